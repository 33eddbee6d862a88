"""W3C trace context carried in job headers, when OpenTelemetry is installed.

A producer's ``DisqueClient.add`` (and ``add_jobs``, ``add_many``) puts the
current span's context in the job's ``traceparent`` header (and
``tracestate`` when the span has one), as the W3C Trace Context
specification writes them; the worker library starts its span for the job
as a child of that context (``process_span``). So a trace that starts in
the producer goes on in the worker that processes its job.

OpenTelemetry is an optional dependency (the ``tracing`` extra). It is
imported at the first use of these functions, not with the client; without
it they do nothing and nothing is imported. Only the API is used: spans are
recorded and exported by whatever SDK the application configures (none:
OpenTelemetry's no-op spans).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
TRACER_NAME = "disque.worker"
MESSAGING_SYSTEM = "disque"

_UNLOADED = object()
_api: Any = _UNLOADED  # the loaded modules (a _TraceApi), or None without OpenTelemetry


class _TraceApi:
    """The parts of OpenTelemetry's API used here, imported together once."""

    def __init__(self) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.trace = trace
        self.consumer = SpanKind.CONSUMER
        self.propagator = TraceContextTextMapPropagator()
        self._tracer: Any = None

    def tracer(self) -> Any:
        # A tracer from the global provider: a proxy that follows a provider
        # the application sets later.
        if self._tracer is None:
            self._tracer = self.trace.get_tracer(TRACER_NAME)
        return self._tracer


def _loaded() -> _TraceApi | None:
    global _api
    if _api is _UNLOADED:
        try:
            _api = _TraceApi()
        except ImportError:
            _api = None
    return _api


def available() -> bool:
    """Whether OpenTelemetry's API can be imported (imports it if so)."""
    return _loaded() is not None


def context_headers() -> dict[str, str]:
    """The headers that carry the current span's context: ``traceparent``
    (and ``tracestate``), or none without OpenTelemetry or outside a span."""
    api = _loaded()
    if api is None:
        return {}
    carrier: dict[str, str] = {}
    api.propagator.inject(carrier)
    return carrier


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


@contextlib.contextmanager
def process_span(queue: str, job_id: str,
                 headers: Mapping[str, str | bytes] | None) -> Iterator[Any]:
    """A consumer span around the processing of one job, the child of the
    context its headers carry (a new trace without one); it records an
    exception that leaves it. Without OpenTelemetry, nothing."""
    api = _loaded()
    if api is None:
        yield None
        return
    parent = None
    if headers and TRACEPARENT in headers:
        carrier = {TRACEPARENT: _text(headers[TRACEPARENT])}
        if TRACESTATE in headers:
            carrier[TRACESTATE] = _text(headers[TRACESTATE])
        parent = api.propagator.extract(carrier)
    attributes = {"messaging.system": MESSAGING_SYSTEM,
                  "messaging.operation.type": "process",
                  "messaging.operation.name": "process",
                  "messaging.destination.name": queue,
                  "messaging.message.id": job_id}
    with api.tracer().start_as_current_span("process " + queue, context=parent,
                                            kind=api.consumer, attributes=attributes) as span:
        yield span
