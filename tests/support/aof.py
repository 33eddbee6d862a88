"""AOF records for tests that write or damage files by hand."""

from __future__ import annotations

import logging

import msgpack

from disque.aof.format import format_marker, read_checked
from disque.jobs.records import append_loadjobs
from disque.aof.loader import AofLoader


def loadjob_record(job, now_ms: int) -> bytes:
    """One LOADJOB record as bytes, as the node appends it."""
    out = bytearray()
    append_loadjobs(out, [job], now_ms)
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


def file_records(path="disque.aof") -> list[list[bytes]]:
    """Every record of a file, which must parse to its end with good
    checksums, without them (their fields only) and without format markers."""
    with open(path, "rb") as f:
        data = f.read()
    out, pos, required = [], 0, False
    while pos < len(data):
        argv, nxt = read_checked(data, pos, len(data), required)
        if format_marker(argv, pos):
            required = True
        else:
            out.append(argv)
        pos = nxt
    return out


def load_into(node, path, enqueue_once: bool = False) -> AofLoader:
    """Load the AOF at ``path`` into ``node`` as the server does at start."""
    loader = AofLoader(node.state, str(path), enqueue_once=enqueue_once, truncate_allowed=False,
                       logger=logging.getLogger("test.aof"))
    try:
        node.state.read_clock()
        while not loader.run(1 << 30):
            pass
    finally:
        loader.close()
    return loader
