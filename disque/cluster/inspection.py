"""Looking inside queues and jobs held by other nodes, for the dashboard:
the requests a node sends for its own page (QUEUEPEEK, JOBPEEK, REDRIVE)
and answers for its peers' pages, each answered by one ANSWER carrying the
request's number (docs/cluster.md "The dashboard's messages").

A job is described as SHOW describes it (``replies.job_info``), with its
body cut to a preview and its full size added, so that every field SHOW
shows reaches the page the same way. Answers are bounded: at most MAX_PEEK
jobs, bodies cut to LIST_PREVIEW bytes in a queue's list and BODY_PREVIEW
for one job. Who may see them is the asking node's decision (its users'
rights); the core only sends and receives: the dashboard waits for the
answers, with a timeout, through the ``AnswerListener`` it sets.
"""

from __future__ import annotations

from typing import Final, Protocol

from disque.cluster import messages as m
from disque.cluster.lifecycle import JobLifecycle
from disque.cluster.outbox import Outbox
from disque.cluster.transport import Link
from disque.context.log import logger
from disque.context.runtime import Runtime
from disque.jobs.job import Job
from disque.jobs.registry import JobRegistry
from disque.jobs.replies import job_info
from disque.queues.queueset import QueueSet

MAX_PEEK: Final = 20  # jobs of one queue in an answer
BODY_PREVIEW: Final = 4096  # bytes of one job's body
LIST_PREVIEW: Final = 256  # bytes of each body in a queue's list
BODY_SIZE: Final = b"body-size"
_BODY_VALUE: Final = 29  # where SHOW's array holds the body (its 15th pair's value)
_LOGGED_NAME: Final = 200  # bytes of a queue or user name the log shows


class AnswerListener(Protocol):
    """Who waits for the answers (the dashboard)."""

    def answered(self, node_id: bytes, request: int, value: object) -> None:
        """``node_id`` answered request ``request`` with ``value`` (unchecked)."""


class NoListener:
    """No one waits: answers are dropped (no dashboard, unit tests)."""

    def answered(self, node_id: bytes, request: int, value: object) -> None:
        """Drop the answer."""


def job_record(job: Job, now_ms: int, preview: int) -> list[object]:
    """SHOW's array of ``job``, its body cut to ``preview`` bytes, followed
    by ``body-size`` and the body's full size."""
    info = job_info(job, now_ms)
    body = job.body
    if body is not None and len(body) > preview:
        info[_BODY_VALUE] = body[:preview]
    info += [BODY_SIZE, 0 if body is None else len(body)]
    return info


class Inspection:
    """The dashboard's requests to other nodes and this node's answers."""

    def __init__(self, runtime: Runtime, registry: JobRegistry, queues: QueueSet,
                 lifecycle: JobLifecycle, outbox: Outbox) -> None:
        self.runtime = runtime
        self.registry = registry
        self.queues = queues
        self.lifecycle = lifecycle
        self.outbox = outbox
        self.listener: AnswerListener = NoListener()
        self.requests = 0  # the last request's number

    # ------------------------------------------------------------ asking

    def _ask(self, node_id: bytes, msg: dict) -> int:
        """Send a request to ``node_id``: its number, or 0 without a link."""
        if not self.outbox.has_link(node_id):
            return 0
        self.requests += 1
        msg[m.REQ] = self.requests
        self.outbox.send_to(node_id, msg)
        return self.requests

    def ask_queue(self, node_id: bytes, queue: bytes, count: int) -> int:
        """Ask ``node_id`` for its first ``count`` jobs of ``queue``."""
        return self._ask(node_id, {m.TYPE: m.QUEUEPEEK, m.QUEUE: queue, m.COUNT: count})

    def ask_job(self, node_id: bytes, job_id: bytes) -> int:
        """Ask ``node_id`` for its copy of a job."""
        return self._ask(node_id, {m.TYPE: m.JOBPEEK, m.ID: job_id})

    def ask_redrive(self, node_id: bytes, queue: bytes, user: bytes) -> int:
        """Ask ``node_id`` to redrive the dead letters it queues in ``queue``
        (``user``, of this node's dashboard, is named in its log)."""
        return self._ask(node_id, {m.TYPE: m.REDRIVE, m.QUEUE: queue, m.USER: user})

    def delete_copies(self, job_id: bytes, node_ids: list[bytes]) -> None:
        """Have these nodes forget their copy of a job: the DELJOB a FASTACK
        sends (``acks.on_deljob``), for the dashboard deleting a job everywhere."""
        msg = m.job_message(m.DELJOB, job_id)
        for node_id in node_ids:
            self.outbox.send_to(node_id, msg)

    def on_answer(self, sender: bytes, msg: dict, link: Link) -> None:
        """An answer to one of our requests: to the listener."""
        self.listener.answered(sender, msg[m.REQ], msg.get(m.VALUE))

    # --------------------------------------------------------- answering

    def queue_peek(self, name: bytes, count: int) -> list[object]:
        """``[length, records]``: the queue's length here and its first
        ``count`` jobs (at most MAX_PEEK), first served first."""
        queue = self.queues.by_name.get(name)
        if queue is None:
            return [0, []]
        wanted = min(count, MAX_PEEK)
        now = self.runtime.now
        records: list[object] = []
        if wanted > 0:
            for job in queue.jobs.iter_from_head():
                records.append(job_record(job, now, LIST_PREVIEW))
                if len(records) == wanted:
                    break
        return [len(queue), records]

    def job_peek(self, job_id: bytes) -> list[object] | None:
        """The job's record here, or None when this node has no copy."""
        job = self.registry.by_id.get(job_id)
        return None if job is None else job_record(job, self.runtime.now, BODY_PREVIEW)

    def _answer(self, sender: bytes, msg: dict, value: object) -> None:
        self.outbox.send_to(sender, {m.TYPE: m.ANSWER, m.REQ: msg[m.REQ], m.VALUE: value})

    def on_queuepeek(self, sender: bytes, msg: dict, link: Link) -> None:
        """QUEUEPEEK: our first jobs of the queue."""
        self._answer(sender, msg, self.queue_peek(msg[m.QUEUE], msg[m.COUNT]))

    def on_jobpeek(self, sender: bytes, msg: dict, link: Link) -> None:
        """JOBPEEK: our copy of the job, or None."""
        self._answer(sender, msg, self.job_peek(msg[m.ID]))

    def on_redrive(self, sender: bytes, msg: dict, link: Link) -> None:
        """REDRIVE: the dead letters we queue in the queue go back (QREDRIVE's
        rule); the count moved is the answer."""
        queue = msg[m.QUEUE]
        moved = self.lifecycle.redrive_queued(queue, 0)
        logger.info("Redrove %d dead letters of '%s' for user '%s' of node %s's dashboard",
                    moved, queue[:_LOGGED_NAME].decode("utf-8", "backslashreplace"),
                    msg[m.USER][:_LOGGED_NAME].decode("utf-8", "backslashreplace"),
                    sender[:8].decode("ascii", "replace"))
        self._answer(sender, msg, moved)
