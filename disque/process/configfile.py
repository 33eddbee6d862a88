"""The config file on disk: reading it at startup, and the file system the
config's ``include``, ``dir`` and CONFIG REWRITE work on.

``disque.config`` parses, validates and renders; this module does its I/O
(spec: config.md §1, §3).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterable

from disque.config import Config, ConfigError
from disque.config.messages import CANT_OPEN_CONFIG

NEW_FILE_MODE = 0o644  # a config file REWRITE creates
STDIN_PATH = "-"  # `disque-server -`: the config text comes from standard input


class OsFileSystem:
    """The process's file system and working directory (disque.config's FileSystem)."""

    def read_file(self, path: str) -> bytes:
        """The whole content of ``path``."""
        with open(path, "rb") as f:
            return f.read()

    def replace_file(self, path: str, data: bytes, new_mode: int = NEW_FILE_MODE) -> None:
        """Atomically replace ``path`` (following symlinks) with ``data``, keeping its
        mode (``new_mode`` for a file created)."""
        target = os.path.realpath(path)
        directory = os.path.dirname(target)
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except FileNotFoundError:
            mode = new_mode
        import tempfile  # only CONFIG REWRITE needs it (it brings shutil, bz2, lzma)
        fd, temp = tempfile.mkstemp(prefix=os.path.basename(target) + ".", suffix=".tmp",
                                    dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(temp, mode)
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        # The rename is durable once the directory is: best effort, as some
        # file systems refuse to fsync a directory.
        with contextlib.suppress(OSError):
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def change_dir(self, path: str) -> None:
        """chdir: relative paths (AOF, nodes.conf, log) resolve against ``dir``."""
        os.chdir(path)

    def working_dir(self) -> str:
        """The current directory; "" when it was removed under the process."""
        try:
            return os.getcwd()
        except OSError:
            return ""


def load_config(path: str | None, overrides: Iterable[str] = (), *,
                commands: Iterable[str] | None = None) -> Config:
    """Read the config file ``path`` (if any; ``-`` is standard input) and
    apply it, then the ``--name args...`` overrides; raise ConfigError."""
    files = OsFileSystem()
    text = None
    config_file = None
    if path == STDIN_PATH:
        # No file to name: CONFIG REWRITE then answers that there is none,
        # as it does for a node started without a config file.
        try:
            text = sys.stdin.buffer.read()
        except (OSError, ValueError, AttributeError) as exc:
            reason = getattr(exc, "strerror", None) or "standard input is closed"
            raise ConfigError(CANT_OPEN_CONFIG.format(path=path, reason=reason)) from None
    elif path is not None:
        config_file = os.path.abspath(path)  # before any `dir` chdir
        try:
            text = files.read_file(path)
        except OSError as exc:
            raise ConfigError(CANT_OPEN_CONFIG.format(path=path, reason=exc.strerror)) from None
    return Config.load(text, overrides, config_file=config_file, files=files,
                       commands=commands)
