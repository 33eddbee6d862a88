"""AOF records for tests that write or damage files by hand."""

from __future__ import annotations

from disque.aof.format import append_loadjob


def loadjob_record(job, now_ms: int) -> bytes:
    """One LOADJOB record as bytes, as the node appends it."""
    out = bytearray()
    append_loadjob(out, job, now_ms)
    return bytes(out)
