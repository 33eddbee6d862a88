"""Loading an AOF into a node (spec: persistence.md §5).

Loading runs in slices so the server can answer INFO and -LOADING while
a large file is read. Jobs come back ``active`` and are re-queued after
their retry time; during an ``aof-enqueue-jobs-once`` load, jobs stored
as queued are put back in their queues (RETRY 0 ones included, spec
decision 2).

The file is read in large chunks and fed to the reader of
``state.restore.JobRestore``, which applies it record after record. A
damaged file stops the load with the reader's offset and record number; a
file that ends inside its last record (a crash during a write) is cut
there when ``aof-load-truncated`` allows it.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from disque.jobs.record_reader import AofFormatError
from disque.state.restore import JobRestore

if TYPE_CHECKING:
    from disque.state.nodestate import NodeState

READ_CHUNK = 8 * 1024 * 1024


class AofLoadError(Exception):
    """The AOF cannot be loaded; the server refuses to start."""


class AofLoader:
    """Reads one AOF file into a node, a slice at a time."""

    def __init__(self, node: NodeState, path: str, *, enqueue_once: bool, truncate_allowed: bool,
                 logger: logging.Logger | logging.LoggerAdapter[logging.Logger]) -> None:
        self.path = path
        self.truncate_allowed = truncate_allowed
        self.logger = logger
        self.file = open(path, "rb")
        self.total_bytes = os.fstat(self.file.fileno()).st_size
        self.truncated_at: int | None = None
        self.restore = JobRestore(node.lifecycle, node.jobs, node.runtime, node.membership.nodes,
                                  enqueue_once)

    @property
    def loaded_bytes(self) -> int:
        """The offset after the last record applied."""
        return self.restore.reader.position

    @property
    def records(self) -> int:
        """Records applied so far."""
        return self.restore.reader.records

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
        try:
            while True:
                done += restore.load(max_records - done)
                if done >= max_records:
                    return False
                if not self._read_more():
                    break
            restore.reader.finish()
        except AofFormatError as exc:
            if not exc.truncated:
                raise AofLoadError("Bad file format reading the append only file %s: %s"
                                   % (exc.where(), exc.reason)) from exc
            self._cut_tail(exc.record_offset)
        restore.finish()
        return True

    def _read_more(self) -> bool:
        """Feed the reader the file's next chunk; False at the file's end.
        The chunk is let go on return, before the next one is read, so the
        two are never held at once beside the reader's buffer."""
        chunk = self.file.read(READ_CHUNK)
        if not chunk:
            return False
        self.restore.reader.feed(chunk)
        return True

    def _cut_tail(self, offset: int) -> None:
        """The file ends inside the record at ``offset``: drop it if allowed."""
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
