"""Reading AOF files offline (docs/aof-format.md), without Spark.

Records are framed, their checksums checked and their jobs decoded by
``jobs.record_reader``, the reader the server's loader uses, so a file
reads here exactly as it loads. Records come out as columns, ready for
Arrow.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

from disque.aof.format import load_job
from disque.jobs.record_reader import RecordDamaged, RecordReader, RecordTruncated
from disque.jobs.records import FORMAT_RECORD

log = logging.getLogger("disque.spark")

READ_CHUNK = 4 << 20


class AofFormatError(ValueError):
    """The file is not a Disque AOF (or is corrupted past its last complete record)."""


def iter_commands(path: str, chunk_size: int = READ_CHUNK,
                  allow_truncated: bool = True) -> Iterator[list[bytes]]:
    """Every record of the file, as a list of bytes without its checksum.

    A partial last record (the node died mid-write) is skipped with a warning
    unless ``allow_truncated`` is false, like the server's aof-load-truncated."""
    reader = RecordReader()
    records = 0
    buf = b""
    pos = 0
    base = 0  # the file offset of buf[0]
    with open(path, "rb") as f:
        while True:
            try:
                nxt = reader.read(buf, pos, len(buf))
            except RecordTruncated:
                chunk = f.read(chunk_size)
                if not chunk:
                    break
                base += pos
                buf = buf[pos:] + chunk
                pos = 0
                continue
            except RecordDamaged as exc:
                raise AofFormatError("%s: bad record at offset %d after record %d: %s"
                                     % (path, base + exc.offset, records, exc.reason)) from None
            records += 1
            yield reader.argv(buf)
            pos = nxt
    if pos < len(buf):
        message = "%s: truncated record after record %d" % (path, records)
        if not allow_truncated:
            raise AofFormatError(message)
        log.warning("%s, skipped", message)


class RecordColumns:
    """AOF records accumulated column by column (the names of columns.AOF_FIELDS)."""

    NAMES = ("file", "record", "time", "id", "queue", "ctime", "ctime_ms", "body_length", "body",
             "repl", "etime", "delay", "retry", "nacks", "additional_deliveries", "flags",
             "nodes_delivered", "state", "reason")

    def __init__(self, file: str, with_body: bool = False) -> None:
        self.file = file
        self.with_body = with_body
        self.columns: dict[str, list] = {name: [] for name in self.NAMES}
        self.length = 0

    def __len__(self) -> int:
        return self.length

    def take(self) -> dict[str, list]:
        """The accumulated columns, and start over."""
        columns = self.columns
        columns["file"] = [self.file] * self.length
        if not self.with_body:
            columns["body"] = None
        self.columns = {name: [] for name in self.NAMES}
        self.length = 0
        return columns

    def _row(self, **values: Any) -> None:
        for name, column in self.columns.items():
            if name != "file":
                column.append(values.get(name))
        self.length += 1

    def add(self, command: list[bytes]) -> None:
        """One request of the file."""
        name = command[0].upper()
        if name == b"LOADJOB":
            self._loadjob(command)
        elif name == b"DELJOB":
            self._deljob(command)
        elif name == FORMAT_RECORD:
            return  # the format marker (checksums follow): no event
        else:
            self._row(record=name.decode("ascii", "replace"))

    def _loadjob(self, command: list[bytes]) -> None:
        try:
            job, queued = load_job(command[1], None)
        except (IndexError, ValueError, TypeError) as exc:  # BadJobPayload is a ValueError
            raise AofFormatError("%s: bad LOADJOB payload: %s" % (self.file, exc)) from None
        self._row(record="LOADJOB",
                  time=int(command[2]) if len(command) > 2 else None,
                  id=_text(job.id), queue=_text(job.queue), ctime=job.ctime,
                  ctime_ms=job.ctime // 1_000_000, body_length=len(job.body),
                  body=job.body if self.with_body else None,
                  repl=job.repl, etime=job.etime, delay=job.delay, retry=job.retry,
                  nacks=job.nacks, additional_deliveries=job.adeliv, flags=job.flags,
                  nodes_delivered=[_text(n) for n in job.delivered],
                  state="queued" if queued else "active")

    def _deljob(self, command: list[bytes]) -> None:
        if len(command) >= 7:
            self._row(record="DELJOB", id=_text(command[1]), time=int(command[2]),
                      queue=_text(command[3]), nacks=int(command[4]),
                      additional_deliveries=int(command[5]), reason=_text(command[6]))
        else:  # the original server's bare "DELJOB <id>"
            self._row(record="DELJOB", id=_text(command[1]) if len(command) > 1 else None)


def _text(value: bytes | str) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def read_records(path: str, with_body: bool = False, rows_per_batch: int = 65536,
                 allow_truncated: bool = True) -> Iterator[dict[str, list]]:
    """The file's records as column dicts of up to ``rows_per_batch`` rows."""
    columns = RecordColumns(path, with_body)
    for command in iter_commands(path, allow_truncated=allow_truncated):
        columns.add(command)
        if len(columns) >= rows_per_batch:
            yield columns.take()
    if len(columns):
        yield columns.take()
