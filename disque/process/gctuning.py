"""How the server process runs the cyclic garbage collector (from its cron)."""

from __future__ import annotations

import gc
import time

FULL_GC_INTERVAL_S = 300
FULL_GC_MAX_OBJECTS = 2_000_000


class GarbageCollector:
    """Cyclic GC tuned for a heap of long-lived jobs.

    CPython's generational GC re-traverses every tracked object each time
    the old generation grows by 25 %, which with a million queued jobs
    doubles the cost of ADDJOB and causes long pauses. Jobs never need the
    cycle collector (their skiplist links are cut when they leave a queue),
    so young objects are collected every cron tick and survivors frozen;
    a full collection runs every few minutes while the heap is small
    enough for it to be quick.
    """

    def __init__(self) -> None:
        gc.disable()
        self.last_full = time.monotonic()

    def tick(self) -> None:
        """Called from the cron."""
        gc.collect(1)
        gc.freeze()
        now = time.monotonic()
        if now - self.last_full > FULL_GC_INTERVAL_S:
            self.last_full = now
            if gc.get_freeze_count() < FULL_GC_MAX_OBJECTS:
                gc.unfreeze()
                gc.collect()
                gc.freeze()
