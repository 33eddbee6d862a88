"""``Settings``: what loading a file, CONFIG GET/SET and CONFIG REWRITE use
of a ``Config`` besides the directives' own attributes, which they read
and write by name. ``config.settings.Config`` is the one implementation;
naming the members here keeps those modules below it."""

from __future__ import annotations

from typing import Protocol

from disque.config.filesystem import FileSystem
from disque.config.users import User


class Settings(Protocol):
    """The settings object the config machinery fills and reads."""

    users: dict[bytes, User]
    aclfile: str
    rename_commands: list[tuple[str, str]]
    config_file: str | None
    files: FileSystem

    @property
    def dir(self) -> str:
        """The working directory (the process's, not a stored value)."""
