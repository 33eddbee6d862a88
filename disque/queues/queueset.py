"""Queue objects of one node: creation, pause, idle garbage collection.

spec: jobs-and-ids.md §7, commands.md PAUSE. A mixin of Node.
"""

from __future__ import annotations

from disque.memory import queue_cost
from disque.queues.queue import PAUSE_OUT, Queue

IDLE_LIMITS_S = (300, 10, 2)  # by memory warning level
GC_SAMPLE = 64  # queues looked at per pass, more while >10 % of them are collectable
GC_MAX_VISITS = 4096


class QueueSet:
    """Queue creation and destruction (mixed into Node)."""

    def create_queue(self, name: bytes) -> Queue:
        """Create an empty queue object."""
        queue = Queue(name, self.now // 1000)
        self.queues[name] = queue
        self.queue_scan.add(queue)
        self.used_memory += queue_cost(name)
        return queue

    def get_or_create_queue(self, name: bytes) -> Queue:
        """The queue object for ``name``, created if missing."""
        queue = self.queues.get(name)
        if queue is None:
            queue = self.create_queue(name)
        return queue

    def destroy_queue(self, queue: Queue) -> None:
        """Forget an empty, unblocked queue object."""
        del self.queues[queue.name]
        self.queue_scan.remove(queue)
        self.ready_queues.pop(queue, None)
        self.used_memory -= queue_cost(queue.name)

    def set_pause(self, queue_name: bytes, flags: int) -> None:
        """Set the pause flags; clearing the output pause wakes consumers."""
        queue = self.queues.get(queue_name)
        if queue is None:
            if not flags:
                return
            queue = self.create_queue(queue_name)
        was_out = queue.paused & PAUSE_OUT
        queue.paused = flags
        if was_out and not flags & PAUSE_OUT and queue.blocked and queue.jobs:
            self.ready_queues[queue] = None

    def queue_is_collectable(self, queue: Queue, idle_limit: int) -> bool:
        """Empty, idle, unpaused and nobody waiting on it."""
        return (not queue.jobs and not queue.blocked and not queue.paused
                and self.now // 1000 - queue.atime >= idle_limit)

    def idle_queue_limit(self) -> int:
        """Seconds of idleness after which an empty queue is destroyed."""
        return IDLE_LIMITS_S[min(self.memory_level(), 2)]

    def collect_idle_queues(self, force_limit: int | None = None) -> int:
        """One incremental GC pass over the queues; return how many were destroyed.

        Queues are visited in rotation through the scan index so that every
        queue is looked at regularly without scanning them all each time.
        """
        limit = self.idle_queue_limit() if force_limit is None else force_limit
        destroyed = 0
        visited = 0
        cursor = self.queue_gc_cursor
        while visited < GC_SAMPLE or (destroyed * 10 > visited and visited < GC_MAX_VISITS):
            cursor, sample = self.queue_scan.scan(cursor, GC_SAMPLE)
            for queue in sample:
                visited += 1
                if self.queue_is_collectable(queue, limit):
                    self.destroy_queue(queue)
                    destroyed += 1
            if cursor == 0:
                break
        self.queue_gc_cursor = cursor
        return destroyed
