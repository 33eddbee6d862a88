"""Bus framing against fake transports: the messages for a peer leave in one
frame per loop turn (or once EARLY_FLUSH are waiting) behind one header,
and a frame reaches the node core whole, its messages in order."""

from __future__ import annotations

import struct

import msgpack

from disque.cluster.wire import BUS_FORMATS
from disque.net import bus as busmod
from disque.net.bus import EARLY_FLUSH, BusConnection, ClusterBus
from tests.unit.net.test_connection import FakeLoop, FakeTransport

PEER = b"b" * 40


HEADER = {"v": 1, "sender": b"a" * 40, "port": 7711, "flags": 0}


class RecordingNode:
    """What the bus asks of the node core."""

    def __init__(self) -> None:
        self.frames: list[list] = []
        self.header_calls = 0

    def bus_header(self) -> dict:
        self.header_calls += 1
        return HEADER

    def receive_frame(self, link, frame: list) -> None:
        self.frames.append(frame)


def make_bus() -> tuple[ClusterBus, BusConnection, FakeTransport, FakeLoop, list]:
    loop = FakeLoop()
    aof_flushes: list[int] = []
    node = RecordingNode()
    bus = ClusterBus(node, loop, before_write=lambda: aof_flushes.append(1))
    conn = BusConnection(bus, PEER)
    transport = FakeTransport()
    conn.connection_made(transport)
    # An outbound link opens with its hello (the bus formats it speaks).
    assert frames(b"".join(transport.writes)) == [[{**HEADER, "formats": list(BUS_FORMATS)}]]
    transport.writes.clear()
    node.header_calls = 0
    bus.outbound[PEER] = conn
    return bus, conn, transport, loop, aof_flushes


def frames(data: bytes) -> list:
    """Decode every frame of a byte stream."""
    out = []
    while data:
        (size,) = struct.unpack(">I", data[:4])
        out.append(msgpack.unpackb(data[4:4 + size], raw=False))
        data = data[4 + size:]
    return out


def test_messages_of_one_turn_share_one_frame() -> None:
    bus, _, transport, loop, aof_flushes = make_bus()
    bus.send(PEER, {"type": "GOTJOB", "id": b"1"})
    bus.send(PEER, {"type": "GOTJOB", "id": b"2"})
    assert transport.writes == []  # nothing leaves before the turn ends
    loop.end_turn()
    assert len(transport.writes) == 1 and aof_flushes == [1]
    assert frames(transport.writes[0]) == [[HEADER, {"type": "GOTJOB", "id": b"1"},
                                            {"type": "GOTJOB", "id": b"2"}]]


def test_a_full_frame_leaves_before_the_turn_ends() -> None:
    bus, _, transport, loop, aof_flushes = make_bus()
    for i in range(EARLY_FLUSH + 3):
        bus.send(PEER, {"type": "DELJOB", "n": i})
    assert len(transport.writes) == 1 and aof_flushes == [1]  # AOF first, as always
    loop.end_turn()
    sent = [frames(w)[0] for w in transport.writes]
    assert [f[0] for f in sent] == [HEADER, HEADER]
    assert [len(f) - 1 for f in sent] == [EARLY_FLUSH, 3]
    assert [msg["n"] for f in sent for msg in f[1:]] == list(range(EARLY_FLUSH + 3))


def test_large_frames_use_a_32_bit_array_header(monkeypatch) -> None:
    monkeypatch.setattr(busmod, "EARLY_FLUSH", 1000)
    bus, _, transport, loop, _ = make_bus()
    for i in range(70):
        bus.send(PEER, {"n": i})
    loop.end_turn()
    assert [msg["n"] for msg in frames(transport.writes[0])[0][1:]] == list(range(70))


def test_received_frames_are_handed_over_whole_and_in_order() -> None:
    bus, conn, _, _, _ = make_bus()
    one = msgpack.packb([HEADER, {"type": "GOTJOB", "id": b"1"}, {"type": "GOTJOB", "id": b"2"}])
    two = msgpack.packb([HEADER, {"type": "DELJOB", "id": b"3"}])
    data = struct.pack(">I", len(one)) + one + struct.pack(">I", len(two)) + two
    conn.data_received(data[:7])  # a frame split across reads
    assert bus.node.frames == []
    conn.data_received(data[7:])
    assert [f[0] for f in bus.node.frames] == [HEADER, HEADER]
    assert [[m["id"] for m in f[1:]] for f in bus.node.frames] == [[b"1", b"2"], [b"3"]]
    assert not conn.closed


def test_the_header_is_packed_once_while_it_does_not_change() -> None:
    bus, _, transport, loop, _ = make_bus()
    for _ in range(3):
        bus.send(PEER, {"type": "DELJOB", "id": b"1"})
        loop.end_turn()
    assert bus.node.header_calls == 3 and bus._header is HEADER
    assert len(set(transport.writes)) == 1  # three identical frames


def test_a_frame_that_is_not_an_array_closes_the_link() -> None:
    bus, conn, transport, _, _ = make_bus()
    bare = msgpack.packb({"type": "GOTJOB", "id": b"1"})
    conn.transport.abort = lambda: setattr(transport, "closed", True)
    conn.data_received(struct.pack(">I", len(bare)) + bare)
    assert bus.node.frames == [] and conn.closed
