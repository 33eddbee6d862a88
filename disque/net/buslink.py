"""One link of the cluster bus: its reads cut into frames, its writes framed.

spec: cluster-bus.md §1. A ``BusConnection`` is one TCP connection of the
bus, inbound or outbound. It runs the link's handshakes (the cluster
secret's, ``disque.net.busauth``, then the bus format's,
``disque.net.busformat``), cuts what it reads into frames (checked against
their MAC with a secret, decoded by ``disque.cluster.wire``, compiled) and
hands them to the node, and writes the messages queued for its peer as
frames. Which links exist, their configuration and their counters are the
``ClusterBus``'s (``disque.net.bus``), which the link sees as a
``LinkOwner``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol, cast

from disque.cluster.transport import Link
from disque.cluster.wire import (FRAME_BAD_MAC, FRAME_OK, FRAME_TOO_LARGE, PeerOutput, Wire,
                                 decode_frames, frame_bytes)
from disque.net.busformat import FormatRefused, LinkFormat
from disque.context.log import logger

if TYPE_CHECKING:
    from disque.net.busauth import BusKeys, Handshake, Session


MAX_PENDING_OUTPUT = 256 * 1024 * 1024  # a peer this far behind is dropped


class BusNode(Protocol):
    """What the bus needs of the node core: decoded frames and link events
    in, the header of its own frames out (``disque.node.Node``)."""

    def receive_frame(self, link: Link, frame: list) -> None:
        """Handle one decoded frame from ``link``."""

    def link_up(self, node_id: bytes, link: Link) -> None:
        """The outbound link of ``node_id`` is connected (and authenticated)."""

    def link_down(self, node_id: bytes) -> None:
        """The outbound link of ``node_id`` closed or could not be opened."""

    def bus_header(self) -> dict:
        """The header of this node's frames (the same dict until it changes)."""



class LinkOwner(Protocol):
    """What a link needs of the bus that owns it (``disque.net.bus.ClusterBus``):
    the node, the settings links share, the counters a link adds to, and
    where it reports a closed link or a broken protocol."""

    node: BusNode
    loop: asyncio.AbstractEventLoop
    wire: Wire
    inbound: set[BusConnection]
    formats: tuple[int, ...]
    keys: BusKeys | None
    own_nonces: set[bytes]
    max_frame: int
    handshake_timeout: float
    auth_failures: int
    mac_failures: int
    frames_too_large: int
    messages_too_large: int
    handshake_timeouts: int
    frames_sent: int

    def refuses(self, host: str) -> bool:
        """Protected mode keeps a link with ``host`` out."""

    def refused(self, host: str, direction: str) -> None:
        """Count (and log) a link protected mode refused."""

    def connection_closed(self, conn: BusConnection) -> None:
        """``conn`` closed: an outbound link is reported down."""

    def protocol_error(self, conn: BusConnection, what: str) -> None:
        """Close a link that broke the protocol, logged."""

    def format_refused(self, conn: BusConnection, why: str, drain: bool) -> None:
        """Close a link whose peer shares no bus format with this node, logged."""

    def flush_output(self, output: PeerOutput) -> None:
        """Write a link's queue out now, the AOF first."""

    def packed_header(self) -> bytes:
        """This node's frame header, packed."""

    def server_after_bus(self) -> None:
        """What the server does after the bus's input was handled."""


class BusConnection(asyncio.Protocol):
    """One TCP connection of the bus, inbound or outbound."""

    def __init__(self, bus: LinkOwner, node_id: bytes | None) -> None:
        self.bus = bus
        self.node_id = node_id  # set for outbound links
        self.outbound = node_id is not None
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.link: Link | None = None
        self.closed = False
        self.output = PeerOutput(self)  # messages waiting for this loop turn's flush
        self.link_format = LinkFormat(self.outbound, bus.formats)  # agreed as the link opens
        self.handshake: Handshake | None = None  # the secret's handshake, while it runs
        self.session: Session | None = None  # the MAC keys once it succeeded
        self.deadline: asyncio.TimerHandle | None = None  # the handshake's timeout
        # An outbound link with a secret: resolved True once authenticated,
        # False when the link closed first.
        self.ready: asyncio.Future[bool] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream connection's transport; the base class names the wider type.
        stream = self.transport = cast(asyncio.Transport, transport)
        peer = stream.get_extra_info("peername") or ("", 0)
        local = stream.get_extra_info("sockname") or ("", 0)
        self.link = Link(self.node_id, peer[0], local[0], self)
        bus = self.bus
        if not self.outbound:
            if bus.refuses(peer[0]):
                # Closed before a byte is read: no frame of an unauthenticated
                # stranger reaches the node (a MEET would list it).
                bus.refused(self.link.peer_ip, "from")
                self.closed = True
                stream.abort()
                return
            bus.inbound.add(self)
        if bus.keys is not None:
            from disque.net.busauth import Handshake
            self.handshake = Handshake(bus.keys, initiator=self.outbound,
                                       own_nonces=bus.own_nonces)
            if self.outbound:
                self.ready = bus.loop.create_future()
                bus.own_nonces.add(self.handshake.nonce)
            else:
                stream.write(self.handshake.start())
        elif self.outbound:
            self._send_fields(self.link_format.hello())
        if bus.keys is not None or not self.outbound:
            self.deadline = bus.loop.call_later(bus.handshake_timeout, self._handshake_expired)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.bus.inbound.discard(self)
        self.bus.connection_closed(self)
        self.transport = None
        self._handshake_over(False)
        # Nothing may keep a closed link's buffer: the link and this
        # connection point at each other, and a cycle lives until a full
        # collection (gctuning freezes survivors).
        self.buffer = bytearray()
        if self.link is not None:
            self.link.handle = None
        self.output.handle = None

    def _handshake_over(self, authenticated: bool) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        if self.handshake is not None:
            self.bus.own_nonces.discard(self.handshake.nonce)
            self.handshake = None
        ready = self.ready
        if ready is not None and not ready.done():
            ready.set_result(authenticated)

    def _handshake_expired(self) -> None:
        self.deadline = None
        if not self.closed:
            self.bus.handshake_timeouts += 1
            self.bus.protocol_error(self, "no handshake within %g s" % self.bus.handshake_timeout)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.handshake is not None:
            self._handshake_received()
        else:
            self._frames_received()

    def _handshake_received(self) -> None:
        from disque.net.busauth import BusAuthError  # loaded with the secret's keys
        handshake = self.handshake
        assert handshake is not None and self.transport is not None
        try:
            consumed, reply = handshake.feed(self.buffer)
        except BusAuthError as exc:
            self.bus.auth_failures += 1
            self.bus.protocol_error(self, "bus authentication failed: %s" % exc)
            return
        del self.buffer[:consumed]
        if reply:
            self.transport.write(reply)
        if handshake.session is not None:
            self.session = handshake.session
            self._handshake_over(True)
            if self.outbound:
                self._send_fields(self.link_format.hello())
            if self.buffer:
                self._frames_received()

    def _frames_received(self) -> None:
        """The frames of a link past its handshake: cut, checked against their
        MAC with a cluster secret, and decoded by ``wire.decode_frames``
        (compiled), then handed to the node one by one. While the link agrees
        its format they are read one at a time: one may change the format of
        the next."""
        link = self.link
        assert link is not None  # set by connection_made, before any data
        bus = self.bus
        session = self.session
        link_format = self.link_format
        while True:
            agreeing = link_format.pending
            if session is None:
                frames, pos, problem, what = decode_frames(self.buffer, bus.max_frame, 0, None,
                                                           agreeing)
            else:
                frames, pos, problem, what = decode_frames(self.buffer, bus.max_frame,
                                                           session.mac_len, session.check,
                                                           agreeing)
            if frames and self.deadline is not None:
                self._handshake_over(True)  # a plain inbound link's first frame
            if agreeing and frames and not self._agree(frames[0]):
                return  # refused: the link is closed
            for msgs in frames:
                link.node_id = self.node_id
                try:
                    bus.node.receive_frame(link, msgs)
                except Exception:
                    logger.exception("Error handling bus messages from %s", link.peer_ip)
                if self.closed:
                    return  # the frames after it are dropped
            if problem != FRAME_OK:
                if problem == FRAME_TOO_LARGE:
                    bus.frames_too_large += 1
                elif problem == FRAME_BAD_MAC:
                    bus.mac_failures += 1
                bus.protocol_error(self, what)
                return
            del self.buffer[:pos]
            if not (agreeing and frames and self.buffer):
                break
        bus.server_after_bus()

    def _agree(self, frame: list) -> bool:
        """A frame read while the link agrees its format: answer it if the
        agreement asks; False when the peer is refused (the link is closed)."""
        try:
            reply = self.link_format.on_frame(frame[0] if frame else None)
        except FormatRefused as exc:
            if exc.reply is not None:
                self._send_fields(exc.reply)
            self.bus.format_refused(self, exc.reason, drain=exc.reply is not None)
            return False
        if reply is not None:
            self._send_fields(reply)
        # Frames sent from now on are in the format agreed (the same until it is).
        self.output.format = self.link_format.sending
        return True

    def _send_fields(self, fields: dict) -> None:
        """A frame without messages, this node's header with ``fields`` added
        (the format agreement's), in format 1's layout. The messages queued
        before it leave first, in the format they were packed in."""
        bus = self.bus
        if self.output.out is not None:
            bus.flush_output(self.output)
        if self.transport is None or self.closed:
            return
        self._write_frame([], bus.wire.pack_value({**bus.node.bus_header(), **fields}), 0)

    def write(self, packed: bytes) -> None:
        """Queue a packed message: the messages for a peer leave together in one
        frame and one syscall, at the end of the loop turn or once EARLY_FLUSH
        of them are waiting."""
        if self.transport is None or self.closed:
            return
        self.bus.wire.write(self.output, packed)

    def flush(self) -> None:
        output = self.output
        output.close_batch()
        size = output.size
        out = output.take()
        if not out or self.transport is None or self.closed:
            return
        header = self.bus.packed_header()
        if size + len(header) + 5 > self.bus.max_frame:
            self._write_split(out, header)
        else:
            self._write_frame(out, header, size)
        if self.transport.get_write_buffer_size() > MAX_PENDING_OUTPUT:
            logger.warning("Bus link to %s is too far behind: dropping it", self.peer_ip())
            self.close()

    def _write_frame(self, out: list[bytes], header: bytes, size: int) -> None:
        """Send ``out`` (packed messages of ``size`` bytes) behind ``header`` as one frame."""
        data = frame_bytes(out, header, size)
        if self.session is not None:
            data += self.session.seal(data)
        transport = self.transport
        assert transport is not None  # flush writes only on an open transport
        transport.write(data)
        self.bus.frames_sent += 1

    def _write_split(self, out: list[bytes], header: bytes) -> None:
        """Send messages that together exceed the frame cap in several frames;
        a message that alone exceeds it cannot be sent and is dropped."""
        room = self.bus.max_frame - len(header) - 5
        group: list[bytes] = []
        size = 0
        for packed in out:
            if len(packed) > room:
                self.bus.messages_too_large += 1
                logger.warning("A bus message of %d bytes to %s exceeds the frame cap (%d "
                               "bytes, from proto-max-bulk-len): dropped", len(packed),
                               self.peer_ip(), self.bus.max_frame)
                continue
            if group and size + len(packed) > room:
                self._write_frame(group, header, size)
                group, size = [], 0
            group.append(packed)
            size += len(packed)
        if group:
            self._write_frame(group, header, size)

    def close(self, drain: bool = False) -> None:
        """Close the connection; ``drain`` sends what is written first."""
        if not self.closed and self.transport is not None:
            self.closed = True
            if drain:
                self.transport.close()
            else:
                self.transport.abort()

    def peer_ip(self) -> str:
        """The peer's address for the log ("?" before the connection is made)."""
        return self.link.peer_ip if self.link is not None else "?"

