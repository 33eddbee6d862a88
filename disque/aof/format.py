"""Reading AOF records: LOADJOB and DELJOB as RESP multibulk requests.

The format is documented in docs/aof-format.md (spec: persistence.md §1).
The records are built by ``disque.jobs.records`` and read back by
``disque.jobs.record_reader``, both in the compiled core; this is their
strict face for the adapters: whole records as argv lists, with the exact
byte offset of any damage, so a damaged file can be diagnosed and a
truncated tail cut off.

A LOADJOB payload is a packed little-endian struct, as in the original
server; files of earlier versions, whose payloads are msgpack arrays,
load as well. Every record this version writes ends with a checksum, and
a file it starts begins with the marker record ``AOFFORMAT 2``, after
which a record without a checksum is damage.
"""

from __future__ import annotations

from collections.abc import Container

from disque.jobs.job import Job
from disque.jobs.record_reader import (RecordDamaged, RecordTruncated, decode_job, format_marker,
                                       read_checked, read_record)

AofFormatError = RecordDamaged  # the file is damaged at ``offset``
Truncated = RecordTruncated  # the file ends inside the record at ``offset``

__all__ = ["AofFormatError", "Truncated", "format_marker", "load_job", "read_checked",
           "read_record"]


def load_job(payload: bytes, known_nodes: Container[bytes] | None,
             own: tuple[bytes, ...] | None = None) -> tuple[Job, bool]:
    """The job of a LOADJOB payload, and whether it was stored as queued
    (see ``codec.from_storage``). Raises BadJobPayload."""
    return decode_job(payload, 0, len(payload), known_nodes, own)
