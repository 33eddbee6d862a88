"""The metrics section: what metrics-port costs the node.

Two fresh nodes run ADDJOB -P 16 (redis-benchmark) in alternating rounds:
one with metrics-port 0, one with metrics-port on and /metrics scraped
every second while redis-benchmark runs, as Prometheus would (target:
within 3 %). Then one scrape is timed on a node holding 100,000 jobs in
100 queues, and on one with 10,000 queues, where metrics-max-queues keeps
the per-queue series (and the scrape) bounded; the same node with the
bound lifted shows what it saves.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
import urllib.request

import redis

from bench import redis_benchmark
from bench.measurement import Measurement, Reference, Section, Target, median
from bench.servers import DisqueNode, Servers
from bench.settings import Settings

log = logging.getLogger("bench")

SCRAPE_INTERVAL_S = 1.0
SCRAPE_TIMEOUT_S = 10.0
PROFILE_SCRAPES = 20  # timed scrapes per profiled dataset; the median is reported
JOBS_IN_QUEUES = 100_000
JOB_QUEUES = 100
MANY_QUEUES = 10_000
LOAD_BATCH = 1000
QUEUE_LENGTH_SERIES = "disque_queue_length{"


def scrape_once(port: int) -> tuple[float, bytes]:
    """GET /metrics: (seconds it took, the body)."""
    started = time.perf_counter()
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                timeout=SCRAPE_TIMEOUT_S) as response:
        body = response.read()
    return time.perf_counter() - started, body


class Scraper:
    """Scrapes /metrics every SCRAPE_INTERVAL_S in a thread until stopped."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.durations: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-scraper", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.durations.append(scrape_once(self.port)[0])
            self._stop.wait(SCRAPE_INTERVAL_S)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _addjob_sample(node: DisqueNode, command: tuple[str, ...],
                   settings: Settings) -> tuple[float, float]:
    """One redis-benchmark run: (requests/s, server CPU µs per request)."""
    node.flush()
    cpu = node.cpu_seconds()
    result = redis_benchmark.run(node.port, command, settings.clients, settings.requests, 16)
    cpu = node.cpu_seconds() - cpu
    queued = node.queue_length("q")
    if queued != settings.requests:
        raise redis_benchmark.BenchmarkError("%d ADDJOBs but %d jobs queued"
                                             % (settings.requests, queued))
    return result.rps, cpu * 1e6 / settings.requests


def overhead(servers: Servers, settings: Settings) -> list[Measurement]:
    """ADDJOB -P 16 with metrics on and scraped every second, against metrics
    off: throughput, and the server's CPU per request (which other load on
    the machine disturbs less; the scrapes' own CPU is in it)."""
    command = ("ADDJOB", "q", "x" * settings.body_bytes, "0")
    metrics_port = servers.ports.take()
    on_rps, off_rps, on_cpu, off_cpu, scrapes = [], [], [], [], []
    with servers.fresh_disque("metrics-off") as off, \
            servers.fresh_disque("metrics-on", "metrics-port %d\n" % metrics_port) as on:
        for round_number in range(settings.repeats):
            # Off then on, then on then off, ...: neither node always runs first.
            for metrics_on in ((False, True) if round_number % 2 == 0 else (True, False)):
                if metrics_on:
                    with Scraper(metrics_port) as scraper:
                        rps, cpu = _addjob_sample(on, command, settings)
                    on_rps.append(rps)
                    on_cpu.append(cpu)
                    scrapes.extend(scraper.durations)
                else:
                    rps, cpu = _addjob_sample(off, command, settings)
                    off_rps.append(rps)
                    off_cpu.append(cpu)
            log.info("  ADDJOB -P 16 metrics off %9.0f req/s %5.2f µs CPU/req | on, %d scrapes "
                     "%9.0f req/s %5.2f µs CPU/req", off_rps[-1], off_cpu[-1],
                     len(scraper.durations), on_rps[-1], on_cpu[-1])
        with on.client() as client:
            build = client.info("build").get("core_build")
    shape = ("redis-benchmark -c %d -n %d -P 16 ADDJOB q <%d-byte body> 0 on a node with "
             "metrics-port on and /metrics scraped every %.0f s, against a node with "
             "metrics-port 0 (rounds alternating which node runs first)"
             % (settings.clients, settings.requests, settings.body_bytes, SCRAPE_INTERVAL_S))
    reference = "disque ADDJOB -P 16, metrics-port 0"
    return [
        Measurement(
            name="metrics_addjob_p16", description=shape, value=median(on_rps), unit="req/s",
            samples=on_rps, reference=Reference(reference, median(off_rps), off_rps),
            target=Target("ratio", ">=", 0.97),
            details={"round_ratios": [round(a / b, 3) for a, b in zip(on_rps, off_rps)],
                     "scrapes_during_load": len(scrapes),
                     "scrape_ms_during_load_median":
                         round(statistics.median(scrapes) * 1000, 2) if scrapes else None,
                     "core_build": build}),
        Measurement(
            name="metrics_addjob_p16_cpu", description="server CPU per request; " + shape,
            value=median(on_cpu), unit="µs/request", samples=on_cpu,
            reference=Reference(reference, median(off_cpu), off_cpu),
            target=Target("ratio", "<=", 1.03),
            details={"round_ratios": [round(a / b, 3) for a, b in zip(on_cpu, off_cpu)]}),
    ]


def _load(client: redis.Redis, queues: list[str], jobs: int) -> None:
    """``jobs`` jobs spread round-robin over ``queues``, pipelined."""
    pipe = client.pipeline(transaction=False)
    for i in range(jobs):
        pipe.execute_command("ADDJOB", queues[i % len(queues)], b"job %d" % i, 0)
        if (i + 1) % LOAD_BATCH == 0:
            pipe.execute()
    pipe.execute()


def _profile(name: str, description: str, port: int, client: redis.Redis) -> Measurement:
    """The median of PROFILE_SCRAPES timed scrapes, and what they returned."""
    info = client.info()
    durations, body = [], b""
    for _ in range(PROFILE_SCRAPES):
        seconds, body = scrape_once(port)
        durations.append(seconds * 1000)
    series = sum(1 for line in body.splitlines() if not line.startswith(b"#"))
    queue_series = body.count(QUEUE_LENGTH_SERIES.encode())
    log.info("  scrape %-34s %7.2f ms, %6d series (%d queues), %8d bytes", name,
             median(durations), series, queue_series, len(body))
    return Measurement(name, description, median(durations), "ms", samples=durations,
                       details={"series": series, "queues_with_series": queue_series,
                                "bytes": len(body), "registered_jobs": info["registered_jobs"],
                                "core_build": client.info("build").get("core_build")})


def scrape_cost(servers: Servers, settings: Settings) -> list[Measurement]:
    """How long one scrape takes on a loaded node, and what metrics-max-queues bounds."""
    metrics_port = servers.ports.take()
    out = []
    with servers.fresh_disque("metrics-scrape", "metrics-port %d\n" % metrics_port) as node, \
            node.client() as client:
        _load(client, ["q%d" % i for i in range(JOB_QUEUES)], JOBS_IN_QUEUES)
        out.append(_profile("metrics_scrape_100k_jobs",
                            "GET /metrics on a node holding %d jobs in %d queues"
                            % (JOBS_IN_QUEUES, JOB_QUEUES), metrics_port, client))
        client.execute_command("DEBUG", "FLUSHALL")
        _load(client, ["many%d" % i for i in range(MANY_QUEUES)], MANY_QUEUES)
        out.append(_profile("metrics_scrape_10k_queues",
                            "GET /metrics on a node with %d queues of one job, "
                            "metrics-max-queues 100 (the default)" % MANY_QUEUES, metrics_port,
                            client))
        client.execute_command("CONFIG", "SET", "metrics-max-queues", MANY_QUEUES)
        out.append(_profile("metrics_scrape_10k_queues_unbounded",
                            "the same with metrics-max-queues %d: a series per queue"
                            % MANY_QUEUES, metrics_port, client))
    return out


def metrics(servers: Servers, settings: Settings) -> list[Measurement]:
    """ADDJOB -P 16 with metrics on and scraped every second vs off (within 3 %),
    and the time of one scrape with 100k jobs and with 10k queues."""
    return [*overhead(servers, settings), *scrape_cost(servers, settings)]


SECTIONS: dict[str, Section] = {"metrics": metrics}
