"""A peer sending garbage to the cluster bus does not crash the node.

spec: cluster-bus.md §1 (framing: 4-byte big-endian length + msgpack map,
common header; messages from unknown senders are ignored except MEET/PING).
"""

from __future__ import annotations

import random
import socket
import struct

import msgpack
import pytest

from tests.support.cluster import BUS_SECURITY
from tests.support.process import free_port, wait_until

# Speaks the plain bus: with DISQUE_TEST_BUS, the secret or TLS refuses it
# before anything here is tested (test_bus_auth shows that).
pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(bool(BUS_SECURITY), reason="speaks the plain bus protocol")]

BUS_OFFSET = 10000
FAKE_JOB_ID = b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAB-0001"


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def packed_frame(obj) -> bytes:
    """A frame holding ``obj`` as is (well-formed frames hold an array of messages)."""
    return frame(msgpack.packb(obj, use_bin_type=True))


def packed(*elements) -> bytes:
    """A frame of ``elements``: well formed when they are a header and messages."""
    return packed_frame(list(elements))


def header_of(node_id: bytes, port: int, **changes) -> dict:
    return dict({"v": 1, "sender": node_id, "port": port, "flags": 0}, **changes)


def send_garbage(port: int, data: bytes) -> bytes:
    """Send ``data`` on a fresh bus connection; return what came back before close."""
    with socket.create_connection(("127.0.0.1", port + BUS_OFFSET), timeout=5) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)  # EOF: the node processes what it got, then closes
        except (BrokenPipeError, ConnectionResetError):
            return b""  # the node already dropped the link: fine
        out = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                out += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        return out


def read_frame(sock: socket.socket) -> dict:
    """The first message of the next frame that carries messages, with the
    frame's header fields (a link's first frame, the node's bus formats, has none)."""
    data = b""
    while True:
        while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "bus connection closed"
            data += chunk
        end = 4 + struct.unpack(">I", data[:4])[0]
        frame = msgpack.unpackb(data[4:end], raw=False, strict_map_key=False)
        data = data[end:]
        assert type(frame) is list and frame, frame
        if len(frame) >= 2:
            return {**frame[0], **frame[1]}
        assert "formats" in frame[0], frame


def garbage_payloads(known_id: bytes, known_port: int, seed: int) -> list[bytes]:
    """Malformed traffic, from random bytes (drawn from ``seed``) to well-framed
    maps with bad fields."""
    rng = random.Random(seed)
    header = header_of(known_id, known_port)

    def msg(kind: str, **body) -> bytes:
        return packed(header, dict(type=kind, **body))

    bad_gossip = [1, "x", {"id": 5}, {"id": b"a" * 40, "ip": 7, "port": "p", "ping": "x",
                                      "pong": None, "flags": -1},
                  {"id": b"b" * 40, "ip": "127.0.0.1", "port": 70000, "ping": 0, "pong": 0,
                   "flags": 0}]
    return [
        rng.randbytes(4096),
        rng.randbytes(3),
        b"\xff\xff\xff\xff" + b"x" * 100,  # frame far beyond any sane size
        b"\x3f\xff\xff\xff" + rng.randbytes(2048),  # ~1 GB declared, connection then closed
        b"\x00\x00\x00\x00",  # empty frame
        frame(b"\xc1"),  # never-used msgpack byte
        frame(b"\x91" * 200_000 + b"\xc0"),  # arrays nested 200k deep
        frame(b"\xdf\xff\xff\xff\xff"),  # map32 claiming 4G entries
        frame(b"\xa3\xff\xfe\xfd"),  # str that is not UTF-8
        frame(b"\x81\x91\x01\x01"),  # map with an (unhashable) array key
        packed_frame(42), packed_frame("PING"), packed_frame(None),  # not arrays
        packed_frame(dict(header, type="GOTJOB", id=FAKE_JOB_ID)),  # a bare message
        packed([1, 2, 3]), packed(42), packed("PING"), packed(None),  # bad headers
        packed(msgpack.ExtType(5, b"xx")), packed(),
        packed(42, {"v": 1}, msgpack.ExtType(5, b"xx")),
        packed(header_of(known_id, known_port, v=2), {"type": "PING", "gossip": []}),
        packed(header_of(b"x" * 40, 1234), {"type": "BOGUS"}),
        packed(header_of(123, "x"), {"type": "PING", "gossip": "nope"}),
        packed(header_of(known_id, known_port, flags="x"), {"type": "PING", "gossip": []}),
        packed(header_of(known_id, known_port, bport=1 << 20), {"type": "PING", "gossip": []}),
        packed(header), packed(header, 42, [1], None, "GOTJOB"),  # bad messages
        packed(header, {"type": "GOTJOB", "id": FAKE_JOB_ID, "mflags": "x"}),
        msg("BOGUS"),
        msg(b"PING", gossip=[]),
        msg("PING", gossip="nope"),
        msg("PING", gossip=bad_gossip),
        msg("PONG", gossip=bad_gossip),
        msg("FAIL", node=5),
        msg("FAIL", node=b"z" * 40),
        msg("REPLJOB", job=[1, 2, 3]),
        msg("REPLJOB", job=["x"] * 20),
        msg("REPLJOB", job=[None] * 40),
        msg("REPLJOB", job="x"),
        msg("YOURJOBS", jobs=[[None] * 5, "junk", {"a": 1}]),
        msg("YOURJOBS", jobs=[]),
        msg("NEEDJOBS", queue=b"nosuchq", count=10 ** 12),
        msg("NEEDJOBS", queue=b"nosuchq", count=-5),
        msg("NEEDJOBS", queue="gq", count="many"),
        msg("PAUSE", queue=b"gq", pause=b"bogus"),
        msg("PAUSE", queue=5, pause=None),
        msg("SETACK", id=FAKE_JOB_ID, may_have=-1),
        msg("SETACK", id=b"short", may_have=1),
        msg("GOTACK", id=FAKE_JOB_ID, known=7),
        msg("GOTJOB", id=FAKE_JOB_ID),
        msg("ENQUEUE", id=FAKE_JOB_ID, delay=-1),
        msg("QUEUED", id=FAKE_JOB_ID, mflags=255),
        msg("WILLQUEUE", id=FAKE_JOB_ID),
        msg("WORKING", id=[FAKE_JOB_ID]),
        msg("DELJOB", id=FAKE_JOB_ID),
        msg("GOTJOB"),
        # Several frames in one write, the last one truncated.
        packed(42) + msg("GOTJOB", id=FAKE_JOB_ID) + b"\x00\x00\x10\x00abc",
        packed(header, {"type": "GOTJOB", "id": FAKE_JOB_ID}, 42,
               {"type": "DELJOB", "id": FAKE_JOB_ID}),
    ]


def test_garbage_on_the_bus_does_not_hurt_the_node(cluster_factory, run_seed):
    cluster = cluster_factory(3)
    target = 0
    port = cluster.port(target)
    peer = 1
    job_id = cluster.call(target, "ADDJOB", "gq", "keep", 5000, "REPLICATE", 3)

    for payload in garbage_payloads(cluster.ids[peer].encode(), cluster.port(peer), run_seed):
        send_garbage(port, payload)
        assert cluster.alive(target), cluster.logs()
        assert cluster.raw(target, "PING") == b"+PONG\r\n"

    # The node closes a connection that declares an oversized frame.
    with socket.create_connection(("127.0.0.1", port + BUS_OFFSET), timeout=5) as sock:
        sock.sendall(b"\xff\xff\xff\xff")
        assert sock.recv(16) == b""

    # The bus still works: a well-formed PING from an unknown node gets a PONG.
    with socket.create_connection(("127.0.0.1", port + BUS_OFFSET), timeout=5) as sock:
        sock.sendall(packed(header_of(b"e" * 40, 1), {"type": "PING", "gossip": []}))
        pong = read_frame(sock)
    assert pong["type"] == "PONG" and pong["sender"] == cluster.ids[target].encode()

    log = cluster.nodes[target].log_path.read_text(errors="replace")
    assert "Bad bus message" in log and "Bus protocol error" in log
    assert "Error handling bus messages" not in log  # every handler rejected it cleanly

    # The cluster is still healthy and nothing bogus was learned.
    cluster.wait_joined(10)
    assert set(cluster.cluster_nodes(target)) == set(cluster.ids)
    for i in (1, 2):
        assert cluster.flags(target, i) == {"noflags"}
    assert cluster.call(target, "QLEN", "gq") == 1
    assert cluster.show(target, job_id)["body"] == b"keep"
    assert cluster.call(target, "PAUSE", "gq", "state") == b"none"
    assert int(cluster.call(target, "INFO", "jobs")["registered_jobs"]) == 1
    new_job = cluster.call(target, "ADDJOB", "gq", "after", 5000, "REPLICATE", 3)
    assert cluster.holders(new_job) == [0, 1, 2]
    wait_until(lambda: cluster.call(target, "GETJOB", "NOHANG", "COUNT", 2, "FROM", "gq"), 2)


def test_fake_peer_answering_a_meet_with_a_bad_node_id(cluster_factory):
    """The node connects to a fake peer (CLUSTER MEET) that answers with a
    non-hex sender ID: it must not adopt it (nodes.conf and CLUSTER NODES
    would break); the same peer answering with a hex ID is adopted."""
    cluster = cluster_factory(1)
    fake_port = free_port()
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", fake_port + BUS_OFFSET))
        listener.listen(5)
        listener.settimeout(10)
        for sender, adopted in ((b"\xff" * 40, False), (b"Z" * 40, False), (b"ab" * 20, True)):
            assert cluster.raw(0, "CLUSTER", "MEET", "127.0.0.1", fake_port) == b"+OK\r\n"
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(5)
                assert read_frame(conn)["type"] == "MEET"
                conn.sendall(packed(header_of(sender, fake_port), {"type": "PONG", "gossip": []}))

                def settled() -> bool:
                    nodes = cluster.cluster_nodes(0)
                    return (sender.decode("latin-1") in nodes) == adopted and len(nodes) == 2
                wait_until(settled, 5, interval=0.05, message="PONG from %r handled" % sender)
                assert cluster.raw(0, "CLUSTER", "SAVECONFIG") == b"+OK\r\n"
                if not adopted:
                    # Still the handshake node; drop it before the next round.
                    shake = next(n for n in cluster.cluster_nodes(0).values()
                                 if "handshake" in n.flags)
                    assert cluster.raw(0, "CLUSTER", "FORGET", shake.id) == b"+OK\r\n"
    line = cluster.cluster_nodes(0)[(b"ab" * 20).decode()]
    assert (line.addr, line.flags) == ("127.0.0.1:%d" % fake_port, {"noflags"})
    conf = (cluster.nodes[0].dir / "nodes.conf").read_text()
    assert (b"ab" * 20).decode() in conf and "\ufffd" not in conf
    log = cluster.nodes[0].log_path.read_text(errors="replace")
    assert "Bad bus message" in log and "Error handling bus messages" not in log
