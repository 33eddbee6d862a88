"""Dataset size estimate and memory warning levels (spec: jobs-and-ids.md §8).

``used_memory`` is an estimate of what the dataset costs in this process,
not the RSS: it grows and shrinks with jobs and queues, so maxmemory
thresholds behave predictably (spec decision 7). The per-object costs
are what CPython actually spends on a job (object, ID, skiplist links,
timer and registry entries) measured on 64-bit builds.
"""

from __future__ import annotations

from typing import Final, Protocol

BASE_MEMORY: Final = 786432  # interpreter, tables and buffers of an empty node
JOB_COST: Final = 420  # Job object + ID + registry, skiplist, timer and scan entries
DUMMY_ACK_COST: Final = 300
QUEUE_COST: Final = 700  # Queue object + skiplist heads + registry entry


def job_cost(job: _Sized) -> int:
    """Bytes charged for one job record."""
    if job.body is None:
        return DUMMY_ACK_COST
    return JOB_COST + len(job.body)


def queue_cost(name: bytes) -> int:
    """Bytes charged for one queue object."""
    return QUEUE_COST + len(name)


def warning_level(used: int, maxmemory: int) -> int:
    """0 below 75 %, 1 above 75 %, 2 above 95 % (integer thresholds like the original)."""
    if maxmemory <= 0:
        return 0
    step = maxmemory // 100
    if used > step * 95:
        return 2
    if used > step * 75:
        return 1
    return 0


def format_human(n: int) -> str:
    """used_memory_human style: 755.34K, 1.20M, ..."""
    if n < 1024:
        return "%dB" % n
    for unit, scale in (("K", 1024), ("M", 1024 ** 2), ("G", 1024 ** 3), ("T", 1024 ** 4)):
        if n < scale * 1024 or unit == "T":
            return "%.2f%s" % (n / scale, unit)
    return "%dB" % n


class _Sized(Protocol):
    body: bytes | None


class MemoryAccount:
    """The dataset's estimated size and the maxmemory thresholds it is held to.

    Parts that create or drop jobs and queues add or subtract their cost
    here; commands and the cron compare ``used`` with the thresholds.
    """

    __slots__ = ("used", "peak", "maxmemory", "warn_threshold", "evict_threshold")

    def __init__(self, maxmemory: int) -> None:
        self.used = BASE_MEMORY
        self.peak = 0
        self.maxmemory = 0
        self.warn_threshold: float = float("inf")
        self.evict_threshold: float = float("inf")
        self.set_limit(maxmemory)

    def set_limit(self, maxmemory: int) -> None:
        """Recompute the 75 % / 95 % thresholds for ``maxmemory`` (0: no limit)."""
        self.maxmemory = maxmemory
        if maxmemory > 0:
            self.warn_threshold = float((maxmemory // 100) * 75)
            self.evict_threshold = float((maxmemory // 100) * 95)
        else:
            self.warn_threshold = self.evict_threshold = float("inf")

    def level(self) -> int:
        """Memory warning level 0, 1 (>75 %) or 2 (>95 %)."""
        return warning_level(self.used, self.maxmemory)

    def update_peak(self) -> int:
        """The highest ``used`` seen when asked (INFO memory)."""
        if self.used > self.peak:
            self.peak = self.used
        return self.peak

    def reset(self) -> None:
        """An empty dataset (DEBUG FLUSHALL, CLUSTER RESET)."""
        self.used = BASE_MEMORY
