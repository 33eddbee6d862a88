"""Job headers and ADDJOBS on a real 3-node cluster (docs/commands.md "Job
headers", "Bulk add"): every copy carries the headers, GETJOB WITHHEADERS on
another node than the producer's gets them (the job crossing by federation),
a replica restarted from its AOF keeps them, and a synchronous ADDJOBS waits
for every job's copies or answers NOREPL for each."""

from __future__ import annotations

import pytest

from tests.support.process import wait_until

pytestmark = pytest.mark.cluster

TRACEPARENT = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
NOREPL_TIMEOUT = "NOREPL Timeout reached before replicating to the requested number of nodes"


def _fields(cluster, i: int, job_id: bytes) -> dict:
    reply = cluster.call(i, "SHOW", job_id)
    return dict(zip(reply[0::2], reply[1::2]))


def test_copies_carry_headers_and_another_node_serves_them(cluster_factory):
    cluster = cluster_factory(3, appendonly=True)
    job_id = cluster.call(0, "ADDJOB", "q", "body", 5000, "REPLICATE", 3,
                          "HEADER", "traceparent", TRACEPARENT, "HEADER", "tenant", "acme")
    headers = [b"traceparent", TRACEPARENT, b"tenant", b"acme"]
    for i in range(3):
        assert _fields(cluster, i, job_id)[b"headers"] == headers
    # A replica restarted from its AOF still holds them.
    cluster.kill(2)
    cluster.restart(2)
    cluster.wait_joined(20)
    assert _fields(cluster, 2, job_id)[b"headers"] == headers
    # Queued on node 0 only: node 1's GETJOB gets it by federation, headers and all.
    got = cluster.call(1, "GETJOB", "TIMEOUT", 10000, "WITHHEADERS", "FROM", "q")
    assert got == [[b"q", job_id, b"body", b"headers", headers]]
    assert cluster.call(1, "ACKJOB", job_id) == 1


def test_sync_addjobs_waits_for_every_copy(cluster_factory):
    cluster = cluster_factory(3)
    ids = cluster.call(0, "ADDJOBS", "q", 5000, "REPLICATE", 3, "HEADER", "k", "v",
                       "DEDUPIDS", "t1", "a", "t2", "b", "t3", "c")
    assert len(set(ids)) == 3 and all(i.startswith(b"D-") for i in ids)
    # Synchronous: every copy was made before the reply.
    assert [cluster.registered_jobs(i) for i in range(3)] == [3, 3, 3]
    shown = _fields(cluster, 2, ids[1])
    assert shown[b"headers"] == [b"k", b"v"] and shown[b"dedupid"] == b"t2"
    # Any holder answers the tokens.
    assert cluster.call(1, "ADDJOBS", "q", 5000, "REPLICATE", 3, "DEDUPIDS", "t3", "c",
                        "t1", "a") == [ids[2], ids[0]]


def test_sync_addjobs_without_enough_copies_answers_norepl_for_each(cluster_factory):
    cluster = cluster_factory(3)
    cluster.kill(2)  # not yet failed: still counted reachable, its copies never come
    reply = cluster.call(0, "ADDJOBS", "q", 1000, "REPLICATE", 3, "BODIES", "a", "b")
    assert [str(r) for r in reply] == [NOREPL_TIMEOUT] * 2
    # The partial copies on node 1 are deleted too.
    wait_until(lambda: cluster.registered_jobs(0) + cluster.registered_jobs(1) == 0,
               message="the failed jobs and their copies to be gone")
