"""AOF records: LOADJOB and DELJOB as RESP multibulk requests.

The format is documented in docs/aof-format.md (spec: persistence.md §1).
Encoding is used on the hot path (every ADDJOB with appendonly on);
decoding reports exact byte offsets so a damaged file can be diagnosed
and a truncated tail cut off.
"""

from __future__ import annotations

import msgpack

from disque.jobs.codec import to_storage

LOADJOB = b"LOADJOB"
DELJOB = b"DELJOB"

REASON_ACKED = b"acked"
REASON_EXPIRED = b"expired"
REASON_DELETED = b"deleted"
REASON_EVICTED = b"evicted"
REASON_MOVED = b"moved"

_DELJOB_FORMAT = b"*7\r\n$6\r\nDELJOB\r\n$40\r\n%b\r\n$%d\r\n%d\r\n$%d\r\n%b\r\n$%d\r\n%d\r\n$%d\r\n%d\r\n$%d\r\n%b\r\n"
_packb = msgpack.Packer(use_bin_type=True).pack


def _digits(n: int) -> int:
    return len(str(n))


_LOADJOB_HEAD = b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n"
_HEADS = 4096  # record heads made in advance, for payloads up to this size
_LOADJOB_HEADS = [_LOADJOB_HEAD % size for size in range(_HEADS)]
_stamp_cache = [-1, b""]  # the record tail of the last time seen: one per ms


def _restamp(now_ms: int) -> None:
    stamp = b"%d" % now_ms
    _stamp_cache[:] = now_ms, b"\r\n$%d\r\n%b\r\n" % (len(stamp), stamp)


def append_loadjob(out: bytearray, job, now_ms: int) -> None:
    """Append ``LOADJOB <msgpack job> <unix ms>`` to ``out``.

    On the ADDJOB hot path with appendonly on, so the record is never
    built as an object of its own: the head comes from a table and the
    tail with the time is formatted once per millisecond.
    """
    payload = _packb(to_storage(job))
    size = len(payload)
    out += _LOADJOB_HEADS[size] if size < _HEADS else _LOADJOB_HEAD % size
    out += payload
    if _stamp_cache[0] != now_ms:
        _restamp(now_ms)
    out += _stamp_cache[1]


def deljob_record(job, now_ms: int, reason: bytes) -> bytes:
    """``DELJOB <id> <unix ms> <queue> <nacks> <additional deliveries> <reason>``."""
    queue = job.queue or b""
    return _DELJOB_FORMAT % (job.id, _digits(now_ms), now_ms, len(queue), queue,
                             _digits(job.nacks), job.nacks, _digits(job.adeliv), job.adeliv,
                             len(reason), reason)


class AofFormatError(Exception):
    """The file is damaged at ``offset``."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__("Bad file format reading the append only file at offset %d: %s"
                         % (offset, reason))
        self.offset = offset
        self.reason = reason


class Truncated(Exception):
    """The file ends in the middle of a record that starts at ``offset``."""

    def __init__(self, offset: int) -> None:
        super().__init__("Unexpected end of file at offset %d" % offset)
        self.offset = offset


def _read_line(buf, pos: int, end: int, record_start: int) -> tuple[bytes, int]:
    eol = buf.find(b"\r\n", pos, end)
    if eol < 0:
        raise Truncated(record_start)
    return bytes(buf[pos:eol]), eol + 2


def _read_count(buf, pos: int, end: int, prefix: int, record_start: int) -> tuple[int, int]:
    if pos >= end:
        raise Truncated(record_start)
    if buf[pos] != prefix:
        raise AofFormatError(pos, "expected %r" % chr(prefix))
    line, nxt = _read_line(buf, pos + 1, end, record_start)
    if not line.isdigit():
        raise AofFormatError(pos, "invalid length %r" % line[:20])
    return int(line), nxt


def read_record(buf, pos: int, end: int) -> tuple[list[bytes], int]:
    """Parse the record starting at ``pos``; return (argv, next position).

    Raises Truncated when the buffer ends inside the record (the caller may
    read more, or treat it as a truncated tail) and AofFormatError when the
    bytes cannot be a record.
    """
    start = pos
    count, pos = _read_count(buf, pos, end, 42, start)  # '*'
    if not 1 <= count <= 16:
        raise AofFormatError(start, "invalid number of arguments %d" % count)
    argv = []
    for _ in range(count):
        length, pos = _read_count(buf, pos, end, 36, start)  # '$'
        if pos + length + 2 > end:
            raise Truncated(start)
        if buf[pos + length:pos + length + 2] != b"\r\n":
            raise AofFormatError(pos + length, "bulk not terminated by CRLF")
        argv.append(bytes(buf[pos:pos + length]))
        pos += length + 2
    return argv, pos
