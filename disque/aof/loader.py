"""Loading an AOF into a node (spec: persistence.md §5).

Loading runs in slices so the server can answer INFO and -LOADING while
a large file is read. Jobs come back ``active`` and are re-queued after
their retry time; during an ``aof-enqueue-jobs-once`` load, jobs stored
as queued are put back in their queues (RETRY 0 ones included, spec
decision 2).

The file is read in large chunks, which ``state.restore.JobRestore``
applies record after record with the file's one reader
(``jobs.record_reader``). What it stops at (damage, a record cut by the
end of the chunk, a payload that does not decode, a command no AOF holds)
goes through the strict parser here, built on the same framing, which
names the exact offset of any damage, including a record whose checksum
does not match its bytes.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from disque.aof.format import AofFormatError, Truncated, format_marker, load_job, read_checked
from disque.state.restore import JobRestore
from disque.jobs.records import DELJOB, LOADJOB

if TYPE_CHECKING:
    from disque.state.nodestate import NodeState

READ_CHUNK = 8 * 1024 * 1024


class AofLoadError(Exception):
    """The AOF cannot be loaded; the server refuses to start."""


class AofLoader:
    """Reads one AOF file into a node, a slice at a time."""

    def __init__(self, node: NodeState, path: str, *, enqueue_once: bool, truncate_allowed: bool,
                 logger: logging.Logger | logging.LoggerAdapter[logging.Logger]) -> None:
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
        self.eof = False
        self.truncated_at: int | None = None
        self._strict_records = 0
        self.restore = JobRestore(node.lifecycle, node.jobs, node.runtime, node.membership.nodes,
                                  enqueue_once)

    @property
    def records(self) -> int:
        """Records applied so far."""
        return self.restore.records + self._strict_records

    @property
    def checksums_required(self) -> bool:
        """A format marker was read: every record after it carries a checksum."""
        return self.restore.reader.required

    @property
    def jobs_loaded(self) -> int:
        """Jobs registered so far (expired and repeated ones are not)."""
        return self.restore.jobs_loaded

    def close(self) -> None:
        """Release the file."""
        self.file.close()

    def run(self, max_records: int) -> bool:
        """Apply up to ``max_records`` records; True once the whole file is loaded."""
        restore = self.restore
        done = 0
        while done < max_records:
            before = restore.records
            pos = restore.load_written(self.buffer, self._pos, max_records - done)
            done += restore.records - before
            self.loaded_bytes += pos - self._pos
            self._pos = pos
            if done >= max_records:
                break
            try:
                argv, used = read_checked(self.buffer, pos, len(self.buffer),
                                          restore.reader.required)
                marker = format_marker(argv, pos)
            except Truncated:
                if not self._read_more():
                    self._finish()
                    restore.finish()
                    return True
                continue
            except AofFormatError as exc:
                offset = self.loaded_bytes + exc.offset - pos
                raise AofLoadError("Bad file format reading the append only file at offset %d: "
                                   "%s" % (offset, exc.reason)) from None
            if marker:
                restore.reader.required = True
            else:
                self._apply(argv, self.loaded_bytes)
            self.loaded_bytes += used - pos
            self._pos = used
            self._strict_records += 1
            done += 1
        return False

    def _read_more(self) -> bool:
        chunk = self.file.read(READ_CHUNK) if not self.eof else b""
        if not chunk:
            self.eof = True
            return False
        self.buffer = self.buffer[self._pos:] + chunk
        self._pos = 0
        return True

    def _finish(self) -> None:
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

    def _apply(self, argv: list[bytes], offset: int) -> None:
        name = argv[0].upper()
        if name == LOADJOB and len(argv) >= 2:
            node = self.node
            try:
                job, queued = load_job(argv[1], node.membership.nodes,
                                       node.runtime.self_delivered)
            except (ValueError, TypeError) as exc:  # BadJobPayload is a ValueError
                raise AofLoadError("Corrupted job in the append only file at offset %d: %s"
                                   % (offset, exc)) from None
            self.restore.load_job(job, queued)
        elif name == DELJOB and len(argv) >= 2:
            self.restore.delete(argv[1])
        else:
            raise AofLoadError("Unknown command '%s' reading the append only file at offset %d"
                               % (argv[0][:64].decode("latin-1"), offset))
