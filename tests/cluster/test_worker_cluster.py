"""disque.worker across a real 3-node cluster: a node killed (SIGKILL) under a
running worker loses no job, and a worker leaves a node that starts leaving."""

from __future__ import annotations

import contextlib
import random
import threading
import time

import pytest

from disque.client import DisqueClient
from disque.worker import ThreadedWorker, Worker
from tests.support.process import wait_until

pytestmark = pytest.mark.cluster


@contextlib.contextmanager
def running(worker: Worker):
    """``worker.run()`` on a thread, stopped (and checked to stop) on the way out."""
    thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "the worker did not stop within 30 s"


def seeds(cluster, order) -> str:
    return ",".join("127.0.0.1:%d" % cluster.port(i) for i in order)


def test_node_killed_under_a_running_worker_loses_nothing(cluster_factory, run_seed):
    """Jobs with two copies each; the node the worker fetches from is killed halfway:
    the worker fails over, the survivors requeue the dead node's jobs after their
    1 s retry, and every job is processed (at least once)."""
    print("seed", run_seed)
    rng = random.Random(run_seed)
    cluster = cluster_factory(3)
    order = [0, 1, 2]
    rng.shuffle(order)
    total = 240
    with DisqueClient(seeds(cluster, order)) as producer:
        ids = producer.add_jobs([("tasks", b"job-%d" % i) for i in range(total)],
                                replicate=2, retry=1)
    assert all(isinstance(i, str) for i in ids), ids[:3]

    processed: list[bytes] = []
    lock = threading.Lock()
    worker = ThreadedWorker(seeds(cluster, order), concurrency=3, hello_interval=1.0)

    @worker.task("tasks")
    def handle(job):
        time.sleep(0.01)
        with lock:
            processed.append(job.body)

    with running(worker):
        wait_until(lambda: len(processed) >= total // 3, timeout=20,
                   message="a third of the jobs processed")
        victim = cluster.nodes.index(next(n for n in cluster.nodes
                                          if n.port == worker.fetch_node.port))
        cluster.kill(victim)
        survivors = [i for i in range(3) if i != victim]
        wait_until(lambda: len(set(processed)) == total, timeout=40, interval=0.1,
                   message="every job processed after node %d was killed (%d of %d)"
                           % (victim, len(set(processed)), total))
        assert worker.fetch_node.port in {cluster.port(i) for i in survivors}
    assert set(processed) == {b"job-%d" % i for i in range(total)}
    print("processed %d deliveries of %d jobs; node %d killed"
          % (len(processed), total, victim))


def test_worker_follows_a_leaving_node_away(cluster_factory):
    """CLUSTER LEAVING on the worker's node: its GETJOB is answered -LEAVING and the
    worker moves to another node, where jobs added later are processed."""
    cluster = cluster_factory(3)
    processed: list[bytes] = []
    worker = ThreadedWorker(seeds(cluster, [0, 1, 2]), concurrency=2, hello_interval=1.0)

    @worker.task("tasks")
    def handle(job):
        processed.append(job.body)

    with running(worker):
        wait_until(lambda: worker.fetch_node is not None, message="the worker connected")
        home = next(i for i in range(3) if cluster.port(i) == worker.fetch_node.port)
        cluster.call(home, "ADDJOB", "tasks", "before", 0, "REPLICATE", 1)
        wait_until(lambda: processed == [b"before"], message="the first job processed")
        assert cluster.call(home, "CLUSTER", "LEAVING", "yes") == b"OK"
        wait_until(lambda: worker.fetch_node.port != cluster.port(home), timeout=10,
                   message="the worker left node %d" % home)
        other = next(i for i in range(3) if cluster.port(i) == worker.fetch_node.port)
        cluster.call(other, "ADDJOB", "tasks", "after", 0, "REPLICATE", 1)
        wait_until(lambda: processed == [b"before", b"after"], message="the second job")
