"""One timer structure for every job: buckets of jobs keyed by due time.

Each job has at most one pending action time (``job.awakeme``, spec:
jobs-and-ids.md §6). Jobs are grouped in 8 ms buckets held in a dict,
with a heap of bucket numbers; rescheduling moves a job between two sets
in O(1) and leaves no garbage behind, unlike a heap of entries.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from disque.jobs.job import Job

_SHIFT = 3  # 8 ms per bucket
NEVER = 1 << 62


class TimerWheel:
    """Jobs by ``awakeme`` (ms, 0 = not scheduled)."""

    __slots__ = ("_buckets", "_heap", "earliest")

    def __init__(self) -> None:
        self._buckets: dict[int, set[Job]] = {}
        self._heap: list[int] = []
        self.earliest = NEVER  # lower bound of the next due time, cheap to read

    def __len__(self) -> int:
        return sum(len(b) for b in self._buckets.values())

    def schedule(self, item: Job, when: int) -> None:
        """(Re)schedule ``item`` at ``when`` ms."""
        old = item.awakeme
        if old:
            if old == when:
                return
            bucket = self._buckets.get(old >> _SHIFT)
            if bucket is not None:
                bucket.discard(item)
        item.awakeme = when
        key = when >> _SHIFT
        bucket = self._buckets.get(key)
        if bucket is None:
            self._buckets[key] = {item}
            heapq.heappush(self._heap, key)
            if when < self.earliest:
                self.earliest = key << _SHIFT
        else:
            bucket.add(item)

    def cancel(self, item: Job) -> None:
        """Forget ``item``'s pending time."""
        old = item.awakeme
        if old:
            bucket = self._buckets.get(old >> _SHIFT)
            if bucket is not None:
                bucket.discard(item)
            item.awakeme = 0

    def next_due(self) -> int:
        """Earliest due time in ms (NEVER when nothing is scheduled); refreshes
        ``earliest`` by dropping emptied buckets."""
        heap = self._heap
        while heap:
            key = heap[0]
            if self._buckets.get(key):
                self.earliest = key << _SHIFT
                return self.earliest
            heapq.heappop(heap)
            self._buckets.pop(key, None)
        self.earliest = NEVER
        return NEVER

    def pop_due(self, now: int) -> list[Job]:
        """Remove and return the items due at ``now``, earliest buckets first.

        Their ``awakeme`` is reset to 0; the caller reschedules what needs it.
        """
        due: list[Job] = []
        heap = self._heap
        buckets = self._buckets
        limit = now >> _SHIFT
        ready: set[Job] | list[Job]
        while heap and heap[0] <= limit:
            key = heap[0]
            bucket = buckets.get(key)
            if not bucket:
                heapq.heappop(heap)
                buckets.pop(key, None)
                continue
            if key < limit:
                heapq.heappop(heap)
                del buckets[key]
                ready = bucket
            else:
                ready = [item for item in bucket if item.awakeme <= now]
                if not ready:
                    break
                bucket.difference_update(ready)
            for item in ready:
                item.awakeme = 0
            due.extend(ready)
        due.sort(key=_awake_order)
        self.earliest = heap[0] << _SHIFT if heap else NEVER
        return due

    def clear(self) -> None:
        """Drop every pending timer (DEBUG FLUSHALL)."""
        for bucket in self._buckets.values():
            for item in bucket:
                item.awakeme = 0
        self._buckets.clear()
        self._heap.clear()
        self.earliest = NEVER


def _awake_order(item: Job) -> tuple[int, bytes]:
    # Sets iterate in address order; sorting keeps simulations reproducible.
    return item.ctime, item.id
