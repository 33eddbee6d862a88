"""What every worker does around its handlers: fetch, hold, settle, stop.

A worker has two connections (two ``DisqueClient``\\ s over the same seed
nodes): the fetcher's, on its own thread, blocked in ``GETJOB TIMEOUT
<poll> COUNT <free> WITHCOUNTERS FROM <queues>`` whenever the worker can
take more jobs, and the settler's (``settler.Settler``) for ACKJOB, NACK
and WORKING. Each ``DisqueClient`` picks its node by HELLO priority and
fails over on connection errors and ``-LEAVING``; the fetcher also asks
HELLO again every ``hello_interval`` seconds and moves to a better node.

The subclasses run the handlers: ``ThreadedWorker`` on threads,
``AsyncioWorker`` as tasks on an event loop. A handler that returns gets
its job acknowledged; one that raises gets it NACKed, with ``DELAY`` (base
``nack_delay``, doubled per earlier NACK, at most ``nack_delay_max``) and
``REASON "<exception type>: <message>"`` (the job's ``nack-reason`` in SHOW)
when the node supports them.

Jobs are fetched ``WITHHEADERS`` (``job.headers``), unless the node
refuses the option (a Disque 1.0 node), and each handler runs inside an
OpenTelemetry span when OpenTelemetry is installed: the child of the
producer's span whose context the job's ``traceparent`` header carries
(``disque.client.tracing``; ``trace=False`` turns the spans off).

Stopping (``stop()``, SIGTERM or SIGINT in ``run()``): no more fetching;
jobs fetched but not started are NACKed at once; running ones get
``grace`` seconds to finish, then are NACKed too; pending ACKs and NACKs
are sent; then ``run()`` returns.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from disque.client import (DEFAULT_SEED, AuthenticationError, ConnectionSecurity, DisqueClient,
                           DisqueError, Job, NodeAddress, ResponseError)
from disque.client import tracing
from disque.client.disqueclient import NACK_REASON_LIMIT
from disque.client.errors import CONNECTION_ERRORS, is_syntax_error
from disque.worker.backoff import Backoff, nack_delay
from disque.worker.events import configure_unless_set_up, emit
from disque.worker.settler import Settler
from disque.worker.stats import WorkerStats
from disque.worker.tasks import Handler, TaskRegistry, refuse_run_during_import

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
FETCH_ERRORS = (DisqueError, ResponseError, *CONNECTION_ERRORS)
_NO_SPAN = contextlib.nullcontext()


@dataclass(frozen=True)
class WorkerOptions:
    """A worker's settings (``disque-worker --help`` says the same)."""

    concurrency: int = 4  # handlers running at once
    prefetch: int | None = None  # jobs held beyond the running ones (None: concurrency)
    poll_ms: int = 500  # GETJOB TIMEOUT: also how soon a stop is noticed
    working_after: float = 0.25  # seconds a held job waits for its first WORKING
    nack_delay: float = 1.0  # NACK DELAY of a first failure, in seconds (0: plain NACK)
    nack_delay_max: float = 300.0
    grace: float = 10.0  # seconds running jobs get to finish when the worker stops
    settle_timeout: float = 5.0  # seconds pending ACKs/NACKs get when the worker stops
    hello_interval: float = 5.0  # seconds between HELLOs of the fetching connection
    socket_timeout: float = 10.0
    password: str | None = None
    username: str | None = None  # with password: AUTH as this ACL user
    # TLS and the ACL user (password and username above are its plain shorthand).
    security: ConnectionSecurity | None = None
    trace: bool = True  # a span per job when OpenTelemetry is installed (docs/worker.md)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.prefetch is not None and self.prefetch < 0:
            raise ValueError("prefetch must be 0 or more")
        if self.poll_ms < 1:
            raise ValueError("poll_ms must be at least 1")

    @property
    def capacity(self) -> int:
        """Jobs held at most: running plus prefetched."""
        return self.concurrency + (self.concurrency if self.prefetch is None else self.prefetch)


class Worker(abc.ABC):
    """The common part of ``ThreadedWorker`` and ``AsyncioWorker``: tasks, fetching,
    settling, stopping. Subclasses run the handlers (``_submit``) and ``run()``."""

    coroutines = False  # whether handlers are async def
    mode = "worker"

    def __init__(self, nodes: str | Sequence[str | NodeAddress | tuple[str, int]] = DEFAULT_SEED,
                 options: WorkerOptions | None = None, **settings: Any) -> None:
        """``nodes``: seed nodes (``"h:p,h:p"``); ``settings``: ``WorkerOptions`` fields."""
        if options is not None and settings:
            raise TypeError("give options or keyword settings, not both")
        self.options = options if options is not None else WorkerOptions(**settings)
        self.nodes = nodes
        self.tasks = TaskRegistry(self.coroutines)
        self.stats = WorkerStats()
        self._stopping = threading.Event()
        self._lock = threading.Condition()
        self._held: dict[str, Job] = {}  # fetched and not finished
        self._settler = Settler(self._client(), self.options.working_after, self.stats,
                                self.stop)
        self._fetch_thread: threading.Thread | None = None
        self._supports_delay = False
        self._withheaders = True  # until a node refuses GETJOB ... WITHHEADERS
        self._tracing = False  # a span per job: trace on and OpenTelemetry installed
        self.fetch_node: NodeAddress | None = None  # where jobs come from now

    # -- registration ------------------------------------------------------------

    def task(self, queue: str) -> Callable[[Handler], Handler]:
        """Decorator: the function handles the jobs of ``queue``."""
        def register(func: Handler) -> Handler:
            self.tasks.add(queue, func)
            return func
        return register

    def add_task(self, queue: str, func: Handler) -> None:
        """``task`` without the decorator."""
        self.tasks.add(queue, func)

    # -- control -----------------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to stop gracefully (thread-safe; returns at once)."""
        if not self._stopping.is_set():
            self._stopping.set()
            emit(logging.INFO, "worker.stopping", held=len(self._held))
            with self._lock:
                self._lock.notify_all()

    @property
    def stopping(self) -> bool:
        """Whether ``stop`` was called."""
        return self._stopping.is_set()

    def _client(self) -> DisqueClient:
        opts = self.options
        return DisqueClient(self.nodes, password=opts.password, username=opts.username,
                            security=opts.security, socket_timeout=opts.socket_timeout)

    def _begin(self) -> bool:
        """Connect (waiting for a node to answer), probe NACK DELAY, start the settler
        and the fetcher; False if the worker was stopped first. Refused while
        ``disque-worker`` imports its target's module (``tasks.StartedOnImport``)."""
        refuse_run_during_import()
        configure_unless_set_up()
        if not self.tasks.handlers:
            raise ValueError("no task registered: use @worker.task(queue)")
        self._tracing = self.options.trace and tracing.available()
        settle_client = self._settler.client
        backoff = Backoff(cap=5.0)
        while True:
            try:
                node = settle_client.connect()
                if self.options.nack_delay > 0:
                    self._supports_delay = settle_client.supports_nack_delay()
                break
            except AuthenticationError:
                raise  # every node would refuse us: not worth waiting for
            except FETCH_ERRORS as exc:  # no node up yet: wait for one, as after a failure
                wait = backoff.next()
                emit(logging.WARNING, "worker.connect_error",
                     error="%s: %s" % (type(exc).__name__, exc), retry_in=wait)
                if self._stopping.wait(wait):
                    return False
        emit(logging.INFO, "worker.started", mode=self.mode, queues=",".join(self.tasks.queues()),
             concurrency=self.options.concurrency, capacity=self.options.capacity, node=node,
             nack_delay=self._supports_delay)
        self._settler.start()
        self._fetch_thread = threading.Thread(target=self._fetch_loop, name="disque-worker-fetch",
                                              daemon=True)
        self._fetch_thread.start()
        return True

    def _finish_stop(self) -> None:
        """After the grace period: NACK what is still held, flush the settler, log."""
        with self._lock:
            left = list(self._held.values())
            self._held.clear()
        self._abandon(left)
        if self._fetch_thread is not None:
            self._fetch_thread.join(self.options.poll_ms / 1000 + self.options.socket_timeout)
        settled = self._settler.close(self.options.settle_timeout)
        stats = self.stats
        emit(logging.INFO, "worker.stopped", fetched=stats.fetched, succeeded=stats.succeeded,
             failed=stats.failed, abandoned=stats.abandoned, acked=stats.acked,
             nacked=stats.nacked, settled=settled)

    def _wait_idle(self, timeout: float) -> None:
        """Wait until no job is held, at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._held:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._lock.wait(left)

    def _install_signals(self) -> dict[int, Any]:
        """SIGTERM and SIGINT call ``stop`` (only from the main thread, as Python allows)."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {sig: signal.signal(sig, lambda signum, frame: self.stop()) for sig in STOP_SIGNALS}

    @staticmethod
    def _restore_signals(previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    # -- fetching ----------------------------------------------------------------

    def _fetch_loop(self) -> None:
        try:
            self._fetch()
        except BaseException as exc:  # the worker cannot go on without fetching: stop it
            emit(logging.CRITICAL, "worker.crashed", part="fetcher",
                 error="%s: %s" % (type(exc).__name__, exc))
            self.stop()
            raise

    def _fetch(self) -> None:
        opts = self.options
        client = self._client()
        queues = self.tasks.queues()
        backoff = Backoff()
        node: NodeAddress | None = None
        next_hello = time.monotonic() + opts.hello_interval
        try:
            while not self.stopping:
                free = self._free_slots()
                if not free:
                    continue
                try:
                    if time.monotonic() >= next_hello:
                        next_hello = time.monotonic() + opts.hello_interval
                        client.rebalance()
                    jobs = client.get_jobs(*queues, count=free, timeout_ms=opts.poll_ms,
                                           withcounters=True, withheaders=self._withheaders)
                except FETCH_ERRORS as exc:
                    if self._withheaders and is_syntax_error(exc):
                        self._withheaders = False  # a node without headers: fetch without
                        emit(logging.INFO, "worker.no_headers", node=client.node)
                        continue
                    wait = backoff.next()
                    emit(logging.WARNING, "worker.fetch_error",
                         error="%s: %s" % (type(exc).__name__, exc), node=client.node,
                         retry_in=wait)
                    self._stopping.wait(wait)
                    continue
                backoff.reset()
                if client.node != node:
                    node = self.fetch_node = client.node
                    emit(logging.INFO, "worker.node", node=node, node_id=client.node_id,
                         failovers=client.failovers)
                if jobs and node is not None:
                    self._hand_out(node, jobs)
        finally:
            client.close()

    def _free_slots(self) -> int:
        """Jobs the worker may fetch now; waits (up to a poll period) for one to finish."""
        capacity = self.options.capacity
        with self._lock:
            if len(self._held) >= capacity and not self.stopping:
                self._lock.wait(self.options.poll_ms / 1000)
            return 0 if self.stopping else max(0, capacity - len(self._held))

    def _hand_out(self, node: NodeAddress, jobs: list[Job]) -> None:
        """Hold the fetched jobs and give them to the handlers (or back, when stopping)."""
        self.stats.fetched += len(jobs)
        self._settler.held(node, [job.id for job in jobs])
        fresh: list[Job] = []
        with self._lock:
            if self.stopping:  # fetched while the stop came: nobody will run them
                late = jobs
            else:
                late = []
                for job in jobs:
                    if job.id in self._held:
                        # Delivered again (its retry ran out first) while it runs here:
                        # the run under way acknowledges it.
                        emit(logging.INFO, "job.redelivered", queue=job.queue, id=job.id,
                             nacks=job.nacks, additional_deliveries=job.additional_deliveries)
                    else:
                        self._held[job.id] = job
                        fresh.append(job)
        if late:
            self._abandon(late)
        elif fresh:
            self._submit([(job, self.tasks.handler(job.queue)) for job in fresh])

    def _span(self, job: Job) -> Any:
        """The context manager a handler runs in: the job's span when tracing."""
        if not self._tracing:
            return _NO_SPAN
        return tracing.process_span(job.queue, job.id, job.headers)

    # -- outcomes (from the threads or tasks that run handlers) -----------------

    def _finished(self, job: Job, started: float, error: BaseException | None) -> None:
        """A handler returned (``error`` None) or raised: ACK or NACK the job."""
        with self._lock:
            if self._held.pop(job.id, None) is None:
                return  # abandoned (and NACKed) when the worker stopped: too late
            if error is None:
                self.stats.succeeded += 1
            else:
                self.stats.failed += 1
            self._lock.notify_all()
        took_ms = (time.monotonic() - started) * 1000
        if error is None:
            self._settler.ack(job.id)
            emit(logging.DEBUG, "job.done", queue=job.queue, id=job.id, ms=round(took_ms, 3))
            return
        delay = nack_delay(job.nacks, self.options.nack_delay, self.options.nack_delay_max)
        described = "%s: %s" % (type(error).__name__, error)
        self._settler.nack(job.id, delay, failure_reason(described))
        emit(logging.WARNING, "job.failed", queue=job.queue, id=job.id, ms=round(took_ms, 3),
             nacks=job.nacks, nack_delay=delay if self._supports_delay else 0,
             error=described, where=_where(error))

    def _abandon(self, jobs: list[Job]) -> None:
        """NACK jobs the worker will not finish, without delay: another worker takes them."""
        with self._lock:
            self.stats.abandoned += len(jobs)
        for job in jobs:
            self._settler.nack(job.id, 0)
            emit(logging.WARNING, "job.abandoned", queue=job.queue, id=job.id)

    def _take_back(self, jobs: list[Job]) -> None:
        """Jobs fetched but never started, at stop: no longer held, NACKed."""
        with self._lock:
            mine = [job for job in jobs if self._held.pop(job.id, None) is not None]
            self._lock.notify_all()
        self._abandon(mine)

    # -- for the subclasses --------------------------------------------------------

    @abc.abstractmethod
    def run(self) -> None:
        """Process jobs until ``stop()`` (or SIGTERM / SIGINT), then stop gracefully."""

    @abc.abstractmethod
    def _submit(self, work: list[tuple[Job, Handler]]) -> None:
        """Run these handlers on their jobs (called from the fetcher's thread)."""


def failure_reason(described: str) -> bytes:
    """A failed handler's ``NACK ... REASON``: its exception described, as UTF-8 cut
    to what a node keeps (whole characters only, so it reads back as text)."""
    raw = described.encode("utf-8", "backslashreplace")
    if len(raw) <= NACK_REASON_LIMIT:
        return raw
    return raw[:NACK_REASON_LIMIT].decode("utf-8", "ignore").encode("utf-8")


def _where(error: BaseException) -> str:
    """``file:line`` of the frame that raised, for a one-line log entry."""
    tb = error.__traceback__
    if tb is None:
        return "?"
    while tb.tb_next is not None:
        tb = tb.tb_next
    return "%s:%d" % (tb.tb_frame.f_code.co_filename.rsplit("/", 1)[-1], tb.tb_lineno)
