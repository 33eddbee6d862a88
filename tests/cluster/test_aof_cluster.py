"""The AOF in a cluster of real processes (spec: persistence.md §2 and §5).

Synchronous replication is the durability of a memory-only cluster; with the
AOF on, a whole cluster killed at once with SIGKILL must still deliver every
REPLICATE N job it confirmed, and ACKed jobs must stay gone.
"""

from __future__ import annotations

import pytest

from tests.support.process import wait_until

pytestmark = pytest.mark.cluster

ROUNDS = 5
REDELIVERY_WAIT_S = 20.0


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory(3, appendonly=True)


def aof_bytes(cluster, i: int) -> bytes:
    return (cluster.nodes[i].dir / "disque.aof").read_bytes()


def test_sync_addjob_is_logged_on_every_holder_before_the_reply(cluster):
    # spec §2: the record is written before the reply leaves the process, so
    # a SIGKILL right after the producer saw the ID cannot lose it.
    for attempt in range(30):
        origin = attempt % 3
        job_id = cluster.call(origin, "ADDJOB", "order", "job %d" % attempt, 0,
                              "REPLICATE", 3, "RETRY", 5)
        missing = [i for i in range(3) if job_id not in aof_bytes(cluster, i)]
        assert not missing, "attempt %d: ADDJOB on node %d replied before nodes %s logged it" % (
            attempt, origin, missing)
        deleted = cluster.call(origin, "ACKJOB", job_id)
        assert deleted == 1
        assert b"DELJOB" in aof_bytes(cluster, origin)[-200:]  # the ACK is logged before +1


def kill_all_at_once(cluster) -> None:
    for node in cluster.nodes:
        node.kill(wait=False)  # every SIGKILL sent before any process is reaped
    for i in range(len(cluster)):
        cluster.kill(i)


def test_whole_cluster_sigkilled_still_delivers_repl3_jobs(cluster):
    # persistence.md §5 "Job replicated to N nodes is delivered after mass
    # restart", five times in a row; one job added on each node per round.
    delivered_before: set[bytes] = set()
    for round_no in range(ROUNDS):
        queue = "mass%d" % round_no
        added = {cluster.call(i, "ADDJOB", queue, "round %d from %d" % (round_no, i), 0,
                              "REPLICATE", 3, "RETRY", 1): "round %d from %d" % (round_no, i)
                 for i in range(3)}
        kill_all_at_once(cluster)
        cluster.restart_many(range(3))
        for job_id in delivered_before:  # acked before the crash: never resurrected
            assert cluster.holders(job_id) == [], job_id
        for i in range(3):  # every holder loaded its copy (active, or already re-queued)
            for job_id, body in added.items():
                info = cluster.show(i, job_id)
                assert info is not None and info["state"] in ("active", "queued"), (i, info)
                assert info["body"] == body.encode() and info["retry"] == 1
        cluster.wait_joined(30)

        got: dict[bytes, bytes] = {}

        def fetch() -> bool:
            for i in range(3):
                reply = cluster.call(i, "GETJOB", "NOHANG", "COUNT", 10, "FROM", queue)
                for queue_name, job_id, body in reply or []:
                    assert queue_name == queue.encode()
                    got[job_id] = body
                    cluster.call(i, "ACKJOB", job_id)
            return set(got) == set(added)
        wait_until(fetch, REDELIVERY_WAIT_S, interval=0.05,
                   message="round %d: %d of 3 jobs delivered after the mass restart"
                           % (round_no, len(got)))
        assert got == {job_id: body.encode() for job_id, body in added.items()}

        def acked_everywhere() -> bool:
            return all(info is None or info["state"] == "acked"
                       for job_id in added for info in (cluster.show(i, job_id)
                                                        for i in range(3)))
        wait_until(acked_everywhere, 10, interval=0.05, message="ACKs spread")
        delivered_before.update(added)
