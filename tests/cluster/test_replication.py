"""Replicated jobs survive node crashes; replicas requeue after RETRY.

spec: cluster-bus.md §6.1-§6.5, commands.md ADDJOB / GETJOB.
"""

from __future__ import annotations

import random

import pytest

from tests.support.process import wait_until

pytestmark = pytest.mark.cluster


def test_repl3_job_is_delivered_after_killing_two_of_its_holders(cluster_factory, run_seed):
    cluster = cluster_factory(5)
    seed = run_seed  # origin, survivor and getter are drawn from it
    rng = random.Random(seed)
    for iteration in range(3):
        queue = "q%d" % iteration  # a fresh queue: no federation backoff carried over
        body = b"body-%d-%d" % (seed, iteration)
        origin = rng.randrange(len(cluster))
        job_id = cluster.call(origin, "ADDJOB", queue, body, 5000, "REPLICATE", 3, "RETRY", 1)
        holders = cluster.stable_holders(origin, job_id)
        assert len(holders) >= 3, (seed, iteration, holders)
        survivor = rng.choice(holders)
        victims = [i for i in holders if i != survivor]
        for i in victims:
            cluster.kill(i)
        getter = rng.choice(cluster.live())
        reply = cluster.call(getter, "GETJOB", "TIMEOUT", 15000, "FROM", queue)
        assert reply == [[queue.encode(), job_id, body]], \
            "seed %d iteration %d: origin %d survivor %d getter %d victims %s\n%s" % (
                seed, iteration, origin, survivor, getter, victims, cluster.logs())
        assert cluster.call(getter, "ACKJOB", job_id) == 1
        if iteration < 2:
            cluster.restart_many(victims)
            cluster.wait_joined(20)


def test_replica_requeues_after_retry_when_the_queueing_node_is_killed(cluster_factory):
    cluster = cluster_factory(3)
    job_id = cluster.call(0, "ADDJOB", "rq", "payload", 5000, "REPLICATE", 3, "RETRY", 1)
    assert cluster.show(0, job_id)["state"] == "queued"
    for i in (1, 2):
        info = cluster.show(i, job_id)
        assert info["state"] == "active" and info["retry"] == 1
        assert cluster.call(i, "QLEN", "rq") == 0
    cluster.kill(0)

    def queued_on_replica() -> list[int]:
        return [i for i in (1, 2) if cluster.call(i, "QLEN", "rq") == 1]
    # RETRY 1: a replica queues it about a second later; the poll bounds that.
    wait_until(queued_on_replica, 5, interval=0.05, message="a replica queues the job")
    # If both queued it at once, the job ID decides which one keeps it.
    wait_until(lambda: len(queued_on_replica()) == 1, 10, interval=0.05,
               message="exactly one replica keeps it queued")
    keeper = queued_on_replica()[0]
    assert cluster.show(keeper, job_id)["state"] == "queued"
    other = 3 - keeper
    # The other replica is served through federation (NEEDJOBS / YOURJOBS).
    reply = cluster.call(other, "GETJOB", "TIMEOUT", 10000, "WITHCOUNTERS", "FROM", "rq")
    assert reply[0][:5] == [b"rq", job_id, b"payload", b"nacks", 0]
    assert reply[0][5] == b"additional-deliveries"
    assert reply[0][6] >= 1  # a replica's queueing counts as a re-delivery
    assert cluster.call(other, "ACKJOB", job_id) == 1


def test_mass_restart_with_aof_keeps_a_repl3_job(cluster_factory):
    # persistence.md §5: every node killed with SIGKILL and restarted.
    cluster = cluster_factory(3, appendonly=True, config="appendfsync always\n")
    job_id = cluster.call(0, "ADDJOB", "mq", "survivor", 5000, "REPLICATE", 3, "RETRY", 1)
    assert len(cluster.holders(job_id)) == 3
    for i in range(3):
        cluster.kill(i)
    cluster.restart_many(range(3))
    for i in range(3):  # loaded as active; a node up for ~1 s may have requeued it
        info = cluster.show(i, job_id)
        assert info is not None and info["state"] in ("active", "queued"), (i, info)
        assert info["body"] == b"survivor" and info["retry"] == 1
    cluster.wait_joined(20)

    def queued_somewhere() -> list[int]:
        return [i for i in range(3) if cluster.call(i, "QLEN", "mq") >= 1]
    queued = wait_until(queued_somewhere, 15, interval=0.05, message="job queued after restart")
    reply = cluster.call(queued[0], "GETJOB", "TIMEOUT", 10000, "FROM", "mq")
    assert reply == [[b"mq", job_id, b"survivor"]]
