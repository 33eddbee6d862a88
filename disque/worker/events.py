"""Structured log lines: one line per event, as ``key=value`` pairs or JSON.

A worker logs through the ``disque.worker`` logger. Each record's message is
an ``Event`` (its name and fields), so the formatters here write its fields
as they are, and any other formatter still gets a readable ``name k=v`` text.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

LOGGER_NAME = "disque.worker"
FORMATS = ("kv", "json")
log = logging.getLogger(LOGGER_NAME)


class Event:
    """A log record's message: the event's name and its fields, rendered when emitted."""

    __slots__ = ("name", "fields")

    def __init__(self, name: str, fields: dict[str, Any]) -> None:
        self.name = name
        self.fields = fields

    def __str__(self) -> str:
        return " ".join([self.name, *("%s=%s" % (k, kv_value(v)) for k, v in self.fields.items())])


def emit(level: int, name: str, **fields: Any) -> None:
    """Log event ``name`` with ``fields`` on the worker's logger (nothing built when filtered)."""
    if log.isEnabledFor(level):
        log.log(level, Event(name, fields))


def kv_value(value: Any) -> str:
    """A value of a ``key=value`` line, quoted (JSON string rules) when it holds a space,
    a quote, an equals sign or nothing."""
    if isinstance(value, float):
        return "%.3f" % value
    if isinstance(value, bytes):
        value = value.decode("utf-8", "backslashreplace")
    text = str(value)
    if not text or any(c in text for c in ' "=\n\t'):
        return json.dumps(text)
    return text


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + (
        ".%03dZ" % record.msecs)


def _fields(record: logging.LogRecord) -> tuple[str, dict[str, Any]]:
    message = record.msg
    if isinstance(message, Event):
        return message.name, message.fields
    return "log", {"message": record.getMessage()}


class KeyValueFormatter(logging.Formatter):
    """``ts=... level=... event=... key=value ...``: one line per event (logfmt)."""

    def format(self, record: logging.LogRecord) -> str:
        name, fields = _fields(record)
        pairs = [("ts", _timestamp(record)), ("level", record.levelname.lower()),
                 ("event", name), *fields.items()]
        return " ".join("%s=%s" % (k, kv_value(v)) for k, v in pairs)


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the same keys as ``KeyValueFormatter``."""

    def format(self, record: logging.LogRecord) -> str:
        name, fields = _fields(record)
        document = {"ts": _timestamp(record), "level": record.levelname.lower(), "event": name}
        document.update(fields)
        return json.dumps(document, default=_json_default)


def _json_default(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


def configure_unless_set_up() -> None:
    """Log as ``disque-worker`` does (``configure``'s defaults) when the
    application set up no logging: a worker started as ``python mymodule.py``
    would otherwise print its warnings bare, without time or level, and
    nothing at INFO."""
    if not log.handlers and not logging.getLogger().handlers:
        configure()


def configure(fmt: str = "kv", level: int | str = logging.INFO,
              stream: Any = None) -> logging.Handler:
    """Send the worker's events to ``stream`` (stderr) in ``fmt`` (kv or json); the CLI's setup."""
    if fmt not in FORMATS:
        raise ValueError("log format must be one of %s" % ", ".join(FORMATS))
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(KeyValueFormatter() if fmt == "kv" else JsonFormatter())
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False
    return handler
