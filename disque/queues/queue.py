"""A named queue: ordered jobs, blocked consumers, pause flags, delivery
limit, federation stats.

spec: jobs-and-ids.md §7. ``atime``/``ctime`` are unix seconds, federation
times are ms.
"""

from __future__ import annotations

from math import ceil
from typing import Final

from disque.queues.ratelimit import RateLimit
from disque.queues.skiplist import SkipList

PAUSE_NONE: Final = 0
PAUSE_IN: Final = 1
PAUSE_OUT: Final = 2
PAUSE_ALL: Final = PAUSE_IN | PAUSE_OUT
PAUSE_NAMES: Final = {PAUSE_NONE: b"none", PAUSE_IN: b"in", PAUSE_OUT: b"out", PAUSE_ALL: b"all"}
# Looked up with unchecked bus values, hence any key.
PAUSE_BY_NAME: Final[dict[object, int]] = {name: flags for flags, name in PAUSE_NAMES.items()}

IMPORT_WINDOW_MS: Final = 1000
IMPORT_RATE_VALIDITY_MS: Final = 5000


class Queue:
    """One queue object on one node."""

    __slots__ = (
        "name", "jobs", "ctime", "atime", "blocked", "paused", "jobs_in", "jobs_out",
        "needjobs_bcast_time", "needjobs_bcast_attempt", "needjobs_adhoc_time",
        "needjobs_adhoc_attempt", "responders", "import_cur_start", "import_cur_count",
        "import_prev_start", "import_prev_count", "seq", "limit",
    )

    def __init__(self, name: bytes, now_s: int) -> None:
        self.name = name
        self.jobs = SkipList()
        self.ctime = now_s
        self.atime = now_s
        self.blocked: dict | None = None  # client -> None, in arrival order
        self.paused = PAUSE_NONE
        self.jobs_in = 0
        self.jobs_out = 0
        self.needjobs_bcast_time = 0
        self.needjobs_bcast_attempt = 0
        self.needjobs_adhoc_time = 0
        self.needjobs_adhoc_attempt = 0
        self.responders: dict[bytes, int] | None = None  # node id -> unix s of last jobs
        self.import_cur_start = 0
        self.import_cur_count = 0
        self.import_prev_start = 0
        self.import_prev_count = 0
        self.seq = -1
        self.limit: RateLimit | None = None  # QLIMIT's, kept by QueueSet.limits

    def __len__(self) -> int:
        return len(self.jobs)

    def __bool__(self) -> bool:
        return True  # an empty queue is still a queue object

    @property
    def blocked_count(self) -> int:
        """Clients currently blocked on this queue."""
        return len(self.blocked) if self.blocked else 0

    def count_import(self, now_ms: int) -> None:
        """Account one job received through federation (1 s buckets)."""
        if now_ms - self.import_cur_start > IMPORT_WINDOW_MS:
            self.import_prev_start = self.import_cur_start
            self.import_prev_count = self.import_cur_count
            self.import_cur_start = now_ms
            self.import_cur_count = 0
        self.import_cur_count += 1

    def import_rate(self, now_ms: int) -> int:
        """Jobs per second imported recently (0 once the window is stale)."""
        if not self.import_cur_count or now_ms - self.import_cur_start > IMPORT_RATE_VALIDITY_MS:
            return 0
        elapsed = max(50, now_ms - self.import_prev_start)
        if not self.import_prev_start:
            elapsed = max(50, now_ms - self.import_cur_start)
        return ceil((self.import_prev_count + self.import_cur_count) * 1000 / elapsed)
