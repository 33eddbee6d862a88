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
packing and decoding here, chosen per link by the format agreed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
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
BUS_FORMATS: Final = (1,)

# Why decode_frames stopped before the end of the buffer (besides a partial frame).
FRAME_OK: Final = 0
FRAME_TOO_LARGE: Final = 1
FRAME_UNDECODABLE: Final = 2
FRAME_NOT_ARRAY: Final = 3
FRAME_BAD_MAC: Final = 4


class PeerOutput:
    """The packed messages for one link not yet written: they leave as one
    frame at the end of the loop turn, or once ``early_flush`` wait."""

    __slots__ = ("out", "size", "handle")

    def __init__(self, handle: object) -> None:
        self.out: list[bytes] | None = None
        self.size = 0  # bytes in out
        self.handle = handle  # the transport's connection (None once it closed)

    def take(self) -> list[bytes] | None:
        """The waiting messages (None when there are none); the queue is left empty."""
        out = self.out
        self.out = None
        self.size = 0
        return out


class Peer(Protocol):
    """A link as the transport keeps it: its queue of packed messages."""

    output: PeerOutput


class Wire:
    """Packs the core's messages and queues them per peer; the transport
    is told once per loop turn that frames wait (``on_first``) and once
    per ``early_flush`` messages for one peer (``on_full``)."""

    __slots__ = ("peers", "dirty", "early_flush", "on_first", "on_full", "_pack", "_msg",
                 "_packed")

    def __init__(self, peers: Mapping[bytes, Peer], on_first: Callable[[], None],
                 on_full: Callable[[PeerOutput], None], early_flush: int) -> None:
        self.peers = peers  # node ID -> its outbound link: the transport's own table
        self.dirty: list[PeerOutput] = []  # queues with messages, in the order they got them
        self.early_flush = early_flush
        self.on_first = on_first
        self.on_full = on_full
        # One reusable packer: msgpack.packb builds a new one per call.
        self._pack: Callable[[object], bytes] = msgpack.Packer(use_bin_type=True).pack
        self._msg: dict | None = None
        self._packed = b""

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
        link = self.peers.get(node_id)
        if link is not None:
            self.write(link.output, self.pack(msg))

    def write(self, peer: PeerOutput, packed: bytes) -> None:
        """Queue a packed message for ``peer``."""
        out = peer.out
        peer.size += len(packed)
        if out is None:
            peer.out = [packed]
            dirty = self.dirty
            dirty.append(peer)
            if len(dirty) == 1:
                self.on_first()
        else:
            out.append(packed)
            if len(out) >= self.early_flush:
                self.on_full(peer)

    def take_dirty(self) -> list[PeerOutput]:
        """The queues that got messages since the last call."""
        dirty = self.dirty
        self.dirty = []
        return dirty


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
