"""The queues of one node: creation, pause, idle garbage collection, and
which queues have consumers that can be served now.

spec: jobs-and-ids.md §7, commands.md PAUSE.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from typing import Final

from disque.context.memory import MemoryAccount, queue_cost
from disque.queues.queue import PAUSE_OUT, Queue
from disque.context.runtime import Runtime
from disque.jobs.scanindex import ScanIndex

IDLE_LIMITS_S: Final = (300, 10, 2)  # by memory warning level
GC_SAMPLE: Final = 64  # queues looked at per pass, more while >10 % of them are collectable
GC_MAX_VISITS: Final = 4096
BLOCKED_QUEUE_IDLE_S: Final = 300  # a queue whose last waiter left goes when this idle


class QueueSet(Mapping[bytes, Queue]):
    """Queue objects by name, read-only as a mapping (commands, tests).
    ``by_name`` is the dict behind it, for hot paths; it changes only through here."""

    __slots__ = ("by_name", "scan", "gc_cursor", "ready", "memory", "runtime")

    def __init__(self, runtime: Runtime, memory: MemoryAccount) -> None:
        self.by_name: dict[bytes, Queue] = {}
        self.scan: ScanIndex[Queue] = ScanIndex()
        self.gc_cursor = 0
        # Queues with blocked consumers and jobs to give them, served after each input.
        self.ready: dict[Queue, None] = {}
        self.memory = memory
        self.runtime = runtime

    def __getitem__(self, name: bytes) -> Queue:
        return self.by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def __len__(self) -> int:
        return len(self.by_name)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.by_name)

    def create(self, name: bytes) -> Queue:
        """Create an empty queue object."""
        queue = Queue(name, self.runtime.now // 1000)
        self.by_name[name] = queue
        self.scan.add(queue)
        self.memory.used += queue_cost(name)
        return queue

    def get_or_create(self, name: bytes) -> Queue:
        """The queue object for ``name``, created if missing."""
        queue = self.by_name.get(name)
        if queue is None:
            queue = self.create(name)
        return queue

    def destroy(self, queue: Queue) -> None:
        """Forget an empty, unblocked queue object."""
        del self.by_name[queue.name]
        self.scan.remove(queue)
        self.ready.pop(queue, None)
        self.memory.used -= queue_cost(queue.name)

    def mark_ready(self, queue: Queue) -> None:
        """``queue`` got a job while consumers wait on it."""
        self.ready[queue] = None

    def set_pause(self, queue_name: bytes, flags: int) -> None:
        """Set the pause flags; clearing the output pause wakes consumers."""
        queue = self.by_name.get(queue_name)
        if queue is None:
            if not flags:
                return
            queue = self.create(queue_name)
        was_out = queue.paused & PAUSE_OUT
        queue.paused = flags
        if was_out and not flags & PAUSE_OUT and queue.blocked and queue.jobs:
            self.ready[queue] = None

    def is_collectable(self, queue: Queue, idle_limit: int) -> bool:
        """Empty, idle, unpaused and nobody waiting on it."""
        return (not queue.jobs and not queue.blocked and not queue.paused
                and self.runtime.now // 1000 - queue.atime >= idle_limit)

    def waiter_left(self, queue: Queue) -> None:
        """The last blocked consumer of ``queue`` left: drop it if it is idle."""
        if (self.by_name.get(queue.name) is queue
                and self.is_collectable(queue, BLOCKED_QUEUE_IDLE_S)):
            self.destroy(queue)

    def collect_idle(self, limit: int | None = None) -> int:
        """One incremental GC pass over the queues; return how many were destroyed.

        ``limit`` is the idle time in seconds, by default what the memory
        level allows. Queues are visited in rotation through the scan index
        so that every queue is looked at regularly without scanning them
        all each time.
        """
        if limit is None:
            limit = IDLE_LIMITS_S[min(self.memory.level(), 2)]
        destroyed = 0
        visited = 0
        cursor = self.gc_cursor
        while visited < GC_SAMPLE or (destroyed * 10 > visited and visited < GC_MAX_VISITS):
            cursor, sample = self.scan.scan(cursor, GC_SAMPLE)
            for queue in sample:
                visited += 1
                if self.is_collectable(queue, limit):
                    self.destroy(queue)
                    destroyed += 1
            if cursor == 0:
                break
        self.gc_cursor = cursor
        return destroyed

    def clear(self) -> None:
        """Forget every queue (DEBUG FLUSHALL); their cost goes with the dataset's."""
        for queue in self.by_name.values():
            queue.jobs.clear()
            queue.blocked = None
        self.by_name.clear()
        self.scan = ScanIndex()
        self.gc_cursor = 0
        self.ready.clear()
