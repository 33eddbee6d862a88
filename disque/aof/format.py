"""Reading AOF records: LOADJOB and DELJOB as RESP multibulk requests.

The format is documented in docs/aof-format.md (spec: persistence.md §1).
The records are built by ``disque.jobs.records`` (in the compiled core:
it is on the hot path with appendonly on); reading them here reports exact
byte offsets so a damaged file can be diagnosed and a truncated tail cut off.

A LOADJOB payload is a packed little-endian struct, as in the original
server: per job it costs about three quarters of what packing the job
with msgpack did. Files of earlier versions, whose payloads are msgpack
arrays, load as well: a msgpack array never starts with the struct's
marker byte.

Every record this version writes ends with a checksum (xxh3-64 of the
record's bytes before it, as an 8-byte bulk), and a file it starts begins
with the marker record ``AOFFORMAT 2``, after which a record without a
checksum is damage. Files (and records) of earlier versions have neither
and still load; what follows a marker is checked strictly.
"""

from __future__ import annotations

import msgpack

from disque.jobs.codec import (STORED_LAYOUT, BadJobPayload, apply_extension_fields,
                               from_checked_storage, from_storage)
from disque.jobs.job import Job
from disque.jobs.records import (CHECKSUM_LEN, DELJOB, FORMAT_CHECKSUMMED, FORMAT_RECORD,
                                 LOADJOB, PAYLOAD_V1, PAYLOAD_V2, V1_SIZE, checksum)

_unpackb = msgpack.unpackb
_V1_MARKER = bytes((PAYLOAD_V1,))
_V2_MARKER = bytes((PAYLOAD_V2,))
_v1_unpack = STORED_LAYOUT.unpack_from
_NODE_ID_LEN = 40
# The bytes after a checksum's ``$8`` head: the checksum itself and CRLF.
CHECKSUM_TAIL = CHECKSUM_LEN + 2
# A record's argument count with a checksum (without it: one less).
_SUMMED_COUNTS = {LOADJOB: 4, DELJOB: 8}


def load_job(payload: bytes, known_nodes, own: tuple | None = None) -> tuple[Job, bool]:
    """The job of a LOADJOB payload, and whether it was stored as queued
    (see ``codec.from_storage``). Raises BadJobPayload.

    A packed payload's fields go straight to the Job, without the type
    checks a msgpack one needs. disque-check-aof, the Spark AOF reader and
    the loader's strict path use it; the loader's main loop
    (``cluster.restore``) unpacks payloads in place the same way.
    """
    marker = payload[:1]
    if marker == _V1_MARKER or marker == _V2_MARKER:
        if len(payload) < V1_SIZE:
            raise BadJobPayload("job payload too short")
        (_, state, flags, repl, ctime, etime, delay, retry, nacks, adeliv, queue_len,
         body_len, count, job_id) = _v1_unpack(payload)
        queue_end = V1_SIZE + queue_len
        body_end = queue_end + body_len
        nodes_end = body_end + count * _NODE_ID_LEN
        if nodes_end != len(payload) if marker == _V1_MARKER else nodes_end >= len(payload):
            raise BadJobPayload("job payload length does not match its fields")
        delivered = [payload[at:at + _NODE_ID_LEN]
                     for at in range(body_end, nodes_end, _NODE_ID_LEN)]
        job, queued = from_checked_storage(job_id, payload[V1_SIZE:queue_end],
                                           payload[queue_end:body_end], repl, ctime, etime,
                                           delay, retry, nacks, adeliv, flags, delivered, state,
                                           known_nodes, own)
        if marker == _V2_MARKER:
            try:
                extra = _unpackb(payload[nodes_end:], raw=False)
            except (ValueError, TypeError, msgpack.UnpackException) as exc:
                raise BadJobPayload("bad job extensions: %s" % exc) from None
            apply_extension_fields(job, extra)
        return job, queued
    try:
        fields = _unpackb(payload)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise BadJobPayload("not a job payload: %s" % exc) from None
    return from_storage(fields, known_nodes, own)


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


def read_checked(buf, pos: int, end: int, required: bool) -> tuple[list[bytes], int]:
    """``read_record``, then the record's checksum: its argv without the
    checksum, and the next position.

    ``required`` (a format marker was read before) makes a record without
    a checksum damage; without it, only records that carry one are
    checked (files of earlier versions, and what this version appended to
    them). Raises AofFormatError at the record's start when it fails.
    """
    argv, nxt = read_record(buf, pos, end)
    name = argv[0].upper()
    if len(argv) == _SUMMED_COUNTS.get(name):
        stored = argv.pop()
        if len(stored) != CHECKSUM_LEN:
            raise AofFormatError(pos, "bad checksum field")
        if checksum(bytes(buf[pos:nxt - CHECKSUM_TAIL])) != stored:
            raise AofFormatError(pos, "checksum mismatch")
    elif required and name != FORMAT_RECORD:
        raise AofFormatError(pos, "record without a checksum after the format marker")
    return argv, nxt


def format_marker(argv: list[bytes], offset: int) -> bool:
    """Whether ``argv`` is the format marker (checksums required from here on);
    raises AofFormatError for a marker of a format this version cannot read."""
    if argv[0].upper() != FORMAT_RECORD:
        return False
    if argv[1:] != [FORMAT_CHECKSUMMED]:
        raise AofFormatError(offset, "unsupported AOF format %r" % b" ".join(argv[1:])[:20])
    return True
