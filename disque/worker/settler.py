"""The worker's second connection: ACKJOB, NACK and WORKING for the jobs it holds.

The fetching connection spends its time blocked in GETJOB, so outcomes go
through this one, on its own thread, in bulk: every ACK gathered since the
last round trip in one ACKJOB, NACKs grouped by delay and reason, WORKINGs as they
fall due (``leases.LeaseBook``). Each command goes to the node that
delivered the job: only a node that holds a job can requeue it or postpone
its requeue. When that node is gone the client fails over, and a node
holding a copy serves the command (or the job is requeued by its retry
timer: at-least-once either way).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from disque.client import DisqueClient, DisqueError, NodeAddress, ResponseError
from disque.client.errors import CONNECTION_ERRORS
from disque.worker.backoff import Backoff
from disque.worker.events import emit
from disque.worker.leases import LeaseBook
from disque.worker.stats import WorkerStats

NOJOB_PREFIX = "NOJOB"
TOOLATE_PREFIX = "TOOLATE"
# Longest wait for news when no WORKING is due, so a stop deadline is checked.
_IDLE_WAIT = 0.5
SETTLE_ERRORS = (DisqueError, ResponseError, *CONNECTION_ERRORS)


@dataclass
class _NodeWork:
    """What is to be sent to one node."""

    acks: list[str] = field(default_factory=list)
    # (delay in seconds, reason or None) -> job IDs: one NACK command each.
    nacks: dict[tuple[int, bytes | None], list[str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.acks or self.nacks)


class Settler:
    """ACKs, NACKs and WORKINGs on a thread of their own, fed through ``inbox``."""

    def __init__(self, client: DisqueClient, working_after: float, stats: WorkerStats,
                 on_crash: Callable[[], None]) -> None:
        self.client = client
        self.on_crash = on_crash  # a worker that cannot settle must stop fetching
        self.leases = LeaseBook(working_after)
        self.stats = stats  # acked and nacked are counted here, as the replies come
        self._origin: dict[str, NodeAddress] = {}
        self._work: dict[NodeAddress, _NodeWork] = {}
        self._inbox: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self._backoff = Backoff()
        self._retry_at = 0.0
        self._stop_by: float | None = None
        self._thread = threading.Thread(target=self._run_guarded, name="disque-worker-settle",
                                        daemon=True)

    # -- called from other threads ------------------------------------------

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def held(self, node: NodeAddress, ids: list[str]) -> None:
        """``node`` delivered these jobs just now."""
        self._inbox.put(("held", node, ids, time.monotonic()))

    def ack(self, job_id: str) -> None:
        """The job was processed: ACKJOB it."""
        self._inbox.put(("ack", job_id))

    def nack(self, job_id: str, delay: int, reason: bytes | None = None) -> None:
        """Put the job back in its queue, ``delay`` seconds from now (0: at once), saying
        why it failed (``reason``); a node without ``NACK ... DELAY`` or ``REASON`` gets
        a plain NACK (``DisqueClient.nack``)."""
        self._inbox.put(("nack", job_id, delay, reason))

    def close(self, timeout: float) -> bool:
        """Send what is pending (for at most ``timeout`` seconds), then stop; whether
        everything was sent. A settler never started had nothing to send."""
        if self._thread.ident is None:
            self.client.close()
            return True
        self._inbox.put(("stop", time.monotonic() + timeout))
        self._thread.join(timeout + 5)
        return not self._pending()

    # -- the thread -----------------------------------------------------------

    def _run_guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # unsettled jobs go back to their queues by their retry
            emit(logging.CRITICAL, "worker.crashed", part="settler",
                 error="%s: %s" % (type(exc).__name__, exc))
            self.on_crash()
            raise

    def _run(self) -> None:
        while True:
            try:
                item = self._inbox.get(timeout=self._wait())
            except queue.Empty:
                pass
            else:
                self._take(item)
                while True:
                    try:
                        self._take(self._inbox.get_nowait())
                    except queue.Empty:
                        break
            now = time.monotonic()
            if now >= self._retry_at:
                self._send(now)
            if self._stop_by is not None and (not self._pending() or now >= self._stop_by):
                break
        if self._pending():
            emit(logging.ERROR, "worker.unsettled", acks=sum(len(w.acks) for w in
                                                             self._work.values()),
                 nacks=sum(len(ids) for w in self._work.values() for ids in w.nacks.values()),
                 note="left to their retry timers")
        self.client.close()

    def _wait(self) -> float:
        now = time.monotonic()
        if self._pending():
            return max(0.0, self._retry_at - now)
        due = self.leases.next_due()
        wait = _IDLE_WAIT if due is None else min(_IDLE_WAIT, max(0.0, due - now))
        return max(wait, self._retry_at - now)

    def _pending(self) -> bool:
        return any(self._work.values())

    def _take(self, item: tuple) -> None:
        kind = item[0]
        if kind == "ack" or kind == "nack":
            job_id = item[1]
            self.leases.release(job_id)
            work = self._work.setdefault(self._node_of(job_id), _NodeWork())
            self._origin.pop(job_id, None)
            if kind == "ack":
                work.acks.append(job_id)
            else:
                work.nacks.setdefault((item[2], item[3]), []).append(job_id)
        elif kind == "held":
            _, node, ids, at = item
            for job_id in ids:
                self._origin[job_id] = node
                self.leases.hold(job_id, at)
        else:  # stop
            self._stop_by = item[1]

    def _node_of(self, job_id: str) -> NodeAddress:
        """The node that delivered the job (or, not knowing it, the current one)."""
        return self._origin.get(job_id) or self.client.node or self.client.seeds[0]

    def _send(self, now: float) -> None:
        try:
            for node, work in list(self._work.items()):
                if work:
                    self.client.use_node(node)
                    self._send_outcomes(work)
                del self._work[node]
            self._send_working(now)
        except SETTLE_ERRORS as exc:
            wait = self._backoff.next()
            self._retry_at = time.monotonic() + wait
            emit(logging.WARNING, "worker.settle_error", error=_describe(exc), retry_in=wait)
        else:
            self._backoff.reset()

    def _send_outcomes(self, work: _NodeWork) -> None:
        if work.acks:
            self.client.ack_jobs(work.acks)
            emit(logging.DEBUG, "jobs.acked", count=len(work.acks), node=self.client.node)
            self.stats.acked += len(work.acks)
            work.acks.clear()
        for (delay, reason), ids in list(work.nacks.items()):
            self.client.nack(ids, delay=delay, reason=reason)
            emit(logging.DEBUG, "jobs.nacked", count=len(ids), delay=delay,
                 node=self.client.node)
            self.stats.nacked += len(ids)
            del work.nacks[(delay, reason)]

    def _send_working(self, now: float) -> None:
        due = self.leases.due(now)
        by_node: dict[NodeAddress, list[str]] = {}
        for job_id in due:
            by_node.setdefault(self._node_of(job_id), []).append(job_id)
        for node, ids in by_node.items():
            self.client.use_node(node)
            replies = self.client.working_many(ids)
            answered = time.monotonic()
            for job_id, reply in replies.items():
                if isinstance(reply, int):
                    self.leases.renewed(job_id, reply, answered)
                    emit(logging.DEBUG, "job.working", id=job_id, retry=reply,
                         node=self.client.node)
                    continue
                # The job's requeue can no longer be postponed from here.
                self.leases.release(job_id)
                text = str(reply)
                event = ("job.lease_limit" if text.startswith(TOOLATE_PREFIX) else
                         "job.lease_lost" if text.startswith(NOJOB_PREFIX) else
                         "job.working_error")
                emit(logging.WARNING, event, id=job_id, node=self.client.node, error=text)


def _describe(exc: BaseException) -> str:
    return "%s: %s" % (type(exc).__name__, exc)
