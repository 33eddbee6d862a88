"""Federation: moving queued jobs to the nodes where consumers wait.

spec: cluster-bus.md §6.7. A node with waiting consumers
asks others for jobs (NEEDJOBS); nodes with queued jobs answer with a
batch (YOURJOBS). Broadcast requests back off from 2 s to 30 s, requests
to nodes that recently supplied jobs from 25 ms to 2 s.
"""

from __future__ import annotations

from typing import Final

from disque.cluster import messages as m
from disque.cluster.lifecycle import JobLifecycle
from disque.cluster.membership import LEAVING, Membership
from disque.cluster.outbox import Outbox
from disque.cluster.transport import Link
from disque.jobs.codec import FIELDS, BadJobPayload, from_bus, to_bus
from disque.jobs.job import ACKED, ACTIVE, BCAST_QUEUED, QUEUED, WAIT_REPL, Job, extras_of
from disque.jobs.journal import REASON_MOVED
from disque.jobs.registry import JobRegistry
from disque.queues.blocking import CLIENTS_WAITING, REACHED_ZERO, BlockedClients
from disque.queues.queue import PAUSE_OUT, Queue
from disque.queues.queueset import QueueSet
from disque.context.runtime import Runtime

MIN_REQUEST: Final = 5
MAX_REQUEST: Final = 100
BCAST_DELAY_MS: Final = 2000
BCAST_MAX_DELAY_MS: Final = 30000
ADHOC_DELAY_MS: Final = 25
ADHOC_MAX_DELAY_MS: Final = 2000
RESPONDER_VALIDITY_S: Final = 5
INTEREST_TTL_MS: Final = 2500  # a requester renews its NEEDJOBS at least this often while waiting


def _share(qlen: int, count: int) -> int:
    """How many of ``qlen`` queued jobs a request for ``count`` gets (§6.7
    receiver step 2): all it asks for from a long queue, else half, at least one."""
    if qlen >= 2 * count:
        return count
    return max(qlen // 2, 1)


class Interest:
    """Open requests of other nodes for jobs of a queue, and the queues that
    got jobs since: what ``Federation.push_to_interested`` serves."""

    __slots__ = ("wants", "ready")

    def __init__(self) -> None:
        # queue name -> {node id: (expire ms, count)}
        self.wants: dict[bytes, dict[bytes, tuple[int, int]]] = {}
        self.ready: dict[Queue, None] = {}

    def job_queued(self, queue: Queue) -> None:
        """A job was queued in ``queue``, which another node waits on: push it."""
        self.ready[queue] = None

    def clear(self) -> None:
        """Forget every request (DEBUG FLUSHALL)."""
        self.wants.clear()
        self.ready.clear()


class Federation:
    """NEEDJOBS / YOURJOBS."""

    def __init__(self, runtime: Runtime, registry: JobRegistry, queues: QueueSet,
                 lifecycle: JobLifecycle, blocked: BlockedClients, membership: Membership,
                 outbox: Outbox, interest: Interest) -> None:
        self.runtime = runtime
        self.registry = registry
        self.queues = queues
        self.lifecycle = lifecycle
        self.blocked = blocked
        self.membership = membership
        self.outbox = outbox
        self.interest = interest
        self.jobs_imported = 0  # queued here from other nodes' YOURJOBS
        self.jobs_exported = 0  # popped here for other nodes' NEEDJOBS

    def need_jobs(self, queue: Queue, reason: int) -> None:
        """Ask other nodes for jobs of ``queue`` if the backoff allows it.

        Called for every GETJOB that finds the queue empty and every pop
        that empties it, so the common case (nothing due) returns before
        the import rate and the request size are computed.
        """
        membership = self.membership
        if membership.leaving or len(membership.nodes) == 1:
            return
        now = self.runtime.now
        responders = queue.responders
        if responders:
            oldest = now // 1000 - RESPONDER_VALIDITY_S
            if min(responders.values()) < oldest:
                for node_id in [n for n, t in responders.items() if t < oldest]:
                    del responders[node_id]
        # spec §6.7 step 2: a queue that reached zero asks only while it imports.
        rate = queue.import_rate(now) if reason == REACHED_ZERO else None
        if rate == 0:
            return
        bcast_due = now - queue.needjobs_bcast_time > min(
            BCAST_DELAY_MS << min(queue.needjobs_bcast_attempt, 5), BCAST_MAX_DELAY_MS)
        adhoc_due = bool(responders) and (
            reason == REACHED_ZERO or now - queue.needjobs_adhoc_time > min(
                ADHOC_DELAY_MS << min(queue.needjobs_adhoc_attempt, 7), ADHOC_MAX_DELAY_MS))
        if not (bcast_due or adhoc_due):
            return
        if rate is None:
            rate = queue.import_rate(now)
        if bcast_due:
            queue.needjobs_bcast_time = now
            queue.needjobs_bcast_attempt += 1
            self.outbox.broadcast({m.TYPE: m.NEEDJOBS, m.QUEUE: queue.name, m.COUNT: 1})
        if adhoc_due and responders:  # responders: for the type checker
            to_fetch = min(max(rate // len(responders), MIN_REQUEST), MAX_REQUEST)
            queue.needjobs_adhoc_time = now
            queue.needjobs_adhoc_attempt += 1
            msg = {m.TYPE: m.NEEDJOBS, m.QUEUE: queue.name, m.COUNT: to_fetch}
            for node_id in list(responders):
                self.outbox.send_to(node_id, msg)

    def ask_jobs_for_blocked(self) -> None:
        """Client cron: keep asking for the queues blocked consumers wait on."""
        seen = set()
        queues = self.queues.by_name
        for client in self.blocked.clients:
            block = client.blocked
            if block is None:
                continue
            for queue in block.queues:
                if queue.limit is not None and queue.jobs:
                    continue  # its consumers wait for the limit, not for jobs
                if queue.name not in seen and queue.name in queues:
                    seen.add(queue.name)
                    self.need_jobs(queue, CLIENTS_WAITING)

    def on_needjobs(self, sender: bytes, msg: dict, link: Link) -> None:
        """Give a batch of queued jobs to a node whose consumers wait (§6.7).

        What this node cannot give now (all of it when the queue is empty)
        stays an open request for a moment, and jobs queued meanwhile are
        pushed to the requester at once (``push_to_interested``): consumers
        elsewhere then see new jobs within a network round trip instead of
        waiting here for their next request.
        """
        name = msg[m.QUEUE]
        queue = self.queues.by_name.get(name)
        if (queue is not None and queue.paused & PAUSE_OUT) or not self.outbox.has_link(sender):
            return
        count = min(max(msg[m.COUNT], 1), MAX_REQUEST)
        now = self.runtime.now
        if queue is not None and queue.jobs:
            if queue.import_rate(now) > 0:
                return
            count -= self._give_jobs(queue, sender, _share(len(queue.jobs), count))
            if not count:
                return
        wants = self.interest.wants.get(name)
        if wants is None:
            wants = self.interest.wants[name] = {}
        wants[sender] = (now + INTEREST_TTL_MS, count)

    def _give_jobs(self, queue: Queue, node_id: bytes, count: int) -> int:
        """Pop up to ``count`` jobs and send them in one YOURJOBS; return how many."""
        pop_job = self.lifecycle.pop_job
        jobs = [pop_job(queue) for _ in range(min(count, len(queue.jobs)))]
        self.jobs_exported += len(jobs)
        for job in jobs:
            if job.retry:
                # The requester now holds a copy too: list it, or an ACK garbage
                # collected through nodes-delivered would never reach it and it
                # would redeliver an acked job (spec: cluster-bus.md §6.6; C
                # has this hole). Nodes with the shorter list learn it from the
                # SETACK takeover rule (§6.6 step 4).
                job.add_delivered(node_id)
        now = self.runtime.now
        self.outbox.send_to(node_id, {m.TYPE: m.YOURJOBS, m.JOBS: [to_bus(j, now) for j in jobs]})
        for job in jobs:
            if job.retry == 0:
                self.lifecycle.delete_job(job, reason=REASON_MOVED)  # at-most-once: one place only
        return len(jobs)

    def push_to_interested(self) -> None:
        """Send newly queued jobs to nodes that asked for them and wait.

        Unlike a NEEDJOBS answer (§6.7 receiver step 2), a push hands out all
        the open requests cover, split evenly among the requesters: a half
        kept back would only wait here for the next push, while local
        consumers are served first anyway (``queue.blocked``).
        """
        ready = self.interest.ready
        all_wants = self.interest.wants
        now = self.runtime.now
        while ready:
            queue = next(iter(ready))
            del ready[queue]
            wants = all_wants.get(queue.name)
            if not wants or self.queues.by_name.get(queue.name) is not queue:
                continue
            waiting = len(wants)  # requesters not yet served in this pass
            for node_id in list(wants):
                if (not queue.jobs or queue.blocked or queue.paused & PAUSE_OUT
                        or queue.import_rate(now)):
                    break
                expire, count = wants.pop(node_id)
                if self._is_leaving(node_id):
                    waiting -= 1
                    continue  # a leaving node never imports (spec §7): its request goes
                share = -(-len(queue.jobs) // waiting)  # rounded up: nothing stays behind
                waiting -= 1
                if expire >= now and self.outbox.has_link(node_id):
                    count -= self._give_jobs(queue, node_id, min(share, count))
                    if count:
                        wants[node_id] = (expire, count)  # now last: requesters take turns
            if not wants:
                del all_wants[queue.name]

    def _is_leaving(self, node_id: bytes) -> bool:
        """The node said it is leaving the cluster (its flag, from gossip)."""
        node = self.membership.nodes.get(node_id)
        return node is not None and bool(node.flags & LEAVING)

    def expire_interest(self) -> None:
        """Cron: forget requests nobody renewed."""
        now = self.runtime.now
        all_wants = self.interest.wants
        for name in list(all_wants):
            wants = all_wants[name]
            for node_id in [n for n, (expire, _) in wants.items() if expire < now]:
                del wants[node_id]
            if not wants:
                del all_wants[name]

    def _take_newer_move(self, job: Job, payload: list) -> bool:
        """A copy held here meets the sender's, which has extension fields:
        when the sender's is a newer dead-letter generation (a move or a
        redrive this node missed), take its queue and counters first, so the
        job is queued where its holders agree. False if it does not decode."""
        try:
            received = from_bus(payload, self.runtime.now, self.membership.nodes)
        except BadJobPayload:
            return False
        theirs = extras_of(received)
        ours = extras_of(job)
        if (theirs is not None and theirs.moves > (ours.moves if ours is not None else 0)
                and (job.state == ACTIVE or job.state == QUEUED)):
            queue = received.queue
            assert queue is not None  # from_bus always gives one
            self.lifecycle.apply_state(job, (queue, theirs.origin, theirs.reason, theirs.moves,
                                             received.nacks, received.adeliv, received.retry,
                                             theirs.nack_reason))
        return True

    def on_yourjobs(self, sender: bytes, msg: dict, link: Link) -> None:
        """Queue jobs received from another node (§6.7)."""
        now = self.runtime.now
        jobs = self.registry.by_id
        lifecycle = self.lifecycle
        for payload in msg.get(m.JOBS) or ():
            # A copy held here wins over the received one (step 1), so a
            # replica skips decoding what it would discard.
            job_id = payload[0] if type(payload) is list and payload else None
            job: Job | None = jobs.get(job_id) if type(job_id) is bytes else None
            if job is None:
                try:
                    received = from_bus(payload, now, self.membership.nodes)
                except BadJobPayload:
                    break
                job = jobs.get(received.id)
            if job is None:
                job = received
                lifecycle.set_received_qtime(job)
                lifecycle.register_job(job)
            elif len(payload) > FIELDS and not self._take_newer_move(job, payload):
                break
            if job.state == ACKED:
                continue  # spec decision 5: never resurrect an acked job
            if job.state == WAIT_REPL:
                # Its producer still waits here: queueing it would take it out
                # of wait-repl for good and leave the producer blocked.
                continue
            job.flags &= ~BCAST_QUEUED
            if job.retry == 0:
                job.qtime = 1  # spec decision 1: a RETRY 0 job is queued exactly once here
            if not lifecycle.enqueue_job(job):
                continue
            assert job.queue is not None
            queue = self.queues.by_name[job.queue]
            if queue.responders is None:
                queue.responders = {}
            if sender not in queue.responders:
                queue.needjobs_bcast_attempt = 0
            queue.responders[sender] = now // 1000
            queue.count_import(now)
            self.jobs_imported += 1
            queue.needjobs_adhoc_attempt = 0
