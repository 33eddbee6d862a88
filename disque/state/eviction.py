"""Memory eviction above the 95 % level (spec: jobs-and-ids.md §8, decision 13).

Only what is safe to lose is evicted: acked jobs (and dummy ACKs), RETRY 0
jobs this node already delivered, and idle empty queues. Candidates are
tracked as they appear (``JobRegistry.evictable``), so a node full of
jobs that must be kept answers -OOM at once instead of scanning its
dataset on every command.
"""

from __future__ import annotations

from typing import Final, Protocol

from disque.cluster.lifecycle import JobLifecycle
from disque.jobs.journal import REASON_EVICTED
from disque.jobs.registry import JobRegistry, is_evictable
from disque.context.memory import MemoryAccount
from disque.queues.queueset import QueueSet
from disque.context.stats import JobCounters

MAX_EVICTIONS_PER_CALL: Final = 10000
IDLE_QUEUE_LIMIT_S: Final = 2
NOEVICTION: Final = "noeviction"


class EvictionSettings(Protocol):
    """The configuration eviction reads."""

    maxmemory_policy: str


class MemoryPolicy:
    """What the node drops when the dataset passes the eviction threshold."""

    def __init__(self, settings: EvictionSettings, memory: MemoryAccount, registry: JobRegistry,
                 lifecycle: JobLifecycle, queues: QueueSet,
                 counters: JobCounters | None = None) -> None:
        self.settings = settings
        self.counters = counters if counters is not None else JobCounters()
        self.memory = memory
        self.registry = registry
        self.lifecycle = lifecycle
        self.queues = queues

    def free_memory(self) -> bool:
        """Evict what is safe to evict until at or below 95 %; report success."""
        if self.settings.maxmemory_policy == NOEVICTION:
            return False
        memory = self.memory
        candidates = self.registry.evictable
        budget = MAX_EVICTIONS_PER_CALL
        while memory.used > memory.evict_threshold and candidates and budget:
            job = next(iter(candidates))
            del candidates[job]
            if job.seq >= 0 and is_evictable(job):
                self.lifecycle.delete_job(job, reason=REASON_EVICTED)
                self.counters.evicted += 1
                budget -= 1
        if memory.used > memory.evict_threshold and self.queues:
            self.queues.collect_idle(IDLE_QUEUE_LIMIT_S)
        return memory.used <= memory.evict_threshold
