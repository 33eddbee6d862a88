"""The job state machine of one node: register, queue, pop, ack, delete, timers.

spec: jobs-and-ids.md §4-§7 and cluster-bus.md §6.5-§6.6. It lives with
the cluster parts because its transitions are announced to the other
holders of a job (QUEUED, WILLQUEUE, SETACK, DELJOB). It never touches
I/O or a clock: ``runtime.now`` is set by the node's entry points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final, Protocol

from disque.protocol import errors
from disque.cluster import messages as m
from disque.cluster.membership import Membership
from disque.cluster.outbox import Outbox
from disque.jobs.job import (ACKED, ACTIVE, BCAST_QUEUED, BCAST_WILLQUEUE, DELIVERED, QUEUED,
                             WAIT_REPL, Job, JobExtras, extras_of, own_extras)
from disque.jobs.dedup import DedupIndex
from disque.jobs.journal import (REASON_ACKED, REASON_DELETED, REASON_EXPIRED,
                                 REASON_NACK_REASON, REASON_QUEUE_CHANGED, Journal)
from disque.jobs.quotas import QuotaLedger
from disque.jobs.replies import dead_letter_queue
from disque.jobs.registry import JobRegistry
from disque.jobs.timers import TimerWheel
from disque.queues.blocking import BlockedClients
from disque.queues.queue import PAUSE_IN, PAUSE_OUT, Queue
from disque.queues.queueset import QueueSet
from disque.protocol.resp import status
from disque.context.runtime import JITTER_RANGE_MS, Runtime, ms_from_seconds
from disque.context.stats import JobCounters

WILLQUEUE_ADVANCE_MS: Final = 500
GC_MAX_RETRY: Final = 10
GC_MAX_DELAY_MS: Final = 180_000
# A local job flag beside those of disque.jobs.job (never sent nor stored:
# codec keeps the low three bits): the requeue ahead is a NACK ... DELAY's,
# counted as a NACK when it happens.
NACK_DUE: Final = 8
DEAD_MAXDELIVER: Final = b"maxdeliver"  # ext.reason of a job delivered MAXDELIVER times


class QueueArrivals(Protocol):
    """Told when a job is queued in a queue other nodes asked jobs of."""

    @property
    def wants(self) -> Mapping[bytes, object]:
        """The names of the queues other nodes wait on (read on every queueing)."""

    def job_queued(self, queue: Queue) -> None:
        """A job was just queued in ``queue``, one of ``wants``."""


class JobLifecycle:
    """State transitions of the jobs of one node."""

    def __init__(self, runtime: Runtime, registry: JobRegistry, queues: QueueSet,
                 timers: TimerWheel, blocked: BlockedClients, membership: Membership,
                 outbox: Outbox, journal: Journal, arrivals: QueueArrivals,
                 dedup: DedupIndex, counters: JobCounters | None = None,
                 quotas: QuotaLedger | None = None) -> None:
        self.runtime = runtime
        self.registry = registry
        self.queues = queues
        self.timers = timers
        self.blocked = blocked
        self.membership = membership
        self.outbox = outbox
        # The node's one journal: Replication reports through it too, and
        # NodeState.set_journal swaps it (AOF on or off, a flush not logged).
        self.journal = journal
        self.arrivals = arrivals
        self.dedup = dedup
        self.counters = counters if counters is not None else JobCounters()
        # What users with an ACL quota have pending here: a job leaves its
        # account when it is acked or deleted here. ``quota_charged`` is the
        # ledger's dict (never replaced): one test when no job is charged.
        self.quotas = quotas if quotas is not None else QuotaLedger()
        self.quota_charged = self.quotas.charged

    # ------------------------------------------------------------ registry

    def register_job(self, job: Job, schedule: bool = True) -> None:
        """Hold ``job`` here and (unless the caller queues it right away,
        which schedules it anyway) set its timer. A DEDUPID token it
        carries is remembered (a copy, or a job loaded from the AOF)."""
        self.registry.add(job)
        if job.ext is not None:
            self.dedup.remember_job(job)
        if schedule:
            self.schedule_job(job)

    def delete_job(self, job: Job, producer_error: bytes = errors.NOREPL_REMOVED,
                   reason: bytes = REASON_DELETED) -> None:
        """Forget ``job`` on this node only (``reason`` goes to the journal).

        A producer still waiting for its replication gets ``producer_error``
        and the partial copies are asked to go (spec: commands.md ADDJOB).
        """
        state = job.state
        if state == QUEUED:
            self._unqueue(job)
        elif state == WAIT_REPL:
            self.blocked.release_producer(job.id, producer_error)
            self.outbox.send_to_holders(job, m.job_message(m.DELJOB, job.id))
            self.dedup.forget_job(job)  # never created: a retry may create it
        if state == ACTIVE or state == QUEUED:
            self.journal.job_removed(job, reason)
        if self.quota_charged:
            self.quotas.release(job)
        self.timers.cancel(job)
        self.registry.remove(job)

    def schedule_job(self, job: Job) -> None:
        """Recompute the job's next timer action (spec: jobs-and-ids.md §6)."""
        when = ms_from_seconds(job.etime + 1)
        state = job.state
        if state == ACKED:
            delay = min(1000 << job.gc_retry, GC_MAX_DELAY_MS)
            when = min(when, self.runtime.now + delay + self.runtime.jitter())
        elif (state == ACTIVE or state == QUEUED) and job.qtime:
            qtime = job.qtime
            if job.flags & BCAST_WILLQUEUE:
                qtime -= WILLQUEUE_ADVANCE_MS
            if qtime < when:
                when = qtime
        self.timers.schedule(job, when)

    # -------------------------------------------------------------- queues

    def enqueue_job(self, job: Job, nack: bool = False, timeout: bool = False,
                    reason: bytes | None = None) -> bool:
        """Put ``job`` in its queue; False when the rules refuse it (spec §7).

        ``nack``: a NACK (counted as one), ``reason`` what its consumer said
        of the failure (NACK ... REASON: kept with the job, which then has
        extensions); ``timeout``: the retry timer's requeue (the one BACKOFF
        lengthens the retry period at). A counted requeue of a job with
        extensions goes through ``_requeue_extended``: the dead-letter rule,
        BACKOFF, and its generation in the QUEUED.
        """
        if job.state == QUEUED or not job.qtime:
            return False
        flags = job.flags & ~NACK_DUE
        if job.retry == 0 and flags & DELIVERED:
            return False
        if flags & BCAST_QUEUED or nack:
            if nack:
                job.nacks += 1
                self.counters.nacked += 1
                mflag = m.MFLAG_INCR_NACKS
                if reason is not None:
                    own_extras(job).nack_reason = reason
            else:
                job.adeliv += 1
                mflag = m.MFLAG_INCR_DELIV
            ext = extras_of(job)
            if ext is not None:  # not a plain job, nor a DEDUPID token alone
                self._requeue_extended(job, ext, flags, mflag, timeout, reason)
                return True
            self.outbox.send_to_holders(job, m.job_message(m.QUEUED, job.id, mflag))
        else:
            flags |= BCAST_QUEUED  # the first queueing by this node is silent
        self.queue_job(job, flags)
        return True

    def _requeue_extended(self, job: Job, ext: JobExtras, flags: int, mflag: int,
                          timeout: bool, reason: bytes | None) -> None:
        """A counted requeue (its counter already incremented) of a job with
        extensions: a retry timeout lengthens a BACKOFF job's period; at a
        NACK or a retry timeout, a job past its MAXDELIVER-th delivery (1 +
        nacks + additional deliveries) goes to its dead-letter queue
        instead, once (a dead letter is never moved again), and the move is
        a new generation of the job. The other holders hear the QUEUED with
        the generation's state, and with a NACK's ``reason`` (already the
        job's), which the move's records carry or a record of its own does."""
        maxdeliver = ext.maxdeliver
        if timeout:
            if ext.backoff:
                job.retry = backed_off_retry(job, ext)
        elif mflag != m.MFLAG_INCR_NACKS:
            maxdeliver = 0  # ENQUEUE, a load: counted, but only a failure moves a job
        if maxdeliver and ext.origin is None and 1 + job.nacks + job.adeliv > maxdeliver:
            queue = dead_letter_queue(job)
            assert queue is not None  # a job with extensions and a queue has one
            self.journal.job_removed(job, REASON_QUEUE_CHANGED)
            ext.origin = job.queue
            ext.reason = DEAD_MAXDELIVER
            ext.moves += 1
            self.counters.dead_lettered += 1
            job.queue = self._queue_name(queue)
            self.queue_job(job, flags)
            self.journal.job_stored(job)
        else:
            self.queue_job(job, flags)
            if reason is not None:
                self._record_again(job, REASON_NACK_REASON)
        msg = self.job_message(m.QUEUED, job, mflag)
        if reason is not None:
            msg[m.NACK_REASON] = reason
        self.outbox.send_to_holders(job, msg)

    def _record_again(self, job: Job, change: bytes) -> None:
        """Journal a change of a job held here as a DELJOB for ``change`` (a
        journal reason that is no departure) and the job as it is now: a
        load keeps the first LOADJOB of an ID."""
        self.journal.job_removed(job, change)
        self.journal.job_stored(job)

    def note_nack_reason(self, job: Job, reason: bytes) -> None:
        """Keep ``reason`` (a NACK ... REASON's, here or heard from another
        holder) as the job's latest, in the AOF too while the job is stored."""
        ext = own_extras(job)
        if ext.nack_reason == reason:
            return  # heard again (with a generation's state): nothing to record
        ext.nack_reason = reason
        state = job.state
        if state == ACTIVE or state == QUEUED:
            self._record_again(job, REASON_NACK_REASON)

    def redrive(self, job: Job) -> bool:
        """QREDRIVE: a dead letter queued here goes back to its origin queue
        as a new generation, its counters reset and its retry period back to
        ADDJOB's; the other holders hear it. False for any other job."""
        ext = extras_of(job)
        if ext is None or ext.origin is None or job.state != QUEUED:
            return False
        self.journal.job_removed(job, REASON_QUEUE_CHANGED)
        self._unqueue(job)
        job.state = ACTIVE
        job.queue = self._queue_name(ext.origin)
        ext.origin = None
        ext.reason = None
        ext.moves += 1
        job.nacks = job.adeliv = 0
        if ext.base_retry:
            job.retry = ext.base_retry
        self.queue_job(job, (job.flags & ~NACK_DUE) | BCAST_QUEUED)
        self.journal.job_stored(job)
        self.outbox.send_to_holders(job, self.job_message(m.QUEUED, job))
        return True

    def redrive_queued(self, queue_name: bytes, count: int) -> int:
        """The dead letters queued here in ``queue_name`` (at most ``count``
        in queue order, 0: all) go back to their queues (QREDRIVE, and the
        dashboard's REDRIVE); returns how many moved."""
        queue = self.queues.by_name.get(queue_name)
        if queue is None:
            return 0
        dead: list[Job] = []
        for job in queue.jobs.iter_from_head():
            ext = extras_of(job)
            if ext is not None and ext.origin is not None:
                dead.append(job)
                if len(dead) == count:
                    break
        moved = 0
        for job in dead:
            if self.redrive(job):
                moved += 1
        return moved

    def apply_state(self, job: Job, state: m.JobState) -> None:
        """Take a newer generation of ``job`` heard from another holder: its
        queue, dead-letter fields, counters, retry period and, when it says
        one, its last NACK's reason. A copy queued here (in the older
        generation's queue) leaves its queue: it is active now, and the
        caller postpones it."""
        queue, origin, reason, moves, nacks, adeliv, retry, nack_reason = state
        ext = own_extras(job)
        was = job.state
        journaled = was == ACTIVE or was == QUEUED
        if journaled:
            self.journal.job_removed(job, REASON_QUEUE_CHANGED)
        if was == QUEUED:
            self._unqueue(job)
            job.state = ACTIVE
        job.queue = self._queue_name(queue)
        ext.origin = origin
        ext.reason = reason
        ext.moves = moves
        job.nacks = nacks
        job.adeliv = adeliv
        job.retry = retry
        if nack_reason is not None:
            ext.nack_reason = nack_reason
        if journaled:
            self.journal.job_stored(job)

    def job_message(self, kind: str, job: Job, mflags: int = 0) -> dict:
        """QUEUED, WILLQUEUE or WORKING about ``job``: a job with extensions
        adds its generation, and the state it decides once it moved or
        backs off (see messages.MOVES), with its last NACK's reason."""
        msg = m.job_message(kind, job.id, mflags)
        ext = extras_of(job)
        if ext is not None:
            msg[m.MOVES] = ext.moves
            if ext.moves or ext.backoff:
                msg[m.QUEUE] = job.queue
                if ext.origin is not None:
                    msg[m.ORIGIN] = ext.origin
                if ext.reason is not None:
                    msg[m.REASON] = ext.reason
                msg[m.NACKS] = job.nacks
                msg[m.ADELIV] = job.adeliv
                msg[m.RETRY] = job.retry
                if ext.nack_reason is not None:
                    msg[m.NACK_REASON] = ext.nack_reason
        return msg

    def _queue_name(self, name: bytes) -> bytes:
        """The name object of an existing queue (shared by its jobs), else ``name``."""
        queue = self.queues.by_name.get(name)
        return queue.name if queue is not None else name

    def nack_later(self, job: Job, delay: int, reason: bytes | None = None) -> None:
        """NACK ... DELAY: requeue ``job`` (active) ``delay`` seconds from now,
        counted then as a NACK; the holders postpone their own requeue
        until after it (WORKING with the delay). A ``reason`` is the job's
        at once, and the holders' with the WORKING: the failure happened now."""
        job.flags |= NACK_DUE | BCAST_WILLQUEUE
        job.qtime = self.runtime.now + ms_from_seconds(delay)
        self.schedule_job(job)
        if reason is not None:
            self.note_nack_reason(job, reason)
        msg = self.job_message(m.WORKING, job)
        msg[m.DELAY] = delay
        if reason is not None:
            msg[m.NACK_REASON] = reason
        self.outbox.send_to_holders(job, msg)

    def queue_job(self, job: Job, flags: int = BCAST_QUEUED) -> None:
        """State queued, requeue timer armed, inserted in its queue; ``flags``
        become the job's local flags.

        ADDJOB's hot path calls it right after ``JobRegistry.add_new`` with
        the default flags: a job queued for the first time, silently, whose
        next queueing here is announced (what ``enqueue_job`` does for it,
        without the rules a new job passes anyway).
        """
        job.state = QUEUED
        now = self.runtime.now
        retry = job.retry
        if retry:
            job.flags = flags | BCAST_WILLQUEUE
            # One big-int addition: the jitter is folded into the small offset.
            qtime = job.qtime = now + (retry * 1000 - JITTER_RANGE_MS // 2
                                       + int(self.runtime.random() * JITTER_RANGE_MS))
            awake = qtime - WILLQUEUE_ADVANCE_MS
            expire = ms_from_seconds(job.etime + 1)
            self.timers.schedule(job, awake if awake < expire else expire)
        else:
            job.flags = flags
            job.qtime = 0
            self.timers.schedule(job, ms_from_seconds(job.etime + 1))
        name = job.queue
        assert name is not None  # only dummy ACKs have none, and they are never queued
        queue = self.queues.by_name.get(name)
        if queue is None:
            queue = self.queues.create(name)
        queue.jobs.insert(job)
        queue.atime = now // 1000
        queue.jobs_in += 1
        if queue.blocked and not queue.paused & PAUSE_OUT:
            self.queues.mark_ready(queue)
        arrivals = self.arrivals
        if arrivals.wants and name in arrivals.wants:
            arrivals.job_queued(queue)

    def dequeue_job(self, job: Job) -> bool:
        """Take a queued job out of its queue (it becomes active)."""
        if job.state != QUEUED:
            return False
        self._unqueue(job)
        job.state = ACTIVE
        return True

    def _unqueue(self, job: Job) -> None:
        assert job.queue is not None
        self.queues.by_name[job.queue].jobs.remove(job)

    def pop_job(self, queue: Queue) -> Job:
        """Deliver the oldest job of a non-empty queue (the retry clock keeps running)."""
        # Callers pass a non-empty queue; an assert would run per delivered job.
        job: Job = queue.jobs.pop_first()  # type: ignore[assignment]
        job.state = ACTIVE
        job.flags |= DELIVERED
        if job.retry == 0:
            self.registry.mark_evictable(job)
        queue.atime = self.runtime.now // 1000
        queue.jobs_out += 1
        return job

    # ---------------------------------------------------------------- acks

    def ack_job(self, job: Job, schedule: bool = True) -> bool:
        """Move ``job`` to ``acked``; False if it already was. Without
        ``schedule`` the caller sets the GC timer (``gc_attempt`` does)."""
        state = job.state
        if state == ACKED:
            return False
        if state == QUEUED:
            self._unqueue(job)
        elif state == WAIT_REPL:
            # spec decision 6: the job was consumed, so the producer has its answer.
            self.blocked.release_producer(job.id, status(job.id))
        job.state = ACKED
        job.confirmed = None
        if self.quota_charged:
            self.quotas.release(job)
        self.registry.mark_evictable(job)
        if state == ACTIVE or state == QUEUED:
            self.journal.job_removed(job, REASON_ACKED)
        if schedule:
            self.schedule_job(job)
        return True

    def gc_attempt(self, job: Job) -> None:
        """Try to garbage-collect an acked job (spec: cluster-bus.md §6.6)."""
        delivered = job.delivered
        if delivered is self.runtime.self_delivered:
            self.delete_job(job)  # held here only: nobody else to ask
            return
        if job.gc_retry < GC_MAX_RETRY:
            job.gc_retry += 1
        confirmed = job.confirmed
        if confirmed is None:
            confirmed = job.confirmed = {self.runtime.node_id}
        targets: tuple[bytes, ...]
        if delivered:
            # spec decision 11: every holder must have confirmed, not just as many.
            if confirmed.issuperset(delivered):
                self.delete_job(job)
                return
            targets = delivered
        else:
            if self.membership.size == 1:
                self.delete_job(job)
                return
            targets = tuple(self.membership.nodes)
        msg = {m.TYPE: m.SETACK, m.ID: job.id, m.MAY_HAVE: len(delivered),
               m.HOLDERS: list(delivered)}
        for node_id in targets:
            if node_id not in confirmed:
                self.outbox.send_to(node_id, msg)
        self.schedule_job(job)

    # -------------------------------------------------------------- timers

    def process_job_timers(self) -> None:
        """Run every job action that is due (spec: jobs-and-ids.md §6)."""
        due = self.timers.pop_due(self.runtime.now)
        for job in due:
            if job.seq >= 0:  # not deleted by an earlier action of this pass
                self._job_timer(job)

    def _job_timer(self, job: Job) -> None:
        now = self.runtime.now
        if job.etime <= now // 1000:
            self.delete_job(job, reason=REASON_EXPIRED)
            self.counters.expired += 1
            return
        state = job.state
        if state == ACKED:
            self.gc_attempt(job)
            return
        if (job.flags & BCAST_WILLQUEUE and job.qtime
                and job.qtime - WILLQUEUE_ADVANCE_MS <= now):
            if state == ACTIVE:
                self.outbox.send_to_holders(job, self.job_message(m.WILLQUEUE, job))
            job.flags &= ~BCAST_WILLQUEUE
        qtime = job.qtime
        if state == ACTIVE and qtime and qtime <= now:
            if job.flags & NACK_DUE and self.enqueue_job(job, True):
                return  # a delayed NACK: no pause check, as for NACK itself
            assert job.queue is not None  # a dummy ACK is acked, never active
            queue = self.queues.by_name.get(job.queue)
            if job.retry and queue is not None and queue.paused & PAUSE_IN:
                job.qtime = now + job.retry * 1000 + self.runtime.jitter()
            elif self.enqueue_job(job, False, True):
                self.counters.requeued += 1
                return
            elif not job.retry:
                # A delivered RETRY 0 job given a qtime by ENQUEUE/YOURJOBS can
                # never be queued: without this its timer would stay due forever.
                job.qtime = 0
        elif state == QUEUED and qtime and qtime <= now and job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = now + job.retry * 1000 + self.runtime.jitter()
            ext = extras_of(job)
            if ext is not None and ext.moves:
                # A moved job still queued here says so once a retry period:
                # copies that missed the move (a partition) catch up, and
                # of two queued copies of one generation one steps back.
                self.outbox.send_to_holders(job, self.job_message(m.QUEUED, job))
        self.schedule_job(job)

    def postpone_job(self, job: Job, delay: int = 0) -> None:
        """WORKING / QUEUED received: push the requeue one retry period
        away, plus ``delay`` seconds (a NACK ... DELAY elsewhere). A delayed
        NACK of this node's is then superseded: it no longer counts."""
        job.flags &= ~NACK_DUE
        if job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = (self.runtime.now + ms_from_seconds(job.retry + delay)
                         + self.runtime.jitter())
            self.schedule_job(job)

    def set_received_qtime(self, job: Job) -> None:
        """qtime of a copy received from another node or loaded from the AOF (§6)."""
        if job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = self.runtime.now + (job.delay + job.retry) * 1000 + self.runtime.jitter()
        else:
            job.qtime = 0

    def purge(self, queue: Queue, limit: int) -> int:
        """QPURGE, in parts of at most ``limit`` jobs: delete the first jobs
        queued in ``queue`` here, and ask their other holders to delete
        their copies (DELJOB, as FASTACK does); jobs active here are not in
        the queue and stay. Returns how many went (each one journaled)."""
        jobs = queue.jobs
        alone = self.runtime.self_delivered  # a job created here and never copied
        purged = 0
        while purged < limit:
            job = jobs.pop_first()
            if job is None:
                break
            # Out of the queue: it leaves as an active job does (journaled,
            # its timer cancelled).
            job.state = ACTIVE
            if job.delivered is not alone:
                self.outbox.send_to_holders(job, m.job_message(m.DELJOB, job.id))
            self.delete_job(job)
            purged += 1
        return purged

    def delete_all(self) -> None:
        """Delete every job, one by one, with what each deletion entails (DEBUG FLUSHALL)."""
        for job in list(self.registry.by_id.values()):
            self.delete_job(job)
        self.registry.clear()
        self.timers.clear()


def backed_off_retry(job: Job, ext: JobExtras) -> int:
    """The retry period after a retry-timeout requeue of a BACKOFF job: the
    period times the factor, rounded up, capped at MAXRETRY or else the
    job's TTL; never shorter than it was."""
    retry = job.retry
    cap = ext.maxretry
    if not cap:
        cap = job.etime - job.ctime // 1_000_000_000  # the TTL: etime - creation, seconds
    longer = math.ceil(retry * ext.backoff)
    if longer > cap:
        longer = cap
    return longer if longer > retry else retry
