"""Errors of config loading, CONFIG SET and CONFIG REWRITE."""

from __future__ import annotations

from disque.config.messages import FATAL_AT_LINE


class ConfigError(Exception):
    """Fatal config error; str() is the whole message the server prints before exiting 1."""

    def __init__(self, message: str, *, line_number: int | None = None,
                 line: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.line_number = line_number
        self.line = line
        self.reason = reason if reason is not None else message

    @classmethod
    def at_line(cls, line_number: int, line: str, reason: str) -> ConfigError:
        """Build the '*** FATAL CONFIG FILE ERROR ***' report for one line."""
        message = FATAL_AT_LINE.format(number=line_number, line=line, reason=reason)
        return cls(message, line_number=line_number, line=line, reason=reason)


class ConfigSetError(Exception):
    """CONFIG SET/REWRITE failure; str() is the error reply without the leading '-'."""


class InvalidValue(Exception):
    """A value failed validation; ``reason`` is the config-file message."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason

