"""Bus frames as bytes: messages packed and grouped per peer, frames decoded.

spec: cluster-bus.md §1. A frame is a 4-byte big-endian length followed by
a msgpack array: the sender's header map, then the message maps. The TCP
bus (``disque.net.bus``) reads and writes the sockets; this module does the
byte work of every message and every frame, compiled with the core, so the
interpreted adapter runs once per frame and per loop turn, not once per
message: ``Wire.send`` packs a message and queues it for its peer (one
``PeerOutput`` per link), ``frame_bytes`` joins a peer's queue behind
the header, ``decode_frames`` cuts a link's input into decoded frames.

The layout described here is bus format 1. Two ends of a link agree on the
highest format both speak when the link opens (``disque.net.busformat``);
a format this version adds is listed in ``BUS_FORMATS`` and gets its
packing and decoding here, chosen per link by the format agreed
(``PeerOutput.format``).

Format 2 frames are format 1's but for the messages about jobs: those a
peer gets in a row, of one type and the same MFLAGS, travel as one batch,
a msgpack array of the type's code, the flags and each message's fields
in a fixed order (listed in ``messages``); anything else is a map as in
format 1. The order of a peer's messages is kept, and a loop turn of a
pipelined producer or of an ACKJOB of many jobs costs a peer one message
per type instead of one per job.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final, Protocol

import msgpack  # type: ignore[import-untyped]  # no stubs; the bus's own encoding

from disque.cluster import messages as m

_LENGTH: Final = struct.Struct(">I")
_ARRAY32: Final = struct.Struct(">BI")
_FIXARRAY: Final = [bytes((0x90 | n,)) for n in range(16)]  # msgpack array headers

_pack_value: Final[Callable[[object], bytes]] = msgpack.Packer(use_bin_type=True).pack
# The packed start of the messages that carry a job ID alone ({type, id}), and
# of GOTACK ({type, id, known}): the ID (40 bytes, a bin 8) completes them.
_ID_MESSAGE_HEAD: Final = {
    kind: b"\x82" + _pack_value(m.TYPE) + _pack_value(kind) + _pack_value(m.ID) + b"\xc4\x28"
    for kind in (m.GOTJOB, m.DELJOB, m.QUEUED, m.WORKING, m.WILLQUEUE)}
_GOTACK_HEAD: Final = (b"\x83" + _pack_value(m.TYPE) + _pack_value(m.GOTACK) + _pack_value(m.ID)
                       + b"\xc4\x28")
_GOTACK_KNOWN: Final = [_pack_value(m.KNOWN) + _pack_value(known) for known in (0, 1)]

# The bus formats this version speaks, oldest first. Format 1 is the one
# every version reads: versions from before the agreement speak it alone,
# and the frames that agree a link's format are written in it.
BUS_FORMATS: Final = (1, 2)
BATCHING_FORMAT: Final = 2  # the first format that batches messages about jobs
# A batch is closed once this large, so that a few big jobs make several
# messages: a frame too large for the peer drops one message, not a batch.
BATCH_BYTES: Final = 64 * 1024
_BIN40: Final = b"\xc4\x28"  # msgpack's head of a 40-byte bin: a job ID
_POSITIVE: Final = [_pack_value(n) for n in range(128)]  # small ints, packed
_NIL: Final = _pack_value(None)

# Why decode_frames stopped before the end of the buffer (besides a partial frame).
FRAME_OK: Final = 0
FRAME_TOO_LARGE: Final = 1
FRAME_UNDECODABLE: Final = 2
FRAME_NOT_ARRAY: Final = 3
FRAME_BAD_MAC: Final = 4


class PeerOutput:
    """The packed messages for one link not yet written: they leave as one
    frame at the end of the loop turn, or once ``early_flush`` wait. In
    format 2 the last of them may be a batch still open (``batch``: its
    packed pieces, the first one its code and flags)."""

    __slots__ = ("out", "size", "handle", "format", "count", "batch", "batch_key", "batch_items",
                 "batch_size")

    def __init__(self, handle: object) -> None:
        self.out: list[bytes] | None = None
        self.size = 0  # bytes in out and in the open batch
        self.handle = handle  # the transport's connection (None once it closed)
        self.format = 1  # the bus format of the link's frames (agreed as it opens)
        self.count = 0  # the core's messages in out and the batch
        self.batch: list[bytes] | None = None
        self.batch_key = 0  # the open batch's code and flags (code | flags << 8)
        self.batch_items = 0  # its array's elements
        self.batch_size = 0  # and its bytes

    def close_batch(self) -> None:
        """Add the open batch, if any, to ``out`` as one message."""
        batch = self.batch
        if batch is None:
            return
        self.batch = None
        head = _array_head(self.batch_items)
        batch[0] = head + batch[0]
        self.size += len(head)
        out = self.out
        assert out is not None  # a batch opens in a queue that has messages
        out.append(b"".join(batch))

    def take(self) -> list[bytes] | None:
        """The waiting messages (None when there are none); the queue is left empty."""
        self.close_batch()
        out = self.out
        self.out = None
        self.size = 0
        self.count = 0
        return out


def _array_head(items: int) -> bytes:
    """The msgpack head of an array of ``items`` elements."""
    if items < 16:
        return _FIXARRAY[items]
    if items < 0x10000:
        return b"\xdc" + items.to_bytes(2, "big")
    return _ARRAY32.pack(0xDD, items)


class Peer(Protocol):
    """A link as the transport keeps it: its queue of packed messages."""

    output: PeerOutput


class Wire:
    """Packs the core's messages and queues them per peer; the transport
    is told once per loop turn that frames wait (``on_first``) and once
    per ``early_flush`` messages for one peer (``on_full``). ``messages``
    counts the messages queued as they travel (a format 2 batch is one)."""

    __slots__ = ("peers", "dirty", "early_flush", "on_first", "on_full", "messages", "_pack",
                 "_msg", "_packed", "_piece_of", "_piece", "_piece_key", "_piece_items")

    def __init__(self, peers: dict, on_first: Callable[[], None],
                 on_full: Callable[[PeerOutput], None], early_flush: int) -> None:
        # Node ID -> its outbound link (a Peer): the transport's own table. A
        # dict, not a Mapping: compiled, its get is then a direct lookup.
        self.peers = peers
        self.dirty: list[PeerOutput] = []  # queues with messages, in the order they got them
        self.early_flush = early_flush
        self.on_first = on_first
        self.on_full = on_full
        self.messages = 0
        # One reusable packer: msgpack.packb builds a new one per call.
        self._pack: Callable[[object], bytes] = msgpack.Packer(use_bin_type=True).pack
        self._msg: dict | None = None
        self._packed = b""
        # The last message's batch piece, kept as _msg/_packed are.
        self._piece_of: dict | None = None
        self._piece = b""
        self._piece_key = -1  # -1: the message travels as a map
        self._piece_items = 0

    def pack(self, msg: dict) -> bytes:
        """``msg`` packed; the same dict sent to several nodes in a row is packed
        once (messages are never modified once sent)."""
        if msg is not self._msg:
            packed = pack_job_message(msg)
            self._packed = packed if packed is not None else self._pack(msg)
            self._msg = msg
        return self._packed

    def pack_value(self, value: object) -> bytes:
        """Any value packed as a message is (a frame's header)."""
        return self._pack(value)

    def send(self, node_id: bytes, msg: dict) -> None:
        """Queue ``msg`` for the outbound link of ``node_id`` (dropped without one)."""
        link: Peer | None = self.peers.get(node_id)
        if link is None:
            return
        output = link.output
        if output.format >= BATCHING_FORMAT:
            self.add(output, msg)
        else:
            self.write(output, self.pack(msg))

    def write(self, peer: PeerOutput, packed: bytes) -> None:
        """Queue a packed message for ``peer``."""
        self.messages += 1
        out = peer.out
        peer.size += len(packed)
        if out is None:
            peer.out = [packed]
            peer.count = 1
            dirty = self.dirty
            dirty.append(peer)
            if len(dirty) == 1:
                self.on_first()
        else:
            peer.close_batch()
            out.append(packed)
            peer.count += 1
            if peer.count >= self.early_flush:
                self.on_full(peer)

    def add(self, peer: PeerOutput, msg: dict) -> None:
        """Queue ``msg`` for ``peer`` in format 2: in the batch open there when it
        is of the same type and flags, else in a batch of its own, or as a map."""
        if msg is not self._piece_of:
            self._piece_of = msg
            self._piece_key = batch_piece_key(msg)
            if self._piece_key >= 0:
                self._piece, self._piece_items = batch_piece(msg, self._piece_key, self._pack)
        key = self._piece_key
        if key < 0:
            self.write(peer, self.pack(msg))
            return
        piece = self._piece
        batch = peer.batch
        if batch is not None and peer.batch_key == key and peer.batch_size < BATCH_BYTES:
            batch.append(piece)
            peer.batch_items += self._piece_items
            peer.batch_size += len(piece)
            peer.size += len(piece)
            peer.count += 1
            if peer.count >= self.early_flush:
                self.on_full(peer)
            return
        self.messages += 1
        mflags = key >> 8
        head = _POSITIVE[key & 0xFF] + (_POSITIVE[mflags] if mflags < 128 else _pack_value(mflags))
        peer.size += len(head) + len(piece)
        out = peer.out
        if out is None:
            peer.out = []
            peer.count = 1
        else:
            peer.close_batch()
            peer.count += 1
        peer.batch = [head, piece]
        peer.batch_key = key
        peer.batch_items = 2 + self._piece_items
        peer.batch_size = len(piece)
        if out is None:
            dirty = self.dirty
            dirty.append(peer)
            if len(dirty) == 1:
                self.on_first()
        elif peer.count >= self.early_flush:
            self.on_full(peer)

    def take_dirty(self) -> list[PeerOutput]:
        """The queues that got messages since the last call."""
        dirty = self.dirty
        self.dirty = []
        return dirty


def batch_piece_key(msg: dict) -> int:
    """The batch a message joins in format 2 (its type's code | its MFLAGS << 8),
    or -1 when it travels as a map: another type, a field the batch has no
    place for, or a field of another type than the batch's."""
    kind = msg.get(m.TYPE)
    if type(kind) is not str:
        return -1
    code = m.BATCH_CODES.get(kind)
    if code is None:
        return -1
    size = len(msg)
    mflags = 0
    if m.MFLAGS in msg:
        flags = msg[m.MFLAGS]
        if type(flags) is not int or not 0 <= flags < 0x1000000:
            return -1
        mflags = flags
        size -= 1
    if code == m.REPLJOB_CODE:
        return code | mflags << 8 if size == 2 and type(msg.get(m.JOB)) is list else -1
    if not m.is_job_id(msg.get(m.ID)):
        return -1
    if code == m.SETACK_CODE:
        holders = msg.get(m.HOLDERS)
        if type(msg.get(m.MAY_HAVE)) is not int:
            return -1
        if not (size == 3 if holders is None and m.HOLDERS not in msg
                else size == 4 and type(holders) is list):
            return -1
        return code | mflags << 8
    field = m.BATCH_INT_FIELD.get(code)
    if field is not None:
        return code | mflags << 8 if size == 3 and type(msg.get(field)) is int else -1
    return code | mflags << 8 if size == 2 else -1


def _packed_int(value: int) -> bytes:
    return _POSITIVE[value] if 0 <= value < 128 else _pack_value(value)


def batch_piece(msg: dict, key: int, pack: Callable[[object], bytes]) -> tuple[bytes, int]:
    """A batchable message's fields (``batch_piece_key`` gave ``key``) as its
    batch carries them, packed, and how many elements they add to the batch."""
    code = key & 0xFF
    if code == m.REPLJOB_CODE:
        return pack(msg[m.JOB]), 1
    piece = _BIN40 + msg[m.ID]
    if code == m.SETACK_CODE:
        holders = msg.get(m.HOLDERS)
        return piece + _packed_int(msg[m.MAY_HAVE]) + (
            _NIL if holders is None else _packed_ids(holders, pack)), 3
    field = m.BATCH_INT_FIELD.get(code)
    if field is not None:
        return piece + _packed_int(msg[field]), 2
    return piece, 1


def _packed_ids(ids: list, pack: Callable[[object], bytes]) -> bytes:
    """A list of node IDs (40 bytes each) packed, as msgpack packs it."""
    if len(ids) < 16 and all(type(i) is bytes and len(i) == 40 for i in ids):
        return _FIXARRAY[len(ids)] + b"".join([_BIN40 + i for i in ids])
    return pack(ids)


def pack_job_message(msg: dict) -> bytes | None:
    """The bytes msgpack makes of a message about one job ID (GOTJOB, DELJOB,
    QUEUED, WORKING, WILLQUEUE, GOTACK: most of the messages of a job moved),
    joined from their fixed start and the ID; None for any other message."""
    job_id = msg.get(m.ID)
    kind = msg.get(m.TYPE)
    if not isinstance(job_id, bytes) or len(job_id) != 40 or not isinstance(kind, str):
        return None
    n = len(msg)
    if n == 2:
        head = _ID_MESSAGE_HEAD.get(kind)
        return head + job_id if head is not None else None
    if n == 3 and kind == m.GOTACK:
        known = msg.get(m.KNOWN)
        if type(known) is int and (known == 0 or known == 1):
            return _GOTACK_HEAD + job_id + _GOTACK_KNOWN[known]
    return None


def frame_bytes(out: list[bytes], header: bytes, size: int) -> bytes:
    """One frame of the packed messages ``out`` (``size`` bytes) behind ``header``."""
    count = len(out) + 1
    size += len(header)
    if count < 16:
        prefix = _LENGTH.pack(size + 1) + _FIXARRAY[count]
    else:
        prefix = _LENGTH.pack(size + 5) + _ARRAY32.pack(0xDD, count)
    out[0:0] = (prefix, header)
    return b"".join(out)


def decode_frames(buffer: bytearray, max_frame: int, trailer: int = 0,
                  check: Callable[[bytearray, int, int], bool] | None = None,
                  first_only: bool = False) -> tuple[list[list[object]], int, int, str]:
    """The whole frames at the start of ``buffer``, decoded: (their message
    arrays, the bytes they took, FRAME_OK or why the next frame is refused,
    what is wrong with it). A partial frame at the end waits for more bytes.
    With a cluster secret each frame is followed by ``trailer`` bytes of MAC,
    which ``check(buffer, start, end)`` verifies before the frame is decoded.
    ``first_only`` stops after one frame: while a link agrees its format,
    a frame may change how the next ones read."""
    frames: list[list[object]] = []
    pos = 0
    end = len(buffer)
    while end - pos >= 4:
        size: int = _LENGTH.unpack_from(buffer, pos)[0]
        if size > max_frame:
            return frames, pos, FRAME_TOO_LARGE, "frame of %d bytes (at most %d)" % (
                size, max_frame)
        if end - pos - 4 - trailer < size:
            break
        if check is not None and not check(buffer, pos, pos + 4 + size):
            return frames, pos, FRAME_BAD_MAC, "frame with a bad MAC dropped"
        view = memoryview(buffer)[pos + 4:pos + 4 + size]
        try:
            msgs = msgpack.unpackb(view, raw=False, strict_map_key=False)
        except Exception as exc:  # msgpack raises several exception types
            view.release()
            return frames, pos, FRAME_UNDECODABLE, "undecodable frame (%s)" % (
                exc.__class__.__name__)
        view.release()  # the buffer may be resized only once no view is left
        if type(msgs) is not list:
            return frames, pos, FRAME_NOT_ARRAY, "frame is not an array of messages"
        frames.append(msgs)
        pos += 4 + size + trailer
        if first_only:
            break
    return frames, pos, FRAME_OK, ""
