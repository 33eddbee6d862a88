"""Cluster sections: synchronous replication and federation on three nodes.

- ``cluster_addjob``: redis-benchmark ADDJOB ... REPLICATE 3 against one
  node of a 3-node cluster, compared with the same node's ADDJOB ...
  REPLICATE 1 in the same run (target ratio >= 0.35).
- ``cluster_cycle``: the produce/consume cycle with REPLICATE 3, producers
  and consumers on the same node (the local reference for federation).
- ``federation``: producers on node A (REPLICATE 3), consumers on node B,
  at full load and at a fixed 5,000 jobs/s. Targets: at full
  load >= 15,000 jobs/s (the original C server: 13-15 k) and >= 1.0 x the
  local cycle of the same run; at the fixed rate an end-to-end p99 <= 25 ms.
- ``cluster_secret``: ADDJOB ... REPLICATE 3 on a cluster with a cluster
  secret (a MAC on every bus frame) against a cluster without, same run
  (target ratio >= 0.9).
- ``original_latency``, ``original_replicate``, ``original_federation``:
  the same kinds of workloads, three nodes of ours against three of the
  original C Disque in the same run (``bench.original``); skipped, and
  listed as such in the report, where the original's binary is absent.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets

from bench import loadgen, original, redis_benchmark
from bench.measurement import Measurement, Reference, Section, Target, median
from bench.servers import Servers
from bench.settings import Settings
from bench.single import _cycle_measurements, _cycle_shape

log = logging.getLogger("bench")
CLUSTER_SIZE = 3
CLUSTER_PRODUCERS = 32
FEDERATION_RATE = 15_000.0  # jobs/s at full load
FEDERATION_VS_LOCAL = 1.0  # full-load throughput / the local REPLICATE 3 cycle's
FEDERATION_P99_MS = 25.0  # at the fixed rate


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
        before, traffic = _node_counters(nodes), original.bus_traffic(nodes)
        local = loadgen.run(loadgen.DisqueDialect(b"bench:local", replicate=3), [a.port],
                            [a.port], full)
        local_costs = _costs_per_job(nodes, before, traffic, local)
        log.info("  local cycle REPLICATE 3: %8.0f jobs/s p50 %.2f ms p99 %.2f ms", local.rate,
                 local.latency_ms(50), local.latency_ms(99))
        local_entries = _single(_cycle_measurements("cluster_cycle", "REPLICATE 3, producers and "
                                                    "consumers on node A; " + _cycle_shape(full),
                                                    local, local))
        local_entries[0].details.update(local_costs)
        out.extend(local_entries)
        for mode, config in (("full", full), ("rate", paced)):
            before, traffic = _node_counters(nodes), original.bus_traffic(nodes)
            got = loadgen.run(loadgen.DisqueDialect(b"bench:fed:" + mode.encode(), replicate=3),
                              [a.port], [b.port], config)
            costs = _costs_per_job(nodes, before, traffic, got)
            log.info("  federation %-4s %8.0f jobs/s p50 %.2f ms p99 %.2f ms", mode, got.rate,
                     got.latency_ms(50), got.latency_ms(99))
            shape = "producers on node A (REPLICATE 3), consumers on node B; " + _cycle_shape(config)
            entries = _single(_cycle_measurements("federation_" + mode, shape, got, local))
            entries[0].details.update(costs)
            if mode == "full":
                entries[0].reference = Reference("local cycle on node A", local.rate)
                entries[0].target = Target("ratio", ">=", FEDERATION_VS_LOCAL)
                entries.insert(1, Measurement(
                    "federation_full_rate", "delivered jobs/s (the original C Disque: 13-15 k); "
                    + shape, got.rate, "jobs/s", target=Target("value", ">=", FEDERATION_RATE)))
            else:
                entries[2].target = Target("value", "<=", FEDERATION_P99_MS)
            out.extend(entries)
    return out


def cluster_secret(servers: Servers, settings: Settings) -> list[Measurement]:
    """ADDJOB REPLICATE 3 on a cluster with a cluster secret (every bus frame
    MACed) vs a cluster without, same run, rounds alternating which goes first."""
    body = "x" * settings.body_bytes
    requests = max(settings.requests // 2, 1000)
    sealed_config = "cluster-node-timeout 3000\ncluster-secret %s\n" % secrets.token_hex(32)
    samples: dict[str, list[float]] = {"plain": [], "secret": []}
    cpu: dict[str, list[float]] = {"plain": [], "secret": []}
    with servers.cluster(CLUSTER_SIZE, name="plain") as plain, \
            servers.cluster(CLUSTER_SIZE, config=sealed_config, name="secret") as sealed:
        runs = [("plain", plain), ("secret", sealed)]
        for round_no in range(settings.repeats):
            for kind, nodes in (runs if round_no % 2 == 0 else runs[::-1]):
                for each in nodes:
                    each.flush()
                before = sum(node.cpu_seconds() for node in nodes)
                rps = redis_benchmark.run(nodes[0].port, ("ADDJOB", "q", body, "0", "REPLICATE",
                                                          str(CLUSTER_SIZE)),
                                          settings.clients, requests, 1).rps
                used = sum(node.cpu_seconds() for node in nodes) - before
                log.info("  ADDJOB REPLICATE 3, %-6s bus: %8.0f req/s", kind, rps)
                samples[kind].append(rps)
                cpu[kind].append(round(used / requests * 1e6, 1))
    return [Measurement(
        "cluster_secret_addjob_replicate3",
        "redis-benchmark -c %d -n %d: ADDJOB q <%d-byte body> 0 REPLICATE 3 on one node of a "
        "%d-node cluster whose bus has a cluster secret vs one without"
        % (settings.clients, requests, settings.body_bytes, CLUSTER_SIZE),
        median(samples["secret"]), "req/s", samples=samples["secret"],
        reference=Reference("same cluster without a secret", median(samples["plain"]),
                            samples["plain"]),
        target=Target("ratio", ">=", 0.9),
        details={"cluster_cpu_us_per_job_secret": cpu["secret"],
                 "cluster_cpu_us_per_job_plain": cpu["plain"]})]


def _node_counters(nodes) -> list[tuple[float, int]]:
    """Each node's CPU seconds and bus messages its core sent so far (a
    message per job: CLUSTER INFO's count, before batching)."""
    counters = []
    for node in nodes:
        info = node.call("CLUSTER", "INFO")
        text = info.decode() if isinstance(info, bytes) else str(info)
        sent = next(int(line.split(":", 1)[1]) for line in text.splitlines()
                    if line.startswith("cluster_stats_messages_sent:"))
        counters.append((node.cpu_seconds(), sent))
    return counters


def _costs_per_job(nodes, before: list[tuple[float, int]], traffic: tuple[int, int] | None,
                   got: loadgen.CycleResult) -> dict[str, object]:
    """CPU microseconds per delivered job on each node, and bus messages (as they
    travel, and as the cores sent them) and frames per job over a run: what tells
    a slow run that does more work per job from one that got less CPU."""
    after = _node_counters(nodes)
    jobs = max(got.delivered, 1)
    return {"node_cpu_us_per_job": [round((a[0] - b[0]) / jobs * 1e6, 1)
                                    for a, b in zip(after, before)],
            **original.bus_per_job(traffic, original.bus_traffic(nodes), jobs),
            "bus_core_messages_per_job": round(sum(a[1] - b[1] for a, b in zip(after, before))
                                               / jobs, 2)}


def _single(measurements: list[Measurement]) -> list[Measurement]:
    """Drop the redis reference that the single-node helper attaches."""
    for m in measurements:
        m.reference = None
        m.details.pop("redis", None)
    return measurements


SECTIONS: dict[str, Section] = {
    "cluster_addjob": cluster_addjob,
    "federation": federation,
    "cluster_secret": cluster_secret,
    # Against the original C server, when it is present (bench.original).
    "original_latency": original.original_latency,
    "original_replicate": original.original_replicate,
    "original_federation": original.original_federation,
}
