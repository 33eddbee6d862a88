"""ACK propagation and garbage collection across the cluster.

spec: cluster-bus.md §6.6 ("Consequences checked by tests"), commands.md
ACKJOB / FASTACK.
"""

from __future__ import annotations

import pytest

from tests.support.process import wait_until

pytestmark = pytest.mark.cluster

GC_TIMEOUT_S = 15


@pytest.fixture(scope="module")
def cluster5(module_cluster_factory):
    """A healthy 5-node cluster shared by the non-destructive tests below."""
    return module_cluster_factory(5)


def _non_holder(cluster, origin: int, job_id) -> int:
    holders = cluster.stable_holders(origin, job_id)
    others = [i for i in range(len(cluster)) if i not in holders]
    assert others, "every node got a replica of %s" % job_id
    return others[0]


def test_ackjob_at_origin_removes_every_copy(cluster5):
    job_id = cluster5.call(0, "ADDJOB", "ackq", "b", 5000, "REPLICATE", 5)
    assert cluster5.holders(job_id) == [0, 1, 2, 3, 4]
    assert cluster5.show(0, job_id)["nodes-delivered"] == set(cluster5.ids)
    assert cluster5.call(0, "ACKJOB", job_id) == 1
    cluster5.wait_holders(job_id, 0, GC_TIMEOUT_S)
    assert cluster5.call(0, "QLEN", "ackq") == 0


def test_ackjob_on_a_node_without_the_job_collects_every_copy(cluster5):
    job_id = cluster5.call(0, "ADDJOB", "dummyq", "b", 5000, "REPLICATE", 3)
    stranger = _non_holder(cluster5, 0, job_id)
    assert cluster5.raw(stranger, "ACKJOB", job_id) == b":0\r\n"  # unknown here: not counted
    info = cluster5.show(stranger, job_id)
    if info is not None:  # the dummy ACK, unless already collected
        assert (info["state"], info["queue"], info["body"]) == ("acked", None, None)
        assert info["nodes-delivered"] == set()
    cluster5.wait_holders(job_id, 0, GC_TIMEOUT_S)


def test_ackjob_of_unknown_at_most_once_id_creates_no_dummy(cluster5):
    job_id = cluster5.call(0, "ADDJOB", "amoq", "b", 5000, "REPLICATE", 1, "RETRY", 0)
    assert job_id.endswith(b"-05a0")  # even TTL field: at-most-once
    assert cluster5.raw(1, "ACKJOB", job_id) == b":0\r\n"
    assert cluster5.raw(1, "SHOW", job_id) == b"$-1\r\n"
    assert cluster5.show(0, job_id)["state"] == "queued"  # nobody told the holder
    assert cluster5.call(0, "ACKJOB", job_id) == 1
    assert cluster5.raw(0, "SHOW", job_id) == b"$-1\r\n"  # repl 1: deleted at once


def test_fastack_to_owner_holder_and_non_owner(cluster5):
    owner_job = cluster5.call(0, "ADDJOB", "fq", "b1", 5000, "REPLICATE", 3)
    assert cluster5.raw(0, "FASTACK", owner_job) == b":1\r\n"
    assert cluster5.raw(0, "SHOW", owner_job) == b"$-1\r\n"
    cluster5.wait_holders(owner_job, 0, GC_TIMEOUT_S)

    holder_job = cluster5.call(0, "ADDJOB", "fq", "b2", 5000, "REPLICATE", 3)
    replica = next(i for i in cluster5.holders(holder_job) if i != 0)
    assert cluster5.raw(replica, "FASTACK", holder_job) == b":1\r\n"
    cluster5.wait_holders(holder_job, 0, GC_TIMEOUT_S)
    assert cluster5.call(0, "QLEN", "fq") == 0

    stranger_job = cluster5.call(0, "ADDJOB", "fq", "b3", 5000, "REPLICATE", 3)
    stranger = _non_holder(cluster5, 0, stranger_job)
    assert cluster5.raw(stranger, "FASTACK", stranger_job) == b":0\r\n"  # DELJOB to everyone
    cluster5.wait_holders(stranger_job, 0, GC_TIMEOUT_S)


def test_ack_waits_for_a_down_holder_then_is_collected(cluster_factory):
    cluster = cluster_factory(5)
    job_id = cluster.call(0, "ADDJOB", "downq", "b", 5000, "REPLICATE", 5)
    assert cluster.holders(job_id) == [0, 1, 2, 3, 4]
    # A second job, acked through a node that never had it (dummy ACK).
    dummy_job = cluster.call(0, "ADDJOB", "downq", "d", 5000, "REPLICATE", 3)
    stranger = _non_holder(cluster, 0, dummy_job)
    dummy_holders = [i for i in cluster.holders(dummy_job) if i != 0]
    cluster.kill(0)  # the origin, holding the queued copies
    assert cluster.call(1, "ACKJOB", job_id) == 1
    assert cluster.call(stranger, "ACKJOB", dummy_job) == 0
    survivors = [1, 2, 3, 4]

    def acked_copies() -> int:
        infos = [cluster.show(i, job_id) for i in survivors]
        return sum(1 for info in infos if info is not None and info["state"] == "acked")
    wait_until(lambda: acked_copies() == 4, 10, interval=0.05, message="4 acked copies")

    # Let node 1 run the GC attempt it scheduled when acking (it can only be
    # rescheduled later, with a longer backoff, after the attempt ran).
    first = cluster.show(1, job_id)["next-awake-within"]
    assert first is not None and first <= 1000 * 2 + 250

    def attempt_done() -> bool:
        nxt = cluster.show(1, job_id)["next-awake-within"]
        return nxt is not None and nxt > first
    wait_until(attempt_done, 10, interval=0.05, message="a GC attempt without the down holder")
    assert acked_copies() == 4, "ACK collected although a holder was down"
    for i in survivors:  # nobody can have heard from the down holder
        assert cluster.ids[0] not in cluster.show(i, job_id)["nodes-confirmed"]

    # The live holders of the second job took the ACK over from the dummy.
    wait_until(lambda: all((cluster.show(i, dummy_job) or {}).get("state") == "acked"
                           for i in dummy_holders), 10, interval=0.05,
               message="dummy ACK reached the live holders")

    cluster.restart(0)  # no AOF: it comes back without the jobs
    assert cluster.raw(0, "SHOW", job_id) == b"$-1\r\n"
    cluster.wait_holders(job_id, 0, 30)
    cluster.wait_holders(dummy_job, 0, 30)
