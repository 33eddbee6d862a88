"""``WorkerStats``: what a worker did, for its last log line, tests and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WorkerStats:
    """Counts since the worker started."""

    fetched: int = 0  # deliveries GETJOB gave
    succeeded: int = 0  # handlers that returned
    failed: int = 0  # handlers that raised
    abandoned: int = 0  # NACKed because the worker stopped before finishing them
    acked: int = 0  # ACKJOBs answered (jobs)
    nacked: int = 0  # NACKs answered (jobs)
