"""MemoryPolicy on its own: only what is safe to lose goes, and only while needed."""

from __future__ import annotations

from dataclasses import dataclass

from disque.state.eviction import MemoryPolicy
from disque.jobs.journal import REASON_EVICTED
from tests.unit.cluster.wiring import Parts, make_job


@dataclass
class Settings:
    maxmemory_policy: str = "acks"


def test_acked_jobs_are_evicted_oldest_first_until_under_the_threshold():
    parts = Parts(maxmemory=1_000_000)
    jobs = [make_job(parts, tag=i, body=b"x" * 50_000) for i in range(8)]
    for job in jobs:
        parts.add_new(job)
    for job in jobs[:6]:
        parts.lifecycle.ack_job(job)
    policy = MemoryPolicy(Settings(), parts.memory, parts.registry, parts.lifecycle, parts.queues)
    parts.memory.set_limit(1_000_000)
    over = parts.memory.used > parts.memory.evict_threshold
    assert over and policy.free_memory()
    gone = [job for job in jobs if parts.registry.get(job.id) is None]
    assert gone == jobs[:len(gone)] and 0 < len(gone) <= 6
    # An acked job left the journal with its ACK: evicting it writes nothing more.
    assert [e for e in parts.journal.events if e[0] == "removed" and e[2] == REASON_EVICTED] == []
    assert parts.registry.get(jobs[7].id) is not None  # never acked: kept


def test_noeviction_keeps_everything():
    parts = Parts(maxmemory=100_000)
    job = make_job(parts, body=b"x" * 200_000)
    parts.add_new(job)
    parts.lifecycle.ack_job(job)
    policy = MemoryPolicy(Settings("noeviction"), parts.memory, parts.registry,
                          parts.lifecycle, parts.queues)
    assert not policy.free_memory() and parts.registry.get(job.id) is job
