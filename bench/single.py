"""Single-node sections: PING, ADDJOB vs LPUSH, the produce/consume cycle, memory per job.

Each section is a function ``(servers, settings) -> list[Measurement]``;
``SECTIONS`` lists them in run order. Disque and redis-server samples of
the same workload are taken back to back, each from an empty dataset.
"""

from __future__ import annotations

import dataclasses
import logging
from bench import loadgen, memory, redis_benchmark
from bench.measurement import Measurement, Reference, Section, Target, median
from bench.servers import DisqueNode, RedisServer, Servers
from bench.settings import Settings

log = logging.getLogger("bench")

# redis-benchmark -r takes a C int: DEDUPID tokens are 12-digit numbers
# below 2^31. Among 200,000 requests about ten repeat a token (and create
# no job), so the DEDUPID sample checks that nearly every request landed.
_TOKEN_KEYSPACE = 2**31 - 1
_REPEATED_TOKENS_ALLOWED = 0.001


@dataclasses.dataclass(frozen=True)
class Workload:
    """One redis-benchmark comparison: a disque command against its redis-server counterpart."""

    name: str
    disque: tuple[str, ...]
    redis: tuple[str, ...]
    pipeline: int
    label: str
    target: Target | None = None
    counts_queue: bool = False  # the command enqueues: check every request landed
    keyspace: int = 0  # redis-benchmark -r: random __rand_int__ values


def _sample(server: DisqueNode | RedisServer, workload: Workload, command: tuple[str, ...],
            settings: Settings) -> float:
    server.flush()
    result = redis_benchmark.run(server.port, command, settings.clients, settings.requests,
                                 workload.pipeline, keyspace=workload.keyspace)
    if workload.counts_queue or workload.keyspace:
        queued = server.queue_length("q")
        missing = settings.requests - queued
        if missing < 0 or missing > (settings.requests * _REPEATED_TOKENS_ALLOWED
                                     if workload.keyspace else 0):
            raise redis_benchmark.BenchmarkError(
                "%s on %s: %d requests but %d items queued"
                % (workload.name, server.kind, settings.requests, queued))
    log.info("  %-10s %-12s %12.0f req/s", workload.name, server.kind, result.rps)
    return result.rps


def _compare(servers: Servers, settings: Settings, workloads: list[Workload],
             bare: Workload | None = None) -> list[Measurement]:
    """Run each workload ``repeats`` times alternating with its reference, and
    keep the medians. The reference is redis-server running the workload's
    redis form or, given ``bare``, the same disque node running ``bare``."""
    out = []
    for workload in workloads:
        disque, reference = [], []
        for _ in range(settings.repeats):
            if bare is None:
                reference.append(_sample(servers.redis(), workload, workload.redis, settings))
            else:
                reference.append(_sample(servers.disque(), bare, bare.disque, settings))
            disque.append(_sample(servers.disque(), workload, workload.disque, settings))
        name = ("redis-server %s" % " ".join(workload.redis[:2]) if bare is None
                else "disque %s" % bare.label)
        out.append(Measurement(
            name=workload.name,
            description="redis-benchmark -c %d -n %d -P %d: %s"
                        % (settings.clients, settings.requests, workload.pipeline, workload.label),
            value=median(disque), unit="req/s", samples=disque,
            reference=Reference(name, median(reference), reference),
            target=workload.target,
            # Back-to-back pairs share the machine's momentary load; their spread shows the noise.
            details={"round_ratios": [round(d / r, 3) for d, r in zip(disque, reference)]}))
    return out


def ping(servers: Servers, settings: Settings) -> list[Measurement]:
    """PING with -P 1 and -P 16: the server's per-request floor, as context."""
    return _compare(servers, settings, [
        Workload("ping_p%d" % p, ("PING",), ("PING",), p, "PING on both") for p in (1, 16)])


def addjob(servers: Servers, settings: Settings) -> list[Measurement]:
    """ADDJOB against LPUSH with a 64-byte body, unpipelined and with -P 16,
    in its bare form and with an everyday option (REPLICATE 1, RETRY, TTL)."""
    body = "x" * settings.body_bytes
    forms = [
        ("addjob", ("ADDJOB", "q", body, "0"), "ADDJOB q <%d-byte body> 0"),
        ("addjob_options", ("ADDJOB", "q", body, "0", "REPLICATE", "1", "RETRY", "60",
                            "TTL", "3600"),
         "ADDJOB q <%d-byte body> 0 REPLICATE 1 RETRY 60 TTL 3600"),
    ]
    targets = {1: Target("ratio", ">=", 0.8), 16: Target("ratio", ">=", 0.30)}
    return _compare(servers, settings, [
        Workload("%s_p%d" % (name, pipeline), command, ("LPUSH", "q", body), pipeline,
                 (label + " vs redis-server LPUSH q <body>") % settings.body_bytes,
                 targets[pipeline], counts_queue=True)
        for name, command, label in forms for pipeline in (1, 16)])


def extensions(servers: Servers, settings: Settings) -> list[Measurement]:
    """ADDJOB -P 16 with PRIORITY and with DEDUPID against the bare ADDJOB
    on the same node, rounds alternating (target: each within 10 %)."""
    body = "x" * settings.body_bytes
    plain = Workload("addjob_p16", ("ADDJOB", "q", body, "0"), (), 16, "ADDJOB q <body> 0",
                     counts_queue=True)
    within = Target("ratio", ">=", 0.9)
    return _compare(servers, settings, [
        Workload("addjob_priority_p16", ("ADDJOB", "q", body, "0", "PRIORITY", "9"), (), 16,
                 "ADDJOB q <%d-byte body> 0 PRIORITY 9 vs the bare ADDJOB" % settings.body_bytes,
                 within, counts_queue=True),
        Workload("addjob_dedupid_p16", ("ADDJOB", "q", body, "0", "DEDUPID", "__rand_int__"),
                 (), 16, "ADDJOB q <%d-byte body> 0 DEDUPID <12 random digits> vs the bare "
                 "ADDJOB" % settings.body_bytes, within, keyspace=_TOKEN_KEYSPACE),
    ], bare=plain)


# Bodies per ADDJOBS in the bulk_add section.
BULK_JOBS = 100


def _bulk_sample(server: DisqueNode, command: tuple[str, ...], requests: int, pipeline: int,
                 jobs_per_request: int, settings: Settings, keyspace: int = 0) -> float:
    """Jobs/s of ``requests`` commands adding ``jobs_per_request`` jobs each to queue q."""
    server.flush()
    result = redis_benchmark.run(server.port, command, settings.clients, requests, pipeline,
                                 keyspace=keyspace)
    expected = requests * jobs_per_request
    missing = expected - server.queue_length("q")
    if missing < 0 or missing > (expected * _REPEATED_TOKENS_ALLOWED if keyspace else 0):
        raise redis_benchmark.BenchmarkError("%s: %d jobs expected, %d missing"
                                             % (command[0], expected, missing))
    return result.rps * jobs_per_request


def bulk_add(servers: Servers, settings: Settings) -> list[Measurement]:
    """ADDJOBS of BULK_JOBS bodies (-P 1) against ADDJOB -P 16 on the same
    node, in jobs/s, the same number of jobs each, rounds alternating; bare,
    and with a DEDUPID per job (DEDUPIDS against ADDJOB ... DEDUPID)."""
    body = "x" * settings.body_bytes
    bulk_requests = max(1, settings.requests // BULK_JOBS)
    forms = [
        ("addjobs_bodies", ("ADDJOBS", "q", "0", "BODIES", *[body] * BULK_JOBS),
         ("ADDJOB", "q", body, "0"), 0, "ADDJOBS q 0 BODIES <%d bodies of %d bytes>"),
        ("addjobs_dedupids",
         ("ADDJOBS", "q", "0", "DEDUPIDS", *[w for _ in range(BULK_JOBS)
                                             for w in ("__rand_int__", body)]),
         ("ADDJOB", "q", body, "0", "DEDUPID", "__rand_int__"), _TOKEN_KEYSPACE,
         "ADDJOBS q 0 DEDUPIDS <%d random tokens and bodies of %d bytes>"),
    ]
    out = []
    for name, bulk, single, keyspace, label in forms:
        disque, reference = [], []
        for _ in range(settings.repeats):
            reference.append(_bulk_sample(servers.disque(), single, settings.requests, 16, 1,
                                          settings, keyspace))
            disque.append(_bulk_sample(servers.disque(), bulk, bulk_requests, 1, BULK_JOBS,
                                       settings, keyspace))
            log.info("  %-18s %10.0f jobs/s | ADDJOB -P 16 %10.0f jobs/s", name, disque[-1],
                     reference[-1])
        out.append(Measurement(
            name=name,
            description="redis-benchmark -c %d: %s, %d commands of -P 1, against %d ADDJOBs "
                        "-P 16 (jobs/s)" % (settings.clients, label % (BULK_JOBS,
                                                                        settings.body_bytes),
                                            bulk_requests, settings.requests),
            value=median(disque), unit="jobs/s", samples=disque,
            reference=Reference("disque %s -P 16" % " ".join(single[:1] + single[4:5]),
                                median(reference), reference),
            target=Target("ratio", ">=", 1.0),
            details={"round_ratios": [round(d / r, 3) for d, r in zip(disque, reference)]}))
    return out


def cycle(servers: Servers, settings: Settings) -> list[Measurement]:
    """Produce + GETJOB COUNT 16 + ACKJOB, at full load and at a fixed rate.

    Target at full load: the original's 55 k jobs/s.

    The same generator drives redis-server lists (LPUSH + BLMPOP COUNT 16)
    as a reference: it shows how much of the figure is the generator's own
    ceiling. For orientation, C Disque did 55-57 k jobs/s, p50 0.75 ms here.
    """
    full = loadgen.CycleConfig(duration=settings.cycle_duration, warmup=settings.cycle_warmup,
                               body_bytes=settings.body_bytes)
    paced = dataclasses.replace(full, rate=settings.cycle_rate)
    out = []
    for mode, config in (("full", full), ("rate", paced)):
        queue = b"bench:cycle:" + mode.encode()
        redis_server, disque = servers.redis(), servers.disque()
        redis_server.flush()
        ref = loadgen.run(loadgen.RedisListDialect(queue), [redis_server.port],
                          [redis_server.port], config)
        disque.flush()
        got = loadgen.run(loadgen.DisqueDialect(queue), [disque.port], [disque.port], config)
        log.info("  cycle %-4s disque %8.0f jobs/s p50 %.2f ms p99 %.2f ms"
                 " | redis %8.0f jobs/s p50 %.2f ms p99 %.2f ms", mode, got.rate,
                 got.latency_ms(50), got.latency_ms(99), ref.rate, ref.latency_ms(50),
                 ref.latency_ms(99))
        target = Target("value", ">=", 55_000) if mode == "full" else None
        out.extend(_cycle_measurements("cycle_" + mode, _cycle_shape(config), got, ref, target))
    return out


def _cycle_shape(config: loadgen.CycleConfig) -> str:
    """How a cycle run was driven, for the measurement descriptions."""
    if config.rate is None:
        producers = "full load: %d producers, batches of %d, at most %d jobs undelivered" % (
            config.producers, config.batch, config.max_backlog)
    else:
        producers = "fixed rate %.0f jobs/s from one pacer over a pool of %d producer connections" % (
            config.rate, config.producers)
    return ("%s; %d consumers (GETJOB TIMEOUT 100 COUNT 16, one ACKJOB per fetch); "
            "%d-byte bodies; %.0f s window" % (producers, config.consumers, config.body_bytes,
                                               config.duration))


def _cycle_measurements(prefix: str, shape: str, got: loadgen.CycleResult,
                        ref: loadgen.CycleResult, target: Target | None = None) -> list[Measurement]:
    """Throughput and p50/p99 latency of one disque cycle run, redis as the reference."""
    reference_name = "redis-server LPUSH + BLMPOP COUNT 16"
    out = [Measurement(prefix + "_throughput", "delivered jobs/s; " + shape, got.rate, "jobs/s",
                       reference=Reference(reference_name, ref.rate), target=target,
                       details={"disque": got.details(), "redis": ref.details()})]
    for p in (50, 99):
        out.append(Measurement(
            "%s_latency_p%d" % (prefix, p),
            "end-to-end p%d latency (ADDJOB sent to GETJOB reply); %s" % (p, shape),
            got.latency_ms(p), "ms", reference=Reference(reference_name, ref.latency_ms(p))))
    return out


def memory_per_job(servers: Servers, settings: Settings) -> list[Measurement]:
    """RSS and used_memory growth of a fresh node holding ``memory_jobs`` queued jobs."""
    with servers.fresh_disque("memory") as node:
        log.info("  loading %d jobs into a fresh node", settings.memory_jobs)
        result = memory.measure(node, settings.memory_jobs, settings.body_bytes)
    log.info("  memory: %.0f bytes/job RSS, %.0f bytes/job used_memory",
             result.rss_per_job, result.used_per_job)
    if result.errors or result.registered_jobs != settings.memory_jobs:
        raise RuntimeError("memory load incomplete: %d ADDJOB errors, %d of %d jobs registered"
                           % (result.errors, result.registered_jobs, settings.memory_jobs))
    shape = "%d queued jobs with %d-byte bodies (pipelined ADDJOB)" % (
        settings.memory_jobs, settings.body_bytes)
    return [
        Measurement("memory_rss_per_job", "VmRSS growth per job, " + shape,
                    result.rss_per_job, "bytes/job", target=Target("value", "<=", 500),
                    details=result.details()),
        Measurement("memory_used_memory_per_job", "INFO used_memory growth per job, " + shape,
                    result.used_per_job, "bytes/job"),
    ]


SECTIONS: dict[str, Section] = {
    "ping": ping,
    "addjob": addjob,
    "extensions": extensions,
    "bulk_add": bulk_add,
    "cycle": cycle,
    "memory": memory_per_job,
}
