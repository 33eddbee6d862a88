"""Synchronous and asynchronous job replication: REPLJOB, GOTJOB, ENQUEUE.

spec: cluster-bus.md §6.1-§6.4, commands.md ADDJOB.
"""

from __future__ import annotations

from typing import Final

from disque.context.clients import Block, ClientState
from disque.cluster import messages as m
from disque.cluster.lifecycle import JobLifecycle
from disque.cluster.membership import Membership
from disque.cluster.outbox import Outbox
from disque.cluster.transport import Link
from disque.jobs.codec import BadJobPayload, from_bus, to_bus
from disque.jobs.job import ACTIVE, BCAST_QUEUED, QUEUED, WAIT_REPL, Job
from disque.jobs.journal import REASON_HOLDERS_CHANGED
from disque.jobs.registry import JobRegistry
from disque.context.memory import MemoryAccount
from disque.queues.blocking import BlockedClients
from disque.queues.queue import PAUSE_IN
from disque.queues.queueset import QueueSet
from disque.protocol.resp import status
from disque.context.runtime import Runtime
from disque.context.stats import REPLICATION_WAIT_BUCKETS_MS, LatencyHistogram

REPLICATION_RETRY_MS: Final = 50


class Replication:
    """Copies of jobs on other nodes, and the producers waiting for them."""

    def __init__(self, runtime: Runtime, registry: JobRegistry, queues: QueueSet,
                 lifecycle: JobLifecycle, blocked: BlockedClients, membership: Membership,
                 outbox: Outbox, memory: MemoryAccount) -> None:
        self.runtime = runtime
        self.registry = registry
        self.queues = queues
        self.lifecycle = lifecycle
        self.blocked = blocked
        self.membership = membership
        self.outbox = outbox
        self.memory = memory
        # Synchronous ADDJOBs: how many waited for replicas, how many waits
        # failed (timeout, disconnection, LEAVING), and how long the
        # successful ones took (job creation to enough copies).
        self.waits = 0
        self.wait_failures = 0
        self.wait_latency = LatencyHistogram(REPLICATION_WAIT_BUCKETS_MS)

    def replicate(self, job: Job, count: int, noreply: bool) -> int:
        """Add up to ``count`` new holders and send REPLJOB; return how many were added."""
        delivered = job.delivered
        nodes = self.membership.nodes
        added = [nid for nid in self.membership.reachable
                 if nid not in delivered and nodes[nid].link]
        if len(added) > count:  # a random subset; when all are taken, order is moot
            self.runtime.rng.shuffle(added)
            del added[count:]
        if added:
            job.delivered = delivered + tuple(added)
        confirmed = job.confirmed or ()
        messages: dict[int, dict] = {}  # one message (packed once) per flag value
        own = self.runtime.node_id
        for node_id in job.delivered:
            if node_id == own:
                continue
            if node_id in confirmed and not added:
                continue
            flags = m.MFLAG_NOREPLY if noreply or node_id in confirmed else 0
            msg = messages.get(flags)
            if msg is None:
                payload = (next(iter(messages.values()))[m.JOB] if messages
                           else to_bus(job, self.runtime.now))
                msg = messages[flags] = {m.TYPE: m.REPLJOB, m.JOB: payload, m.MFLAGS: flags}
            self.outbox.send_to(node_id, msg)
        return len(added)

    def wait_for_replicas(self, client: ClientState, job: Job, external: bool, additional: int,
                          deadline: int) -> None:
        """A synchronous ADDJOB: hold ``job`` in wait-repl, ask ``additional``
        nodes for copies and park the producer until enough confirm."""
        self.ask_replicas(job, external, additional)
        self.blocked.block_for_replication(client, job.id, deadline)

    def ask_replicas(self, job: Job, external: bool, additional: int) -> None:
        """Hold ``job`` in wait-repl and ask ``additional`` nodes for copies (its
        producer waits: alone, or with the other jobs of its ADDJOBS)."""
        job.state = WAIT_REPL
        self.waits += 1
        job.confirmed = set() if external else {self.runtime.node_id}
        self.lifecycle.register_job(job)
        self.replicate(job, additional, False)

    def hand_off(self, job: Job, count: int, delay: int) -> None:
        """An asynchronous ADDJOB this node keeps no copy of: replicate it and
        ask one holder to queue it."""
        self.replicate(job, count, True)
        own = self.runtime.node_id
        holders = [n for n in job.delivered if n != own]
        if holders:
            target = holders[self.runtime.rng.randrange(len(holders))]
            self.outbox.send_to(target, {m.TYPE: m.ENQUEUE, m.ID: job.id, m.DELAY: delay})

    def retry_pending(self) -> None:
        """Client cron: one more target every 50 ms for each waiting ADDJOB."""
        now = self.runtime.now
        # Chosen before any is retried: every job of an ADDJOBS gets its target.
        due: list[tuple[bytes, Block]] = []
        for job_id, client in self.blocked.producers.items():
            block = client.blocked
            if block is not None and now - block.last_repl >= REPLICATION_RETRY_MS:
                due.append((job_id, block))
        for job_id, block in due:
            job = self.registry.by_id.get(job_id)
            if job is not None and self.replicate(job, 1, False):
                block.last_repl = now

    def replication_achieved(self, job: Job) -> None:
        """Enough copies exist: queue or hand off the job, then answer the producer."""
        job.state = ACTIVE
        # ctime is the creation's ms times 10^6 (JobRegistry.new_ctime).
        self.wait_latency.observe(self.runtime.now - job.ctime // 1_000_000)
        own = self.runtime.node_id
        if own not in job.delivered:
            self.blocked.release_producer(job.id, status(job.id))
            # External replication: one holder queues it, this node forgets it.
            holders = sorted(n for n in job.confirmed or () if n != own)
            if holders:
                target = holders[self.runtime.rng.randrange(len(holders))]
                self.outbox.send_to(target, {m.TYPE: m.ENQUEUE, m.ID: job.id,
                                             m.DELAY: job.delay})
            self.lifecycle.delete_job(job)
            return
        job.confirmed = None
        if job.delay == 0:
            self.lifecycle.enqueue_job(job)
        else:
            self.lifecycle.schedule_job(job)
        self.lifecycle.journal.job_stored(job)
        # After the record: it is written before the reply (spec: persistence.md §2).
        self.blocked.release_producer(job.id, status(job.id))

    def producer_gone(self, block: Block) -> None:
        """A waiting producer was let go (timeout, disconnection, LEAVING):
        its job goes too (an ADDJOBS's: those still waiting)."""
        if block.batch is not None:
            waiting = list(block.batch.waiting)
        elif block.job_id is not None:
            waiting = [block.job_id]
        else:
            return
        for job_id in waiting:
            job = self.registry.by_id.get(job_id)
            if job is not None:
                self.wait_failures += 1
                self.lifecycle.delete_job(job)

    # ------------------------------------------------------------ receivers

    def on_repljob(self, sender: bytes, msg: dict, link: Link) -> None:
        """Store a copy sent by the job's origin (spec §6.2)."""
        if self.memory.used > self.memory.warn_threshold or self.membership.leaving:
            return  # above 75 % of maxmemory (or leaving): no new copies here
        try:
            job = from_bus(msg[m.JOB], self.runtime.now, self.membership.nodes)
        except BadJobPayload:
            return  # spec §6.2: ignored unless it carries exactly one decodable job
        assert job.queue is not None  # from_bus always gives a queue
        queue = self.queues.by_name.get(job.queue)
        if queue is not None and queue.paused & PAUSE_IN:
            return
        local = self.registry.by_id.get(job.id)
        if local is not None:
            known = len(local.delivered)
            local.merge_delivered(job.delivered)
            if len(local.delivered) != known and (local.state == ACTIVE or local.state == QUEUED):
                # The AOF keeps a job's first LOADJOB: the wider list goes in as a
                # DELJOB and a new LOADJOB (a stale list after a restart left a
                # holder out of this node's SETACKs).
                journal = self.lifecycle.journal
                journal.job_removed(local, REASON_HOLDERS_CHANGED)
                journal.job_stored(local)
        else:
            job.flags |= BCAST_QUEUED
            self.lifecycle.set_received_qtime(job)
            self.lifecycle.register_job(job)
            self.lifecycle.journal.job_stored(job)
        if not msg.get(m.MFLAGS, 0) & m.MFLAG_NOREPLY:
            self.outbox.send_to(sender, m.job_message(m.GOTJOB, job.id))

    def on_gotjob(self, sender: bytes, msg: dict, link: Link) -> None:
        """A replica confirmed its copy (spec §6.3)."""
        job = self.registry.by_id.get(msg[m.ID])
        if job is None or job.state != WAIT_REPL or job.confirmed is None:
            return
        job.confirmed.add(sender)
        if len(job.confirmed) >= job.repl:
            self.replication_achieved(job)

    def on_enqueue(self, sender: bytes, msg: dict, link: Link) -> None:
        """The origin kept no copy and asks this holder to queue the job (spec §6.4).

        A job in wait-repl here is this node's own, its producer still
        waiting: only a forged ENQUEUE names it, and queueing it would take it
        out of wait-repl for good and leave the producer blocked (as YOURJOBS
        skips it)."""
        job = self.registry.by_id.get(msg[m.ID])
        if job is None or job.state != ACTIVE:
            return
        assert job.queue is not None
        queue = self.queues.by_name.get(job.queue)
        if queue is not None and queue.paused & PAUSE_IN:
            return
        job.flags &= ~BCAST_QUEUED
        delay = msg.get(m.DELAY, 0)
        if delay == 0:
            if not job.qtime:
                job.qtime = 1  # spec decision 1: let a RETRY 0 job be queued once
            job.state = ACTIVE
            self.lifecycle.enqueue_job(job)
        elif job.retry and job.qtime:
            job.qtime = self.runtime.now + delay * 1000
            self.lifecycle.schedule_job(job)
