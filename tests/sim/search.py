"""Fault-schedule search: many seeded random histories, the invariants after each.

``make sim-search SEEDS=10000`` (or ``python -m tests.sim.search --seeds
10000 --workers 2``) runs one simulated cluster per seed: 3 to 7 real
node cores on the simulated network, with producers and consumers, while
a nemesis drops, delays, duplicates and (in some seeds) reorders
messages, partitions the network, crashes nodes (SIGKILL) and restarts
them with or without their AOF (sometimes with the disk lost too), makes
clocks jump, pauses queues and makes nodes leave. In half the seeds it
also freezes node processes for up to 6 s (SIGSTOP: messages and clients
wait), in half it kills several nodes that have an AOF at once (all of a
job's holders, often) and restarts them a moment later. Then the network
heals, every node restarts, a drainer takes and acknowledges what is
left, and the ledger (``harness.workload``) checks the invariants:

* no job whose synchronous ADDJOB with REPLICATE >= 2 was acknowledged
  to its producer (TTL long enough not to expire during the run) is lost
  while one of the nodes that held it at that moment still has it: never
  crashed, or crashed and restarted with its AOF;
* no job is delivered after its acknowledgement completed cluster-wide
  (every copy gone, AOFs of crashed nodes included), and once the links
  are back an ACKJOB stops deliveries by every node that knew of the job
  within ACK propagation time;
* every queued job is eventually delivered once the network heals: the
  cluster converges to no job left but RETRY 0 ones that were delivered;
* a RETRY 0 job is delivered at most once; a job ID always has the body
  and queue it was created with; every reply is one well-formed RESP
  value; every node's internal state stays consistent; no node raises.

What the invariants allow: a job delivered more than once (at-least-once
under RETRY: a worker that took too long, a partition, a NACK, a restart
from AOF that requeues a job whose ACK it never heard); the loss of a job
added with REPLICATE 1, ASYNC, a short TTL, or every one of whose holders
lost its jobs (crash without AOF, or with its disk); an ADDJOB that
failed (-NOREPL, a lost connection) may or may not have created a job.

A seed fixes the whole history: a failing one is printed with the
command that replays it (``--replay SEED``, with ``SIM_TRACE=1`` for the
full event trace).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from tests.sim.harness import NetParams, Sim
from tests.sim.harness.start import skewed_cluster
from tests.sim.harness.workload import Workload

REPLAY = ".venv/bin/python -m tests.sim.search --replay %d"
DEFAULT_BASE = 1_000_000  # apart from the seeds of tests/sim's own randomized tests


@dataclass
class Outcome:
    """What one seed did."""

    seed: int
    ok: bool
    seconds: float
    nodes: int = 0
    aof: str = ""
    error: str = ""
    stats: dict = field(default_factory=dict)


def build(seed: int) -> tuple[Sim, Workload, int]:
    """The simulation, workload and chaos time of ``seed`` (nothing run yet)."""
    rng = random.Random(seed)
    size = rng.choice((3, 3, 4, 4, 5, 5, 6, 7))
    mode = rng.choice(("off", "all", "all", "some"))
    if mode == "all":
        aof: list[int] = list(range(size))
    elif mode == "some":
        aof = sorted(rng.sample(range(size), rng.randint(1, size - 1)))
    else:
        aof = []
    reorder = rng.random() < 0.1
    net = NetParams(latency=(0.1, rng.choice((1.0, 5.0, 5.0, 20.0))),
                    drop=rng.choice((0.0, 0.001, 0.01)), dup=rng.choice((0.0, 0.0, 0.01)))
    sim = skewed_cluster(rng, size, seed, net, aof=aof)
    workload = Workload(sim, random.Random(rng.getrandbits(64)),
                        producers=rng.randint(1, 3), consumers=rng.randint(1, 3),
                        max_down=rng.randint(1, max(1, size // 2)), reorder=reorder,
                        disk_loss=rng.choice((0.0, 0.0, 0.2)), mass_crash=rng.random() < 0.5,
                        watch_gone=True, stalls=rng.random() < 0.5)
    return sim, workload, rng.randint(8_000, 25_000)


def describe(sim: Sim) -> str:
    aof = [sn.index for sn in sim.nodes if sn.aof is not None]
    if not aof:
        return "off"
    return "all" if len(aof) == len(sim.nodes) else ",".join("n%d" % i for i in aof)


def run_seed(seed: int) -> Outcome:
    """Run one seed; any exception (an invariant, a node's own) is its failure."""
    started = time.perf_counter()
    sim = None
    try:
        sim, workload, chaos_ms = build(seed)
        workload.run(chaos_ms=chaos_ms)
        stats = dict(workload.stats)
        stats["delivered"] = sum(len(r.deliveries) for r in workload.ledger.by_body.values())
        stats["duplicates"] = sum(max(0, len(r.deliveries) - 1)
                                  for r in workload.ledger.by_body.values())
        stats["aof_loads"] = sum(sn.aof.loads for sn in sim.nodes if sn.aof is not None)
        return Outcome(seed, True, time.perf_counter() - started, len(sim.nodes), describe(sim),
                       stats=stats)
    except Exception as exc:  # noqa: BLE001 -- every failure is reported with its seed
        text = "%s: %s" % (type(exc).__name__, exc)
        if not isinstance(exc, AssertionError):
            text += "\n" + "".join(traceback.format_exception(exc)[-6:])
        return Outcome(seed, False, time.perf_counter() - started,
                       len(sim.nodes) if sim else 0, describe(sim) if sim else "", error=text)
    finally:
        if sim is not None:
            sim.close()


def search(seeds: range, workers: int,
           progress: Callable[[Outcome, int], None] | None = None) -> list[Outcome]:
    """Run every seed of ``seeds`` over ``workers`` processes."""
    outcomes: list[Outcome] = []
    if workers <= 1:
        for seed in seeds:
            outcomes.append(run_seed(seed))
            if progress is not None:
                progress(outcomes[-1], len(outcomes))
        return outcomes
    context = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
    with context.Pool(workers) as pool:
        for outcome in pool.imap_unordered(run_seed, seeds, chunksize=4):
            outcomes.append(outcome)
            if progress is not None:
                progress(outcome, len(outcomes))
    outcomes.sort(key=lambda o: o.seed)
    return outcomes


def summary(outcomes: list[Outcome], seconds: float) -> str:
    failed = [o for o in outcomes if not o.ok]
    totals: dict[str, int] = {}
    for outcome in outcomes:
        for key, value in outcome.stats.items():
            totals[key] = totals.get(key, 0) + value
    lines = ["seeds run      %d (%d..%d)" % (len(outcomes), outcomes[0].seed, outcomes[-1].seed)
             if outcomes else "seeds run      0",
             "failed         %d" % len(failed),
             "wall time      %.1f s (%.3f s per seed)" % (seconds, seconds / max(1, len(outcomes))),
             "with AOF       %d seeds" % sum(1 for o in outcomes if o.aof not in ("", "off"))]
    for key in ("addjob", "delivered", "duplicates", "ackjob", "fastack", "nack", "crash",
                "mass_crash", "stall", "disk_lost", "restart", "aof_loads", "partition",
                "clock", "faults", "pause", "leaving"):
        if key in totals:
            lines.append("%-14s %d" % (key, totals[key]))
    return "\n".join(lines)


def failure_report(outcome: Outcome) -> str:
    return ("FAILED seed %d (%d nodes, AOF %s): replay with: %s  (SIM_TRACE=1 for every event)\n"
            "  %s" % (outcome.seed, outcome.nodes, outcome.aof, REPLAY % outcome.seed,
                      outcome.error.replace("\n", "\n  ")[:4000]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.search", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds (1000)")
    parser.add_argument("--base", type=int, default=DEFAULT_BASE,
                        help="first seed (%d)" % DEFAULT_BASE)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes (2)")
    parser.add_argument("--replay", type=int, metavar="SEED",
                        help="run one seed in this process and show its failure in full")
    args = parser.parse_args(argv)
    if args.replay is not None:
        sim, workload, chaos_ms = build(args.replay)
        try:
            workload.run(chaos_ms=chaos_ms)
        finally:
            sim.close()
        print("seed %d passed (%d nodes, AOF %s): %s" % (args.replay, len(sim.nodes),
                                                         describe(sim), workload.stats))
        return 0
    seeds = range(args.base, args.base + args.seeds)
    print("fault-schedule search: seeds %d..%d on %d worker(s)" % (
        seeds.start, seeds.stop - 1, args.workers), flush=True)
    step = max(1, args.seeds // 20)

    def progress(outcome: Outcome, done: int) -> None:
        if not outcome.ok:
            print(failure_report(outcome), flush=True)
        if done % step == 0:
            print("  %d/%d seeds, %.0f s" % (done, args.seeds, time.perf_counter() - started),
                  flush=True)

    started = time.perf_counter()
    outcomes = search(seeds, args.workers, progress)
    print(summary(outcomes, time.perf_counter() - started))
    failed = [o for o in outcomes if not o.ok]
    for outcome in failed:
        print("replay: %s" % (REPLAY % outcome.seed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
