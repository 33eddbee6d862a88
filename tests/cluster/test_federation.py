"""Federation: consumers on one node receive jobs produced all over the
cluster (NEEDJOBS / YOURJOBS), at-least-once and at-most-once.

spec: cluster-bus.md §6.7, jobs-and-ids.md §7 (import rate), commands.md
GETJOB / QSCAN / QSTAT.
"""

from __future__ import annotations

import random
import time

import pytest

from tests.support.process import wait_until

pytestmark = pytest.mark.cluster

JOBS = 100
CONSUMER = 2
FETCH_DEADLINE_S = 30
GC_TIMEOUT_S = 15


@pytest.fixture(scope="module")
def cluster5(module_cluster_factory):
    """A healthy 5-node cluster shared by the tests below (one queue each)."""
    return module_cluster_factory(5)


def _produce(cluster, queue: str, options_for, seed: int) -> dict[bytes, int]:
    """ADDJOB ``JOBS`` jobs on random nodes; {job id: producing node}."""
    rng = random.Random(seed)
    produced = {}
    for n in range(JOBS):
        node = rng.randrange(len(cluster))
        job_id = cluster.call(node, "ADDJOB", queue, "job-%d" % n, 0, *options_for(n))
        assert job_id.startswith(b"D-"), job_id
        produced[job_id] = node
    assert len(produced) == JOBS
    return produced


def _consume(cluster, queue: str, expected: int) -> list[bytes]:
    """GETJOB on the consumer node until ``expected`` jobs arrived; every ID received."""
    received: list[bytes] = []
    deadline = time.monotonic() + FETCH_DEADLINE_S
    while len(set(received)) < expected and time.monotonic() < deadline:
        for entry in cluster.call(CONSUMER, "GETJOB", "TIMEOUT", 500, "COUNT", 20,
                                  "FROM", queue) or ():
            name, job_id, body = entry
            assert name == queue.encode()
            received.append(job_id)
    return received


def _queued_anywhere(cluster, queue: str) -> int:
    return sum(cluster.call(i, "QLEN", queue) for i in range(len(cluster)))


def test_jobs_produced_everywhere_are_consumed_from_one_node(cluster5):
    # Half with the default replication (3 copies here, synchronous), half
    # with one copy: every producer's queue is a federation source.
    produced = _produce(cluster5, "fedq",
                        lambda n: () if n % 2 else ("REPLICATE", 1), seed=1)
    assert len(set(produced.values())) == len(cluster5), "not every node produced"
    received = _consume(cluster5, "fedq", JOBS)
    assert sorted(received) == sorted(produced), "jobs lost or delivered twice"
    assert cluster5.call(CONSUMER, "ACKJOB", *received) == JOBS

    # Nothing left queued anywhere and every copy (sources' active ones
    # included) is collected: the consumer was added to nodes-delivered.
    for i in range(len(cluster5)):
        assert cluster5.call(i, "GETJOB", "NOHANG", "FROM", "fedq") is None
    wait_until(lambda: all(cluster5.registered_jobs(i) == 0 for i in range(len(cluster5))),
               GC_TIMEOUT_S, interval=0.1, message="every copy garbage collected")


def test_at_most_once_jobs_are_delivered_exactly_once(cluster5):
    produced = _produce(cluster5, "amoq", lambda n: ("REPLICATE", 1, "RETRY", 0), seed=2)
    assert all(job_id.endswith(b"-05a0") for job_id in produced)  # even TTL: at-most-once
    received = _consume(cluster5, "amoq", JOBS)
    twice = sorted({job_id for job_id in received if received.count(job_id) > 1})
    assert not twice, "at-most-once jobs delivered twice: %s" % twice
    assert set(received) == set(produced), "at-most-once jobs lost"
    # Handed over, not copied: the sources deleted what they sent.
    for i in range(len(cluster5)):
        if i != CONSUMER:
            kept = [cluster5.show(i, job_id) for job_id in cluster5.jscan(i)]
            assert not kept, "source %d kept jobs: %s" % (i, kept)
    assert _queued_anywhere(cluster5, "amoq") == 0
    assert cluster5.call(CONSUMER, "ACKJOB", *received) == JOBS
    # Imported ones list their source in nodes-delivered: its GOTACK ends them.
    wait_until(lambda: cluster5.registered_jobs(CONSUMER) == 0, GC_TIMEOUT_S, interval=0.1,
               message="acked at-most-once jobs collected")


def test_importing_queue_listed_by_qscan_importrate(cluster5):
    source = 0
    importer = CONSUMER
    source_id = cluster5.ids[source]
    ids = [cluster5.call(source, "ADDJOB", "impq", "i%d" % n, 0, "REPLICATE", 1)
           for n in range(20)]
    # A queue that only ever had local jobs on the importer.
    local_id = cluster5.call(importer, "ADDJOB", "localq", "l", 0, "REPLICATE", 1)
    assert cluster5.call(importer, "GETJOB", "FROM", "localq") == [[b"localq", local_id, b"l"]]

    received = []
    deadline = time.monotonic() + FETCH_DEADLINE_S
    while len(received) < len(ids) and time.monotonic() < deadline:
        received += [job_id for _, job_id, _ in
                     cluster5.call(importer, "GETJOB", "TIMEOUT", 500, "COUNT", 20,
                                   "FROM", "impq") or ()]
    assert sorted(received) == sorted(ids)

    # The import rate covers the last 5 s: look right away.
    imported = cluster5.qscan(importer, "IMPORTRATE", 1)
    assert b"impq" in imported and b"localq" not in imported
    assert b"localq" in cluster5.qscan(importer)
    stat = cluster5.qstat(importer, "impq")
    assert stat["import-from"] == {source_id}
    assert stat["import-rate"] >= 1
    assert stat["jobs-in"] == len(ids) and stat["jobs-out"] == len(ids)
    assert cluster5.qstat(importer, "localq")["import-rate"] == 0
    # The source exported the jobs: it imported nothing.
    assert cluster5.qscan(source, "IMPORTRATE", 1) == []
    source_stat = cluster5.qstat(source, "impq")
    assert (source_stat["import-from"], source_stat["jobs-out"]) == (set(), len(ids))
    assert cluster5.call(importer, "ACKJOB", *received, local_id) == len(ids) + 1
