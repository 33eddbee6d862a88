"""The queues of one node: creation, pause, delivery limits, idle garbage
collection, and which queues have consumers that can be served now.

spec: jobs-and-ids.md §7, commands.md PAUSE; QLIMIT in docs/rate-limits.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from typing import Final

from disque.context.memory import MemoryAccount, queue_cost
from disque.queues.queue import PAUSE_OUT, Queue
from disque.queues.ratelimit import RateLimit
from disque.context.runtime import Runtime
from disque.jobs.scanindex import ScanIndex

IDLE_LIMITS_S: Final = (300, 10, 2)  # by memory warning level
GC_SAMPLE: Final = 64  # queues looked at per pass, more while >10 % of them are collectable
GC_MAX_VISITS: Final = 4096
BLOCKED_QUEUE_IDLE_S: Final = 300  # a queue whose last waiter left goes when this idle


class QueueSet(Mapping[bytes, Queue]):
    """Queue objects by name, read-only as a mapping (commands, tests).
    ``by_name`` is the dict behind it, for hot paths; it changes only through here."""

    __slots__ = ("by_name", "scan", "gc_cursor", "ready", "memory", "runtime", "limits",
                 "throttled")

    def __init__(self, runtime: Runtime, memory: MemoryAccount) -> None:
        self.by_name: dict[bytes, Queue] = {}
        self.scan: ScanIndex[Queue] = ScanIndex()
        self.gc_cursor = 0
        # Queues with blocked consumers and jobs to give them, served after each input.
        self.ready: dict[Queue, None] = {}
        self.memory = memory
        self.runtime = runtime
        # QLIMIT's limits by queue name: a queue object collected when idle
        # and made again finds its limit (and its bucket) here.
        self.limits: dict[bytes, RateLimit] = {}
        # Queues whose limit held back a job while consumers may wait: the
        # node's timer wakes them when a token is due (``wake_throttled``).
        self.throttled: dict[Queue, None] = {}

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
        if self.limits:
            queue.limit = self.limits.get(name)
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
        self.throttled.pop(queue, None)
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

    def set_limit(self, queue_name: bytes, limit: RateLimit | None) -> None:
        """Set or (None) remove a queue's delivery limit; consumers waiting
        on a queue with jobs get them at once if the new limit allows."""
        if limit is None:
            self.limits.pop(queue_name, None)
        else:
            self.limits[queue_name] = limit
        queue = self.by_name.get(queue_name)
        if queue is not None:
            queue.limit = limit
            if queue.blocked and queue.jobs:
                self.ready[queue] = None

    def throttle(self, queue: Queue) -> None:
        """``queue``'s limit held back a job: wake its waiters when a token is due."""
        self.throttled[queue] = None

    def wake_throttled(self) -> None:
        """Queues whose next token is due and whose consumers wait become
        ready; those nobody waits on any more are forgotten."""
        now = self.runtime.now
        throttled = self.throttled
        for queue in list(throttled):
            limit = queue.limit
            if not queue.blocked or not queue.jobs or self.by_name.get(queue.name) is not queue:
                del throttled[queue]
            elif limit is None or limit.next_token_at() <= now:
                del throttled[queue]
                self.ready[queue] = None

    def next_wake(self) -> int | None:
        """When the first throttled queue's token is due (None: none is throttled)."""
        earliest: int | None = None
        for queue in self.throttled:
            limit = queue.limit
            due = limit.next_token_at() if limit is not None else self.runtime.now
            if earliest is None or due < earliest:
                earliest = due
        return earliest

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
        self.throttled.clear()
