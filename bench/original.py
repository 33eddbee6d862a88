"""Cluster sections against the original C Disque 1.0-rc1, three nodes each.

Three nodes of this project and three of the original (``ReferenceNode``,
from ``../shared/reference/disque-server-1.0-rc1`` beside the checkout or
``$DISQUE_REFERENCE_SERVER``) run side by side for a whole section; every
round measures both, the order flipping each round (ours first in even
rounds), 64-byte bodies. Without the binary each section is skipped, and
the report says so.

- ``original_latency``: ``ADDJOB q <body> 0 REPLICATE 3`` from one
  connection (redis-benchmark -c 1), p50, synchronous and with ``ASYNC``.
  Target: p50 <= 1.2 x the original's.
- ``original_replicate``: the same ADDJOB at -c 16 -P 16 (pipelined
  producers) and at -c 50 -P 1. Target: >= 1.0 x the original's req/s.
- ``original_federation``: 16 producers on node A, each pipelining 16
  synchronous ``REPLICATE 3`` ADDJOBs; 6 consumers on node B doing
  ``GETJOB TIMEOUT 100 COUNT 16 FROM q`` then ACKJOB of the ids. Targets:
  >= 1.0 x the original's delivered jobs/s, end-to-end p99 <= the
  original's, server CPU per delivered job (three nodes summed) <= 1.2 x
  the original's.

Each measurement's details give every round's figures, both sides' server
CPU per job and the share of CPU time the hypervisor stole during the round.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Callable, Iterator

from bench import loadgen, machine, redis_benchmark
from bench.measurement import Measurement, Reference, SectionSkipped, Target, median
from bench.servers import DisqueNode, Servers, reference_server
from bench.settings import Settings

log = logging.getLogger("bench")
CLUSTER_SIZE = 3
SIDES = ("disque", "original")
LATENCY_RATIO = 1.2  # p50 at -c 1: ours / the original's, at most
THROUGHPUT_RATIO = 1.0  # req/s and jobs/s: ours / the original's, at least
FEDERATION_CPU_RATIO = 1.2  # server CPU per federated job: ours / the original's, at most
FEDERATION_PRODUCERS = 16
FEDERATION_BATCH = 16
FEDERATION_CONSUMERS = 6
LATENCY_REQUESTS = 10_000  # -c 1 requests per sample (-n), at most
# The federation's warm-up, at least: a consumer's first NEEDJOBS broadcast
# often finds node A still empty, and the original's next one comes 4 s
# later (spec: cluster-bus.md §6.7); the window measures both flowing.
FEDERATION_WARMUP_S = 5.0


@dataclasses.dataclass
class Round:
    """What one side measured in one round."""

    value: float
    cpu_us_per_job: float
    user_us_per_job: float  # the part of cpu_us_per_job spent in user space
    steal_percent: float | None
    extra: dict[str, float] = dataclasses.field(default_factory=dict)


Sample = Callable[[list[DisqueNode]], tuple[float, int, dict[str, float]]]


@contextlib.contextmanager
def _clusters(servers: Servers) -> Iterator[dict[str, list[DisqueNode]]]:
    """Both three-node clusters, up for the whole section; skipped without the original."""
    binary = reference_server()
    if binary is None:
        raise SectionSkipped("the original server is not present (../shared/reference/"
                             "disque-server-1.0-rc1 or $DISQUE_REFERENCE_SERVER)")
    with servers.cluster(CLUSTER_SIZE, name="ours") as ours, \
            servers.cluster(CLUSTER_SIZE, name="original", reference=binary) as original:
        yield {"disque": ours, "original": original}


def _rounds(settings: Settings, clusters: dict[str, list[DisqueNode]], name: str,
            sample: Sample) -> dict[str, list[Round]]:
    """``repeats`` rounds of ``sample`` on each side, the order flipping each round.
    ``sample`` returns (value, jobs for the CPU figure, extra figures)."""
    got: dict[str, list[Round]] = {side: [] for side in SIDES}
    for round_no in range(settings.repeats):
        for side in (SIDES if round_no % 2 == 0 else SIDES[::-1]):
            nodes = clusters[side]
            for node in nodes:
                node.flush()
            ticks = machine.cpu_ticks()
            before = _cpu_split(nodes)
            value, jobs, extra = sample(nodes)
            after = _cpu_split(nodes)
            user, system = ((a - b) * 1e6 / max(jobs, 1) for a, b in zip(after, before))
            steal = machine.steal_percent(ticks, machine.cpu_ticks())
            got[side].append(Round(value, user + system, user, steal, extra))
            log.info("  %-28s round %d %-8s %10.3f %s  %6.1f CPU us/job (user %.1f)  steal %s %%",
                     name, round_no, side, value,
                     " ".join("%s %.3f" % item for item in extra.items()), user + system, user,
                     steal)
    return got


def bus_traffic(nodes: list[DisqueNode]) -> tuple[int, int] | None:
    """Bus messages (as they travel: a batch is one) and frames the nodes sent
    so far, summed (INFO bus); None for nodes without these counters (the
    original, a version from before them)."""
    messages = frames = 0
    for node in nodes:
        info = node.call("INFO", "bus")  # redis-py parses INFO into a dict
        fields = info if isinstance(info, dict) else {}
        if "bus_messages_sent" not in fields or "bus_frames_sent" not in fields:
            return None
        messages += int(fields["bus_messages_sent"])
        frames += int(fields["bus_frames_sent"])
    return messages, frames


def bus_per_job(before: tuple[int, int] | None, after: tuple[int, int] | None,
                jobs: int) -> dict[str, float]:
    """Bus messages and frames per job between two ``bus_traffic`` readings."""
    if before is None or after is None:
        return {}
    return {"bus_messages_per_job": round((after[0] - before[0]) / max(jobs, 1), 2),
            "bus_frames_per_job": round((after[1] - before[1]) / max(jobs, 1), 2)}


def _cpu_split(nodes: list[DisqueNode]) -> tuple[float, float]:
    """User and system CPU seconds of ``nodes`` so far, summed."""
    splits = [node.cpu_split() for node in nodes]
    return sum(u for u, _ in splits), sum(s for _, s in splits)


def _measurement(name: str, description: str, unit: str, rounds: dict[str, list[Round]],
                 target: Target, pick: Callable[[Round], float] = lambda r: r.value
                 ) -> Measurement:
    ours = [pick(r) for r in rounds["disque"]]
    original = [pick(r) for r in rounds["original"]]
    return Measurement(
        name, description, median(ours), unit, samples=ours,
        reference=Reference("original C Disque 1.0-rc1, same run", median(original), original),
        target=target,
        details={
            "round_ratios": [round(a / b, 3) if b else None for a, b in zip(ours, original)],
            "cpu_us_per_job": {side: [round(r.cpu_us_per_job, 1) for r in rounds[side]]
                               for side in SIDES},
            "user_us_per_job": {side: [round(r.user_us_per_job, 1) for r in rounds[side]]
                                for side in SIDES},
            "steal_percent": {side: [r.steal_percent for r in rounds[side]] for side in SIDES},
            **{"%s_%s" % (key, side): [round(r.extra[key], 3) for r in rounds[side]]
               for side in SIDES for key in (rounds[side][0].extra if rounds[side] else {})},
        })


def _addjob(settings: Settings, clients: int, requests: int, pipeline: int,
            options: tuple[str, ...] = ()) -> Sample:
    command = ("ADDJOB", "q", "x" * settings.body_bytes, "0", "REPLICATE", str(CLUSTER_SIZE),
               *options)

    def sample(nodes: list[DisqueNode]) -> tuple[float, int, dict[str, float]]:
        result = redis_benchmark.run(nodes[0].port, command, clients, requests, pipeline)
        if (queued := nodes[0].queue_length("q")) < requests and not options:
            raise redis_benchmark.BenchmarkError("%d requests but only %d jobs queued on %s"
                                                 % (requests, queued, nodes[0].kind))
        p50 = result.columns.get("p50_latency_ms")
        if p50 is None:
            raise redis_benchmark.BenchmarkError("redis-benchmark printed no p50 (Redis 7's "
                                                 "redis-benchmark is needed)")
        return result.rps, requests, {"p50_ms": p50}
    return sample


def original_latency(servers: Servers, settings: Settings) -> list[Measurement]:
    """ADDJOB REPLICATE 3 from one connection, sync and ASYNC: p50 against the original's."""
    requests = min(LATENCY_REQUESTS, max(settings.requests // 20, 1000))
    out = []
    with _clusters(servers) as clusters:
        for label, options in (("sync", ()), ("async", ("ASYNC",))):
            name = "original_addjob_replicate3_c1_%s_p50" % label
            rounds = _rounds(settings, clusters, name,
                             _addjob(settings, 1, requests, 1, options))
            out.append(_measurement(
                name, "redis-benchmark -c 1 -n %d: ADDJOB q <%d-byte body> 0 REPLICATE 3%s, "
                "p50 latency; 3 nodes of this project vs 3 of the original, rounds alternating"
                % (requests, settings.body_bytes, " ASYNC" if options else ""), "ms", rounds,
                Target("ratio", "<=", LATENCY_RATIO), pick=lambda r: r.extra["p50_ms"]))
    return out


def original_replicate(servers: Servers, settings: Settings) -> list[Measurement]:
    """ADDJOB REPLICATE 3 at -c 16 -P 16 and -c 50 -P 1: req/s against the original's."""
    requests = max(settings.requests // 4, 1000)
    out = []
    with _clusters(servers) as clusters:
        for clients, pipeline in ((16, 16), (50, 1)):
            name = "original_addjob_replicate3_c%d_p%d" % (clients, pipeline)
            rounds = _rounds(settings, clusters, name,
                             _addjob(settings, clients, requests, pipeline))
            out.append(_measurement(
                name, "redis-benchmark -c %d -P %d -n %d: ADDJOB q <%d-byte body> 0 REPLICATE "
                "3; 3 nodes of this project vs 3 of the original, rounds alternating"
                % (clients, pipeline, requests, settings.body_bytes), "req/s", rounds,
                Target("ratio", ">=", THROUGHPUT_RATIO)))
    return out


def original_federation(servers: Servers, settings: Settings) -> list[Measurement]:
    """Produce on A (16 x 16 pipelined sync REPLICATE 3), consume on B (6 x GETJOB COUNT 16 +
    ACKJOB): delivered jobs/s, end-to-end p99 and server CPU per job against the original's."""
    config = loadgen.CycleConfig(duration=settings.cycle_duration,
                                 warmup=max(settings.cycle_warmup, FEDERATION_WARMUP_S),
                                 body_bytes=settings.body_bytes, producers=FEDERATION_PRODUCERS,
                                 consumers=FEDERATION_CONSUMERS, batch=FEDERATION_BATCH)

    def sample(nodes: list[DisqueNode]) -> tuple[float, int, dict[str, float]]:
        traffic = bus_traffic(nodes)
        got = loadgen.run(loadgen.DisqueDialect(b"q", replicate=CLUSTER_SIZE),
                          [nodes[0].port], [nodes[1].port], config)
        return got.rate, got.delivered, {"p50_ms": got.latency_ms(50),
                                         "p99_ms": got.latency_ms(99),
                                         **bus_per_job(traffic, bus_traffic(nodes),
                                                       got.delivered)}

    shape = ("%d producers on node A each pipelining %d ADDJOB q <%d-byte body> 0 REPLICATE 3, "
             "%d consumers on node B (GETJOB TIMEOUT 100 COUNT 16 FROM q, then ACKJOB), %g s "
             "after %g s of warm-up; 3 nodes of this project vs 3 of the original, rounds "
             "alternating" % (FEDERATION_PRODUCERS, FEDERATION_BATCH, settings.body_bytes,
                              FEDERATION_CONSUMERS, config.duration, config.warmup))
    with _clusters(servers) as clusters:
        rounds = _rounds(settings, clusters, "original_federation", sample)
    return [
        _measurement("original_federation_rate", "delivered jobs/s; " + shape, "jobs/s",
                     rounds, Target("ratio", ">=", THROUGHPUT_RATIO)),
        _measurement("original_federation_p99", "end-to-end p99 latency; " + shape, "ms",
                     rounds, Target("ratio", "<=", 1.0), pick=lambda r: r.extra["p99_ms"]),
        _measurement("original_federation_cpu", "server CPU per delivered job, 3 nodes "
                     "summed; " + shape, "us/job", rounds,
                     Target("ratio", "<=", FEDERATION_CPU_RATIO),
                     pick=lambda r: r.cpu_us_per_job),
    ]
