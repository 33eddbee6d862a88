"""ADDJOB ... DEDUPID on a real 3-node cluster (docs/dedup.md): every node
holding a copy answers the token; -PENDING while the first ADDJOB waits for a
replica, NOREPL frees the token on the origin and on the replica that held a
partial copy; a node restarted from its AOF still answers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.cluster import raw_command
from tests.support.process import wait_until

pytestmark = pytest.mark.cluster

NOREPL_TIMEOUT = (b"-NOREPL Timeout reached before replicating to the requested number of "
                  b"nodes\r\n")


def _total_jobs(cluster) -> int:
    return sum(cluster.registered_jobs(i) for i in cluster.live())


def _dedupid(cluster, i: int, job_id: bytes) -> bytes | None:
    """The dedupid pair of SHOW (Disque 1.0's 30 elements, then the extensions')."""
    reply = cluster.call(i, "SHOW", job_id)
    return dict(zip(reply[0::2], reply[1::2])).get(b"dedupid")


def test_every_holder_answers_with_the_first_job(cluster_factory):
    cluster = cluster_factory(3, appendonly=True)
    job_id = cluster.call(0, "ADDJOB", "orders", "body", 5000, "REPLICATE", 3,
                          "DEDUPID", "order-1")
    assert [cluster.registered_jobs(i) for i in range(3)] == [1, 1, 1]  # synchronous
    for i in (0, 1, 2):
        assert cluster.call(i, "ADDJOB", "orders", "again", 5000, "REPLICATE", 3,
                            "DEDUPID", "order-1") == job_id
    assert [cluster.registered_jobs(i) for i in range(3)] == [1, 1, 1]
    assert _dedupid(cluster, 2, job_id) == b"order-1"
    # A replica restarted from its AOF still knows the token.
    cluster.kill(2)
    cluster.restart(2)
    cluster.wait_joined(20)
    assert cluster.call(2, "ADDJOB", "orders", "again", 5000, "REPLICATE", 3,
                        "DEDUPID", "order-1") == job_id
    # The job consumed and acknowledged on a replica: the token still answers everywhere.
    got = cluster.call(1, "GETJOB", "TIMEOUT", 10000, "FROM", "orders")
    assert got[0][1] == job_id
    assert cluster.call(1, "ACKJOB", job_id) == 1
    wait_until(lambda: _total_jobs(cluster) == 0, 15, interval=0.05,
               message="the acked job collected everywhere")
    for i in (0, 1, 2):
        assert cluster.call(i, "ADDJOB", "orders", "again", 5000, "REPLICATE", 3,
                            "DEDUPID", "order-1") == job_id
    assert _total_jobs(cluster) == 0


def test_pending_then_norepl_frees_the_token_on_every_node(cluster_factory):
    cluster = cluster_factory(3)
    cluster.freeze(2)  # links up, answers nothing: not flagged for a while
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(raw_command, cluster.port(0), "ADDJOB", "q", "first", 2000,
                            "REPLICATE", 3, "DEDUPID", "t")
        wait_until(lambda: cluster.registered_jobs(1) == 1, 2, interval=0.02,
                   message="the partial copy on node 1")
        assert not first.done()
        retry = cluster.raw(0, "ADDJOB", "q", "retry", 2000, "REPLICATE", 3, "DEDUPID", "t")
        assert retry.startswith(b"-PENDING Job D-") and b"waiting for its replicas" in retry
        pending_id = retry.split()[2]
        # Node 1 holds an active copy and cannot know that its origin still waits:
        # it answers with the ID (docs/dedup.md, "what it does not guarantee").
        assert cluster.call(1, "ADDJOB", "q", "retry", 2000, "REPLICATE", 2,
                            "DEDUPID", "t") == pending_id
        assert first.result(10) == NOREPL_TIMEOUT
    wait_until(lambda: cluster.registered_jobs(1) == 0, 5, interval=0.02,
               message="the origin's DELJOB to reach node 1")
    # The job was never created: a retry at the origin or at node 1 creates it.
    created = cluster.call(1, "ADDJOB", "q", "retry", 2000, "REPLICATE", 2, "DEDUPID", "t")
    assert created != pending_id and created.startswith(b"D-")
    assert cluster.call(1, "ADDJOB", "q", "retry", 2000, "REPLICATE", 2,
                        "DEDUPID", "t") == created
    assert cluster.call(0, "ADDJOB", "q", "again", 2000, "REPLICATE", 2,
                        "DEDUPID", "t") == created  # node 0 holds the copy node 1 made
    assert cluster.call(0, "ADDJOB", "q2", "other", 2000, "REPLICATE", 2,
                        "DEDUPID", "t") != created
