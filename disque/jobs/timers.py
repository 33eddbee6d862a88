"""One timer structure for every job: lists of jobs in 8 ms buckets.

Each job has at most one pending action time (``job.awakeme``, spec:
jobs-and-ids.md §6). Jobs are grouped in 8 ms buckets held in a dict,
with a heap of bucket numbers, so scheduling a job costs one list append.
Rescheduling or cancelling leaves the old list entry behind: an entry
counts only while its job's ``awakeme`` still falls in that bucket, and a
bucket whose stale entries outnumber the live ones is compacted, so a
deleted job is not kept alive by a far-off bucket.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from disque.jobs.job import Job

_SHIFT: Final = 3  # 8 ms per bucket
NEVER: Final = 1 << 62


class _Bucket:
    """The jobs due in one 8 ms span; ``live`` counts those still due there,
    ``first`` is a lower bound of their due times (exact after a partial pop)."""

    __slots__ = ("jobs", "live", "first")

    def __init__(self, first: int) -> None:
        self.jobs: list[Job] = []
        self.live = 0
        self.first = first


class TimerWheel:
    """Jobs by ``awakeme`` (ms, 0 = not scheduled)."""

    __slots__ = ("_buckets", "_heap", "earliest")

    def __init__(self) -> None:
        self._buckets: dict[int, _Bucket] = {}
        self._heap: list[int] = []  # bucket numbers, one per bucket
        self.earliest = NEVER  # lower bound of the next due time, cheap to read

    def __len__(self) -> int:
        return sum(b.live for b in self._buckets.values())

    def __contains__(self, item: Job) -> bool:
        bucket = self._buckets.get(item.awakeme >> _SHIFT)
        return bool(item.awakeme) and bucket is not None and item in bucket.jobs

    def schedule(self, item: Job, when: int) -> None:
        """(Re)schedule ``item`` at ``when`` ms."""
        key = when >> _SHIFT
        old = item.awakeme
        item.awakeme = when
        buckets = self._buckets
        if old and old >> _SHIFT == key:
            bucket = buckets[key]  # same bucket: its entry stands
        else:
            if old:
                self._leave(old >> _SHIFT)
            found = buckets.get(key)
            if found is None:
                found = buckets[key] = _Bucket(when)
                heapq.heappush(self._heap, key)
            bucket = found
            bucket.jobs.append(item)
            bucket.live += 1
        if when < bucket.first:
            bucket.first = when
        if when < self.earliest:
            self.earliest = when

    def cancel(self, item: Job) -> None:
        """Forget ``item``'s pending time."""
        old = item.awakeme
        if old:
            item.awakeme = 0
            self._leave(old >> _SHIFT)

    def _leave(self, key: int) -> None:
        """A job's awakeme moved out of bucket ``key``: its entry went stale."""
        bucket = self._buckets[key]
        live = bucket.live = bucket.live - 1
        jobs = bucket.jobs
        if not live:
            jobs.clear()
        elif live * 2 < len(jobs):
            bucket.jobs = _live_entries(jobs, key)

    def next_due(self) -> int:
        """Earliest due time in ms (NEVER when nothing is scheduled); refreshes
        ``earliest`` by dropping emptied buckets."""
        heap = self._heap
        buckets = self._buckets
        while heap:
            bucket = buckets[heap[0]]
            if bucket.live:
                self.earliest = bucket.first
                return bucket.first
            del buckets[heapq.heappop(heap)]
        self.earliest = NEVER
        return NEVER

    def pop_due(self, now: int) -> list[Job]:
        """Remove and return the items due at ``now``: earliest bucket first,
        in the order they were scheduled within a bucket.

        Their ``awakeme`` is reset to 0; the caller reschedules what needs it.
        """
        due: list[Job] = []
        heap = self._heap
        buckets = self._buckets
        limit = now >> _SHIFT
        append = due.append
        while heap and heap[0] <= limit:
            key = heap[0]
            bucket = buckets[key]
            if key < limit:
                heapq.heappop(heap)
                del buckets[key]
                for item in bucket.jobs:
                    if item.awakeme >> _SHIFT == key:  # 0 once popped: duplicates skip
                        item.awakeme = 0
                        append(item)
                continue
            if bucket.first > now:
                break
            waiting: list[Job] = []
            first = NEVER
            for item in bucket.jobs:
                awake = item.awakeme
                if awake >> _SHIFT == key:
                    if awake <= now:
                        item.awakeme = 0
                        append(item)
                    else:
                        waiting.append(item)
                        if awake < first:
                            first = awake
            if not waiting:
                heapq.heappop(heap)
                del buckets[key]
                continue
            # The rest of the bucket is due later: arm the next timer at its
            # exact time, not at the bucket's start (which would spin).
            bucket.jobs = _live_entries(waiting, key)
            bucket.live = len(bucket.jobs)
            bucket.first = first
            break
        self.earliest = buckets[heap[0]].first if heap else NEVER
        return due

    def clear(self) -> None:
        """Drop every pending timer (DEBUG FLUSHALL)."""
        for key, bucket in self._buckets.items():
            for item in bucket.jobs:
                if item.awakeme >> _SHIFT == key:
                    item.awakeme = 0
        self._buckets.clear()
        self._heap.clear()
        self.earliest = NEVER


def _live_entries(jobs: list[Job], key: int) -> list[Job]:
    """The jobs of bucket ``key`` still due there, each once (a job that left
    and came back has two entries)."""
    return list(dict.fromkeys([job for job in jobs if job.awakeme >> _SHIFT == key]))
