"""AOF sections: what the append-only file costs and how fast it comes back.

- ``aof_addjob``: redis-benchmark ADDJOB (-P 1 and -P 16) against a node with
  ``appendonly yes`` / ``appendfsync everysec``, compared with a node without
  AOF in the same run, samples alternating (target ratio >= 0.8 for both).
- ``aof_load``: a node with the AOF on is given ``memory_jobs`` jobs
  (1,000,000 by default, pipelined), stopped and started again; the time from
  process start to the node answering PING (no longer -LOADING) is the load
  time (target <= 3 s). Then a BGREWRITEAOF of the same dataset is timed.
"""

from __future__ import annotations

import logging
import re
import time

import uvloop

from bench import redis_benchmark
from bench.measurement import Measurement, Reference, Section, Target, median
from bench.memory import add_jobs
from bench.servers import DisqueNode, Servers
from bench.settings import Settings

log = logging.getLogger("bench")
AOF_CONFIG = "appendonly yes\nappendfsync everysec\n"
LOAD_CONNECTIONS = 4
LOAD_BATCH = 1000
LOADED_LINE = re.compile(r"DB loaded from append only file: ([0-9.]+) seconds \((\d+) jobs\)")


def aof_addjob(servers: Servers, settings: Settings) -> list[Measurement]:
    """ADDJOB with appendfsync everysec vs the same workload on a node without AOF."""
    body = "x" * settings.body_bytes
    command = ("ADDJOB", "q", body, "0")
    out = []
    with servers.fresh_disque("aof_on", AOF_CONFIG) as with_aof, \
            servers.fresh_disque("aof_off") as without:
        for pipeline in (1, 16):
            on, off = [], []
            for _ in range(settings.repeats):
                for node, samples in ((without, off), (with_aof, on)):
                    node.flush()
                    rps = redis_benchmark.run(node.port, command, settings.clients,
                                              settings.requests, pipeline).rps
                    if (queued := node.queue_length("q")) != settings.requests:
                        raise redis_benchmark.BenchmarkError(
                            "%d requests but %d jobs queued" % (settings.requests, queued))
                    log.info("  ADDJOB -P %-2d %-8s %10.0f req/s", pipeline,
                             "AOF" if node is with_aof else "no AOF", rps)
                    samples.append(rps)
            fields = _persistence(with_aof)
            out.append(Measurement(
                "aof_addjob_p%d" % pipeline,
                "redis-benchmark -c %d -n %d -P %d: ADDJOB q <%d-byte body> 0 with appendonly "
                "yes, appendfsync everysec vs the same on a node without AOF"
                % (settings.clients, settings.requests, pipeline, settings.body_bytes),
                median(on), "req/s", samples=on,
                reference=Reference("node without AOF", median(off), off),
                target=Target("ratio", ">=", 0.8),
                details={"round_ratios": [round(a / b, 3) for a, b in zip(on, off)],
                         "aof_current_size": int(fields.get("aof_current_size", 0)),
                         "aof_delayed_fsync": int(fields.get("aof_delayed_fsync", 0))}))
    return out


def aof_load(servers: Servers, settings: Settings) -> list[Measurement]:
    """Restart time of a node whose AOF holds ``memory_jobs`` jobs, and their rewrite time."""
    jobs = settings.memory_jobs
    with servers.fresh_disque("aof_load", AOF_CONFIG) as node:
        log.info("  adding %d jobs with the AOF on", jobs)
        started = time.monotonic()
        errors = uvloop.run(add_jobs(node.port, jobs, settings.body_bytes,
                                      LOAD_CONNECTIONS, LOAD_BATCH))
        generate_s = time.monotonic() - started
        if errors:
            raise RuntimeError("%d ADDJOB errors while generating the AOF" % errors)
        aof_bytes = (node.dir / "disque.aof").stat().st_size
        node.stop()
        log.info("  AOF of %d bytes written in %.1f s; restarting", aof_bytes, generate_s)
        started = time.monotonic()
        node.start(timeout=600)
        load_s = time.monotonic() - started
        registered = int(_info(node, "jobs")["registered_jobs"])
        if registered != jobs:
            raise RuntimeError("%d jobs registered after the load, expected %d"
                               % (registered, jobs))
        server_load_s = _server_load_seconds(node)
        log.info("  loaded in %.2f s (server: %s s)", load_s, server_load_s)
        started = time.monotonic()
        if node.call("BGREWRITEAOF") is not True:
            raise RuntimeError("BGREWRITEAOF was not started")
        fields = _wait_rewrite(node)
        rewrite_s = time.monotonic() - started
        log.info("  BGREWRITEAOF of %d jobs: %.2f s", jobs, rewrite_s)
    shape = "%d jobs with %d-byte bodies (pipelined ADDJOB, appendfsync everysec)" % (
        jobs, settings.body_bytes)
    return [
        Measurement("aof_load_seconds",
                    "process start to PING answered (not -LOADING) with an AOF of " + shape,
                    load_s, "s", target=Target("value", "<=", 3.0),
                    details={"jobs": jobs, "aof_bytes": aof_bytes,
                             "server_reported_load_s": server_load_s,
                             "load_rate_jobs_per_s": round(jobs / load_s, 1),
                             "generate_s": round(generate_s, 3),
                             "generate_rate_jobs_per_s": round(jobs / generate_s, 1)}),
        Measurement("aof_rewrite_seconds", "BGREWRITEAOF until aof_rewrite_in_progress:0, "
                    + shape, rewrite_s, "s",
                    details={"aof_last_rewrite_time_sec":
                             int(fields["aof_last_rewrite_time_sec"]),
                             "aof_bytes_after": int(fields["aof_current_size"])}),
    ]


def _info(node: DisqueNode, section: str) -> dict[str, str]:
    text = node.call("INFO", section)
    if isinstance(text, dict):  # redis-py parsed it
        return {k: str(v) for k, v in text.items()}
    return dict(line.split(":", 1) for line in text.decode().split("\r\n") if ":" in line)


def _persistence(node: DisqueNode) -> dict[str, str]:
    return _info(node, "persistence")


def _wait_rewrite(node: DisqueNode, timeout: float = 600.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        fields = _persistence(node)
        if fields["aof_rewrite_in_progress"] == "0":
            if fields["aof_last_bgrewrite_status"] != "ok":
                raise RuntimeError("BGREWRITEAOF failed:\n%s" % node.tail_logs())
            return fields
        if time.monotonic() > deadline:
            raise RuntimeError("BGREWRITEAOF still running after %.0f s" % timeout)
        time.sleep(0.05)


def _server_load_seconds(node: DisqueNode) -> float | None:
    """The load time the server logged (the last one)."""
    found = LOADED_LINE.findall((node.dir / "disque.log").read_text(errors="replace"))
    return float(found[-1][0]) if found else None


SECTIONS: dict[str, Section] = {
    "aof_addjob": aof_addjob,
    "aof_load": aof_load,
}
