"""Memory cost of queued jobs: RSS growth of a node while it holds N jobs.

RSS is what the operating system charges, so it includes CPython's
per-object overhead and allocator slack that the node's own
``used_memory`` estimate (INFO) can only approximate; both are reported.
The node must be fresh: a heap that already grew and shrank would hide
growth in arenas freed by earlier sections.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import uvloop

from bench.loadgen import DisqueDialect
from bench.servers import DisqueNode
from disque.tools.resp_client import connect

QUEUE = b"bench:memory"


@dataclass(frozen=True)
class MemoryResult:
    """Before/after figures of one load."""

    jobs: int
    rss_before: int
    rss_after: int
    used_before: int
    used_after: int
    registered_jobs: int
    load_seconds: float
    errors: int

    @property
    def rss_per_job(self) -> float:
        """Bytes of RSS growth per queued job."""
        return (self.rss_after - self.rss_before) / self.jobs

    @property
    def used_per_job(self) -> float:
        """Bytes of INFO used_memory growth per queued job."""
        return (self.used_after - self.used_before) / self.jobs

    def details(self) -> dict[str, object]:
        """Raw figures for the report."""
        return {"jobs": self.jobs, "rss_before": self.rss_before, "rss_after": self.rss_after,
                "used_memory_before": self.used_before, "used_memory_after": self.used_after,
                "registered_jobs": self.registered_jobs,
                "load_seconds": round(self.load_seconds, 3),
                "load_rate_jobs_per_s": round(self.jobs / self.load_seconds, 1),
                "addjob_errors": self.errors}


def job_body(i: int, size: int) -> bytes:
    """A distinct ``size``-byte body per job, like real payloads (no shared objects)."""
    return (b"%d:" % i).ljust(size, b"m")


async def add_jobs(port: int, jobs: int, body_bytes: int, connections: int, batch: int) -> int:
    """Pipelined ADDJOB of ``jobs`` jobs over several connections; returns the error count."""
    dialect = DisqueDialect(QUEUE)
    clients = [await connect(port) for _ in range(connections)]
    next_job, errors = 0, 0

    async def feed(client) -> None:
        nonlocal next_job, errors
        while next_job < jobs:
            first, next_job = next_job, min(jobs, next_job + batch)
            payload = b"".join(dialect.produce(job_body(i, body_bytes))
                               for i in range(first, next_job))
            replies = await client.request(payload, next_job - first)
            errors += sum(1 for r in replies if not dialect.produced(r))

    try:
        await asyncio.gather(*(feed(c) for c in clients))
    finally:
        for client in clients:
            client.close()
    return errors


def measure(node: DisqueNode, jobs: int, body_bytes: int = 64, connections: int = 4,
            batch: int = 1000) -> MemoryResult:
    """Load ``jobs`` jobs into an empty node and compare RSS and used_memory before/after."""
    with node.client() as client:
        used_before = int(client.info("memory")["used_memory"])
        rss_before = node.rss_bytes()
        started = time.monotonic()
        errors = uvloop.run(add_jobs(node.port, jobs, body_bytes, connections, batch))
        load_seconds = time.monotonic() - started
        info = client.info()
        rss_after = node.rss_bytes()
    return MemoryResult(jobs, rss_before, rss_after, used_before, int(info["used_memory"]),
                        int(info["registered_jobs"]), load_seconds, errors)
