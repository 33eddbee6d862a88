"""Bus links over real loopback sockets in one process (uvloop, as the
server runs): authenticated links, what closes them, and that a closed
link's buffer is freed at once rather than at the next full collection."""

from __future__ import annotations

import asyncio
import functools
import gc
import socket
import struct
import weakref

import msgpack
import uvloop

from disque.net import busauth
from disque.net.bus import ClusterBus
from disque.net.busauth import BusKeys
from disque.config import Config
from tests.unit.net.test_bus_frames import HEADER, PEER
from tests.unit.net.test_bus_frames import make_bus as make_fake_bus

SECRET = b"the cluster's long shared secret"
NEW_SECRET = b"the cluster's next shared secret"
A_ID = b"a" * 40
B_ID = b"b" * 40
WAIT_S = 5.0


@functools.cache
def keys(*secrets: bytes) -> BusKeys:
    return BusKeys(tuple(busauth.stretch(s) for s in secrets))


class StubNode:
    """What the bus asks of the node core, recorded."""

    def __init__(self, node_id: bytes) -> None:
        self.header = {"v": 1, "sender": node_id, "port": 7711, "flags": 0}
        self.frames: list[list] = []
        self.links: list = []
        self.up: list[bytes] = []
        self.down: list[bytes] = []

    def bus_header(self) -> dict:
        return self.header

    def receive_frame(self, link, frame: list) -> None:
        if len(frame) > 1:  # the format agreement's frames carry no messages
            self.frames.append(frame)
            self.links.append(link)

    def link_up(self, node_id: bytes, link) -> None:
        self.up.append(node_id)

    def link_down(self, node_id: bytes) -> None:
        self.down.append(node_id)


def run(test) -> None:
    """Run the coroutine function ``test`` on a fresh uvloop loop."""
    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(test(loop), 30))
    finally:
        loop.close()


async def until(predicate, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not predicate():
        assert loop.time() < deadline, "timed out waiting for " + what
        await asyncio.sleep(0.005)


async def make_bus(loop, node_id: bytes, bus_keys: BusKeys | None) -> ClusterBus:
    bus = ClusterBus(StubNode(node_id), loop)
    bus.keys = bus_keys
    await bus.listen(["127.0.0.1"], 0, 16)
    return bus


def bus_port(bus: ClusterBus) -> int:
    return bus.servers[0].sockets[0].getsockname()[1]


async def linked(loop, a_keys, b_keys) -> tuple[ClusterBus, ClusterBus]:
    """Bus A listening, bus B opening its link to A."""
    a = await make_bus(loop, A_ID, a_keys)
    b = await make_bus(loop, B_ID, b_keys)
    b.connect(A_ID, "127.0.0.1", bus_port(a))
    await until(lambda: b.node.up or b.node.down, "B's link to A up or down")
    return a, b


def test_an_authenticated_link_carries_frames_both_ways():
    async def test(loop):
        a, b = await linked(loop, keys(SECRET), keys(SECRET))
        assert b.node.up == [A_ID]
        b.send(A_ID, {"type": "PING", "gossip": []})
        await until(lambda: a.node.frames, "A receives B's frame")
        assert a.node.frames == [[b.node.header, {"type": "PING", "gossip": []}]]
        a.reply(a.node.links[0], {"type": "PONG", "gossip": []})
        await until(lambda: b.node.frames, "B receives A's reply")
        assert b.node.frames == [[a.node.header, {"type": "PONG", "gossip": []}]]
        assert (a.auth_failures, a.mac_failures, b.auth_failures, b.mac_failures) == (0, 0, 0, 0)
        a.shutdown()
        b.shutdown()
    run(test)


def test_a_wrong_secret_never_brings_the_link_up():
    async def test(loop):
        a, b = await linked(loop, keys(SECRET), keys(NEW_SECRET))
        assert b.node.down == [A_ID] and b.node.up == [] and not b.outbound
        assert a.auth_failures == 1 and a.node.frames == []
        # A node without a secret reads A's challenge as an oversized frame
        # and drops the link at once.
        c = await make_bus(loop, b"c" * 40, None)
        c.connect(A_ID, "127.0.0.1", bus_port(a))
        await until(lambda: c.node.down, "C's link dropped")
        assert c.node.down == [A_ID] and c.frames_too_large == 1 and a.node.frames == []
        for bus in (a, b, c):
            bus.shutdown()
    run(test)


def test_a_forged_or_replayed_frame_closes_the_link():
    async def test(loop):
        for replay in (False, True):
            a, b = await linked(loop, keys(SECRET), keys(SECRET))
            conn = b.outbound[A_ID]
            payload = msgpack.packb([b.node.header, {"type": "PING", "gossip": []}])
            data = struct.pack(">I", len(payload)) + payload
            if replay:
                sealed = data + conn.session.seal(data)
                conn.transport.write(sealed + sealed)
            else:
                conn.transport.write(data + bytes(busauth.MAC_LEN))
            await until(lambda: b.node.down == [A_ID], "the link closed")
            assert a.mac_failures == 1
            assert len(a.node.frames) == (1 if replay else 0)
            a.shutdown()
            b.shutdown()
    run(test)


def test_dropping_a_secret_closes_the_links_made_with_it():
    async def test(loop):
        a, b = await linked(loop, keys(NEW_SECRET, SECRET), keys(SECRET))
        assert b.outbound[A_ID].session.key == busauth.stretch(SECRET)
        a.set_keys(keys(NEW_SECRET, SECRET))  # still accepted: kept
        await asyncio.sleep(0.05)
        assert b.node.down == []
        a.set_keys(keys(NEW_SECRET))
        await until(lambda: b.node.down == [A_ID], "B's link closed")
        a.shutdown()
        b.shutdown()
    run(test)


def test_a_closed_links_buffer_is_freed_without_a_collection():
    """A peer sends part of a large frame and disconnects: the bytes must go
    with the connection, by reference counting alone (the server collects
    cycles rarely and freezes survivors, gctuning.py)."""
    async def test(loop):
        a = await make_bus(loop, A_ID, None)
        sock = socket.create_connection(("127.0.0.1", bus_port(a)))
        sock.setblocking(False)
        await until(lambda: a.inbound, "A accepted the connection")
        held = weakref.ref(next(iter(a.inbound)))
        await loop.sock_sendall(sock, struct.pack(">I", 8 << 20) + b"x" * (1 << 20))
        await until(lambda: sum(len(c.buffer) for c in a.inbound) == (1 << 20) + 4,
                    "A buffered the partial frame")
        gc.disable()
        try:
            gc.freeze()  # as the server's cron does with whatever survived
            sock.close()
            await until(lambda: not a.inbound, "A saw the close")
            await asyncio.sleep(0.01)  # the loop's own references go at the end of its turn
            assert held() is None, [type(r) for r in gc.get_referrers(held())]
        finally:
            gc.unfreeze()
            gc.enable()
        a.shutdown()
    run(test)


def test_messages_beyond_the_frame_cap_leave_in_several_frames():
    """The sender never builds a frame its peer would refuse: a turn's
    messages are split, and a message that alone exceeds the cap is dropped
    and counted."""
    bus, _, transport, loop, _ = make_fake_bus()
    bus.max_frame = 1000
    for n in range(7):
        bus.send(PEER, {"type": "REPLJOB", "n": n, "body": b"x" * 300})
    bus.send(PEER, {"type": "REPLJOB", "n": 7, "body": b"x" * 2000})
    loop.end_turn()
    data = b"".join(transport.writes)
    sizes, sent = [], []
    while data:
        (size,) = struct.unpack(">I", data[:4])
        sizes.append(size)
        sent.append(msgpack.unpackb(data[4:4 + size], raw=False))
        data = data[4 + size:]
    assert all(size <= bus.max_frame for size in sizes) and len(sizes) == 4  # 2+2+2+1
    assert all(frame[0] == HEADER for frame in sent)
    assert [msg["n"] for frame in sent for msg in frame[1:]] == list(range(7))
    assert bus.messages_too_large == 1


def test_configure_warns_when_the_bus_is_open_beyond_loopback(tmp_path):
    def warnings(bind: list[str], secret: str = "", protected: bool = False) -> list[str]:
        config = Config()
        config.protected_mode = protected
        config.bind = bind
        config.cluster_secret = secret
        config.proto_max_bulk_len = 4 << 20
        config.cluster_node_timeout = 2500
        bus = ClusterBus(StubNode(A_ID), None)
        found = bus.configure(config)
        assert (bus.max_frame, bus.handshake_timeout) == ((5 << 20), 2.5)
        return found

    assert warnings(["127.0.0.1", "::1"]) == []
    assert warnings(["127.0.0.1"], secret=SECRET.decode()) == []
    for bind in (["10.1.2.3"], ["127.0.0.1", "192.168.0.7"], [], ["0.0.0.0"]):
        (found,) = warnings(bind)
        assert "without a cluster secret" in found and "cluster-secret-file" in found
        # In protected mode such links are refused: the warning says so and the way out.
        (found,) = warnings(bind, protected=True)
        assert "protected mode is on and no cluster secret is set" in found
        assert "cluster-secret" in found and "protected-mode off" in found
    assert warnings(["10.1.2.3"], secret=SECRET.decode()) == []


def test_a_node_relayed_to_itself_is_refused():
    """A relay that joins a node's outbound link to the node's own listener
    gets no link up: the listener sees its own node's nonce."""
    async def test(loop):
        a = await make_bus(loop, A_ID, keys(SECRET))

        async def relay(reader, writer):
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", bus_port(a))

            async def pipe(src, dst):
                while data := await src.read(65536):
                    dst.write(data)
                dst.close()
            await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer),
                                 return_exceptions=True)
        server = await asyncio.start_server(relay, "127.0.0.1", 0)
        a.connect(B_ID, "127.0.0.1", server.sockets[0].getsockname()[1])
        await until(lambda: a.node.down, "A's link through the relay failed")
        assert a.node.up == [] and a.auth_failures == 1 and not a.own_nonces
        server.close()
        a.shutdown()
    run(test)


class SecretChangesAsConnected:
    """A loop whose create_connection lets the node's secret change just as
    the connection is made, before the task that asked for it resumes."""

    def __init__(self, loop, change) -> None:
        self.loop = loop
        self.change = change

    def __getattr__(self, name: str):
        return getattr(self.loop, name)

    async def create_connection(self, *args, **kwargs):
        made = await self.loop.create_connection(*args, **kwargs)
        self.change()
        return made


def test_a_link_being_made_with_a_dropped_secret_never_comes_up():
    async def test(loop):
        a = await make_bus(loop, A_ID, keys(SECRET, NEW_SECRET))  # A accepts either
        b = ClusterBus(StubNode(B_ID), SecretChangesAsConnected(
            loop, lambda: b.set_keys(keys(NEW_SECRET))))
        b.keys = keys(SECRET)
        b.connect(A_ID, "127.0.0.1", bus_port(a))
        await until(lambda: b.node.down, "B's attempt reported down")
        await asyncio.sleep(0.2)  # time for a handshake with the dropped secret to finish
        assert b.node.up == [] and not b.outbound, "a link made with a dropped secret came up"
        a.shutdown()
        b.shutdown()
    run(test)
