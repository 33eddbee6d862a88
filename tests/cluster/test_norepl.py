"""NOREPL when too few nodes are reachable, sync replication timeouts, and
synchronous REPLJOB retries against a node that comes back.

spec: commands.md ADDJOB (validation step 6, blocked ADDJOB outcomes),
cluster-bus.md §6.1 (client cron re-sends REPLJOB to unconfirmed nodes).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.cluster import raw_command
from tests.support.process import wait_until

pytestmark = pytest.mark.cluster

NOREPL = b"-NOREPL Not enough reachable nodes for the requested replication level\r\n"
NOREPL_TIMEOUT = (b"-NOREPL Timeout reached before replicating to the requested number of "
                  b"nodes\r\n")


def test_norepl_when_too_few_nodes_are_reachable(cluster_factory):
    cluster = cluster_factory(3)
    assert cluster.raw(0, "ADDJOB", "nq", "b", 0, "REPLICATE", 4) == NOREPL
    assert cluster.raw(0, "ADDJOB", "nq", "b", 0, "REPLICATE", 3, "ASYNC", "REPLICATE", 9) == \
        NOREPL

    # A node dead but not yet flagged is still "reachable": a sync ADDJOB
    # replicates to the live one and then times out (had node 2 been flagged
    # already, the reply would be the other NOREPL, at once).
    cluster.kill(2)
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        pending = pool.submit(raw_command, cluster.port(0), "ADDJOB", "nq", "partial", 1000,
                              "REPLICATE", 3)
        # The live replica got its copy while the producer waits...
        wait_until(lambda: cluster.registered_jobs(1) == 1, 2, interval=0.02,
                   message="partial copy on node 1")
        reply = pending.result(10)
        elapsed = time.monotonic() - started
    assert reply == NOREPL_TIMEOUT
    assert elapsed >= 0.9, elapsed  # not before its 1000 ms timeout
    # ...and the partial copies are deleted (locally and through DELJOB).
    assert cluster.registered_jobs(0) == 0
    wait_until(lambda: cluster.registered_jobs(1) == 0, 5, interval=0.02,
               message="partial copy deleted on node 1")

    # Once both other nodes are flagged, nothing above REPLICATE 1 is possible.
    cluster.kill(1)
    wait_until(lambda: all("fail?" in cluster.flags(0, j) or "fail" in cluster.flags(0, j)
                           for j in (1, 2)), 15, interval=0.05, message="peers flagged")
    cluster.wait_reachable(0, 0, timeout=2)
    # Alone, node 0 can never gather a FAIL quorum: PFAIL stays, priority 10.
    assert all(cluster.flags(0, j) == {"fail?"} for j in (1, 2))
    assert [cluster.hello(0)[2][cluster.ids[j]].priority for j in (1, 2)] == ["10", "10"]
    assert cluster.raw(0, "ADDJOB", "nq", "b", 0, "REPLICATE", 3) == NOREPL
    assert cluster.raw(0, "ADDJOB", "nq", "b", 0, "REPLICATE", 2) == NOREPL
    # The default replication counts failed nodes in the cluster size: min(3, 3).
    assert cluster.raw(0, "ADDJOB", "nq", "b", 0) == NOREPL
    assert cluster.raw(0, "ADDJOB", "nq", "b", 0, "REPLICATE", 1).startswith(b"+D-")


def test_sync_replication_completes_when_a_down_node_restarts(cluster_factory):
    cluster = cluster_factory(3)

    # 1. The node is down (no link) when ADDJOB starts: it is added once back.
    cluster.kill(2)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(raw_command, cluster.port(0), "ADDJOB", "sq", "one", 15000,
                              "REPLICATE", 3)
        wait_until(lambda: cluster.registered_jobs(1) == 1, 2, interval=0.02,
                   message="copy on node 1")
        assert not pending.done()
        cluster.restart(2)
        reply = pending.result(15)
    assert reply.startswith(b"+D-"), reply
    job_id = reply[1:-2]
    assert cluster.holders(job_id) == [0, 1, 2]
    cluster.wait_joined(15)

    # 2. The REPLJOB reaches a node that then dies without answering (frozen,
    #    then killed): the client cron re-sends it to that unconfirmed node
    #    after its restart ("Sync REPLJOB messages are retried against old nodes").
    cluster.freeze(2)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(raw_command, cluster.port(0), "ADDJOB", "sq", "two", 15000,
                              "REPLICATE", 3)
        waiting: dict = {}

        def waiting_for_node2() -> bool:
            jobs = cluster.call(0, "JSCAN", "STATE", "wait-repl")[1]
            if not jobs:
                return False
            info = cluster.show(0, jobs[0])
            waiting.update(info or {})
            return info is not None and info["nodes-delivered"] == set(cluster.ids) \
                and info["nodes-confirmed"] == {cluster.ids[0], cluster.ids[1]}
        wait_until(waiting_for_node2, 2, interval=0.02, message="REPLJOB sent to node 2")
        cluster.kill(2)
        cluster.restart(2)
        reply = pending.result(15)
    assert reply == b"+%s\r\n" % waiting["id"].encode()
    info = cluster.show(2, waiting["id"])
    assert info is not None and info["state"] == "active" and info["body"] == b"two"
