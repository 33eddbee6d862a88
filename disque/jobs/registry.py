"""The jobs a node holds, by ID, with what must follow each one in or out.

Adding or removing a job here keeps the scan index (JSCAN, AOF rewrite),
the eviction candidates and the memory estimate in step. It knows no
job state machine: ``disque.cluster.lifecycle`` decides when a job comes
and goes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from disque.jobs.job import ACKED, DELIVERED, STATE_NAMES, Job
from disque.context.memory import DUMMY_ACK_COST, JOB_COST, MemoryAccount, job_cost
from disque.jobs.scanindex import ScanIndex


def is_evictable(job: Job) -> bool:
    """Acked, or at-most-once and already handed to a consumer here."""
    return job.state == ACKED or bool(job.retry == 0 and job.flags & DELIVERED)


class JobRegistry(Mapping[bytes, Job]):
    """Jobs by ID, read-only as a mapping (commands, tests). ``by_id`` is the
    dict behind it, for hot paths; it changes only through here."""

    __slots__ = ("by_id", "scan", "evictable", "memory", "last_ctime", "_ctime_ms")

    def __init__(self, memory: MemoryAccount) -> None:
        self.by_id: dict[bytes, Job] = {}
        self.scan: ScanIndex[Job] = ScanIndex()
        # Jobs safe to drop under memory pressure, oldest candidate first.
        self.evictable: dict[Job, None] = {}
        self.memory = memory
        self.last_ctime = 0
        self._ctime_ms = -1  # the millisecond of the last new_ctime

    def __getitem__(self, job_id: bytes) -> Job:
        return self.by_id[job_id]

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.by_id

    def __len__(self) -> int:
        return len(self.by_id)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.by_id)

    def new_ctime(self, now: int) -> int:
        """Creation time: ms × 10^6, strictly increasing on this node.

        The multiplication runs once per millisecond, not per job: in the
        compiled core a product this large goes through Python ints."""
        if now != self._ctime_ms:
            self._ctime_ms = now
            ctime = now * 1_000_000
            if ctime > self.last_ctime:
                self.last_ctime = ctime
                return ctime
        ctime = self.last_ctime + 1  # >= now * 10^6 since the first call in this ms
        self.last_ctime = ctime
        return ctime

    def add(self, job: Job) -> None:
        """Hold ``job``: indexed, charged, and an eviction candidate if it may go."""
        self.by_id[job.id] = job
        self.scan.add(job)
        body = job.body
        self.memory.used += JOB_COST + len(body) if body is not None else DUMMY_ACK_COST
        if job.state == ACKED or (job.retry == 0 and job.flags & DELIVERED):
            self.evictable[job] = None

    def add_new(self, job: Job) -> None:
        """``add`` for a job just created here (it has a body, it is not acked,
        and it was never delivered): the ADDJOB hot path."""
        self.by_id[job.id] = job
        self.scan.add(job)
        self.memory.used += JOB_COST + len(job.body or b"")

    def remove(self, job: Job) -> None:
        """Forget ``job`` and give back what it cost."""
        del self.by_id[job.id]
        self.scan.remove(job)
        self.evictable.pop(job, None)
        self.memory.used -= job_cost(job)

    def count_states(self) -> list[int]:
        """How many jobs are in each state (indexed by state: wait-repl,
        active, queued, acked). One pass over the jobs, for a metrics
        scrape: compiled, a few ms per million jobs."""
        counts = [0] * len(STATE_NAMES)
        for job in self.by_id.values():
            counts[job.state] += 1
        return counts

    def mark_evictable(self, job: Job) -> None:
        """``job`` became safe to drop under memory pressure."""
        self.evictable[job] = None

    def clear(self) -> None:
        """Forget every job without per-job bookkeeping (DEBUG FLUSHALL)."""
        self.by_id.clear()
        self.scan = ScanIndex()
        self.evictable.clear()
