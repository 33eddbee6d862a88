"""The tables file beside nodes.conf: the schedules, their last ticks,
the queues' delivery limits and the ACL users, one record per change
(docs/persistence.md, "Schedules and delivery limits").

The file is ``DISQUE-TABLES 1`` on a line, then records: a 4-byte
little-endian length, the CRC-32 of the payload, and the payload, a
msgpack array ``[table, key, value]`` (value nil: the key is gone).
Loading keeps the last record of each key. ``write`` appends the records
of a loop turn with one system call, before the turn's replies and bus
messages leave; a thread fsyncs what was written, at most once a second.
Once the file is over twice the size of its live records (and
``COMPACT_MIN``), a thread copies the live records to a new file, which
replaces it with the records appended meanwhile: the loop never rewrites
the table.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor

import msgpack  # type: ignore[import-untyped]  # no stubs

from disque.context.log import logger
from disque.context.tablelog import TABLES, Record

MAGIC = b"DISQUE-TABLES 1\n"
COMPACT_MIN = 1 << 20  # bytes: a smaller file is never compacted
FSYNC_INTERVAL_S = 1.0
_HEAD = struct.Struct("<II")  # payload length, CRC-32
_pack = msgpack.Packer(use_bin_type=True).pack

Key = tuple[bytes, bytes]  # table, key


class TablesFileError(Exception):
    """The file cannot be read: the server does not start."""


def tables_path(cluster_config_file: str) -> str:
    """The tables file of a cluster config file: ``nodes.conf`` -> ``nodes.tables``."""
    base = cluster_config_file[:-5] if cluster_config_file.endswith(".conf") else cluster_config_file
    return base + ".tables"


def frame(table: bytes, key: bytes, value: list | None) -> bytes:
    """One record as the file holds it."""
    payload = _pack([table, key, value])
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def parse(data: bytes, path: str) -> tuple[dict[Key, tuple[list | None, int, int]], int]:
    """The records of a file's content: the last of each key (its value and
    where its frame starts and ends), and where the last whole record ends
    (before a record cut short by a crash); raise TablesFileError on
    anything else that is wrong."""
    if not data.startswith(MAGIC):
        raise TablesFileError("%s is not a tables file (it does not start with %r)"
                              % (path, MAGIC.strip().decode()))
    records: dict[Key, tuple[list | None, int, int]] = {}
    pos = len(MAGIC)
    end = len(data)
    while pos < end:
        if end - pos < _HEAD.size:
            break
        length, crc = _HEAD.unpack_from(data, pos)
        start = pos + _HEAD.size
        if end - start < length:
            break
        payload = data[start:start + length]
        record = None
        if zlib.crc32(payload) == crc:
            try:
                record = msgpack.unpackb(payload, raw=True, use_list=True)
            except (ValueError, msgpack.UnpackException):
                record = None
        if (type(record) is not list or len(record) != 3 or record[0] not in TABLES
                or type(record[1]) is not bytes or not (record[2] is None
                                                         or type(record[2]) is list)):
            raise TablesFileError(
                "The tables file %s is damaged at offset %d. Move it aside to start: the "
                "schedules come back from the other nodes, and the users over an "
                "authenticated bus or from the aclfile; the delivery limits (QLIMIT) must be "
                "set again." % (path, pos))
        records[(record[0], record[1])] = (record[2], pos, start + length)
        pos = start + length
    return records, pos


def _compact(path: str, cut: int) -> int:
    """Write the live records of the first ``cut`` bytes of ``path`` to
    ``path.tmp``, fsynced; its size (a thread's work)."""
    with open(path, "rb") as f:
        data = f.read(cut)
    records, _ = parse(data, path)
    live = [data[start:stop] for value, start, stop in records.values() if value is not None]
    content = MAGIC + b"".join(live)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, content)
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(content)


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_dir(path: str) -> None:
    dirfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def _fsync(fd: int, path: str, new: bool) -> None:
    """The records written reach the disk (and a new file's name: its directory)."""
    os.fsync(fd)
    if new:
        _fsync_dir(path)


class TableFile:
    """One node's tables file, open for appending."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1
        self.size = 0  # bytes in the file
        self.sizes: dict[Key, int] = {}  # the live records' frame sizes
        self.live = 0  # their sum
        self.unwritten = bytearray()  # records a failed write left behind
        self.error: str | None = None  # why the last write failed
        self.created = False  # the file's name is not fsynced yet
        self.unsynced = False
        self.last_fsync = time.monotonic()
        self.pool: ThreadPoolExecutor | None = None  # started with the first fsync
        self.task: Future[None] | Future[int] | None = None  # one fsync or compaction at a time
        self.compacting = False
        self.cut = 0  # the compaction copies the file up to here

    # ------------------------------------------------------------ start

    def load(self) -> list[Record]:
        """The live records, in the order of ``TABLES`` (a table's records
        may name another's keys); a record cut short by a crash is dropped."""
        try:
            os.unlink(self.path + ".tmp")  # a compaction a crash interrupted
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise TablesFileError("Can't remove %s.tmp: %s" % (self.path, exc.strerror)) from None
        try:
            with open(self.path, "rb") as f:
                data = f.read()
            if MAGIC.startswith(data):  # created, and a crash came before its first line
                os.unlink(self.path)
                return []
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise TablesFileError("Can't read the tables file %s: %s"
                                  % (self.path, exc.strerror)) from None
        records, end = parse(data, self.path)
        try:
            if end < len(data):
                logger.warning("The tables file %s ends with a record cut short at offset %d "
                               "(a crash while writing it): dropped", self.path, end)
                os.truncate(self.path, end)
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            raise TablesFileError("Can't open the tables file %s: %s"
                                  % (self.path, exc.strerror)) from None
        self.size = end
        found: list[Record] = []
        for (table, key), (value, start, stop) in records.items():
            if value is not None:
                self.sizes[(table, key)] = stop - start
                self.live += stop - start
                found.append((table, key, value))
        found.sort(key=_table_order)
        return found

    # ------------------------------------------------------------ write

    def write(self, records: list[Record]) -> str | None:
        """Append ``records`` (after any a failed write left); the error
        text when they could not all be written (they are tried again)."""
        pending = self.unwritten
        for table, key, value in records:
            framed = frame(table, key, value)
            pending += framed
            self.live -= self.sizes.pop((table, key), 0)
            if value is not None:
                self.sizes[(table, key)] = len(framed)
                self.live += len(framed)
        if not pending:
            return None
        done = 0
        try:
            if self.fd < 0:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                if not self.size:  # a new file (or one closed at a failed restart: kept)
                    self.created = True
                    pending[:0] = MAGIC
            with memoryview(pending) as view:
                while done < len(pending):
                    done += os.write(self.fd, view[done:])
        except OSError as exc:
            self.size += done
            del pending[:done]
            if self.error is None:
                logger.warning("Can't write the tables file %s: %s (retrying)", self.path,
                               exc.strerror)
            self.error = exc.strerror or str(exc)
            return self.error
        self.size += done
        self.unwritten = bytearray()
        self.unsynced = True
        if self.error is not None:
            logger.warning("The tables file %s is written again", self.path)
            self.error = None
        return None

    # ------------------------------------------------------------- cron

    def cron(self) -> None:
        """Once per cron pass: a failed write tried again, then the thread's
        work: a compaction finished, the fsync due, a compaction begun."""
        if self.unwritten:
            self.write([])
        task = self.task
        if task is not None:
            if not task.done():
                return
            self.task = None
            if self.compacting:
                self._finish_compaction(task)
            else:
                self._fsync_finished(task)
        if self.fd < 0:
            return
        if self.unsynced and time.monotonic() - self.last_fsync >= FSYNC_INTERVAL_S:
            self.unsynced = False
            self.last_fsync = time.monotonic()
            created, self.created = self.created, False
            self.task = self._pool().submit(_fsync, self.fd, self.path, created)
        elif self.size > max(COMPACT_MIN, 2 * self.live) and not self.unwritten:
            self.compacting = True
            self.cut = self.size
            self.task = self._pool().submit(_compact, self.path, self.cut)

    def _pool(self) -> ThreadPoolExecutor:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="tables")
        return self.pool

    def _fsync_finished(self, task: Future) -> None:
        exc = task.exception()
        if exc is not None:
            logger.warning("Can't fsync the tables file %s: %s", self.path, exc)
            self.unsynced = True

    def _finish_compaction(self, task: Future) -> None:
        """The new file gets what was appended since the copy began, then
        replaces the old one (on the loop: the tail is a few records)."""
        self.compacting = False
        tmp = self.path + ".tmp"
        try:
            size = task.result()
            with open(self.path, "rb") as f:
                f.seek(self.cut)
                tail = f.read()
            fd = os.open(tmp, os.O_WRONLY | os.O_APPEND)
            try:
                _write_all(fd, tail)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            _fsync_dir(self.path)
            new_fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except (OSError, TablesFileError) as exc:
            logger.warning("Can't compact the tables file %s: %s", self.path, exc)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return
        os.close(self.fd)
        self.fd = new_fd
        self.size = size + len(tail)

    # ------------------------------------------------------------- stop

    def close(self) -> None:
        """Write what waits, fsync and close (shutdown, restart)."""
        if self.unwritten:
            self.write([])
        task = self.task
        if task is not None:
            task.exception()  # wait for it; its errors were logged or are moot now
            self.task = None
            if self.compacting:
                self.compacting = False
                try:
                    os.unlink(self.path + ".tmp")
                except OSError:
                    pass
        if self.fd >= 0:
            try:
                _fsync(self.fd, self.path, self.created)
            except OSError as exc:
                logger.warning("Can't fsync the tables file %s: %s", self.path, exc.strerror)
            os.close(self.fd)
            self.fd = -1
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None


def _table_order(record: Record) -> int:
    return TABLES.index(record[0])
