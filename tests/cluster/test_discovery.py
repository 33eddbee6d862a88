"""Cluster join and auto-discovery: a chain of MEETs yields a full mesh.

spec: cluster-bus.md §2-§3, commands.md HELLO / CLUSTER.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.support.cluster import parse_cluster_nodes, parse_resp
from tests.support.process import free_port, wait_until

pytestmark = pytest.mark.cluster

NODE_ID = re.compile(rb"^[0-9a-f]{40}$")
INFO_RE = re.compile(
    rb"^\$(\d+)\r\n"
    rb"cluster_state:ok\r\n"
    rb"cluster_known_nodes:(\d+)\r\n"
    rb"cluster_reachable_nodes:(\d+)\r\n"
    rb"cluster_size:(\d+)\r\n"
    rb"cluster_stats_messages_sent:(\d+)\r\n"
    rb"cluster_stats_messages_received:(\d+)\r\n"
    rb"\r\n$")


def _plausible_ms(value: int) -> bool:
    return abs(value - time.time() * 1000) < 120_000


def test_full_mesh_from_a_chain_of_meets(cluster_factory):
    cluster = cluster_factory(7)
    size = len(cluster)
    ids = cluster.ids
    assert len(set(ids)) == size and all(NODE_ID.match(i.encode()) for i in ids)

    def mesh_complete() -> bool:
        for i in range(size):
            for node_id, line in cluster.cluster_nodes(i).items():
                if node_id != ids[i] and (line.flags != {"noflags"} or line.link != "connected"):
                    return False
        return True
    wait_until(mesh_complete, 20, interval=0.1, message="every link connected, no flags")

    for i in range(size):
        raw = cluster.raw(i, "CLUSTER", "NODES")
        kind, body = parse_resp(raw)
        assert kind == "$" and body.endswith(b"\n") and not body.endswith(b"\n\n")
        nodes = parse_cluster_nodes(body)
        assert set(nodes) == set(ids)
        for j, node_id in enumerate(ids):
            line = nodes[node_id]
            assert line.addr == "127.0.0.1:%d" % cluster.port(j)
            if j == i:
                assert (line.flags, line.ping_sent, line.pong_recv, line.link) == \
                    ({"myself"}, 0, 0, "connected")
                assert ("%s 127.0.0.1:%d myself 0 0 connected\n"
                        % (node_id, cluster.port(i))).encode() in body
            else:
                assert line.flags == {"noflags"} and line.link == "connected"
                assert _plausible_ms(line.pong_recv), line
                assert line.ping_sent == 0 or _plausible_ms(line.ping_sent), line

        info = INFO_RE.match(cluster.raw(i, "CLUSTER", "INFO"))
        assert info, cluster.raw(i, "CLUSTER", "INFO")
        length, known, reachable, csize, sent, received = (int(x) for x in info.groups())
        assert length == len(raw_body(cluster.raw(i, "CLUSTER", "INFO")))
        assert (known, reachable, csize) == (size, size - 1, size)
        assert sent > 0 and received > 0

        assert cluster.raw(i, "CLUSTER", "MYID") == b"$40\r\n%s\r\n" % ids[i].encode()

        kind, hello = parse_resp(cluster.raw(i, "HELLO"))
        assert kind == "*" and len(hello) == 2 + size
        assert hello[0] == (":", b"1")
        assert hello[1] == ("$", ids[i].encode())
        entries = {}
        for entry in hello[2:]:
            assert entry[0] == "*" and len(entry[1]) == 4
            assert all(kind == "$" for kind, _ in entry[1]), entry  # port/priority are bulk
            node_id, ip, port, priority = (value for _, value in entry[1])
            entries[node_id.decode()] = (ip, port, priority)
        assert entries == {node_id: (b"127.0.0.1", str(cluster.port(j)).encode(), b"1")
                           for j, node_id in enumerate(ids)}

    # nodes.conf holds the same table (handshake nodes excluded), self marked myself.
    for i, node in enumerate(cluster.nodes):
        conf = parse_cluster_nodes((node.dir / "nodes.conf").read_text())
        assert set(conf) == set(ids)
        assert conf[ids[i]].flags == {"myself"}


def raw_body(raw: bytes) -> bytes:
    """The payload of a raw bulk reply."""
    return parse_resp(raw)[1]


def test_lone_nodes_then_meet(cluster_factory):
    cluster = cluster_factory(3, join=False)
    node_id = cluster.ids[0].encode()
    port = str(cluster.port(0)).encode()
    # Own IP unknown until a peer contacts it (spec: commands.md HELLO).
    line = b"%s :%s myself 0 0 connected\n" % (node_id, port)
    assert cluster.raw(0, "CLUSTER", "NODES") == b"$%d\r\n%s\r\n" % (len(line), line)
    assert cluster.raw(0, "HELLO") == (
        b"*3\r\n:1\r\n$40\r\n%s\r\n*4\r\n$40\r\n%s\r\n$0\r\n\r\n$%d\r\n%s\r\n$1\r\n1\r\n"
        % (node_id, node_id, len(port), port))
    info = cluster.info(0)
    assert (info["cluster_known_nodes"], info["cluster_reachable_nodes"],
            info["cluster_size"]) == ("1", "0", "1")
    assert cluster.raw(0, "ADDJOB", "q", "b", 0).startswith(b"+D-")  # default REPLICATE 1

    cluster.join()
    port = cluster.port(1)
    # MEET of an already known node is accepted and does not duplicate it.
    assert cluster.raw(0, "CLUSTER", "MEET", "127.0.0.1", port) == b"+OK\r\n"
    assert cluster.raw(0, "CLUSTER", "MEET", "127.0.0.1", "notaport") == \
        b"-ERR Invalid TCP port specified: notaport\r\n"
    assert cluster.raw(0, "CLUSTER", "MEET", "nohost", port) == \
        b"-ERR Invalid node address specified: nohost:%d\r\n" % port
    assert cluster.raw(0, "CLUSTER", "MEET", "127.0.0.1", 55536) == \
        b"-ERR Invalid node address specified: 127.0.0.1:55536\r\n"

    # The handshake node created by the MEET is deleted once the peer answers
    # with its real (already known) ID.
    def settled() -> bool:
        nodes = cluster.cluster_nodes(0)
        return len(nodes) == 3 and all("handshake" not in n.flags for n in nodes.values())
    wait_until(settled, 10, interval=0.05, message="handshake node merged")
    assert set(cluster.cluster_nodes(0)) == set(cluster.ids)
    assert cluster.info(0)["cluster_known_nodes"] == "3"

    # A MEET nobody answers leaves a handshake node that expires after
    # max(node-timeout, 1000 ms) (spec: cluster-bus.md §3).
    dead_port = free_port()
    assert cluster.raw(0, "CLUSTER", "MEET", "127.0.0.1", dead_port) == b"+OK\r\n"
    met_at = time.monotonic()
    shakes = [line for line in cluster.cluster_nodes(0).values() if line.port == dead_port]
    assert len(shakes) == 1 and shakes[0].id not in cluster.ids
    assert (shakes[0].addr, shakes[0].flags, shakes[0].link) == \
        ("127.0.0.1:%d" % dead_port, {"handshake"}, "disconnected")
    assert cluster.hello(0)[2][shakes[0].id].priority == "5"
    info = cluster.info(0)
    assert (info["cluster_known_nodes"], info["cluster_size"]) == ("4", "3")
    assert info["cluster_reachable_nodes"] == "2"
    wait_until(lambda: shakes[0].id not in cluster.cluster_nodes(0), 10, interval=0.05,
               message="handshake expiry")
    assert time.monotonic() - met_at >= 2.5  # node-timeout 3000 ms
    assert cluster.info(0)["cluster_known_nodes"] == "3"
