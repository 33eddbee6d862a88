"""Reading the AOF's records back (docs/aof-format.md): the one definition
of how a record is framed (its RESP heads and lengths), checked (its
checksum, the format marker's rule that every record after it carries
one, and that it is a LOADJOB, a DELJOB or the marker) and decoded into a
job or a deletion.

``RecordReader`` is the one way to read a file, whoever reads it: the
loader (``state.restore``'s loop), ``disque-check-aof`` and the Spark AOF
source. It is fed the file's bytes, whole or a chunk at a time, and reads
one record after another with its offset and number; whatever is wrong
with the file is an ``AofFormatError`` naming where. It is core code so
that the compiled build runs the load's per-record work as C.

A record is framed by its bulk lengths, never by lines (job bodies hold
``\\r\\n``). The reader skips the parse of a record whose heads are byte
for byte those of the record before it (a run of LOADJOBs of one payload
size, say): the heads fix every length, so the record then frames as that
one did.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Final

import msgpack  # type: ignore[import-untyped]  # no stubs; its results are checked

from disque.jobs.codec import (STORED_FORMAT, STORED_FORMAT_EXTENDED, STORED_LAYOUT,
                               BadJobPayload, apply_extension_fields, from_checked_storage,
                               from_storage)
from disque.jobs.job import Job
from disque.jobs.records import (CHECKSUM_LEN, DELJOB, FORMAT_CHECKSUMMED, FORMAT_RECORD,
                                 LOADJOB, checksum, unsupported_format)

# What ``RecordReader.next`` read.
END: Final = 0  # no whole record more in the bytes fed so far
JOB: Final = 1  # LOADJOB <payload> ...
DELETION: Final = 2  # DELJOB <id> ...
MARKER: Final = 3  # AOFFORMAT 2: checksums required from here on
_OTHER: Final = 4  # a command no AOF holds: damage

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
_NAME_SHOWN: Final = 32  # bytes of an unknown command's name that a message quotes
_unpackb: Final = msgpack.unpackb
_UnpackException: Final = msgpack.UnpackException


class AofFormatError(ValueError):
    """A damaged AOF, and where: the damaged record's number (from 1) and
    start (``record_offset``: cutting the file there keeps every record
    before it), the byte found wrong (``offset``, at or after the start)
    and what was wrong (``reason``). ``truncated``: the file ends inside
    that record, which a crash during a write leaves."""

    def __init__(self, reason: str, offset: int, record_offset: int, record: int,
                 truncated: bool = False, name: str = "") -> None:
        self.reason = reason
        self.offset = offset
        self.record_offset = record_offset
        self.record = record
        self.truncated = truncated
        self.name = name  # the file's, when the reader was given it
        text = ("%s %s" % (reason, self.where()) if truncated
                else "bad format %s: %s" % (self.where(), reason))
        super().__init__("%s: %s" % (name, text) if name else text)

    def where(self) -> str:
        """The place of the damage as every message names it."""
        found = ("" if self.offset == self.record_offset
                 else ", the damage found at offset %d" % self.offset)
        return "at offset %d (record %d%s)" % (self.record_offset, self.record, found)


class RecordReader:
    """Reads a file's records in order, from the bytes it is fed, holding
    the file's checksum rule.

    ``next`` reads one record and says what it is; until the next call,
    ``offset`` is where it starts, ``records`` its number, and ``argv``,
    ``job`` and ``deleted_id`` give its contents. Feed the file (``feed``)
    whenever ``next`` answers END, and call ``finish`` at its end.
    """

    def __init__(self, data: bytes = b"", name: str = "") -> None:
        self.name = name  # the file's, for messages
        # Set once a format marker was read: a record without a checksum
        # is damage from then on.
        self.required = False
        self.records = 0  # records read
        self._buf = data
        self._pos = 0  # in _buf: the first byte not read
        self._base = 0  # the file offset of _buf[0]
        self._at = 0  # in _buf: the start of the record being read, or last read
        self._spans: list[int] = []
        # The shape of the last record framed, which the next one is
        # expected to repeat: its bytes up to its first argument's, the
        # heads between its later fields (offset from its start, bytes),
        # its fields' offsets, its size, and what it is.
        self._head = b""
        self._head_len = 0
        self._gaps: list[tuple[int, bytes]] = []
        self._rel: list[int] = []
        self._size = 0
        self._kind = _OTHER
        self._summed = False
        self._first_at = 0
        self._first_stop_at = 0
        self._sum_at = 0
        self._sum_stop_at = 0

    @property
    def offset(self) -> int:
        """The file offset of the record last read."""
        return self._base + self._at

    @property
    def position(self) -> int:
        """The file offset after the last record read."""
        return self._base + self._pos

    def feed(self, data: bytes) -> None:
        """The file's next bytes (a record may run across two feeds). The
        record last read is gone: read what is needed of it first."""
        buf = self._buf
        pos = self._pos
        self._buf = buf[pos:] + data if pos < len(buf) else data
        self._base += pos
        self._pos = 0
        self._at = 0

    def next(self) -> int:
        """Read the next record: JOB, DELETION or MARKER, or END when the
        bytes fed so far hold no whole record more.

        Raises AofFormatError when the bytes cannot be a record, its
        checksum fails (or is missing after the format marker), it is a
        marker of another format or a command no AOF holds.
        """
        buf = self._buf
        pos = self._pos
        end = len(buf)
        self._at = pos
        size = self._size  # 0 until a record's shape is learned
        nxt = pos + size
        # Compared by indexing and slicing, which the compiled core does
        # natively (a bytes.startswith with an offset is a generic call).
        same = (size > 0 and nxt <= end and buf[nxt - 2] == _CR and buf[nxt - 1] == _LF
                and buf[pos:pos + self._head_len] == self._head)
        if same:
            if self._summed:
                # The checksum covers every head before it (see _learn).
                sum_at = pos + self._sum_at
                same = checksum(buf[pos:sum_at]) == buf[sum_at:pos + self._sum_stop_at]
            else:
                for offset, gap in self._gaps:
                    at = pos + offset
                    if buf[at:at + len(gap)] != gap:
                        same = False
                        break
        if not same:
            nxt = self._frame(buf, pos, end)
            if nxt < 0:
                return END
            self._learn(buf, pos, nxt)
            if self._summed:
                self._check_sum(buf, pos)
        kind = self._kind
        if not self._summed:  # a record with a checksum is a LOADJOB or a DELJOB
            if kind == MARKER:
                self._check_marker()
                self.required = True
            elif self.required:
                raise self._damage(pos, "record without a checksum after the format marker")
            elif kind == _OTHER:
                raise self._damage(pos, self._unknown())
        self._pos = nxt
        self.records += 1
        return kind

    def finish(self) -> None:
        """The file ends after the bytes fed: raises AofFormatError, marked
        ``truncated``, when they end inside a record."""
        if self._pos < len(self._buf):
            self._at = self._pos
            raise self._damage(self._pos, "unexpected end of file", True)

    def argv(self) -> list[bytes]:
        """The fields of the record last read, without its checksum."""
        buf = self._buf
        at = self._at
        rel = self._rel
        count = len(rel) - 2 if self._summed else len(rel)
        return [buf[at + rel[i]:at + rel[i + 1]] for i in range(0, count, 2)]

    def job(self, known_nodes: Container[bytes] | None, own: tuple[bytes, ...] | None = None,
            names: dict[bytes, bytes] | None = None) -> tuple[Job, bool]:
        """The job of the LOADJOB last read, and whether it was stored as
        queued (see ``codec.from_storage``); raises AofFormatError when its
        payload does not decode.

        A packed payload (format 1 or 2) is unpacked in place, its fields
        straight into the Job without the type checks a msgpack one
        (earlier versions' form, never starting with the packed form's
        byte) needs. ``names``, when given, holds one bytes object per
        queue name, shared by the jobs of that queue.
        """
        buf = self._buf
        at = self._at
        start = at + self._first_at
        stop = at + self._first_stop_at
        try:
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
                delivered = [buf[node_at:node_at + _NODE_ID_LEN]
                             for node_at in range(nodes_at, nodes_end, _NODE_ID_LEN)]
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
        except BadJobPayload as exc:
            raise self.damaged("corrupted job: %s" % exc) from None

    def deleted_id(self) -> bytes:
        """The job ID of the DELJOB last read."""
        at = self._at
        return self._buf[at + self._first_at:at + self._first_stop_at]

    def damaged(self, reason: str) -> AofFormatError:
        """The error naming the record last read damaged, for what a caller
        finds wrong in its fields."""
        start = self._base + self._at
        return AofFormatError(reason, start, start, self.records, False, self.name)

    def _damage(self, at: int, reason: str, truncated: bool = False) -> AofFormatError:
        """The error for the record being read, damaged at ``at`` in the buffer."""
        base = self._base
        return AofFormatError(reason, base + at, base + self._at, self.records + 1, truncated,
                              self.name)

    def _frame(self, buf: bytes, pos: int, end: int) -> int:
        """Frame the record at ``pos`` (up to ``end``): ``_spans`` gets each
        field's start and stop; the position after the record, or -1 when
        the buffer ends inside it."""
        count, pos = self._length(buf, pos, end, _STAR)
        if pos < 0:
            return -1
        if not 1 <= count <= MAX_FIELDS:
            raise self._damage(self._at, "invalid number of arguments %d" % count)
        spans = self._spans
        spans.clear()
        for _ in range(count):
            size, pos = self._length(buf, pos, end, _DOLLAR)
            if pos < 0:
                return -1
            stop = pos + size
            if stop + 2 > end:
                return -1
            if buf[stop] != _CR or buf[stop + 1] != _LF:
                raise self._damage(stop, "bulk not terminated by CRLF")
            spans.append(pos)
            spans.append(stop)
            pos = stop + 2
        return pos

    def _length(self, buf: bytes, pos: int, end: int, prefix: int) -> tuple[int, int]:
        """The number of a ``*<n>`` or ``$<n>`` head at ``pos`` and the
        position after it, that position -1 when the buffer ends first."""
        if pos >= end:
            return 0, -1
        if buf[pos] != prefix:
            raise self._damage(pos, "expected %r" % chr(prefix))
        eol = buf.find(_CRLF, pos + 1, end)
        if eol < 0:
            return 0, -1
        digits = buf[pos + 1:eol]
        if not digits.isdigit():
            raise self._damage(pos, "invalid length %r" % digits[:20])
        return int(digits), eol + 2

    def _check_sum(self, buf: bytes, pos: int) -> None:
        """The record's checksum covers every byte before it."""
        sum_at = pos + self._sum_at
        sum_stop = pos + self._sum_stop_at
        if sum_stop - sum_at != CHECKSUM_LEN:
            raise self._damage(pos, "bad checksum field")
        if checksum(buf[pos:sum_at]) != buf[sum_at:sum_stop]:
            raise self._damage(pos, "checksum mismatch")

    def _check_marker(self) -> None:
        """A format marker names the one format this version reads."""
        argv = self.argv()
        if argv[1:] != [FORMAT_CHECKSUMMED]:
            raise self._damage(self._at, unsupported_format(argv[1:]))

    def _unknown(self) -> str:
        """What is wrong with a record that is no LOADJOB, DELJOB or marker."""
        name = self.argv()[0].upper()
        shown = repr(name[:_NAME_SHOWN])[2:-1]  # control bytes escaped, as in a log line
        if name == LOADJOB or name == DELJOB:
            return "wrong number of arguments for '%s'" % shown
        return "unknown command '%s'" % shown

    def _learn(self, buf: bytes, pos: int, nxt: int) -> None:
        """Take the record just framed as the shape to expect next."""
        spans = self._spans
        count = len(spans) >> 1
        rel = [at - pos for at in spans]
        self._rel = rel
        self._size = nxt - pos
        self._head = buf[pos:spans[2] if count > 1 else nxt]
        self._head_len = len(self._head)
        name = buf[spans[0]:spans[1]].upper()
        self._summed = _SUMMED_COUNTS.get(name, -1) == count
        # A checksum covers every head before it: a record of another shape
        # fails it where this shape has it (and is then framed afresh), so
        # only an unsummed record's heads are compared. The final CRLF,
        # which no checksum covers, is compared by ``next``.
        self._gaps = [] if self._summed else [
            (rel[i], buf[spans[i]:spans[i + 1]]) for i in range(3, len(rel) - 1, 2)]
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
            self._kind = _OTHER
