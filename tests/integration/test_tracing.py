"""Trace context from producer to worker through a real server (docs/worker.md
"Tracing"): spans recorded by the OpenTelemetry SDK's in-memory exporter.
The producer's span is the parent of the worker's span for its job; outside
a span, or without OpenTelemetry, jobs carry no header."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading

import hiredis
import pytest

from disque.client import DisqueClient
from disque.worker import AsyncioWorker, ThreadedWorker
from tests.support.process import REPO, wait_until
from tests.support.worker import running

trace = pytest.importorskip("opentelemetry.trace", reason="needs OpenTelemetry (the dev extra)")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace",
                                reason="needs the OpenTelemetry SDK (the dev extra)")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter)
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans():
    """The process's tracer provider records into an in-memory exporter (a
    provider is set once per process), emptied for each test."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, sdk_trace.TracerProvider):
        provider = sdk_trace.TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _worker_spans(exporter, count: int) -> list:
    wait_until(lambda: len([s for s in exporter.get_finished_spans()
                            if s.kind == SpanKind.CONSUMER]) >= count,
               message="%d worker spans" % count)
    return [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CONSUMER]


def _produce_in_span(port: int, add) -> tuple:
    tracer = trace.get_tracer("test.producer")
    with DisqueClient("127.0.0.1:%d" % port) as client:
        with tracer.start_as_current_span("produce") as producer:
            ids = add(client)
    return producer.get_span_context(), ids


@pytest.mark.parametrize("kind", ["threaded", "asyncio"])
def test_the_producer_span_is_the_parent_of_the_worker_span(server, spans, kind):
    producer, ids = _produce_in_span(server.port, lambda c: [c.add("work", b"job", retry=30)])
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        carried = client.show(ids[0])["headers"]
    assert carried["traceparent"] == b"00-%032x-%016x-%02x" % (
        producer.trace_id, producer.span_id, producer.trace_flags)
    seen = []
    if kind == "threaded":
        worker = ThreadedWorker("127.0.0.1:%d" % server.port, concurrency=2)

        @worker.task("work")
        def handle(job):
            seen.append((job.headers, trace.get_current_span().get_span_context()))
    else:
        worker = AsyncioWorker("127.0.0.1:%d" % server.port, concurrency=2)

        @worker.task("work")
        async def handle(job):
            seen.append((job.headers, trace.get_current_span().get_span_context()))

    with running(worker):
        (span,) = _worker_spans(spans, 1)
    assert span.parent is not None and span.parent.span_id == producer.span_id
    assert span.context.trace_id == producer.trace_id
    assert span.name == "process work"
    assert span.attributes["messaging.system"] == "disque"
    assert span.attributes["messaging.destination.name"] == "work"
    assert span.attributes["messaging.message.id"] == ids[0]
    assert span.status.status_code != StatusCode.ERROR
    ((headers, current),) = seen
    assert headers["traceparent"] == carried["traceparent"]
    assert current.span_id == span.context.span_id  # the handler runs inside the span


def test_add_many_carries_the_context_to_every_job(server, spans):
    producer, ids = _produce_in_span(
        server.port, lambda c: c.add_many("work", [b"a", b"b", b"c"], headers={"k": "v"}))
    worker = ThreadedWorker("127.0.0.1:%d" % server.port, concurrency=3)
    worker.add_task("work", lambda job: None)
    with running(worker):
        worker_spans = _worker_spans(spans, 3)
    assert sorted(s.attributes["messaging.message.id"] for s in worker_spans) == sorted(ids)
    assert {s.parent.span_id for s in worker_spans} == {producer.span_id}
    assert {s.context.trace_id for s in worker_spans} == {producer.trace_id}


def test_a_failing_handler_marks_its_span(server, spans):
    _produce_in_span(server.port, lambda c: [c.add("work", b"job", retry=30)])
    failed = threading.Event()
    worker = ThreadedWorker("127.0.0.1:%d" % server.port, concurrency=1, nack_delay=60)

    @worker.task("work")
    def handle(job):
        failed.set()
        raise RuntimeError("boom")

    with running(worker):
        (span,) = _worker_spans(spans, 1)
    assert span.status.status_code == StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]


class HeaderRefusingProxy:
    """A node as Disque 1.0 answers the client: every request goes through to
    a real node, except that one with a HEADER word gets 1.0's reply to an
    unknown ADDJOB option, ``-ERR syntax error`` (the node itself is asked
    ``PAUSE q bogus`` in its place, which answers those bytes, so the
    replies stay in order). ``refused`` counts those requests."""

    def __init__(self, port: int) -> None:
        self.port_to = port
        self.refused = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.port_to))
                self.sockets += [client, upstream]
                threading.Thread(target=self._requests, args=(client, upstream),
                                 daemon=True).start()
                threading.Thread(target=self._replies, args=(upstream, client),
                                 daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        reader = hiredis.Reader()
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                reader.feed(data)
                out = []
                while (argv := reader.gets()) is not False:
                    if any(arg.upper() == b"HEADER" for arg in argv[1:]):
                        self.refused += 1
                        argv = [b"PAUSE", b"q", b"bogus"]
                    out.append(b"*%d\r\n" % len(argv) + b"".join(
                        b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in argv))
                upstream.sendall(b"".join(out))

    @staticmethod
    def _replies(upstream: socket.socket, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                client.sendall(data)

    def close(self) -> None:
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def test_a_node_that_refuses_header_gets_the_jobs_without_the_context(server, spans):
    proxy = HeaderRefusingProxy(server.port)
    tracer = trace.get_tracer("test.producer")
    try:
        with DisqueClient("127.0.0.1:%d" % proxy.port) as client:
            with tracer.start_as_current_span("produce"):
                first = client.add("q", b"a")
                assert proxy.refused == 1  # refused with the context, added without
                second = client.add("q", b"b")
                assert proxy.refused == 1  # that node is not asked again
        with DisqueClient("127.0.0.1:%d" % proxy.port) as client:
            with tracer.start_as_current_span("produce"):
                batch = client.add_jobs([("q", b"c"), ("q", b"d")])
        assert proxy.refused == 3  # both pipelined ADDJOBs refused, sent again without
    finally:
        proxy.close()
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        assert client.qlen("q") == 4
        for job_id in (first, second, *batch):
            assert "headers" not in client.show(job_id)


def test_outside_a_span_no_header_is_added(server, spans):
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        job_id = client.add("q", b"plain")
        assert len(client.execute("SHOW", job_id)) == 30  # a Disque 1.0 job
        off = DisqueClient("127.0.0.1:%d" % server.port, propagate_trace=False)
        with trace.get_tracer("test").start_as_current_span("produce"):
            untraced = off.add("q", b"untraced")
            mine = client.add("q", b"own", headers={"traceparent": "00-mine"})
        off.close()
        assert len(client.execute("SHOW", untraced)) == 30
        assert client.show(mine)["headers"] == {"traceparent": b"00-mine"}


WITHOUT_OPENTELEMETRY = r"""
import json, sys
sys.modules["opentelemetry"] = None  # as if not installed: importing it fails
from disque.client import DisqueClient, tracing
from disque.worker import ThreadedWorker
from tests.support.worker import running
from tests.support.process import wait_until

client = DisqueClient("127.0.0.1:%d" % int(sys.argv[1]))
job_id = client.add("q", b"job")
shown = client.execute("SHOW", job_id)
worker = ThreadedWorker("127.0.0.1:%d" % int(sys.argv[1]), concurrency=1)
done = []
worker.add_task("q", lambda job: done.append(job.headers))
with running(worker):
    wait_until(lambda: done, message="the job processed")
print(json.dumps({"show": len(shown), "available": tracing.available(), "headers": done[0],
                  "imported": [m for m, v in sys.modules.items()
                               if m.startswith("opentelemetry") and v is not None]}))
"""


def test_without_opentelemetry_nothing_changes(server):
    done = subprocess.run([sys.executable, "-c", WITHOUT_OPENTELEMETRY, str(server.port)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"show": 30, "available": False, "headers": {}, "imported": []}
