"""Synchronous and asynchronous job replication: REPLJOB, GOTJOB, ENQUEUE.

spec: cluster-bus.md §6.1-§6.4, commands.md ADDJOB. A mixin of Node.
"""

from __future__ import annotations

from disque.cluster import messages as m
from disque.jobs.codec import BadJobPayload, from_bus, to_bus
from disque.jobs.job import ACTIVE, BCAST_QUEUED, BCAST_WILLQUEUE, WAIT_REPL, Job
from disque.queues.queue import PAUSE_IN
from disque.resp import status

REPLICATION_RETRY_MS = 50


class Replication:
    """Replication of jobs to other nodes (mixed into Node)."""

    def replicate(self, job: Job, count: int, noreply: bool) -> int:
        """Add up to ``count`` new holders and send REPLJOB; return how many were added."""
        delivered = job.delivered
        nodes = self.membership.nodes
        added = [nid for nid in self.membership.reachable
                 if nid not in delivered and nodes[nid].link]
        if len(added) > count:  # a random subset; when all are taken, order is moot
            self.rng.shuffle(added)
            del added[count:]
        if added:
            job.delivered = delivered + tuple(added)
        confirmed = job.confirmed or ()
        messages: dict[int, dict] = {}  # one message (packed once) per flag value
        for node_id in job.delivered:
            if node_id == self.id:
                continue
            if node_id in confirmed and not added:
                continue
            flags = m.MFLAG_NOREPLY if noreply or node_id in confirmed else 0
            msg = messages.get(flags)
            if msg is None:
                payload = next(iter(messages.values()))[m.JOB] if messages else to_bus(job,
                                                                                      self.now)
                msg = messages[flags] = {m.TYPE: m.REPLJOB, m.JOB: payload, m.MFLAGS: flags}
            self.send_to(node_id, msg)
        return len(added)

    def retry_pending_replications(self) -> None:
        """Client cron: one more target every 50 ms for each waiting ADDJOB."""
        now = self.now
        for client in list(self.repl_waiters.values()):
            block = client.blocked
            job = self.jobs.get(block.job_id)
            if job is None or now - block.last_repl < REPLICATION_RETRY_MS:
                continue
            if self.replicate(job, 1, False):
                block.last_repl = now

    def fail_replication(self, job: Job, reply: bytes) -> None:
        """A waiting job is going away: tell its producer and drop partial copies."""
        client = self.repl_waiters.get(job.id)
        if client is not None:
            self.unblock(client, reply)
        self.send_to_holders(job, m.job_message(m.DELJOB, job.id))

    def replication_achieved(self, job: Job) -> None:
        """Enough copies exist: queue or hand off the job, then answer the producer."""
        job.state = ACTIVE
        client = self.repl_waiters.get(job.id)
        if self.id not in job.delivered:
            if client is not None:
                self.unblock(client, status(job.id))
            # External replication: one holder queues it, this node forgets it.
            holders = sorted(n for n in job.confirmed if n != self.id)
            if holders:
                target = holders[self.rng.randrange(len(holders))]
                self.send_to(target, {m.TYPE: m.ENQUEUE, m.ID: job.id, m.DELAY: job.delay})
            self.delete_job(job)
            return
        job.confirmed = None
        if job.delay == 0:
            self.enqueue_job(job)
        else:
            self.schedule_job(job)
        if self.aof is not None:
            self.aof.loadjob(job)
        if client is not None:  # after the record: it is written before the reply (§2)
            self.unblock(client, status(job.id))

    def replication_succeeded_by_ack(self, job: Job) -> None:
        """An ACK reached a job still waiting for replicas: the producer gets its ID."""
        client = self.repl_waiters.get(job.id)
        if client is not None:
            self.unblock(client, status(job.id))

    # ------------------------------------------------------------ receivers

    def on_repljob(self, sender: bytes, msg: dict) -> None:
        """Store a copy sent by the job's origin (spec §6.2)."""
        if self.used_memory > self.mem_warn_threshold or self.membership.leaving:
            return  # above 75 % of maxmemory (or leaving): no new copies here
        try:
            job = from_bus(msg[m.JOB], self.now, self.membership.nodes)
        except BadJobPayload:
            return  # spec §6.2: ignored unless it carries exactly one decodable job
        queue = self.queues.get(job.queue)
        if queue is not None and queue.paused & PAUSE_IN:
            return
        local = self.jobs.get(job.id)
        if local is not None:
            local.merge_delivered(job.delivered)
        else:
            job.flags |= BCAST_QUEUED
            self.set_received_qtime(job)
            self.register_job(job)
            if self.aof is not None:
                self.aof.loadjob(job)
        if not msg.get(m.MFLAGS, 0) & m.MFLAG_NOREPLY:
            self.send_to(sender, m.job_message(m.GOTJOB, job.id))

    def set_received_qtime(self, job: Job) -> None:
        """qtime of a copy received from another node or loaded from the AOF (§6)."""
        if job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = self.now + (job.delay + job.retry) * 1000 + self.jitter()
        else:
            job.qtime = 0

    def on_gotjob(self, sender: bytes, msg: dict) -> None:
        """A replica confirmed its copy (spec §6.3)."""
        job = self.jobs.get(msg[m.ID])
        if job is None or job.state != WAIT_REPL:
            return
        job.confirmed.add(sender)
        if len(job.confirmed) >= job.repl:
            self.replication_achieved(job)

    def on_enqueue(self, sender: bytes, msg: dict) -> None:
        """The origin kept no copy and asks this holder to queue the job (spec §6.4)."""
        job = self.jobs.get(msg[m.ID])
        if job is None or job.state not in (WAIT_REPL, ACTIVE):
            return
        queue = self.queues.get(job.queue)
        if queue is not None and queue.paused & PAUSE_IN:
            return
        job.flags &= ~BCAST_QUEUED
        delay = msg.get(m.DELAY, 0)
        if delay == 0:
            if not job.qtime:
                job.qtime = 1  # spec decision 1: let a RETRY 0 job be queued once
            job.state = ACTIVE
            self.enqueue_job(job)
        elif job.retry and job.qtime:
            job.qtime = self.now + delay * 1000
            self.schedule_job(job)
