"""A node's cluster series on a real 3-node cluster: nodes by state as the
failure detector moves them (up, pfail, fail), and bus messages by type."""

from __future__ import annotations

import pytest

from tests.support.cluster import Cluster
from tests.support.process import free_port, wait_until
from tests.support.prometheus import scrape

pytestmark = pytest.mark.cluster

NODE_TIMEOUT_MS = 1000
FAILURE_TIMEOUT_S = 30.0  # node-timeout, then the FAIL majority's gossip on a busy machine


def node_states(metrics_port: int) -> dict[str, float]:
    return {dict(labels)["state"]: value
            for (name, labels), value in scrape(metrics_port).items()
            if name == "disque_cluster_nodes"}


def test_nodes_by_state_follow_failure_detection(tmp_path):
    cluster = Cluster(tmp_path / "cluster", 3, node_timeout=NODE_TIMEOUT_MS)
    metrics_port = free_port()
    cluster.nodes[0].args += ("--metrics-port", str(metrics_port))
    cluster.start()
    up = {"up": 3, "pfail": 0, "fail": 0, "handshake": 0, "leaving": 0}
    wait_until(lambda: node_states(metrics_port) == up, message="3 nodes up")
    samples = scrape(metrics_port)
    assert samples[("disque_bus_messages_received_total", (("type", "PONG"),))] > 0
    assert samples[("disque_bus_messages_sent_total", (("type", "MEET"),))] > 0  # CLUSTER MEET
    assert samples[("disque_cluster_reachable_nodes", ())] == 2

    # One node down: the two others agree, it is FAIL.
    cluster.kill(2)
    wait_until(lambda: node_states(metrics_port) == dict(up, up=2, fail=1),
               FAILURE_TIMEOUT_S, interval=0.1, message="node 2 fail")
    # Another one down: node 0 alone is no majority, it stays PFAIL.
    cluster.kill(1)
    wait_until(lambda: node_states(metrics_port) == dict(up, up=1, pfail=1, fail=1),
               FAILURE_TIMEOUT_S, interval=0.1, message="node 1 pfail")
    assert scrape(metrics_port)[("disque_cluster_reachable_nodes", ())] == 0
