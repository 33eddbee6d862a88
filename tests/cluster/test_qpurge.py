"""QPURGE in a real 3-node cluster: the copies of the purged jobs on the
other nodes go too, the jobs another node is working on stay."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cluster

GONE_TIMEOUT_S = 10


def test_qpurge_deletes_the_copies_on_the_other_nodes(cluster_factory):
    cluster = cluster_factory(3)
    ids = [cluster.call(0, "ADDJOB", "purged", "b%d" % i, 5000, "REPLICATE", 3)
           for i in range(4)]
    for job_id in ids:
        assert cluster.stable_holders(0, job_id) == [0, 1, 2]
    kept = cluster.call(0, "ADDJOB", "kept", "k", 5000, "REPLICATE", 3)
    assert cluster.call(0, "QPURGE", "purged") == 4
    for job_id in ids:
        cluster.wait_holders(job_id, 0, GONE_TIMEOUT_S)
    assert [cluster.call(i, "QLEN", "purged") for i in range(3)] == [0, 0, 0]
    assert cluster.holders(kept) == [0, 1, 2]


def test_a_job_delivered_here_is_not_purged(cluster_factory):
    cluster = cluster_factory(3)
    ids = [cluster.call(0, "ADDJOB", "mixed", "b%d" % i, 5000, "REPLICATE", 2)
           for i in range(3)]
    (_, active, _), = cluster.call(0, "GETJOB", "FROM", "mixed")
    assert cluster.call(0, "QPURGE", "mixed") == 2
    for job_id in ids:
        if job_id != active:
            cluster.wait_holders(job_id, 0, GONE_TIMEOUT_S)
    assert cluster.show(0, active)["state"] == "active"
    assert cluster.call(0, "ACKJOB", active) == 1
