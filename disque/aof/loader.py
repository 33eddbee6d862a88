"""Loading an AOF into a node (spec: persistence.md §5).

Loading runs in slices so the server can answer INFO and -LOADING while
a large file is read. Jobs come back ``active`` and are re-queued after
their retry time; during an ``aof-enqueue-jobs-once`` load, jobs stored
as queued are put back in their queues (RETRY 0 ones included, spec
decision 2).
"""

from __future__ import annotations

import os

import hiredis
from disque.aof.format import (DELJOB, LOADJOB, AofFormatError, Truncated, load_job,
                               read_record)

READ_CHUNK = 8 * 1024 * 1024
# hiredis moves its unread bytes to the front of its buffer each time it
# has consumed 1 KB, so it is fed small pieces to keep that cheap.
FAST_READ_CHUNK = 4096


class AofLoadError(Exception):
    """The AOF cannot be loaded; the server refuses to start."""


class _Fallback(Exception):
    """hiredis met something only the strict parser can judge."""


def _encoded_length(record) -> int:
    """Bytes of a multibulk of bulk strings (TypeError when it is not one)."""
    if type(record) is not list or not record:
        raise TypeError
    total = 3 + len(str(len(record)))
    for arg in record:
        if type(arg) is not bytes:
            raise TypeError
        n = len(arg)
        total += n + 5 + len(str(n))
    return total


class AofLoader:
    """Reads one AOF file into a node, a slice at a time."""

    def __init__(self, node, path: str, *, enqueue_once: bool, truncate_allowed: bool,
                 logger) -> None:
        self.node = node
        self.path = path
        self.enqueue_once = enqueue_once
        self.truncate_allowed = truncate_allowed
        self.logger = logger
        self.file = open(path, "rb")
        self.total_bytes = os.fstat(self.file.fileno()).st_size
        self.loaded_bytes = 0  # offset of the first unparsed byte
        self.buffer = b""
        self._pos = 0  # position in ``buffer`` of the byte at ``loaded_bytes``
        self._needs_more = False
        self.eof = False
        self.records = 0
        self.jobs_loaded = 0
        self.truncated_at: int | None = None
        self._fast = True
        self._reader = hiredis.Reader()

    def close(self) -> None:
        """Release the file."""
        self.file.close()

    def run(self, max_records: int) -> bool:
        """Apply up to ``max_records`` records; True once the whole file is loaded.

        Records are parsed with hiredis; at the first thing it cannot parse,
        or a file that does not end where the last record ends, loading goes
        on with the strict Python parser from the last good record, which
        names the exact offset of the damage or of the truncated tail.
        """
        if self._fast:
            try:
                return self._run_fast(max_records)
            except _Fallback:
                self._fast = False
                self.file.seek(self.loaded_bytes)
                self.buffer = b""
                self._pos = 0
                self._needs_more = False
                self.eof = False
        return self._run_strict(max_records)

    def _run_fast(self, max_records: int) -> bool:
        reader = self._reader
        loadjob = self._loadjob
        offset = self.loaded_bytes
        done = 0
        try:
            # An element that is not a string (an integer, a nested array...)
            # raises TypeError: the strict parser then judges the record.
            while done < max_records:
                try:
                    record = reader.gets()
                except hiredis.ProtocolError:
                    raise _Fallback from None
                if record is False:
                    chunk = self.file.read(FAST_READ_CHUNK)
                    if chunk:
                        reader.feed(chunk)
                        continue
                    if offset != self.total_bytes:
                        raise _Fallback  # a cut (or damaged) tail: the strict parser decides
                    return True
                try:
                    if len(record) == 3 and record[0] == LOADJOB:
                        payload = record[1]
                        n = len(payload)
                        k = len(record[2])
                        if type(payload) is not bytes or type(record[2]) is not bytes:
                            raise TypeError
                        loadjob(payload, offset)
                        # *3 $7 LOADJOB $n payload $k stamp: 27 framing bytes plus digits
                        offset += 27 + n + k + (3 if 99 < n < 1000 else len(str(n))) + (
                            2 if k == 13 else len(str(k)))
                    else:
                        size = _encoded_length(record)
                        self._apply(record, offset)
                        offset += size
                except TypeError:
                    raise _Fallback from None
                done += 1
            return False
        finally:
            self.records += done
            self.loaded_bytes = offset

    def _run_strict(self, max_records: int) -> bool:
        done = 0
        while done < max_records:
            if not self.buffer or self._needs_more:
                if not self._read_more():
                    return self._finish()
            try:
                argv, used = read_record(self.buffer, self._pos, len(self.buffer))
            except Truncated:
                self._needs_more = True
                continue
            except AofFormatError as exc:
                offset = self.loaded_bytes + exc.offset - self._pos
                raise AofLoadError("Bad file format reading the append only file at offset %d: "
                                   "%s" % (offset, exc.reason)) from None
            self._apply(argv, self.loaded_bytes)
            self.loaded_bytes += used - self._pos
            self._pos = used
            self.records += 1
            done += 1
        return False

    def _read_more(self) -> bool:
        chunk = self.file.read(READ_CHUNK) if not self.eof else b""
        if not chunk:
            self.eof = True
            return False
        self.buffer = self.buffer[self._pos:] + chunk
        self._pos = 0
        self._needs_more = False
        return True

    def _finish(self) -> bool:
        leftover = len(self.buffer) - self._pos
        if leftover > 0:
            offset = self.loaded_bytes
            if not self.truncate_allowed:
                raise AofLoadError(
                    "Unexpected end of file reading the append only file at offset %d. You can: "
                    "1) Make a backup of your AOF file, then use ./disque-check-aof --fix "
                    "<filename>. 2) Alternatively you can set the 'aof-load-truncated' "
                    "configuration option to yes and restart the server." % offset)
            self.logger.warning("!!! Warning: short read while loading the AOF file %s!!! "
                                "AOF loaded anyway because aof-load-truncated is enabled; "
                                "truncating it at offset %d", self.path, offset)
            os.truncate(self.path, offset)
            self.truncated_at = offset
        self.buffer = b""
        return True

    def _apply(self, argv: list[bytes], offset: int) -> None:
        name = argv[0].upper()
        if name == LOADJOB and len(argv) >= 2:
            self._loadjob(argv[1], offset)
        elif name == DELJOB and len(argv) >= 2:
            job = self.node.jobs.by_id.get(argv[1])
            if job is not None:
                self.node.lifecycle.delete_job(job)
        else:
            raise AofLoadError("Unknown command '%s' reading the append only file at offset %d"
                               % (argv[0][:64].decode("latin-1"), offset))

    def _loadjob(self, payload: bytes, offset: int) -> None:
        node = self.node
        try:
            job, was_queued = load_job(payload, node.membership.nodes, node.runtime.self_delivered)
        except (ValueError, TypeError) as exc:  # BadJobPayload is a ValueError
            raise AofLoadError("Corrupted job in the append only file at offset %d: %s"
                               % (offset, exc)) from None
        if job.etime <= node.runtime.now // 1000 or job.id in node.jobs.by_id:
            return
        lifecycle = node.lifecycle
        lifecycle.set_received_qtime(job)  # spec §5: delay + retry after the load
        requeue = was_queued and self.enqueue_once
        if requeue and not job.qtime:
            job.qtime = 1  # spec decision 2: a RETRY 0 job queued at shutdown is queued again
        lifecycle.register_job(job, not requeue)
        if requeue and not lifecycle.enqueue_job(job):
            lifecycle.schedule_job(job)
        self.jobs_loaded += 1
