"""The job state machine of one node: register, queue, pop, ack, delete, timers.

spec: jobs-and-ids.md §4-§7 and cluster-bus.md §6.5-§6.6. A mixin of
``disque.node.Node``: it works on the node's registry, queues, timers and
outbox, and never touches I/O or the wall clock (``self.now`` is set by
the node's entry points).
"""

from __future__ import annotations

from disque import errors
from disque.aof.format import REASON_ACKED, REASON_DELETED, REASON_EXPIRED
from disque.cluster import messages as m
from disque.jobs.job import (ACKED, ACTIVE, BCAST_QUEUED, BCAST_WILLQUEUE, DELIVERED, QUEUED,
                             WAIT_REPL, Job)
from disque.memory import DUMMY_ACK_COST, JOB_COST, job_cost
from disque.queues.queue import PAUSE_IN, PAUSE_OUT

WILLQUEUE_ADVANCE_MS = 500
JITTER_RANGE_MS = 500  # uniform in [-250, +249]
GC_MAX_RETRY = 10
GC_MAX_DELAY_MS = 180_000


class JobLifecycle:
    """State transitions of jobs (mixed into Node)."""

    def jitter(self) -> int:
        """Random offset that keeps nodes from requeueing in lockstep."""
        return int(self.random() * JITTER_RANGE_MS) - JITTER_RANGE_MS // 2

    def new_ctime(self) -> int:
        """Creation time: ms × 10^6, strictly increasing on this node."""
        ctime = self.now * 1_000_000
        if ctime <= self.last_ctime:
            ctime = self.last_ctime + 1
        self.last_ctime = ctime
        return ctime

    # ------------------------------------------------------------ registry

    def register_job(self, job: Job, schedule: bool = True) -> None:
        """Add ``job`` to the registry and (unless the caller queues it right
        away, which schedules it anyway) set its timer."""
        self.jobs[job.id] = job
        self.job_scan.add(job)
        body = job.body
        self.used_memory += JOB_COST + len(body) if body is not None else DUMMY_ACK_COST
        if job.state == ACKED or (job.retry == 0 and job.flags & DELIVERED):
            self.evictable[job] = None
        if schedule:
            self.schedule_job(job)

    def delete_job(self, job: Job, producer_error: bytes = errors.NOREPL_REMOVED,
                   reason: bytes = REASON_DELETED) -> None:
        """Forget ``job`` on this node only (``reason`` goes to the AOF record).

        A producer still waiting for its replication gets ``producer_error``
        and the partial copies are asked to go (spec: commands.md ADDJOB).
        """
        state = job.state
        if state == QUEUED:
            self._unqueue(job)
        elif state == WAIT_REPL:
            self.fail_replication(job, producer_error)
        if (state == ACTIVE or state == QUEUED) and self.aof is not None:
            self.aof.deljob(job, reason)
        self.timers.cancel(job)
        del self.jobs[job.id]
        self.job_scan.remove(job)
        self.evictable.pop(job, None)
        self.used_memory -= job_cost(job)

    def schedule_job(self, job: Job) -> None:
        """Recompute the job's next timer action (spec: jobs-and-ids.md §6)."""
        when = job.etime * 1000 + 1000
        state = job.state
        if state == ACKED:
            delay = min(1000 << job.gc_retry, GC_MAX_DELAY_MS)
            when = min(when, self.now + delay + self.jitter())
        elif (state == ACTIVE or state == QUEUED) and job.qtime:
            qtime = job.qtime
            if job.flags & BCAST_WILLQUEUE:
                qtime -= WILLQUEUE_ADVANCE_MS
            if qtime < when:
                when = qtime
        self.timers.schedule(job, when)

    # -------------------------------------------------------------- queues

    def enqueue_job(self, job: Job, nack: bool = False) -> bool:
        """Put ``job`` in its queue; False when the rules refuse it (spec §7)."""
        if job.state == QUEUED or not job.qtime:
            return False
        flags = job.flags
        if job.retry == 0 and flags & DELIVERED:
            return False
        if flags & BCAST_QUEUED or nack:
            if nack:
                job.nacks += 1
                mflag = m.MFLAG_INCR_NACKS
            else:
                job.adeliv += 1
                mflag = m.MFLAG_INCR_DELIV
            self.send_to_holders(job, m.job_message(m.QUEUED, job.id, mflag))
        else:
            flags |= BCAST_QUEUED  # the first queueing by this node is silent
        self._queue(job, flags)
        return True

    def add_new_job(self, job: Job) -> None:
        """Register a job just created here and queue it at once.

        The hot path of ADDJOB: what ``register_job`` plus ``enqueue_job`` do
        for a brand-new local job (first queueing, so nothing to announce).
        """
        self.jobs[job.id] = job
        self.job_scan.add(job)
        self.used_memory += JOB_COST + len(job.body)
        self._queue(job, BCAST_QUEUED)

    def _queue(self, job: Job, flags: int) -> None:
        """State queued, requeue timer armed, inserted in its queue."""
        job.state = QUEUED
        now = self.now
        retry = job.retry
        if retry:
            job.flags = flags | BCAST_WILLQUEUE
            # One big-int addition: the jitter is folded into the small offset.
            qtime = job.qtime = now + (retry * 1000 - JITTER_RANGE_MS // 2
                                       + int(self.random() * JITTER_RANGE_MS))
            awake = qtime - WILLQUEUE_ADVANCE_MS
            expire = job.etime * 1000 + 1000
            self.timers.schedule(job, awake if awake < expire else expire)
        else:
            job.flags = flags
            job.qtime = 0
            self.timers.schedule(job, job.etime * 1000 + 1000)
        name = job.queue
        queue = self.queues.get(name)
        if queue is None:
            queue = self.create_queue(name)
        queue.jobs.insert(job)
        queue.atime = now // 1000
        queue.jobs_in += 1
        if queue.blocked and not queue.paused & PAUSE_OUT:
            self.ready_queues[queue] = None
        if self.interest and name in self.interest:
            self.interest_ready[queue] = None

    def dequeue_job(self, job: Job) -> bool:
        """Take a queued job out of its queue (it becomes active)."""
        if job.state != QUEUED:
            return False
        self._unqueue(job)
        job.state = ACTIVE
        return True

    def _unqueue(self, job: Job) -> None:
        self.queues[job.queue].jobs.remove(job)

    def pop_job(self, queue) -> Job:
        """Deliver the oldest job of a non-empty queue (the retry clock keeps running)."""
        job = queue.jobs.pop_first()
        job.state = ACTIVE
        job.flags |= DELIVERED
        if job.retry == 0:
            self.evictable[job] = None
        queue.atime = self.now // 1000
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
            self.replication_succeeded_by_ack(job)
        job.state = ACKED
        job.confirmed = None
        self.evictable[job] = None
        if (state == ACTIVE or state == QUEUED) and self.aof is not None:
            self.aof.deljob(job, REASON_ACKED)
        if schedule:
            self.schedule_job(job)
        return True

    def gc_attempt(self, job: Job) -> None:
        """Try to garbage-collect an acked job (spec: cluster-bus.md §6.6)."""
        if job.gc_retry < GC_MAX_RETRY:
            job.gc_retry += 1
        confirmed = job.confirmed
        if confirmed is None:
            confirmed = job.confirmed = {self.id}
        delivered = job.delivered
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
                self.send_to(node_id, msg)
        self.schedule_job(job)

    # -------------------------------------------------------------- timers

    def process_job_timers(self) -> None:
        """Run every job action that is due (spec: jobs-and-ids.md §6)."""
        due = self.timers.pop_due(self.now)
        for job in due:
            if job.seq >= 0:  # not deleted by an earlier action of this pass
                self._job_timer(job)

    def _job_timer(self, job: Job) -> None:
        now = self.now
        if job.etime <= now // 1000:
            self.delete_job(job, reason=REASON_EXPIRED)
            return
        state = job.state
        if state == ACKED:
            self.gc_attempt(job)
            return
        if (job.flags & BCAST_WILLQUEUE and job.qtime
                and job.qtime - WILLQUEUE_ADVANCE_MS <= now):
            if state == ACTIVE:
                self.send_to_holders(job, m.job_message(m.WILLQUEUE, job.id))
            job.flags &= ~BCAST_WILLQUEUE
        qtime = job.qtime
        if state == ACTIVE and qtime and qtime <= now:
            queue = self.queues.get(job.queue)
            if job.retry and queue is not None and queue.paused & PAUSE_IN:
                job.qtime = now + job.retry * 1000 + self.jitter()
            elif self.enqueue_job(job):
                return
            elif not job.retry:
                # A delivered RETRY 0 job given a qtime by ENQUEUE/YOURJOBS can
                # never be queued: without this its timer would stay due forever.
                job.qtime = 0
        elif state == QUEUED and qtime and qtime <= now and job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = now + job.retry * 1000 + self.jitter()
        self.schedule_job(job)

    def postpone_job(self, job: Job) -> None:
        """WORKING / QUEUED received: push the requeue one retry period away."""
        if job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = self.now + job.retry * 1000 + self.jitter()
            self.schedule_job(job)
