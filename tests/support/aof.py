"""AOF records for tests that write or damage files by hand."""

from __future__ import annotations

import logging

import msgpack

from disque.aof.loader import AofLoader
from disque.jobs.record_reader import END, JOB, MARKER, RecordReader
from disque.jobs.records import append_loadjobs


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


def read_all(data: bytes) -> list[tuple[int, int, list[bytes]]]:
    """Every record of ``data``, which must be whole and undamaged: its
    offset, its kind and its fields without the checksum."""
    reader, out = RecordReader(data), []
    while (kind := reader.next()) != END:
        out.append((reader.offset, kind, reader.argv()))
    reader.finish()
    return out


def first_record(data: bytes) -> tuple[list[bytes], int]:
    """The fields of the first record of ``data`` (without the checksum) and
    the offset after it."""
    reader = RecordReader(data)
    assert reader.next() != END, "no whole record"
    return reader.argv(), reader.position


def decode_payload(payload: bytes) -> tuple:
    """The job of a LOADJOB payload, and whether it was stored queued (the
    reader's verdict on a record holding it: AofFormatError if it does not
    decode)."""
    reader = RecordReader(b"*2\r\n$7\r\nLOADJOB\r\n$%d\r\n%b\r\n" % (len(payload), payload))
    assert reader.next() == JOB
    return reader.job(None)


def file_records(path="disque.aof") -> list[list[bytes]]:
    """Every record of a file but its format markers, which must read to
    its end: their fields, without checksums."""
    with open(path, "rb") as f:
        data = f.read()
    return [argv for _, kind, argv in read_all(data) if kind != MARKER]


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
