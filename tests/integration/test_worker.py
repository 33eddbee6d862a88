"""disque.worker against real servers: threaded and asyncio workers process
jobs, failures are NACKed (with DELAY on this server), long jobs are kept
with WORKING, and ``disque-worker`` stops gracefully on SIGTERM; the
producer's ``DisqueClient.add`` with every job option."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from disque.client import DisqueClient
from disque.worker import AsyncioWorker, ThreadedWorker, Worker
from tests.support.process import REPO, wait_until

WORKER_CLI = [sys.executable, "-m", "disque.worker.cli"]


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


def registered_jobs(server) -> int:
    return int(server.client().info("jobs")["registered_jobs"])


def produce(server, queue: str, count: int, **options) -> list[str]:
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        ids = client.add_jobs([(queue, b"job-%d" % i) for i in range(count)], **options)
    assert all(isinstance(i, str) for i in ids), ids
    return ids


def test_threaded_worker_processes_every_job(server):
    ids = produce(server, "work", 300)
    seen: list[bytes] = []
    lock = threading.Lock()
    worker = ThreadedWorker("127.0.0.1:%d" % server.port, concurrency=4)

    @worker.task("work")
    def handle(job):
        with lock:
            seen.append(job.body)

    with running(worker):
        wait_until(lambda: len(seen) >= len(ids), message="300 jobs processed")
        wait_until(lambda: registered_jobs(server) == 0, message="every job acknowledged")
    assert sorted(seen) == sorted(b"job-%d" % i for i in range(300))
    assert worker.stats.succeeded == 300 and worker.stats.failed == 0


def test_asyncio_worker_runs_handlers_concurrently(server):
    ids = produce(server, "work", 100)
    seen: set[bytes] = set()
    running_now = peak = 0
    worker = AsyncioWorker("127.0.0.1:%d" % server.port, concurrency=20)

    @worker.task("work")
    async def handle(job):
        nonlocal running_now, peak
        running_now += 1
        peak = max(peak, running_now)
        await asyncio.sleep(0.02)
        running_now -= 1
        seen.add(job.body)

    with running(worker):
        wait_until(lambda: len(seen) == len(ids), message="100 jobs processed")
        wait_until(lambda: registered_jobs(server) == 0, message="every job acknowledged")
    assert peak > 1, "handlers ran one at a time"
    assert peak <= 20


@pytest.mark.parametrize("nack_delay", [1.0, 0.0])
def test_failed_job_is_nacked_with_the_delay(server, nack_delay):
    """A handler that raises NACKs its job: with DELAY (this server has it), the
    next delivery waits the delay; with nack_delay 0, a plain NACK requeues at once."""
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        assert client.supports_nack_delay()
        client.add("work", b"flaky", retry=60)
    deliveries: list[tuple[float, int | None]] = []
    worker = ThreadedWorker("127.0.0.1:%d" % server.port, concurrency=1, nack_delay=nack_delay)

    @worker.task("work")
    def handle(job):
        deliveries.append((time.monotonic(), job.nacks))
        if len(deliveries) == 1:
            raise RuntimeError("first try fails")

    with running(worker):
        wait_until(lambda: len(deliveries) == 2, message="the job delivered again")
        wait_until(lambda: registered_jobs(server) == 0, message="the second try acknowledged")
    (first, nacks_before), (second, nacks_after) = deliveries
    assert (nacks_before, nacks_after) == (0, 1)
    assert worker.stats.failed == 1 and worker.stats.succeeded == 1
    if nack_delay:
        assert second - first >= 0.9, "delivered again %.2f s after failing" % (second - first)
    else:
        assert second - first < 0.9, "a plain NACK requeues at once"


@pytest.mark.parametrize("working_after, deliveries_expected", [(0.25, 1), (30.0, 2)])
def test_long_job_is_kept_with_working(server, caplog, working_after, deliveries_expected):
    """A 2.5 s job with RETRY 1: the worker's WORKINGs keep it from being delivered
    again; with the first WORKING due only after 30 s (the control), it is."""
    caplog.set_level(logging.DEBUG, logger="disque.worker")
    calls: list[tuple[int | None, int | None]] = []
    lock = threading.Lock()
    worker = ThreadedWorker("127.0.0.1:%d" % server.port, concurrency=2,
                            working_after=working_after, grace=5)

    @worker.task("slow")
    def handle(job):
        with lock:
            calls.append((job.nacks, job.additional_deliveries))
            first = len(calls) == 1
        if first:
            time.sleep(2.5)

    with running(worker):
        # The worker waits in GETJOB first, so the job's retry period starts as it is fetched.
        wait_until(lambda: server.client().info("clients")["blocked_clients"] == 1,
                   message="the worker blocked in GETJOB")
        job_id = server.call("ADDJOB", "slow", "long", 0, "RETRY", 1).decode()
        wait_until(lambda: registered_jobs(server) == 0, message="the job acknowledged")
        wait_until(lambda: len(calls) >= deliveries_expected, message="deliveries")
    workings = [r for r in caplog.records
                if getattr(r.msg, "name", "") == "job.working" and r.msg.fields["id"] == job_id]
    if deliveries_expected == 1:
        assert calls == [(0, 0)]
        assert len(workings) >= 3, "WORKING every third of the 1 s retry over 2.5 s"
    else:
        assert calls[0] == (0, 0) and calls[1] == (0, 1)  # requeued by its retry timer
        assert workings == []


def test_worker_reconnects_after_its_node_restarts(server, caplog):
    """SIGKILL of the only node: the worker logs fetch errors and retries with backoff;
    once the node is back on its port, jobs added there are processed."""
    processed: list[bytes] = []
    worker = ThreadedWorker("127.0.0.1:%d" % server.port, concurrency=1)

    @worker.task("work")
    def handle(job):
        processed.append(job.body)

    with running(worker):
        server.call("ADDJOB", "work", "before", 0)
        wait_until(lambda: processed == [b"before"], message="the first job")
        wait_until(lambda: registered_jobs(server) == 0, message="the first job acknowledged")
        server.kill()
        wait_until(lambda: any(getattr(r.msg, "name", "") == "worker.fetch_error"
                               for r in caplog.records), message="a fetch error logged")
        server.start()
        server.call("ADDJOB", "work", "after", 0)
        wait_until(lambda: processed == [b"before", b"after"], timeout=15,
                   message="the job added after the restart")
        wait_until(lambda: registered_jobs(server) == 0, message="the second job acknowledged")


def test_sigterm_stops_the_cli_gracefully(server, tmp_path):
    """SIGTERM: running jobs finish and are acknowledged, fetched ones not started are
    NACKed back to the queue, the process exits 0; no job is left held (active)."""
    done_file = tmp_path / "done.txt"
    (tmp_path / "slowjobs.py").write_text(
        "import time\n"
        "def handle(job):\n"
        "    time.sleep(0.4)\n"
        "    with open(%r, 'ab') as out:\n"
        "        out.write(job.body + b'\\n')\n" % str(done_file))
    produce(server, "cli", 30, retry=60)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with open(tmp_path / "worker.log", "wb") as log:
        proc = subprocess.Popen(WORKER_CLI + ["slowjobs:handle", "--queue", "cli", "--cluster",
                                              "127.0.0.1:%d" % server.port, "--concurrency", "3",
                                              "--grace", "5"],
                                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: done_file.exists() and len(done_file.read_bytes().split()) >= 3,
                   message="a few jobs done")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = (tmp_path / "worker.log").read_text()
    done = done_file.read_bytes().split()
    assert len(done) == len(set(done)), "a job ran twice"
    cursor, left = server.client().execute_command("JSCAN", "0", "BUSYLOOP", "REPLY", "all")
    jobs = [dict(zip(flat[0::2], flat[1::2])) for flat in left]
    assert {job[b"state"] for job in jobs} <= {b"queued"}, "jobs left held: %s" % jobs
    assert sorted(done + [job[b"body"] for job in jobs]) == sorted(
        b"job-%d" % i for i in range(30)), output
    stopped = [line for line in output.splitlines() if "event=worker.stopped" in line]
    assert len(stopped) == 1 and "settled=True" in stopped[0], output
    # The jobs fetched ahead and never started went back with one NACK each.
    nacked_back = sum(1 for job in jobs if job[b"nacks"] > 0)
    assert "abandoned=%d" % nacked_back in stopped[0], output


def test_producer_add_takes_every_job_option(server):
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        job_id = client.add("orders", b'{"id": 1}', retry=10, ttl=600, maxlen=100, priority=8,
                            maxdeliver=3, deadletter="orders:failed", backoff=2, maxretry=60,
                            dedupid="order-1")
        assert client.add("orders", b"again", dedupid="order-1") == job_id
        info = client.show(job_id)
        plain = client.add("orders", b"plain", timeout_ms=1000, replicate=1, delay=5)
        assert client.show(plain)["delay"] == 5
        assert client.add_job("orders", b"old style", 0, retry=3).startswith("D-")
    assert info["retry"] == 10 and info["priority"] == 8 and info["maxdeliver"] == 3
    assert info["deadletter"] == b"orders:failed" and info["backoff"] == b"2.0"
    assert info["maxretry"] == 60 and info["dedupid"] == b"order-1"
