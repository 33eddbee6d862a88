"""Cluster sections: synchronous replication and federation on three nodes.

- ``cluster_addjob``: redis-benchmark ADDJOB ... REPLICATE 3 against one
  node of a 3-node cluster, compared with the same node's ADDJOB ...
  REPLICATE 1 in the same run (target ratio >= 0.35).
- ``cluster_cycle``: the produce/consume cycle with REPLICATE 3, producers
  and consumers on the same node (the local reference for federation).
- ``federation``: producers on node A (REPLICATE 3), consumers on node B,
  at full load and at a fixed 5,000 jobs/s (targets: p99 <= 50 ms at the
  fixed rate; full-load throughput >= 0.5 x the local cycle).
"""

from __future__ import annotations

import dataclasses
import logging

from bench import loadgen, redis_benchmark
from bench.measurement import Measurement, Reference, Section, Target, median
from bench.servers import Servers
from bench.settings import Settings
from bench.single import _cycle_measurements, _cycle_shape

log = logging.getLogger("bench")
CLUSTER_SIZE = 3
CLUSTER_PRODUCERS = 32


def cluster_addjob(servers: Servers, settings: Settings) -> list[Measurement]:
    """ADDJOB REPLICATE 3 vs REPLICATE 1 on the same node of a 3-node cluster."""
    body = "x" * settings.body_bytes
    requests = max(settings.requests // 2, 1000)
    repl1, repl3 = [], []
    with servers.cluster(CLUSTER_SIZE) as nodes:
        node = nodes[0]
        for _ in range(settings.repeats):
            for factor, samples in ((1, repl1), (3, repl3)):
                for each in nodes:
                    each.flush()
                rps = redis_benchmark.run(node.port, ("ADDJOB", "q", body, "0", "REPLICATE",
                                                      str(factor)),
                                          settings.clients, requests, 1).rps
                log.info("  ADDJOB REPLICATE %d: %8.0f req/s", factor, rps)
                samples.append(rps)
    return [Measurement(
        "cluster_addjob_replicate3",
        "redis-benchmark -c %d -n %d: ADDJOB q <%d-byte body> 0 REPLICATE 3 on one node of a "
        "%d-node cluster vs the same node's ADDJOB ... REPLICATE 1"
        % (settings.clients, requests, settings.body_bytes, CLUSTER_SIZE),
        median(repl3), "req/s", samples=repl3,
        reference=Reference("same node ADDJOB REPLICATE 1", median(repl1), repl1),
        target=Target("ratio", ">=", 0.35),
        details={"round_ratios": [round(a / b, 3) for a, b in zip(repl3, repl1)]})]


def federation(servers: Servers, settings: Settings) -> list[Measurement]:
    """Local cycle (REPLICATE 3, one node) and federation (A -> B), same cluster."""
    # A synchronous ADDJOB blocks its connection until the replicas answer,
    # so producers use many connections with one job in flight each, as a
    # pool of application clients would.
    full = loadgen.CycleConfig(duration=settings.cycle_duration, warmup=settings.cycle_warmup,
                               body_bytes=settings.body_bytes, producers=CLUSTER_PRODUCERS,
                               batch=1)
    paced = dataclasses.replace(full, rate=settings.cycle_rate)
    out = []
    with servers.cluster(CLUSTER_SIZE) as nodes:
        a, b = nodes[0], nodes[1]
        local = loadgen.run(loadgen.DisqueDialect(b"bench:local", replicate=3), [a.port],
                            [a.port], full)
        log.info("  local cycle REPLICATE 3: %8.0f jobs/s p50 %.2f ms p99 %.2f ms", local.rate,
                 local.latency_ms(50), local.latency_ms(99))
        out.extend(_single(_cycle_measurements("cluster_cycle", "REPLICATE 3, producers and "
                                               "consumers on node A; " + _cycle_shape(full),
                                               local, local)))
        for mode, config in (("full", full), ("rate", paced)):
            got = loadgen.run(loadgen.DisqueDialect(b"bench:fed:" + mode.encode(), replicate=3),
                              [a.port], [b.port], config)
            log.info("  federation %-4s %8.0f jobs/s p50 %.2f ms p99 %.2f ms", mode, got.rate,
                     got.latency_ms(50), got.latency_ms(99))
            shape = "producers on node A (REPLICATE 3), consumers on node B; " + _cycle_shape(config)
            entries = _single(_cycle_measurements("federation_" + mode, shape, got, local))
            if mode == "full":
                entries[0].reference = Reference("local cycle on node A", local.rate)
                entries[0].target = Target("ratio", ">=", 0.5)
            else:
                entries[2].target = Target("value", "<=", 50.0)
            out.extend(entries)
    return out


def _single(measurements: list[Measurement]) -> list[Measurement]:
    """Drop the redis reference that the single-node helper attaches."""
    for m in measurements:
        m.reference = None
        m.details.pop("redis", None)
    return measurements


SECTIONS: dict[str, Section] = {
    "cluster_addjob": cluster_addjob,
    "federation": federation,
}
