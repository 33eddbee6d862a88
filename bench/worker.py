"""The worker section: throughput of a no-op ``disque.worker`` against a preloaded node.

A fresh node gets ``jobs`` queued jobs (pipelined ADDJOB), then a worker of
this process with a handler that does nothing drains them: GETJOB COUNT
(up to its free capacity) on one connection, ACKJOB in bulk on the other.
The figure is jobs acknowledged per second, from the worker's start to the
last ACKJOB reply; the CPU time per job of the server and of the worker
(this process) are reported beside it.
Threaded and asyncio workers alternate, ``repeats`` runs each.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from bench.measurement import Measurement, median
from bench.servers import DisqueNode, Servers
from bench.settings import Settings
from disque.client import DisqueClient, Job
from disque.worker import AsyncioWorker, ThreadedWorker, Worker, WorkerOptions

log = logging.getLogger("bench")

QUEUE = "bench:worker"
FULL_JOBS = 50_000
QUICK_JOBS = 5_000
# A run that takes longer than this is stuck, not slow.
RUN_DEADLINE_S = 300.0
# (name, worker class, options): enough jobs held that GETJOB COUNT fetches in batches.
CONFIGS: tuple[tuple[str, type[Worker], WorkerOptions], ...] = (
    ("threaded", ThreadedWorker, WorkerOptions(concurrency=8, prefetch=120)),
    ("asyncio", AsyncioWorker, WorkerOptions(concurrency=64, prefetch=64)),
)


def noop(job: Job) -> None:
    """The threaded worker's handler."""


async def noop_async(job: Job) -> None:
    """The asyncio worker's handler."""


def preload(node: DisqueNode, jobs: int, body_bytes: int) -> None:
    """Queue ``jobs`` jobs on ``node`` (an empty node: flushed first)."""
    node.flush()
    body = b"x" * body_bytes
    with DisqueClient("127.0.0.1:%d" % node.port) as client:
        failed = [r for r in client.add_jobs((QUEUE, body) for _ in range(jobs))
                  if not isinstance(r, str)]
    if failed or node.queue_length(QUEUE) != jobs:
        raise RuntimeError("preload: %d ADDJOB errors, %d of %d jobs queued"
                           % (len(failed), node.queue_length(QUEUE), jobs))


def drain(node: DisqueNode, kind: type[Worker], options: WorkerOptions, jobs: int
          ) -> tuple[float, float, float]:
    """Run a no-op worker until ``jobs`` jobs are acknowledged: jobs/s, and the CPU µs per
    job of the server and of this process (the worker's threads)."""
    worker = kind("127.0.0.1:%d" % node.port, options)
    worker.add_task(QUEUE, noop_async if worker.coroutines else noop)
    thread = threading.Thread(target=worker.run, name="bench-worker", daemon=True)
    cpu = node.cpu_seconds()
    own_cpu = time.process_time()
    started = time.monotonic()
    thread.start()
    try:
        while worker.stats.acked < jobs:
            if time.monotonic() - started > RUN_DEADLINE_S or not thread.is_alive():
                raise RuntimeError("worker stuck: %s" % worker.stats)
            time.sleep(0.002)
        elapsed = time.monotonic() - started
        cpu = node.cpu_seconds() - cpu
        own_cpu = time.process_time() - own_cpu
    finally:
        worker.stop()
        thread.join(30)
    if node.queue_length(QUEUE) or worker.stats.failed:
        raise RuntimeError("worker left %d jobs queued, %d failed"
                           % (node.queue_length(QUEUE), worker.stats.failed))
    return jobs / elapsed, cpu / jobs * 1e6, own_cpu / jobs * 1e6


def worker(servers: Servers, settings: Settings) -> list[Measurement]:
    """No-op worker throughput, threaded and asyncio, against a node preloaded with jobs."""
    jobs = QUICK_JOBS if settings.quick else FULL_JOBS
    rates: dict[str, list[float]] = {name: [] for name, _, _ in CONFIGS}
    cpu: dict[str, list[float]] = {name: [] for name, _, _ in CONFIGS}
    worker_cpu: dict[str, list[float]] = {name: [] for name, _, _ in CONFIGS}
    with servers.fresh_disque("worker") as node:
        for _ in range(settings.repeats):
            for name, kind, options in CONFIGS:
                preload(node, jobs, settings.body_bytes)
                rate, cpu_us, worker_us = drain(node, kind, options, jobs)
                rates[name].append(rate)
                cpu[name].append(cpu_us)
                worker_cpu[name].append(worker_us)
                log.info("  worker %-8s %8.0f jobs/s, CPU per job: server %.1f µs, worker %.1f µs",
                         name, rate, cpu_us, worker_us)
    out = []
    for name, _, options in CONFIGS:
        details: dict[str, Any] = {"server_cpu_us_per_job": [round(c, 1) for c in cpu[name]],
                                   "worker_cpu_us_per_job": [round(c, 1) for c in
                                                             worker_cpu[name]],
                                   "concurrency": options.concurrency,
                                   "capacity": options.capacity}
        out.append(Measurement(
            "worker_%s" % name,
            "jobs/s acknowledged by a no-op %s worker (concurrency %d, up to %d jobs held: "
            "GETJOB COUNT <free> WITHCOUNTERS, bulk ACKJOB on a second connection) draining "
            "%d queued %d-byte jobs from one node" % (name, options.concurrency,
                                                      options.capacity, jobs,
                                                      settings.body_bytes),
            median(rates[name]), "jobs/s", samples=rates[name], details=details))
    return out


SECTIONS = {"worker": worker}
