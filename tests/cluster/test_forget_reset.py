"""CLUSTER FORGET (with its gossip blacklist) and CLUSTER RESET SOFT/HARD.

spec: commands.md CLUSTER FORGET / RESET, cluster-bus.md §3 (gossip of
unknown nodes, a node answering with another ID is marked noaddr).
"""

from __future__ import annotations

import re

import pytest

from tests.support.cluster import parse_cluster_nodes
from tests.support.process import wait_until

pytestmark = pytest.mark.cluster


def _wait_pongs(cluster, observer: int, target: int, count: int) -> None:
    """Wait until ``observer`` got ``count`` more PONGs from ``target``."""
    target_id = cluster.ids[target]
    seen = [cluster.cluster_nodes(observer)[target_id].pong_recv]

    def more() -> bool:
        pong = cluster.cluster_nodes(observer)[target_id].pong_recv
        if pong != seen[-1]:
            seen.append(pong)
        return len(seen) > count
    wait_until(more, 10, interval=0.05, message="%d PING/PONG rounds" % count)


def test_cluster_forget(cluster_factory):
    cluster = cluster_factory(3)
    ids = cluster.ids
    assert cluster.raw(0, "CLUSTER", "FORGET", "abc") == b"-ERR Invalid node identifier\r\n"
    assert cluster.raw(0, "CLUSTER", "FORGET", "f" * 40) == b"-ERR Unknown node %s\r\n" % (
        b"f" * 40)
    assert cluster.raw(0, "CLUSTER", "FORGET", ids[0]) == \
        b"-ERR I tried hard but I can't forget myself...\r\n"

    # Forgotten on node 0 only: node 1 still gossips about node 2, yet the
    # 60 s blacklist keeps node 0 from re-adding it.
    assert cluster.raw(0, "CLUSTER", "FORGET", ids[2]) == b"+OK\r\n"
    assert set(cluster.cluster_nodes(0)) == {ids[0], ids[1]}
    assert set(parse_cluster_nodes((cluster.nodes[0].dir / "nodes.conf").read_text())) == \
        {ids[0], ids[1]}
    info = cluster.info(0)
    assert (info["cluster_known_nodes"], info["cluster_size"]) == ("2", "2")
    cluster.wait_reachable(0, 1, timeout=2)
    _wait_pongs(cluster, 1, 0, 2)  # node 1's PINGs to 0 carry node 2 (its only candidate)
    _wait_pongs(cluster, 0, 1, 2)  # and so do node 1's PONGs to node 0
    nodes = cluster.cluster_nodes(0)
    assert set(nodes) == {ids[0], ids[1]}, nodes
    assert ids[2] in cluster.cluster_nodes(1)

    # Forgotten everywhere but on itself: nobody will replicate to it.
    assert cluster.raw(1, "CLUSTER", "FORGET", ids[2]) == b"+OK\r\n"
    cluster.wait_reachable(1, 1, timeout=2)
    assert cluster.call(0, "ADDJOB", "fq", "b", 5000, "REPLICATE", 2).startswith(b"D-")
    assert cluster.raw(0, "ADDJOB", "fq", "b", 5000, "REPLICATE", 3) == \
        b"-NOREPL Not enough reachable nodes for the requested replication level\r\n"
    # Node 2 was not told: it still lists both (PINGs to them are answered).
    assert set(cluster.cluster_nodes(2)) == set(ids)
    assert cluster.raw(2, "PING") == b"+PONG\r\n"


def test_cluster_reset_soft_and_hard(cluster_factory):
    cluster = cluster_factory(3)
    ids = list(cluster.ids)
    job_id = cluster.call(2, "ADDJOB", "rq", "b", 5000, "REPLICATE", 1)
    assert cluster.raw(2, "CLUSTER", "RESET", "bogus") == b"-ERR syntax error\r\n"
    assert cluster.raw(2, "CLUSTER", "RESET", "SOFT") == b"+OK\r\n"
    nodes = cluster.cluster_nodes(2)
    assert list(nodes) == [ids[2]] and nodes[ids[2]].flags == {"myself"}
    assert cluster.call(2, "CLUSTER", "MYID").decode() == ids[2]
    assert cluster.raw(2, "SHOW", job_id) == b"$-1\r\n"
    assert cluster.call(2, "QLEN", "rq") == 0
    info = cluster.info(2)
    assert (info["cluster_known_nodes"], info["cluster_reachable_nodes"],
            info["cluster_size"]) == ("1", "0", "1")
    # Default RESET is SOFT, and RESET does not clear the leaving flag.
    assert cluster.raw(2, "CLUSTER", "LEAVING", "yes") == b"+OK\r\n"
    assert cluster.raw(2, "CLUSTER", "RESET") == b"+OK\r\n"
    assert cluster.call(2, "CLUSTER", "MYID").decode() == ids[2]
    assert cluster.raw(2, "CLUSTER", "LEAVING") == b"+yes\r\n"
    assert cluster.raw(2, "CLUSTER", "LEAVING", "no") == b"+OK\r\n"

    assert cluster.raw(2, "CLUSTER", "RESET", "hard") == b"+OK\r\n"
    new_id = cluster.call(2, "CLUSTER", "MYID").decode()
    assert new_id != ids[2] and re.fullmatch("[0-9a-f]{40}", new_id)
    assert list(cluster.cluster_nodes(2)) == [new_id]
    conf = parse_cluster_nodes((cluster.nodes[2].dir / "nodes.conf").read_text())
    assert list(conf) == [new_id] and conf[new_id].flags == {"myself"}

    # Peers reaching the old ID's address now get another ID back: noaddr.
    def stale_is_noaddr() -> bool:
        return all("noaddr" in cluster.cluster_nodes(i)[ids[2]].flags for i in (0, 1))
    wait_until(stale_is_noaddr, 10, interval=0.05, message="old ID flagged noaddr")
    line = cluster.cluster_nodes(0)[ids[2]]
    assert (line.addr, line.link) == (":0", "disconnected")

    # The operator forgets the stale entry and MEETs the reset node again.
    for i in (0, 1):
        assert cluster.raw(i, "CLUSTER", "FORGET", ids[2]) == b"+OK\r\n"
    assert cluster.raw(2, "CLUSTER", "MEET", "127.0.0.1", cluster.port(0)) == b"+OK\r\n"
    cluster.ids[2] = new_id
    cluster.wait_joined(15)
    for i in range(3):
        assert set(cluster.cluster_nodes(i)) == set(cluster.ids)
