"""AOF records for tests that write or damage files by hand."""

from __future__ import annotations

import msgpack

from disque.aof.format import append_loadjobs


def loadjob_record(job, now_ms: int) -> bytes:
    """One LOADJOB record as bytes, as the node appends it."""
    out = bytearray()
    append_loadjobs(out, (job,), now_ms)
    return bytes(out)


def stored_fields(job) -> list:
    """The fields of a LOADJOB payload, in ``codec.from_storage``'s order."""
    return [job.id, job.queue, job.body, job.repl, job.ctime, job.etime, job.delay, job.retry,
            job.nacks, job.adeliv, job.flags, list(job.delivered), job.state]


def msgpack_payload(job) -> bytes:
    """The payload earlier versions wrote: the stored fields as a msgpack array."""
    return msgpack.packb(stored_fields(job), use_bin_type=True)


def msgpack_loadjob_record(job, now_ms: int) -> bytes:
    """A LOADJOB record as earlier versions wrote it (their files must still load)."""
    payload = msgpack_payload(job)
    stamp = b"%d" % now_ms
    return b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
        len(payload), payload, len(stamp), stamp)
