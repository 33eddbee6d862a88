"""The AOF's records as this version writes them: LOADJOB and DELJOB as
RESP multibulk requests, each ending with its checksum (docs/aof-format.md).

Building them is on the hot path with appendonly on (every loop turn that
created jobs), so it lives in the compiled core: interpreted, reading a
dozen fields of each compiled job cost about a microsecond per ADDJOB.
Writing them is the AOF adapter's (``disque.aof.writer``); reading them
back is ``disque.jobs.record_reader``'s, for every reader of the file.
"""

from __future__ import annotations

import struct
from typing import Final

import msgpack  # type: ignore[import-untyped]  # no stubs; packs the extensions' map
import xxhash

from disque.jobs.codec import (STORED_FORMAT, STORED_FORMAT_EXTENDED, STORED_LAYOUT,
                               extension_fields, has_extensions)
from disque.jobs.job import ACTIVE, ADELIV_SHIFT, COUNTER_MASK, QUEUED, Job

LOADJOB: Final = b"LOADJOB"
DELJOB: Final = b"DELJOB"

# Payload v1: the layout is codec's (STORED_LAYOUT), shared with the loader.
PAYLOAD_V1: Final = STORED_FORMAT
# Payload v2: v1's, then the extensions' msgpack map (a job with a priority,
# dead-letter, backoff or DEDUPID field).
PAYLOAD_V2: Final = STORED_FORMAT_EXTENDED
V1_SIZE: Final = STORED_LAYOUT.size
ID_LEN: Final = 40

# The checksum ending every record: xxh3-64 (one C call per record) of the
# record's bytes before its 8 bytes, which follow as a bulk string.
checksum: Final = xxhash.xxh3_64_digest
CHECKSUM_LEN: Final = 8
CHECKSUM_HEAD: Final = b"$8\r\n"
CRLF: Final = b"\r\n"
# The first record of every file this version starts: from it on, every
# record must carry a checksum.
FORMAT_RECORD: Final = b"AOFFORMAT"
FORMAT_CHECKSUMMED: Final = b"2"
FILE_MARKER: Final = b"*2\r\n$9\r\nAOFFORMAT\r\n$1\r\n2\r\n"
# Where an operator meeting a file of a later version is sent.
UPGRADE_DOC: Final = 'docs/operations.md, "Upgrading a cluster"'

def unsupported_format(words: list[bytes]) -> str:
    """Why a format marker naming ``words`` cannot be read: a later version's
    format (a number above this version's) says so and what to do."""
    named = b" ".join(words)[:20]
    number = words[0] if len(words) == 1 else b""
    if 0 < len(number) < 10 and number.isdigit() and int(number) > int(FORMAT_CHECKSUMMED):
        return ("unsupported AOF format %s: the file was written by a later version, and "
                "this one reads format %s and the files before it. Start the version that "
                "wrote it (%s)" % (named.decode(), FORMAT_CHECKSUMMED.decode(), UPGRADE_DOC))
    return "unsupported AOF format %r" % named


_DELJOB_FORMAT: Final = (b"*8\r\n$6\r\nDELJOB\r\n$40\r\n%b\r\n$%d\r\n%d\r\n$%d\r\n%b\r\n"
                         b"$%d\r\n%d\r\n$%d\r\n%d\r\n$%d\r\n%b\r\n$8\r\n")
_LOADJOB_HEAD: Final = b"*4\r\n$7\r\nLOADJOB\r\n$%d\r\n"
_HEADS: Final = 4096  # record heads kept once made, for payloads up to this size
# Filled as sizes are met: made in advance, they cost every start about a millisecond.
_LOADJOB_HEADS: Final = [b""] * _HEADS
# STORED_LAYOUT in four parts: the fields before ctime, ctime, the counts
# and lengths after it, then the job ID as its 40 bytes. The jobs of one
# ADDJOB run share all but ctime and the ID, so those parts are packed
# once per change (with the record's head before them), not once per job.
_FRONT: Final = struct.Struct("<BBBH")
_CTIME: Final = struct.Struct("<Q")
_MIDDLE: Final = struct.Struct("<QQQQQIIH")
_pack_front: Final = _FRONT.pack
_pack_ctime: Final = _CTIME.pack
_pack_middle: Final = _MIDDLE.pack
_pack_map: Final = msgpack.Packer(use_bin_type=True).pack
_join: Final = b"".join


class _Start:
    """The record's head and its payload's first fields, as last packed."""

    __slots__ = ("size", "marker", "state", "flags", "repl", "packed")

    def __init__(self) -> None:
        self.size = self.marker = self.state = self.flags = self.repl = -1
        self.packed = b""

    def of(self, size: int, marker: int, state: int, flags: int, repl: int) -> bytes:
        """The bytes before ctime of a record whose payload is ``size`` bytes."""
        if (size != self.size or marker != self.marker or state != self.state
                or flags != self.flags or repl != self.repl):
            self.size = size
            self.marker = marker
            self.state = state
            self.flags = flags
            self.repl = repl
            if size < _HEADS:
                head = _LOADJOB_HEADS[size]
                if not head:
                    head = _LOADJOB_HEADS[size] = _LOADJOB_HEAD % size
            else:
                head = _LOADJOB_HEAD % size
            self.packed = head + _pack_front(marker, state, flags, repl)
        return self.packed


class _Middle:
    """The middle part of the last payload packed, and what it was packed from."""

    __slots__ = ("etime", "delay", "retry", "counts", "queue_len", "body_len", "holders", "packed")

    def __init__(self) -> None:
        self.etime = self.delay = self.retry = self.counts = -1
        self.queue_len = self.body_len = self.holders = -1
        self.packed = b""

    def of(self, job: Job, queue_len: int, body_len: int, holders: int) -> bytes:
        """The middle part of ``job``'s payload (``holders``: how many node
        IDs its nodes-delivered list stores)."""
        etime = job.etime
        delay = job.delay
        retry = job.retry
        counts = job.counts
        if (etime != self.etime or delay != self.delay or retry != self.retry
                or counts != self.counts or queue_len != self.queue_len
                or body_len != self.body_len or holders != self.holders):
            self.etime = etime
            self.delay = delay
            self.retry = retry
            self.counts = counts
            self.queue_len = queue_len
            self.body_len = body_len
            self.holders = holders
            self.packed = _pack_middle(etime, delay, retry, counts & COUNTER_MASK,
                                       (counts >> ADELIV_SHIFT) & COUNTER_MASK, queue_len,
                                       body_len, holders)
        return self.packed


class _RecordTail:
    """What follows a LOADJOB's payload in one millisecond: the time and the
    checksum's head, made once per millisecond, not per record."""

    __slots__ = ("ms", "tail")

    def __init__(self) -> None:
        self.ms = -1
        self.tail = b""

    def at(self, now_ms: int) -> bytes:
        if now_ms != self.ms:
            stamp = b"%d" % now_ms
            self.ms = now_ms
            self.tail = b"\r\n$%d\r\n%b\r\n$8\r\n" % (len(stamp), stamp)
        return self.tail


_tail: Final = _RecordTail()
_start: Final = _Start()
_middle: Final = _Middle()


def append_loadjobs(out: bytearray, jobs: list[Job], now_ms: int) -> None:
    """Append one ``LOADJOB <payload> <unix ms> <checksum>`` record per job to ``out``.

    The writer builds the records of a whole loop turn in one call, when it
    flushes: one tight loop keeps this code and struct's in the CPU caches,
    where building each record as its job is created, in between parsing
    and queueing, missed them (callgrind: 985 first-level cache misses per
    pipelined ADDJOB instead of 1,369; 927 without the AOF). A job is
    recorded queued or active: one acked in the same turn after it was
    created is recorded active, and its DELJOB follows. Each record is
    joined once so its checksum is one C call over contiguous bytes.
    """
    stamp = _tail.at(now_ms)
    for job in jobs:
        queue = job.queue or b""
        body = job.body or b""
        delivered = job.delivered
        count = len(delivered)
        nodes = delivered[0] if count == 1 else _join(delivered)
        size = V1_SIZE + len(queue) + len(body) + len(nodes)
        extended = has_extensions(job)
        extra = _pack_map(extension_fields(job)) if extended else b""
        size += len(extra)
        start = _start.of(size, PAYLOAD_V2 if extended else PAYLOAD_V1,
                          QUEUED if job.state == QUEUED else ACTIVE, job.flags, job.repl)
        job_id = job.id
        if len(job_id) != ID_LEN:  # as the layout's "40s" stores it
            job_id = job_id[:ID_LEN].ljust(ID_LEN, b"\0")
        record = _join((start, _pack_ctime(job.ctime),
                        _middle.of(job, len(queue), len(body), count), job_id, queue, body,
                        nodes, extra, stamp))
        out += record
        out += checksum(record)
        out += CRLF


def deljob_record(job: Job, now_ms: int, reason: bytes) -> bytes:
    """``DELJOB <id> <unix ms> <queue> <nacks> <additional deliveries> <reason>
    <checksum>``."""
    queue = job.queue or b""
    nacks = job.nacks
    adeliv = job.adeliv
    record = _DELJOB_FORMAT % (job.id, _digits(now_ms), now_ms, len(queue), queue,
                               _digits(nacks), nacks, _digits(adeliv), adeliv,
                               len(reason), reason)
    return record + checksum(record) + CRLF


def _digits(n: int) -> int:
    return len(str(n))
