"""Handing queued jobs to consumers: GETJOB's round-robin, consumers blocked
until jobs arrive (or their queue's delivery limit lets more out), and
asking other nodes when a queue runs dry.

spec: commands.md GETJOB, cluster-bus.md §6.7.
"""

from __future__ import annotations

from disque.cluster.federation import Federation
from disque.cluster.lifecycle import JobLifecycle
from disque.jobs.job import Job
from disque.jobs.replies import job_entry
from disque.queues.blocking import CLIENTS_WAITING, REACHED_ZERO, BlockedClients
from disque.queues.queue import PAUSE_OUT
from disque.queues.queueset import QueueSet
from disque.context.stats import JobCounters


class Consumers:
    """Delivery of jobs to GETJOB clients, waiting or not."""

    def __init__(self, queues: QueueSet, lifecycle: JobLifecycle, blocked: BlockedClients,
                 federation: Federation, counters: JobCounters | None = None) -> None:
        self.queues = queues
        self.counters = counters if counters is not None else JobCounters()
        self.lifecycle = lifecycle
        self.blocked = blocked
        self.federation = federation

    def collect_more(self, names: list[bytes], count: int, found: list[Job], start: int) -> int:
        """GETJOB's jobs, round-robin over the queues, one job per queue per
        round (spec: GETJOB); queues with nothing to give ask other nodes.
        In parts: add jobs to ``found`` until it holds ``count``, going on
        from the queue at ``start`` (a round begun by an earlier part goes
        on); return where the next part starts, or -1 once a whole round
        gave nothing."""
        queues = self.queues.by_name
        pop_job = self.lifecycle.pop_job
        need_jobs = self.federation.need_jobs
        progress = start > 0  # a part stops right after a queue gave a job
        while True:
            for position in range(start, len(names)):
                name = names[position]
                queue = queues.get(name)
                if queue is None or not queue.jobs or queue.paused & PAUSE_OUT:
                    if queue is None:
                        queue = self.queues.create(name)
                    need_jobs(queue, CLIENTS_WAITING)
                    continue
                limit = queue.limit
                if limit is not None and not limit.take(self.queues.runtime.now):
                    self.queues.throttle(queue)  # it has jobs: no other node is asked
                    continue
                found.append(pop_job(queue))
                self.counters.delivered += 1
                if not queue.jobs:
                    need_jobs(queue, REACHED_ZERO)
                if len(found) == count:
                    return position + 1
                progress = True
            if not progress:
                return -1
            progress = False
            start = 0

    def serve_ready(self) -> None:
        """Hand jobs to clients blocked on queues that just received some."""
        ready = self.queues.ready
        blocked = self.blocked
        pop_job = self.lifecycle.pop_job
        while ready:
            queue = next(iter(ready))
            del ready[queue]
            while queue.blocked and queue.jobs and not queue.paused & PAUSE_OUT:
                limit = queue.limit
                if limit is not None and not limit.take(self.queues.runtime.now):
                    self.queues.throttle(queue)
                    break
                client = blocked.first_waiter(queue)
                block = client.blocked
                job = pop_job(queue)
                self.counters.delivered += 1
                reply = b"*1\r\n" + (job_entry(job) if block is None else
                                       job_entry(job, block.withcounters, block.withheaders))
                blocked.unblock(client, reply)
                if not queue.jobs:
                    self.federation.need_jobs(queue, REACHED_ZERO)
