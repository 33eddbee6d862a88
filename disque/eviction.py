"""Memory eviction above the 95 % level (spec: jobs-and-ids.md §8, decision 13).

Only what is safe to lose is evicted: acked jobs (and dummy ACKs), RETRY 0
jobs this node already delivered, and idle empty queues. Candidates are
tracked as they appear (``node.evictable``), so a node full of jobs that
must be kept answers -OOM at once instead of scanning its dataset on
every command.
"""

from __future__ import annotations

from disque.aof.format import REASON_EVICTED
from disque.jobs.job import ACKED, DELIVERED

MAX_EVICTIONS_PER_CALL = 10000
IDLE_QUEUE_LIMIT_S = 2


def is_evictable(job) -> bool:
    """Acked, or at-most-once and already handed to a consumer here."""
    return job.state == ACKED or (job.retry == 0 and job.flags & DELIVERED)


def evict(node) -> bool:
    """Free memory until usage is at or below the 95 % threshold; report success."""
    if node.config.maxmemory_policy == "noeviction":
        return False
    candidates = node.evictable
    budget = MAX_EVICTIONS_PER_CALL
    while node.used_memory > node.mem_evict_threshold and candidates and budget:
        job = next(iter(candidates))
        del candidates[job]
        if job.seq >= 0 and is_evictable(job):
            node.delete_job(job, reason=REASON_EVICTED)
            budget -= 1
    if node.used_memory > node.mem_evict_threshold and node.queues:
        node.collect_idle_queues(IDLE_QUEUE_LIMIT_S)
    return node.used_memory <= node.mem_evict_threshold
