"""Reading AOF files offline (docs/aof-format.md), without Spark.

Records are read with ``jobs.record_reader.RecordReader``, the reader the
server's loader uses, so a file reads here exactly as it loads, and a
damaged one raises the same ``AofFormatError`` naming the file, the offset
and the record. Records come out as columns, ready for Arrow.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

from disque.jobs.record_reader import DELETION, END, JOB, AofFormatError, RecordReader

log = logging.getLogger("disque.spark")

READ_CHUNK = 4 << 20


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

    def add(self, reader: RecordReader, kind: int) -> None:
        """The record ``reader`` last read, of ``kind``: a row for a LOADJOB or
        a DELJOB, none for the format marker."""
        if kind == JOB:
            self._loadjob(reader)
        elif kind == DELETION:
            self._deljob(reader)

    def _loadjob(self, reader: RecordReader) -> None:
        job, queued = reader.job(None)
        command = reader.argv()
        self._row(record="LOADJOB",
                  time=_number(reader, command[2]) if len(command) > 2 else None,
                  id=_text(job.id), queue=_text(job.queue), ctime=job.ctime,
                  ctime_ms=job.ctime // 1_000_000, body_length=len(job.body),
                  body=job.body if self.with_body else None,
                  repl=job.repl, etime=job.etime, delay=job.delay, retry=job.retry,
                  nacks=job.nacks, additional_deliveries=job.adeliv, flags=job.flags,
                  nodes_delivered=[_text(n) for n in job.delivered],
                  state="queued" if queued else "active")

    def _deljob(self, reader: RecordReader) -> None:
        command = reader.argv()
        if len(command) >= 7:
            self._row(record="DELJOB", id=_text(command[1]), time=_number(reader, command[2]),
                      queue=_text(command[3]), nacks=_number(reader, command[4]),
                      additional_deliveries=_number(reader, command[5]),
                      reason=_text(command[6]))
        else:  # the original server's bare "DELJOB <id>"
            self._row(record="DELJOB", id=_text(command[1]))


def _number(reader: RecordReader, field: bytes) -> int:
    """A decimal field of the record ``reader`` last read."""
    try:
        return int(field)
    except ValueError:
        raise reader.damaged("not a number: %r" % field[:20]) from None


def _text(value: bytes | str) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def read_records(path: str, with_body: bool = False, rows_per_batch: int = 65536,
                 allow_truncated: bool = True,
                 chunk_size: int = READ_CHUNK) -> Iterator[dict[str, list]]:
    """The file's records as column dicts of up to ``rows_per_batch`` rows.

    A damaged file raises AofFormatError. A partial last record (the node
    died mid-write) is skipped with a warning unless ``allow_truncated`` is
    false, like the server's aof-load-truncated."""
    columns = RecordColumns(path, with_body)
    reader = RecordReader(name=path)
    try:
        with open(path, "rb") as f:
            while chunk := f.read(chunk_size):
                reader.feed(chunk)
                while (kind := reader.next()) != END:
                    columns.add(reader, kind)
                    if len(columns) >= rows_per_batch:
                        yield columns.take()
        reader.finish()
    except AofFormatError as exc:
        if not (exc.truncated and allow_truncated):
            raise
        log.warning("%s, skipped", exc)
    if len(columns):
        yield columns.take()
