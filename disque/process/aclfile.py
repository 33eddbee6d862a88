"""The aclfile on disk (docs/security.md "The aclfile"): rewritten whole
after the users change, in a thread and atomically (a new file, fsynced,
renamed over the old one), and read at startup and by ACL LOAD.

The users' records in the tables file are the node's truth: they are
appended before a change's replies and bus messages leave, the aclfile
is written after, so the file may lag behind them but never lead, unless
someone edited it. To tell the two apart, before each write the digests
of the content being written and of the content known to be in the file
are appended to the tables file (``ACL_FILE_TABLE``). At startup a file
whose digest is one of those is this node's own: the records win, and
the file is rewritten if it lags. Any other file (edited while the node
was down, or the first start with it) is taken as ACL LOAD takes it:
each difference is a change, with a new version, told to the cluster.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from disque.config.aclfile import AclFileError, parse_acl_file, render_acl_file
from disque.context.log import logger
from disque.context.tablelog import ACL_FILE_TABLE, Record
from disque.process.configfile import OsFileSystem
from disque.process.startup import StartupError

if TYPE_CHECKING:
    from disque.config.users import User
    from disque.process.tablefile import TableFile
    from disque.state.nodestate import NodeState

NEW_FILE_MODE = 0o600  # the file holds password hashes: its owner's only
RETRY_INTERVAL_S = 1.0  # a failed write is tried again this often


def digest(content: bytes) -> bytes:
    """What the tables file remembers of a content of the file."""
    import hashlib  # loaded with the first write: OpenSSL's digests are slow to load
    return hashlib.blake2b(content, digest_size=16).digest()


def take_marker(records: list[Record]) -> list[bytes]:
    """Take the aclfile's record out of the tables file's ``records``: the
    digests of the contents this node last wrote (none without one)."""
    for i, (table, _key, value) in enumerate(records):
        if table == ACL_FILE_TABLE:
            del records[i]
            if type(value) is list:
                return [d for d in value if type(d) is bytes]
            return []
    return []


def _replace(path: str, content: bytes) -> None:
    OsFileSystem().replace_file(path, content, new_mode=NEW_FILE_MODE)


class AclFile:
    """The node's aclfile: what it holds, and the write under way."""

    def __init__(self, path: str, tables: TableFile) -> None:
        self.path = os.path.abspath(path)  # `dir` may change at run time
        self.tables = tables
        self.written = b""  # the digest of what the file is known to hold (b"": nothing)
        self.dirty = False  # the users changed since the last write began
        self.writing = b""  # the digest of what the thread is writing
        self.error: str | None = None  # why the last write failed
        self.retry_at = 0.0
        self.pool: ThreadPoolExecutor | None = None
        self.task: Future[None] | None = None

    def read(self) -> bytes:
        """The file's content (ACL LOAD); raise OSError."""
        with open(self.path, "rb") as f:
            return f.read()

    # ------------------------------------------------------------ start

    def load_at_startup(self, marker: list[bytes], state: NodeState) -> None:
        """After the tables file's records: take the file's users if it is not
        what this node last wrote (``marker``); raise StartupError when it
        cannot be read or holds a bad line."""
        try:
            data: bytes | None = self.read()
        except FileNotFoundError:
            data = None
        except OSError as exc:
            raise StartupError("Can't read the aclfile %s: %s"
                               % (self.path, exc.strerror or exc)) from None
        if data is not None:
            found = digest(data)
            if found not in marker:
                try:
                    users = parse_acl_file(data, self.path)
                except AclFileError as exc:
                    raise StartupError("Aborting startup because of ACL errors: %s"
                                       % exc) from None
                changes = state.user_table.load(users)
                if marker:
                    logger.warning("The aclfile %s changed since this node wrote it: its users "
                                   "taken as ACL LOAD takes them (%d changes)", self.path, changes)
                else:
                    logger.info("%d users read from the aclfile %s (%d changes)", len(users),
                                self.path, changes)
            self.written = found
        self.dirty = data != render_acl_file(state.config.users)

    # ------------------------------------------------------------ write

    def changed(self) -> None:
        """The users changed: the file is rewritten at the next cron pass."""
        self.dirty = True

    def cron(self, users: dict[bytes, User]) -> None:
        """Once per cron pass: a write finished, or one begun when the users
        changed since the last began."""
        task = self.task
        if task is not None:
            if not task.done():
                return
            self.task = None
            self._finished(task)
        if not self.dirty or time.monotonic() < self.retry_at:
            return
        self.dirty = False
        content = render_acl_file(users)
        new = digest(content)
        if new == self.written:
            return
        self._mark(new)
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="aclfile")
        self.task = self.pool.submit(_replace, self.path, content)

    def _mark(self, new: bytes) -> None:
        """Remember, in the tables file and before the file changes, what it
        may hold from now on: the new content, or the one known."""
        self.writing = new
        self.tables.write([(ACL_FILE_TABLE, b"", [new, self.written])])

    def _finished(self, task: Future[None]) -> None:
        exc = task.exception()
        if exc is None:
            self.written = self.writing
            if self.error is not None:
                logger.warning("The aclfile %s is written again", self.path)
                self.error = None
            return
        self.dirty = True
        self.retry_at = time.monotonic() + RETRY_INTERVAL_S
        if self.error is None:
            logger.warning("Can't write the aclfile %s: %s (retrying; the users are kept in the "
                           "tables file meanwhile)", self.path, exc)
        self.error = str(exc)

    def save_now(self, users: dict[bytes, User], force: bool) -> str | None:
        """Write the file now, on the loop (``force``: ACL SAVE, even when it
        holds the users already); the error text on failure."""
        task = self.task
        if task is not None:
            task.exception()  # wait for it
            self.task = None
            self._finished(task)
        content = render_acl_file(users)
        new = digest(content)
        self.dirty = False
        if new == self.written and not force:
            return None
        self._mark(new)
        try:
            _replace(self.path, content)
        except OSError as exc:
            self.dirty = True
            return "%s: %s" % (self.path, exc.strerror or exc)
        self.written = new
        return None

    def close(self, users: dict[bytes, User]) -> None:
        """Shutdown: the file written if it lags, and the thread stopped."""
        if self.dirty or self.task is not None:
            problem = self.save_now(users, False)
            if problem is not None:
                logger.warning("Can't write the aclfile %s", problem)
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None
