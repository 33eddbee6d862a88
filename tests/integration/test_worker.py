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
from redis.exceptions import AuthenticationError

from disque.client import DisqueClient
from disque.worker import AsyncioWorker, ThreadedWorker
from tests.support.process import REPO, wait_until
from tests.support.worker import running

WORKER_CLI = [sys.executable, "-m", "disque.worker.cli"]


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


async def test_asyncio_worker_serves_in_a_running_loop(server):
    """``await worker.serve()`` in the caller's loop: handlers run on that loop."""
    produce(server, "work", 20)
    loop = asyncio.get_running_loop()
    seen: list[bytes] = []
    worker = AsyncioWorker("127.0.0.1:%d" % server.port, concurrency=4)

    @worker.task("work")
    async def handle(job):
        assert asyncio.get_running_loop() is loop
        seen.append(job.body)

    serving = asyncio.create_task(worker.serve())
    try:
        for _ in range(500):  # a bounded poll: up to 10 s
            if len(seen) == 20 or serving.done():
                break
            await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await asyncio.wait_for(serving, 30)
    assert sorted(seen) == sorted(b"job-%d" % i for i in range(20))
    assert worker.stats.acked == 20


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


def test_a_failed_handlers_exception_reaches_show(server):
    """The NACK says why: ``<exception type>: <message>``, SHOW's ``nack-reason``."""
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        job_id = client.add("work", b"order-42", retry=60)
    worker = ThreadedWorker("127.0.0.1:%d" % server.port, concurrency=1, nack_delay=30)

    @worker.task("work")
    def handle(job):
        raise KeyError("customer %s" % job.body.decode())

    def reason():
        return (server.client().execute_command("SHOW", job_id) or [None])[-1]

    with running(worker):
        wait_until(lambda: reason() == b"KeyError: 'customer order-42'",
                   message="the failure's reason in SHOW")
    assert worker.stats.failed == 1


@pytest.mark.parametrize("working_after, kept", [(0.25, True), (30.0, False)])
def test_long_job_is_kept_with_working(server, caplog, working_after, kept):
    """A 2.5 s job with RETRY 1: the worker's WORKINGs keep it from being delivered
    again; with the first WORKING due only after 30 s (the control), the server
    delivers it again meanwhile (and the worker does not run it twice)."""
    caplog.set_level(logging.DEBUG, logger="disque.worker")
    calls: list[tuple[int | None, int | None]] = []
    worker = ThreadedWorker("127.0.0.1:%d" % server.port, concurrency=2,
                            working_after=working_after, grace=5)

    @worker.task("slow")
    def handle(job):
        calls.append((job.nacks, job.additional_deliveries))
        time.sleep(2.5)

    with running(worker):
        # The worker waits in GETJOB first, so the job's retry period starts as it is fetched.
        wait_until(lambda: server.client().info("clients")["blocked_clients"] == 1,
                   message="the worker blocked in GETJOB")
        job_id = server.call("ADDJOB", "slow", "long", 0, "RETRY", 1).decode()
        wait_until(lambda: registered_jobs(server) == 0, message="the job acknowledged")
    events = [r.msg for r in caplog.records if getattr(r.msg, "fields", {}).get("id") == job_id]
    workings = [e for e in events if e.name == "job.working"]
    redelivered = [e.fields for e in events if e.name == "job.redelivered"]
    assert calls == [(0, 0)]
    if kept:
        assert len(workings) >= 3, "WORKING every third of the 1 s retry over 2.5 s"
        assert redelivered == [] and worker.stats.fetched == 1
    else:
        assert workings == []
        assert redelivered[0]["additional_deliveries"] >= 1  # requeued by its retry timer


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


THREADED_HANDLER = """
import time
def handle(job):
    time.sleep(float(job.body.split(b"-")[2]))
    with open(%r, "ab") as out:
        out.write(job.body + b"\\n")
"""
ASYNC_HANDLER = """
import asyncio
async def handle(job):
    await asyncio.sleep(float(job.body.split(b"-")[2]))
    with open(%r, "ab") as out:
        out.write(job.body + b"\\n")
"""


def start_cli(server, tmp_path: Path, handler: str, *options: str) -> subprocess.Popen:
    """``disque-worker`` on the ``cli`` queue with ``handler`` (its source; it appends
    each job's body to done.txt after sleeping the seconds the body names)."""
    (tmp_path / "jobcode.py").write_text(handler % str(tmp_path / "done.txt"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with open(tmp_path / "worker.log", "wb") as log:
        return subprocess.Popen(WORKER_CLI + ["jobcode:handle", "--queue", "cli", "--cluster",
                                              "127.0.0.1:%d" % server.port, *options],
                                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)


@contextlib.contextmanager
def killed_on_error(proc: subprocess.Popen):
    """Kill the worker process if the block fails (the test stops it itself otherwise)."""
    try:
        yield
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def stop_cli(proc: subprocess.Popen, timeout: float) -> int:
    """SIGTERM, and the exit status within ``timeout`` seconds (killed otherwise)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def done_bodies(tmp_path: Path) -> list[bytes]:
    path = tmp_path / "done.txt"
    return path.read_bytes().split() if path.exists() else []


def jobs_left(server) -> list[dict]:
    """Every job the node still has, as SHOW-like dicts with bytes keys."""
    cursor, left = server.client().execute_command("JSCAN", "0", "BUSYLOOP", "REPLY", "all")
    return [dict(zip(flat[0::2], flat[1::2])) for flat in left]


def stopped_line(tmp_path: Path) -> str:
    output = (tmp_path / "worker.log").read_text()
    lines = [line for line in output.splitlines() if "event=worker.stopped" in line]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize("handler", [THREADED_HANDLER, ASYNC_HANDLER], ids=["threaded", "asyncio"])
def test_sigterm_stops_the_cli_gracefully(server, tmp_path, handler):
    """SIGTERM: running jobs finish and are acknowledged, fetched ones not started are
    NACKed back to the queue, the process exits 0; no job is left held (active)."""
    produce_bodies = [b"job-%d-0.3" % i for i in range(30)]
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        client.add_jobs([("cli", body) for body in produce_bodies], retry=60)
    proc = start_cli(server, tmp_path, handler, "--concurrency", "3", "--grace", "5")
    with killed_on_error(proc):
        wait_until(lambda: len(done_bodies(tmp_path)) >= 3, message="a few jobs done")
    assert stop_cli(proc, 15) == 0
    done = done_bodies(tmp_path)
    assert len(done) == len(set(done)), "a job ran twice"
    jobs = jobs_left(server)
    assert {job[b"state"] for job in jobs} <= {b"queued"}, "jobs left held: %s" % jobs
    assert sorted(done + [job[b"body"] for job in jobs]) == sorted(produce_bodies)
    stopped = stopped_line(tmp_path)
    assert "settled=True" in stopped, stopped
    # The jobs fetched ahead and never started went back with one NACK each.
    nacked_back = sum(1 for job in jobs if job[b"nacks"] > 0)
    assert "abandoned=%d" % nacked_back in stopped, stopped


@pytest.mark.parametrize("handler", [THREADED_HANDLER, ASYNC_HANDLER], ids=["threaded", "asyncio"])
def test_sigterm_nacks_jobs_that_outlast_the_grace(server, tmp_path, handler):
    """A job still running when the grace period ends is NACKed back to its queue
    and the process exits anyway (an asyncio task is cancelled, a thread left behind)."""
    server.call("ADDJOB", "cli", "job-1-60", 0, "RETRY", 120)
    proc = start_cli(server, tmp_path, handler, "--grace", "0.5")
    with killed_on_error(proc):
        wait_until(lambda: server.client().info("clients")["blocked_clients"] == 1 and
                   jobs_left(server)[0][b"state"] == b"active", message="the job running")
    assert stop_cli(proc, 15) == 0  # not the handler's 60 s
    [job] = jobs_left(server)
    assert (job[b"state"], job[b"nacks"]) == (b"queued", 1)
    assert done_bodies(tmp_path) == []
    assert "abandoned=1" in stopped_line(tmp_path)


@pytest.mark.parametrize("password", [None, "wrong"])
def test_worker_refused_by_the_server_stops_at_once(server, password):
    """Without the password (or with a wrong one) the worker does not wait for a node
    that would accept it: run() raises."""
    assert server.call("CONFIG", "SET", "requirepass", "s3cret") == b"OK"
    worker = ThreadedWorker("127.0.0.1:%d" % server.port, password=password)
    worker.task("work")(lambda job: None)
    with pytest.raises(AuthenticationError):
        worker.run()
    right = ThreadedWorker("127.0.0.1:%d" % server.port, password="s3cret")
    done: list[bytes] = []
    right.task("work")(lambda job: done.append(job.body))
    with running(right):
        with DisqueClient("127.0.0.1:%d" % server.port, password="s3cret") as client:
            client.add("work", b"authorized")
        wait_until(lambda: done == [b"authorized"], message="the job with the password")


def test_worker_as_an_acl_user_limited_to_its_queues(server):
    """A worker logged in as a user limited to ``@consume ~orders:*`` (and
    the connection commands it needs) fetches, acknowledges and NACKs with
    DELAY there, and takes nothing from another queue."""
    assert server.call("ACL", "SETUSER", "worker", "on", ">w-pw", "~orders:*", "+@consume",
                       "+@connection") == b"OK"
    worker = ThreadedWorker("127.0.0.1:%d" % server.port, username="worker", password="w-pw")
    done: list[bytes] = []
    failed_once: list[bytes] = []

    @worker.task("orders:eu")
    def handle(job):
        if job.body == b"flaky" and not failed_once:
            failed_once.append(job.body)
            raise RuntimeError("first attempt fails")
        done.append(job.body)

    with DisqueClient("127.0.0.1:%d" % server.port) as producer:
        producer.add("orders:eu", b"o1")
        producer.add("orders:eu", b"flaky")
        producer.add("payments", b"p1")
    with running(worker):
        wait_until(lambda: sorted(done) == [b"flaky", b"o1"], timeout=15,
                   message="both orders processed, the flaky one after its NACK DELAY")
        wait_until(lambda: server.call("QLEN", "orders:eu") == 0
                   and registered_jobs(server) == 1, message="orders acknowledged")
    assert server.call("QLEN", "payments") == 1 and worker.stats.failed == 1


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
