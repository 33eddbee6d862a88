"""Requeue coordination: WILLQUEUE, QUEUED and WORKING, plus PAUSE.

spec: cluster-bus.md §6.5 and §6.8. Normally one node queues a job when
its retry time comes: the others hear QUEUED and postpone; when two
queue it at once, the job ID decides who keeps it.

A job with extensions has a generation (``ext.moves``: its dead-letter
moves and redrives) in these messages (docs/dead-letters.md): a holder of
a newer one answers an older one with its state, a holder of an older one
takes the newer one's, so a job is never left in two queues.
"""

from __future__ import annotations

from disque.cluster import messages as m
from disque.cluster.lifecycle import JobLifecycle
from disque.cluster.outbox import Outbox
from disque.cluster.transport import Link
from disque.jobs.job import ACKED, ACTIVE, QUEUED, WAIT_REPL, Job, extras_of
from disque.jobs.registry import JobRegistry
from disque.queues.queue import PAUSE_BY_NAME
from disque.queues.queueset import QueueSet
from disque.context.runtime import Runtime


def node_order_key(node_id: bytes, job_id: bytes) -> bytes:
    """Node ID mixed with the job's random part: the winner differs per job."""
    rand = job_id[11:35]
    return bytes([c ^ rand[i % 24] for i, c in enumerate(node_id)])


class RequeueCoordination:
    """Receivers of requeue-related messages."""

    def __init__(self, runtime: Runtime, registry: JobRegistry, queues: QueueSet,
                 lifecycle: JobLifecycle, outbox: Outbox) -> None:
        self.runtime = runtime
        self.registry = registry
        self.queues = queues
        self.lifecycle = lifecycle
        self.outbox = outbox

    def _setack_reply(self, sender: bytes, job: Job) -> None:
        self.outbox.send_to(sender, {m.TYPE: m.SETACK, m.ID: job.id,
                                     m.MAY_HAVE: len(job.delivered),
                                     m.HOLDERS: list(job.delivered)})

    def _compare_generation(self, sender: bytes, msg: dict, job: Job) -> int:
        """The generation of the sender's copy against this one's: -1 older
        (the sender is told this one's state), 1 newer (taken here: see
        ``JobLifecycle.apply_state``), 0 the same or not comparable."""
        theirs = m.count_field(msg, m.MOVES)
        ext = extras_of(job)
        ours = ext.moves if ext is not None else 0
        if theirs < 0 or theirs == ours:
            return 0
        if theirs < ours:
            self.outbox.send_to(sender, self.lifecycle.job_message(m.QUEUED, job))
            return -1
        state = m.job_state(msg)
        if state is None or state[3] != theirs:
            return 0
        self.lifecycle.apply_state(job, state)
        return 1

    def on_willqueue(self, sender: bytes, msg: dict, link: Link) -> None:
        """A holder is about to requeue: if it is queued here, say so."""
        job = self.registry.by_id.get(msg[m.ID])
        if job is None:
            return
        if job.state == ACKED:
            self._setack_reply(sender, job)
            return
        if job.state in (ACTIVE, QUEUED):
            job.add_delivered(sender)
            if m.MOVES in msg and self._compare_generation(sender, msg, job) < 0:
                return  # the sender hears this copy's state
            if job.state == QUEUED:
                self.outbox.send_to_holders(job, self.lifecycle.job_message(m.QUEUED, job))

    def on_queued(self, sender: bytes, msg: dict, link: Link) -> None:
        """Another node queued the job (or a consumer is working on it).

        The reason of a NACK (its QUEUED, or a delayed one's WORKING) becomes
        this copy's, as its count does; a generation taken from the sender
        brings the sender's reason (``apply_state``); any other message's
        reason is the sender's copy's, maybe older than this one's: not taken.
        """
        job = self.registry.by_id.get(msg[m.ID])
        if job is None:
            return
        state = job.state
        if state == ACKED:
            self._setack_reply(sender, job)
            return
        if state not in (WAIT_REPL, ACTIVE, QUEUED):
            return
        working = msg[m.TYPE] == m.WORKING
        newer = 0
        if m.MOVES in msg:  # a job with extensions: compare generations
            newer = self._compare_generation(sender, msg, job)
            if newer < 0 and not working:
                return  # a copy of an older generation was queued: it moves instead
            if newer > 0:
                state = job.state  # no longer queued here: the sender's copy wins
            elif newer == 0:
                retry = m.count_field(msg, m.RETRY)
                if retry > 0 and job.retry:
                    job.retry = retry  # a BACKOFF period, as the sender has it
        if state == QUEUED and (working or node_order_key(sender, job.id)
                                > node_order_key(self.runtime.node_id, job.id)):
            self.lifecycle.dequeue_job(job)
        delay = m.count_field(msg, m.DELAY) if working else 0
        if delay > 0:
            # A NACK ... DELAY: requeued by then, and nothing waits past the TTL.
            delay = min(delay, max(0, job.etime - self.runtime.now // 1000))
        self.lifecycle.postpone_job(job, delay if delay > 0 else 0)
        if not working and newer == 0:
            mflags = msg.get(m.MFLAGS, 0)
            if mflags & m.MFLAG_INCR_NACKS:
                job.nacks = (job.nacks + 1) & 0xFFFF
                self._take_nack_reason(job, msg)
            if mflags & m.MFLAG_INCR_DELIV:
                job.adeliv = (job.adeliv + 1) & 0xFFFF
        elif working and newer <= 0 and m.DELAY in msg:
            self._take_nack_reason(job, msg)

    def _take_nack_reason(self, job: Job, msg: dict) -> None:
        """A NACK's message: its reason, if it has one, is the job's now."""
        reason = m.nack_reason_field(msg)
        if reason is not None:
            self.lifecycle.note_nack_reason(job, reason)

    def on_working(self, sender: bytes, msg: dict, link: Link) -> None:
        """A consumer works on the job elsewhere: the QUEUED rules, which
        ``on_queued`` applies by message type (a method, not an alias:
        mypyc compiles no class-level aliases)."""
        self.on_queued(sender, msg, link)

    def on_pause(self, sender: bytes, msg: dict, link: Link) -> None:
        """Set a queue's pause flags to exactly what the sender broadcast."""
        flags = PAUSE_BY_NAME.get(msg.get(m.PAUSE_STATE))
        queue = msg.get(m.QUEUE)
        if flags is not None and type(queue) is bytes:
            self.queues.set_pause(queue, flags)
