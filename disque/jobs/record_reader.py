"""Reading the AOF's records back (docs/aof-format.md): the one definition
of how a record is framed (its RESP heads and lengths), checked (its
checksum, and the format marker's rule that every record after it carries
one) and decoded into a job or a deletion.

Every reader of the file uses it: the loader's per-job loop
(``state.restore``), the loader's and ``disque-check-aof``'s strict parser
(``aof.format``) and the Spark AOF source (``spark.aoflog``). It is core
code so that the compiled build runs the load's per-record work as C.

A record is framed by its bulk lengths, never by lines (job bodies hold
``\\r\\n``). ``RecordReader`` frames records one after another and skips
the parse of a record whose heads are byte for byte those of the record
before it (a run of LOADJOBs of one payload size, say): the heads fix
every length, so the record then frames as that one did.
"""

from __future__ import annotations

import struct
from collections.abc import Container
from typing import Final

import msgpack  # type: ignore[import-untyped]  # no stubs; its results are checked

from disque.jobs.codec import (STORED_FORMAT, STORED_FORMAT_EXTENDED, STORED_LAYOUT,
                               BadJobPayload, apply_extension_fields, from_checked_storage,
                               from_storage)
from disque.jobs.job import Job
from disque.jobs.records import (CHECKSUM_LEN, DELJOB, FORMAT_CHECKSUMMED, FORMAT_RECORD,
                                 LOADJOB, checksum, unsupported_format)

# What a record is, once read (``RecordReader.kind``).
OTHER: Final = 0  # a command no AOF holds: the caller names it
JOB: Final = 1  # LOADJOB <payload> ...
DELETION: Final = 2  # DELJOB <id> ...
MARKER: Final = 3  # AOFFORMAT 2: checksums required from here on

MAX_FIELDS: Final = 16
_STAR: Final = 42  # '*'
_DOLLAR: Final = 36  # '$'
_CR: Final = 13
_LF: Final = 10
_CRLF: Final = b"\r\n"
# A record's argument count when it ends with a checksum (without it: one less).
_SUMMED_COUNTS: Final = {LOADJOB: 4, DELJOB: 8}
_FIXED: Final = STORED_LAYOUT.size
_unpack_fixed: Final = STORED_LAYOUT.unpack_from
_NODE_ID_LEN: Final = 40
_unpackb: Final = msgpack.unpackb
_UnpackException: Final = msgpack.UnpackException


class RecordDamaged(Exception):
    """The bytes at ``offset`` cannot be a record (or fail its checksum)."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__("Bad file format reading the append only file at offset %d: %s"
                         % (offset, reason))
        self.offset = offset
        self.reason = reason


class RecordTruncated(Exception):
    """The buffer ends in the middle of the record that starts at ``offset``."""

    def __init__(self, offset: int) -> None:
        super().__init__("Unexpected end of file at offset %d" % offset)
        self.offset = offset


def _length(buf: bytes, pos: int, end: int, prefix: int, record_start: int) -> tuple[int, int]:
    """The number of a ``*<n>`` or ``$<n>`` head at ``pos``, and the position after it."""
    if pos >= end:
        raise RecordTruncated(record_start)
    if buf[pos] != prefix:
        raise RecordDamaged(pos, "expected %r" % chr(prefix))
    eol = buf.find(_CRLF, pos + 1, end)
    if eol < 0:
        raise RecordTruncated(record_start)
    digits = bytes(buf[pos + 1:eol])
    if not digits.isdigit():
        raise RecordDamaged(pos, "invalid length %r" % digits[:20])
    return int(digits), eol + 2


def frame(buf: bytes, pos: int, end: int, spans: list[int]) -> int:
    """Frame the record at ``pos`` (up to ``end``): ``spans`` gets each field's
    start and stop; returns the position after the record.

    Raises RecordTruncated when the buffer ends inside the record (the
    caller may read more, or treat it as a truncated tail) and
    RecordDamaged, at the offending byte, when the bytes cannot be a record.
    """
    start = pos
    count, pos = _length(buf, pos, end, _STAR, start)
    if not 1 <= count <= MAX_FIELDS:
        raise RecordDamaged(start, "invalid number of arguments %d" % count)
    spans.clear()
    for _ in range(count):
        size, pos = _length(buf, pos, end, _DOLLAR, start)
        stop = pos + size
        if stop + 2 > end:
            raise RecordTruncated(start)
        if buf[stop] != _CR or buf[stop + 1] != _LF:
            raise RecordDamaged(stop, "bulk not terminated by CRLF")
        spans.append(pos)
        spans.append(stop)
        pos = stop + 2
    return pos


def summed(name: bytes, count: int) -> bool:
    """Whether a record of ``count`` fields named ``name`` ends with a checksum."""
    return _SUMMED_COUNTS.get(name.upper(), -1) == count


def check_sum(buf: bytes, pos: int, sum_at: int, sum_stop: int) -> None:
    """Check the checksum at ``sum_at`` of the record at ``pos``: it covers
    every byte before it. Raises RecordDamaged at the record's start."""
    if sum_stop - sum_at != CHECKSUM_LEN:
        raise RecordDamaged(pos, "bad checksum field")
    if checksum(buf[pos:sum_at]) != buf[sum_at:sum_stop]:
        raise RecordDamaged(pos, "checksum mismatch")


def unchecked(pos: int) -> RecordDamaged:
    """The verdict on a record without a checksum after the format marker."""
    return RecordDamaged(pos, "record without a checksum after the format marker")


def read_record(data: bytes | bytearray, pos: int, end: int) -> tuple[list[bytes], int]:
    """Parse the record starting at ``pos``; return (argv, next position).

    Raises as ``frame`` does. A bytearray is read from a copy: the framing
    functions take bytes, which the compiled core indexes natively.
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    spans: list[int] = []
    nxt = frame(buf, pos, end, spans)
    return [buf[spans[i]:spans[i + 1]] for i in range(0, len(spans), 2)], nxt


def read_checked(data: bytes | bytearray, pos: int, end: int,
                 required: bool) -> tuple[list[bytes], int]:
    """``read_record``, then the record's checksum: its argv without the
    checksum, and the next position.

    ``required`` (a format marker was read before) makes a record without
    a checksum damage; without it, only records that carry one are
    checked (files of earlier versions, and what this version appended to
    them). Raises RecordDamaged at the record's start when it fails. A
    bytearray is read from a copy, as in ``read_record``.
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    spans: list[int] = []
    nxt = frame(buf, pos, end, spans)
    argv = [buf[spans[i]:spans[i + 1]] for i in range(0, len(spans), 2)]
    if summed(argv[0], len(argv)):
        check_sum(buf, pos, spans[-2], spans[-1])
        argv.pop()
    elif required and argv[0].upper() != FORMAT_RECORD:
        raise unchecked(pos)
    return argv, nxt


def format_marker(argv: list[bytes], offset: int) -> bool:
    """Whether ``argv`` is the format marker (checksums required from here on);
    raises RecordDamaged for a marker of a format this version cannot read."""
    if argv[0].upper() != FORMAT_RECORD:
        return False
    if argv[1:] != [FORMAT_CHECKSUMMED]:
        raise RecordDamaged(offset, unsupported_format(argv[1:]))
    return True


def decode_job(buf: bytes, start: int, stop: int, known_nodes: Container[bytes] | None,
               own: tuple[bytes, ...] | None = None,
               names: dict[bytes, bytes] | None = None) -> tuple[Job, bool]:
    """The job of the LOADJOB payload ``buf[start:stop]``, and whether it was
    stored as queued (see ``codec.from_storage``). Raises BadJobPayload.

    A packed payload (format 1 or 2) is unpacked in place, its fields
    straight into the Job without the type checks a msgpack one (earlier
    versions' form, never starting with the packed form's byte) needs.
    ``names``, when given, holds one bytes object per queue name, shared
    by the jobs of that queue.
    """
    marker = buf[start] if start < stop else -1
    if marker != STORED_FORMAT and marker != STORED_FORMAT_EXTENDED:
        try:
            stored = _unpackb(buf[start:stop])
        except (ValueError, TypeError, _UnpackException) as exc:
            raise BadJobPayload("not a job payload: %s" % exc) from None
        return from_storage(stored, known_nodes, own)
    if stop - start < _FIXED:
        raise BadJobPayload("job payload too short")
    fields = _unpack_fixed(buf, start)
    queue_len: int = fields[10]
    body_len: int = fields[11]
    count: int = fields[12]
    queue_at = start + _FIXED
    body_at = queue_at + queue_len
    nodes_at = body_at + body_len
    nodes_end = nodes_at + count * _NODE_ID_LEN
    # Format 1 ends with the node IDs; format 2 has its map after them.
    if nodes_end != stop if marker == STORED_FORMAT else nodes_end >= stop:
        raise BadJobPayload("job payload length does not match its fields")
    queue = buf[queue_at:body_at]
    if names is not None:
        queue = names.setdefault(queue, queue)
    delivered: tuple[bytes, ...] | list[bytes]
    if count == 1 and own is not None and buf.startswith(own[0], nodes_at):
        delivered = own  # a job held here only: no slice to make
    else:
        delivered = [buf[at:at + _NODE_ID_LEN]
                     for at in range(nodes_at, nodes_end, _NODE_ID_LEN)]
    job, queued = from_checked_storage(
        fields[13], queue, buf[body_at:nodes_at], fields[3], fields[4], fields[5],
        fields[6], fields[7], fields[8], fields[9], fields[2], delivered, fields[1],
        known_nodes, own)
    if marker == STORED_FORMAT_EXTENDED:
        try:
            extra = _unpackb(buf[nodes_end:stop], raw=False)
        except (ValueError, TypeError, _UnpackException) as exc:
            raise BadJobPayload("bad job extensions: %s" % exc) from None
        apply_extension_fields(job, extra)
    return job, queued


class RecordReader:
    """Reads the records of one file in order, holding its checksum rule.

    After ``read``, ``kind`` says what the record is (JOB, DELETION,
    MARKER or OTHER), ``first``/``first_stop`` where its first argument
    (a LOADJOB's payload, a DELJOB's job ID) is, and ``argv`` gives its
    fields without the checksum.
    """

    def __init__(self) -> None:
        # Set once a format marker was read: a record without a checksum
        # is damage from then on.
        self.required = False
        self.kind = OTHER
        self.at = 0  # the last record's start
        self.first = 0
        self.first_stop = 0
        self._spans: list[int] = []
        # The shape of the last record framed, which the next one is
        # expected to repeat: its bytes up to its first argument's, the
        # heads between its later fields (offset from its start, bytes),
        # its fields' offsets, its size, and what it is.
        self._head = b""
        self._gaps: list[tuple[int, bytes]] = []
        self._rel: list[int] = []
        self._size = 0
        self._kind = OTHER
        self._summed = False
        self._first_at = 0
        self._first_stop_at = 0
        self._sum_at = 0
        self._sum_stop_at = 0

    def read(self, buf: bytes, pos: int, end: int) -> int:
        """Frame and check the record at ``pos``; return the position after it.

        Raises RecordTruncated and RecordDamaged as ``frame`` and
        ``read_checked`` do (a checksum that fails, or is missing after the
        format marker; a marker of another format).
        """
        head = self._head
        nxt = pos + self._size
        same = bool(head) and nxt <= end and buf.startswith(head, pos) and buf.startswith(
            _CRLF, nxt - 2)
        if same:
            if self._summed:
                # The checksum covers every head before it (see _learn).
                sum_at = pos + self._sum_at
                same = checksum(buf[pos:sum_at]) == buf[sum_at:pos + self._sum_stop_at]
            else:
                for offset, gap in self._gaps:
                    if not buf.startswith(gap, pos + offset):
                        same = False
                        break
        if not same:
            nxt = frame(buf, pos, end, self._spans)
            self._learn(buf, pos, nxt)
            if self._summed:
                check_sum(buf, pos, pos + self._sum_at, pos + self._sum_stop_at)
        self.at = pos
        kind = self._kind
        if not self._summed:
            if kind == MARKER:
                format_marker(self.argv(buf), pos)
                self.required = True
            elif self.required:
                raise unchecked(pos)
        self.kind = kind
        self.first = pos + self._first_at
        self.first_stop = pos + self._first_stop_at
        return nxt

    def argv(self, buf: bytes) -> list[bytes]:
        """The fields of the record last read, without its checksum."""
        at = self.at
        rel = self._rel
        count = len(rel) - 2 if self._summed else len(rel)
        return [bytes(buf[at + rel[i]:at + rel[i + 1]]) for i in range(0, count, 2)]

    def job(self, buf: bytes, known_nodes: Container[bytes] | None,
            own: tuple[bytes, ...] | None = None) -> tuple[Job, bool]:
        """The job of the LOADJOB last read (``decode_job``)."""
        return decode_job(buf, self.first, self.first_stop, known_nodes, own)

    def _learn(self, buf: bytes, pos: int, nxt: int) -> None:
        """Take the record just framed as the shape to expect next."""
        spans = self._spans
        count = len(spans) >> 1
        rel = [at - pos for at in spans]
        self._rel = rel
        self._size = nxt - pos
        self._head = bytes(buf[pos:spans[2] if count > 1 else nxt])
        name = bytes(buf[spans[0]:spans[1]]).upper()
        self._summed = _SUMMED_COUNTS.get(name, -1) == count
        # A checksum covers every head before it: a record of another shape
        # fails it where this shape has it (and is then framed afresh), so
        # only an unsummed record's heads are compared. The final CRLF,
        # which no checksum covers, is compared by ``read``.
        self._gaps = [] if self._summed else [
            (rel[i], bytes(buf[spans[i]:spans[i + 1]])) for i in range(3, len(rel) - 1, 2)]
        self._sum_at = rel[-2]
        self._sum_stop_at = rel[-1]
        self._first_at = rel[2] if count > 1 else 0
        self._first_stop_at = rel[3] if count > 1 else 0
        fields = count - 1 if self._summed else count
        if name == LOADJOB and fields >= 2:
            self._kind = JOB
        elif name == DELJOB and fields >= 2:
            self._kind = DELETION
        elif name == FORMAT_RECORD:
            self._kind = MARKER
        else:
            self._kind = OTHER
