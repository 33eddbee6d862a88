"""The client and the worker against the original Disque 1.0-rc1 server
(../shared/reference, beside the repository), which has no job headers:
inside an OpenTelemetry span the producer's jobs are still added (without
the trace context), and the worker fetches without WITHHEADERS."""

from __future__ import annotations

import subprocess
import threading

import pytest
import redis

from disque.client import DisqueClient
from disque.worker import ThreadedWorker
from tests.support.process import REPO, free_port, wait_until
from tests.support.worker import running

REFERENCE = REPO.parent / "shared" / "reference" / "disque-server-1.0-rc1"


@pytest.fixture
def disque10(tmp_path):
    """A Disque 1.0-rc1 node on a free port: its address."""
    if not REFERENCE.exists():
        pytest.skip("the Disque 1.0 reference server is not beside the repository (%s)"
                    % REFERENCE)
    port = free_port()
    proc = subprocess.Popen([str(REFERENCE), "--port", str(port), "--bind", "127.0.0.1"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = redis.Redis(port=port, protocol=2, socket_timeout=5)
    try:
        def answers() -> bool:
            try:
                return bool(probe.ping())
            except redis.ConnectionError:
                return False
        wait_until(answers, message="Disque 1.0 to answer PING")
        yield "127.0.0.1:%d" % port
    finally:
        probe.close()
        proc.terminate()
        proc.wait(10)


def test_a_traced_producer_and_a_worker_on_disque_10(disque10):
    trace = pytest.importorskip("opentelemetry.trace", reason="needs OpenTelemetry (dev extra)")
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="needs the SDK (dev extra)")
    tracer = sdk_trace.TracerProvider().get_tracer("test")  # a recording span, whatever is global
    with DisqueClient(disque10, use_hello=False) as client:
        with trace.use_span(tracer.start_span("produce"), end_on_exit=True):
            first = client.add("q", b"one", retry=30)  # refused with the context, then added
            rest = client.add_jobs([("q", b"two"), ("q", b"three")], retry=30)
            after = client.add("q", b"four", retry=30)  # the node is known: sent plain at once
        assert all(job_id.startswith("D-") for job_id in [first, *rest, after])
        assert client.qlen("q") == 4
    seen = []
    lock = threading.Lock()
    worker = ThreadedWorker(disque10, concurrency=2)

    @worker.task("q")
    def handle(job):
        with lock:
            seen.append((job.body, job.headers))

    with running(worker):
        wait_until(lambda: len(seen) == 4, message="4 jobs processed")
    assert sorted(seen) == [(b"four", None), (b"one", None), (b"three", None), (b"two", None)]
    assert not worker._withheaders
