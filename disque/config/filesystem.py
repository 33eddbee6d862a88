"""What the config asks of the file system: ``include`` reads a file, ``dir``
changes the working directory, CONFIG REWRITE replaces the config file.

The config package only parses, validates and renders; the process hands
it a ``FileSystem`` (``disque.process.configfile``) that does the I/O. A
Config made without one gets ``NoFileSystem``, as unit tests and the
simulator do.
"""

from __future__ import annotations

import errno
from typing import Protocol


class FileSystem(Protocol):
    """The file operations of config loading, CONFIG SET dir and CONFIG REWRITE;
    each raises OSError on failure."""

    def read_file(self, path: str) -> bytes:
        """The whole content of ``path`` (relative to the working directory)."""
        ...

    def replace_file(self, path: str, data: bytes) -> None:
        """Make ``data`` the content of ``path`` durably: a crash leaves the old
        or the new content, and the file keeps its mode."""
        ...

    def change_dir(self, path: str) -> None:
        """Make ``path`` the working directory."""
        ...

    def working_dir(self) -> str:
        """The absolute working directory; "" when it cannot be known."""
        ...


class NoFileSystem:
    """A process without files: nothing can be read or written, and the
    working directory is a name that ``change_dir`` records as given."""

    def __init__(self, cwd: str = "") -> None:
        self.cwd = cwd

    def read_file(self, path: str) -> bytes:
        """Every file is missing."""
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)

    def replace_file(self, path: str, data: bytes) -> None:
        """Writing is refused."""
        raise OSError(errno.EROFS, "Read-only file system", path)

    def change_dir(self, path: str) -> None:
        """Record ``path`` as the working directory."""
        self.cwd = path

    def working_dir(self) -> str:
        """The last directory recorded."""
        return self.cwd
