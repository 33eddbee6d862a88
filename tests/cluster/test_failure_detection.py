"""Failure detection (PFAIL → FAIL after SIGKILL, cleared on restart) and
nodes.conf persistence.

spec: cluster-bus.md §2 (nodes.conf), §4 (failure detection), commands.md HELLO.
"""

from __future__ import annotations

import time

import pytest

from tests.support.cluster import parse_cluster_nodes
from tests.support.process import wait_until

pytestmark = pytest.mark.cluster

NODE_TIMEOUT_S = 3.0


def test_fail_flag_after_sigkill_and_cleared_after_restart(cluster_factory):
    cluster = cluster_factory(5)
    victim = 4
    victim_id = cluster.ids[victim]
    observers = [0, 1, 2, 3]
    cluster.kill(victim)
    killed_at = time.monotonic()

    # No link but not yet failing: priority 5, no flag, "disconnected".
    def unlinked() -> bool:
        return all(cluster.hello(i)[2][victim_id].priority == "5" for i in observers)
    wait_until(unlinked, NODE_TIMEOUT_S - 1, interval=0.05, message="HELLO priority 5")
    line = cluster.cluster_nodes(0)[victim_id]
    assert (line.flags, line.link) == ({"noflags"}, "disconnected")

    seen_pfail = set()

    def failed_everywhere() -> bool:
        done = True
        for i in observers:
            flags = cluster.flags(i, victim)
            if "fail?" in flags:
                seen_pfail.add(i)
            done = done and "fail" in flags
        return done
    wait_until(failed_everywhere, 20, interval=0.05, message="FAIL on every other node")
    elapsed = time.monotonic() - killed_at
    assert elapsed >= NODE_TIMEOUT_S - 0.3, "flagged before node-timeout elapsed"
    assert seen_pfail, "FAIL was not preceded by fail? on any node"
    for i in observers:
        assert cluster.flags(i, victim) == {"fail"}  # fail? cleared when promoted
        assert cluster.hello(i)[2][victim_id].priority == "100"
        assert int(cluster.info(i)["cluster_reachable_nodes"]) == 3
        assert cluster.info(i)["cluster_size"] == "5"  # failed nodes still count

    cluster.restart(victim)
    assert cluster.call(victim, "CLUSTER", "MYID").decode() == victim_id
    cluster.wait_flag(victim, "fail", observers, present=False, timeout=10)
    for i in observers:
        line = cluster.cluster_nodes(i)[victim_id]
        assert line.flags == {"noflags"}
        assert line.addr == "127.0.0.1:%d" % cluster.port(victim)
    cluster.wait_joined(15)
    wait_until(lambda: all(cluster.hello(i)[2][victim_id].priority == "1" for i in observers),
               10, interval=0.05, message="HELLO priority back to 1")


def test_nodes_conf_keeps_id_and_peers_across_sigkill(cluster_factory):
    cluster = cluster_factory(3)
    victim = 2
    conf_path = cluster.nodes[victim].dir / "nodes.conf"
    before = parse_cluster_nodes(conf_path.read_text())
    assert set(before) == set(cluster.ids)
    assert before[cluster.ids[victim]].flags == {"myself"}

    cluster.kill(victim)
    cluster.restart(victim)
    assert cluster.call(victim, "CLUSTER", "MYID").decode() == cluster.ids[victim]
    # Known straight from nodes.conf, before any MEET.
    nodes = cluster.cluster_nodes(victim)
    assert set(nodes) == set(cluster.ids)
    for j in (0, 1):
        assert nodes[cluster.ids[j]].addr == "127.0.0.1:%d" % cluster.port(j)
    assert nodes[cluster.ids[victim]].flags == {"myself"}
    cluster.wait_joined(15)
    # And the peers still know it under the same ID (no duplicate entry).
    for j in (0, 1):
        assert set(cluster.cluster_nodes(j)) == set(cluster.ids)
