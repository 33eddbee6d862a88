"""Two builds of disque in one run: ``python -m bench.run --baseline-tree DIR``.

A refactor shows "no regression" by measuring the old build and the new
one side by side, in the same run, on the same machine::

    git worktree add /tmp/disque-baseline <old-commit>
    python -m bench.run --baseline-tree /tmp/disque-baseline --only addjob,cluster

Each build runs its own nodes, started as ``python -m disque.server`` by the
harness's interpreter with the build's tree first on PYTHONPATH (the
"current" build is this checkout unless ``--current-tree`` names another).
Every workload takes ``repeats`` rounds; a round measures redis-server
(the reference of the same moment) and then both builds back to back, the
baseline first in even rounds and the current build first in odd ones
(B C, C B, B C, ...), so drift of the machine and the position in the round
weigh on both builds alike. An even number of rounds balances the order.

Each measurement's value is the current build's median, its reference the
baseline's median, its ratio current / baseline, with the target ``>= 0.95``
(at most 5 % slower). ``details`` add:

- ``round_ratios``: current / baseline of each round (pairs seconds apart);
  ``paired``: their geometric mean with a 95 % interval; ``verdict``: "no
  regression" when the whole interval is >= 0.95, "regression" when all of
  it is below, else "inconclusive" (too noisy to tell: more rounds, or a
  quieter machine);
- ``redis``: redis-server's figure of the same rounds, and both builds'
  ratios to it (``baseline_vs_redis``, ``current_vs_redis``);
- ``cpu_us_per_request``: server CPU time (user + system, all nodes of the
  build, from /proc) per request, and ``cpu_ratio``/``cpu_paired``/
  ``cpu_verdict`` as above with baseline CPU / current CPU, so that below 1
  is again a slower current build. Other load on the machine changes a
  sample's throughput much more than its CPU per request, so on a busy
  machine the CPU figures are the steadier ones.

Sections: ``ping``, ``addjob`` (-P 1 and -P 16), ``cluster_addjob`` (ADDJOB
REPLICATE 3 -P 1 on a 3-node cluster of each build, both clusters up all
along) and ``aof_addjob``; the groups ``single``, ``cluster`` and ``aof``
select among them. The log ends with a table of the figures.

``corecost`` counts instructions instead (callgrind, needs valgrind): this
checkout's ``bench/corecost.py`` runs each of ``CORECOST_WORKLOADS`` with
each build's tree as the only PYTHONPATH, so both builds run the same
harness; value = the current build's instructions per job, reference = the
baseline's (callgrind repeats to the instruction: one run each, no
rounds). A workload the baseline's ``disque`` cannot run (a harness newer
than the tree) keeps the current figure and says why under
``details["baseline"]``; ``details["core_build"]`` says whether each tree
ran its compiled core.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import limits, machine, redis_benchmark
from bench.aof import AOF_CONFIG
from bench.cluster import CLUSTER_SIZE
from bench.measurement import Measurement, Reference, Section, Target, median
from bench.servers import REPO, DisqueNode, Servers
from bench.settings import Settings

log = logging.getLogger("bench")
NO_REGRESSION = Target("ratio", ">=", 0.95)  # current / baseline
# Two-sided 95 % quantiles of Student's t for 1..12 degrees of freedom, then the normal one.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179)


def paired_interval(ratios: list[float]) -> dict[str, float] | None:
    """Geometric mean of per-round ratios and its 95 % interval (t on the log ratios);
    None with fewer than two rounds."""
    if len(ratios) < 2:
        return None
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    half = (T975[len(logs) - 2] if len(logs) - 2 < len(T975) else 1.96) * (
        statistics.stdev(logs) / math.sqrt(len(logs)))
    return {"geomean": round(math.exp(mean), 3), "low": round(math.exp(mean - half), 3),
            "high": round(math.exp(mean + half), 3)}


def verdict(interval: dict[str, float] | None, threshold: float = NO_REGRESSION.threshold) -> str:
    """"no regression" when the whole interval is above the threshold, "regression" when
    it is all below, else "inconclusive": the run was too noisy to tell (take more rounds)."""
    if interval is None:
        return "inconclusive"
    if interval["low"] >= threshold:
        return "no regression"
    if interval["high"] < threshold:
        return "regression"
    return "inconclusive"


@dataclasses.dataclass(frozen=True)
class Build:
    """One source tree whose ``disque`` package the nodes of that build run."""

    label: str  # "baseline" or "current"
    tree: Path

    def describe(self) -> dict[str, object]:
        """Path and revision, for the report."""
        return {"tree": str(self.tree), **machine.revision(self.tree)}


def check_tree(path: Path) -> Path:
    """The resolved tree, once a child started like a node imports ``disque`` from it."""
    tree = path.expanduser().resolve()
    if not (tree / "disque" / "server.py").is_file():
        raise ValueError("%s has no disque/server.py: not a disque checkout" % tree)
    done = subprocess.run(
        [sys.executable, "-c", "import disque.server; print(disque.server.__file__)"],
        env=dict(os.environ, PYTHONPATH=str(tree)), cwd="/", capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError("disque.server of %s does not import:\n%s" % (tree, done.stderr[-2000:]))
    imported = Path(done.stdout.strip()).resolve()
    if not imported.is_relative_to(tree):
        raise ValueError("with PYTHONPATH=%s, disque.server comes from %s" % (tree, imported))
    return tree


def builds(baseline: Path, current: Path | None) -> list[Build]:
    """Baseline first: round 0 starts with it."""
    return [Build("baseline", check_tree(baseline)), Build("current", check_tree(current or REPO))]


@dataclasses.dataclass(frozen=True)
class Workload:
    """One redis-benchmark command run against each build and, as reference, redis-server."""

    name: str
    command: tuple[str, ...]
    redis: tuple[str, ...]
    pipeline: int
    requests: int
    label: str
    counts_queue: bool = True  # check every request queued a job on the node measured


def _round_robin(servers: Servers, settings: Settings, workload: Workload,
                 nodes: dict[str, list[DisqueNode]]) -> Measurement:
    """``repeats`` rounds of redis-server, then both builds in alternating order."""
    samples: dict[str, list[float]] = {label: [] for label in nodes}
    cpu: dict[str, list[float]] = {label: [] for label in nodes}
    reference: list[float] = []
    labels = list(nodes)
    for round_ in range(settings.repeats):
        redis_server = servers.redis()
        redis_server.flush()
        reference.append(redis_benchmark.run(redis_server.port, workload.redis, settings.clients,
                                             workload.requests, workload.pipeline).rps)
        log.info("  %-26s round %d %-12s %10.0f req/s", workload.name, round_, "redis-server",
                 reference[-1])
        for label in labels if round_ % 2 == 0 else labels[::-1]:
            for node in nodes[label]:
                node.flush()
            target = nodes[label][0]
            cpu_before = sum(node.cpu_seconds() for node in nodes[label])
            rps = redis_benchmark.run(target.port, workload.command, settings.clients,
                                      workload.requests, workload.pipeline).rps
            cpu[label].append((sum(node.cpu_seconds() for node in nodes[label]) - cpu_before)
                              * 1e6 / workload.requests)
            if workload.counts_queue and (queued := target.queue_length("q")) != workload.requests:
                raise redis_benchmark.BenchmarkError(
                    "%s on the %s build: %d requests but %d jobs queued"
                    % (workload.name, label, workload.requests, queued))
            log.info("  %-26s round %d %-12s %10.0f req/s %7.1f CPU us/request", workload.name,
                     round_, label, rps, cpu[label][-1])
            samples[label].append(rps)
    return _measurement(settings, workload, samples["baseline"], samples["current"], reference,
                        cpu["baseline"], cpu["current"])


def _measurement(settings: Settings, workload: Workload, baseline: list[float],
                 current: list[float], reference: list[float], baseline_cpu: list[float],
                 current_cpu: list[float]) -> Measurement:
    ratios = [c / b for c, b in zip(current, baseline)]
    cpu_ratios = [b / c for b, c in zip(baseline_cpu, current_cpu) if c > 0]
    redis_value = median(reference)
    paired, cpu_paired = paired_interval(ratios), paired_interval(cpu_ratios)
    details: dict[str, Any] = {
        "round_ratios": [round(r, 3) for r in ratios],
        "round_ratio_median": round(median(ratios), 3),
        "paired": paired,
        "verdict": verdict(paired),
        "first_in_round": ["baseline" if i % 2 == 0 else "current" for i in range(len(ratios))],
        "redis": {"name": "redis-server %s" % " ".join(workload.redis[:2]),
                  "value": round(redis_value, 3), "samples": [round(s, 3) for s in reference]},
        "baseline_vs_redis": round(median(baseline) / redis_value, 3),
        "current_vs_redis": round(median(current) / redis_value, 3),
        # Server CPU time (all nodes of the build) per request: the machine's other load
        # slows the throughput of a sample far more than it changes this.
        "cpu_us_per_request": {"baseline": [round(c, 2) for c in baseline_cpu],
                               "current": [round(c, 2) for c in current_cpu]},
        "cpu_ratio": round(median(baseline_cpu) / median(current_cpu), 3),
        "cpu_round_ratios": [round(r, 3) for r in cpu_ratios],
        "cpu_paired": cpu_paired,
        "cpu_verdict": verdict(cpu_paired),
    }
    return Measurement(
        name=workload.name,
        description="redis-benchmark -c %d -n %d -P %d: %s; current build vs baseline build, "
                    "%d alternating rounds" % (settings.clients, workload.requests,
                                               workload.pipeline, workload.label, len(ratios)),
        value=median(current), unit="req/s", samples=current,
        reference=Reference("baseline build", median(baseline), baseline),
        target=NO_REGRESSION, details=details)


def _addjob_workloads(settings: Settings, prefix: str, label: str) -> list[Workload]:
    """ADDJOB -P 1 and -P 16, bare and with REPLICATE 1 (the batch path takes both)."""
    body = "x" * settings.body_bytes
    forms = [("", ()), ("_replicate1", ("REPLICATE", "1"))]
    return [Workload("%s%s_p%d" % (prefix, name, p), ("ADDJOB", "q", body, "0") + options,
                     ("LPUSH", "q", body), p, settings.requests,
                     "ADDJOB q <%d-byte body> 0%s%s; redis-server LPUSH q <body>"
                     % (settings.body_bytes, "".join(" " + o for o in options), label))
            for name, options in forms for p in (1, 16)]


def ping(servers: Servers, settings: Settings, builds: list[Build]) -> list[Measurement]:
    """PING -P 1 and -P 16 on each build's node: the per-request floor."""
    nodes = {b.label: [servers.disque("disque-" + b.label, b.tree)] for b in builds}
    return [_round_robin(servers, settings, Workload("ping_p%d" % p, ("PING",), ("PING",), p,
                                                     settings.requests, "PING", False), nodes)
            for p in (1, 16)]


def addjob(servers: Servers, settings: Settings, builds: list[Build]) -> list[Measurement]:
    """ADDJOB -P 1 and -P 16 with a 64-byte body on each build's node."""
    nodes = {b.label: [servers.disque("disque-" + b.label, b.tree)] for b in builds}
    return [_round_robin(servers, settings, w, nodes)
            for w in _addjob_workloads(settings, "addjob", "")]


def aof_addjob(servers: Servers, settings: Settings, builds: list[Build]) -> list[Measurement]:
    """ADDJOB -P 1 and -P 16 on a node of each build with appendfsync everysec."""
    with contextlib.ExitStack() as stack:
        nodes = {b.label: [stack.enter_context(
            servers.fresh_disque("aof-" + b.label, AOF_CONFIG, b.tree))] for b in builds}
        return [_round_robin(servers, settings, w, nodes) for w in _addjob_workloads(
            settings, "aof_addjob", " with appendonly yes, appendfsync everysec")]


def cluster_addjob(servers: Servers, settings: Settings, builds: list[Build]) -> list[Measurement]:
    """ADDJOB REPLICATE 3 -P 1 on one node of a 3-node cluster of each build."""
    body = "x" * settings.body_bytes
    requests = max(settings.requests // 2, 1000)  # as in bench.cluster
    workload = Workload(
        "cluster_addjob_replicate3", ("ADDJOB", "q", body, "0", "REPLICATE", str(CLUSTER_SIZE)),
        ("LPUSH", "q", body), 1, requests,
        "ADDJOB q <%d-byte body> 0 REPLICATE %d on one node of a %d-node cluster of each build "
        "(both clusters up all along); redis-server LPUSH q <body>"
        % (settings.body_bytes, CLUSTER_SIZE, CLUSTER_SIZE))
    with contextlib.ExitStack() as stack:
        nodes = {b.label: stack.enter_context(servers.cluster(
            CLUSTER_SIZE, name="cluster-%s-" % b.label, tree=b.tree)) for b in builds}
        return [_round_robin(servers, settings, workload, nodes)]


# bench.corecost workloads compared by ``corecost``: the per-job paths and a cron pass.
CORECOST_WORKLOADS = ("addjob", "addjob-run", "getjob", "cycle", "cron")
CORECOST_JOBS = 4800  # whole runs of 16 for addjob-run and cycle
CORECOST_QUICK_JOBS = 960
PROBE_JOBS = 16  # a run without valgrind that tells whether a tree can run a workload


def _tree_env(tree: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")


def core_build(tree: Path) -> str:
    """``compiled-mypyc`` or ``pure...``: what a process of ``tree`` loads."""
    done = subprocess.run([sys.executable, "-P", "-c",
                           "import disque.build; print(disque.build.core_build())"],
                          env=_tree_env(tree), cwd="/", capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown: " + limits.last_error(
        done.stderr)


def corecost_problem(workload: str, tree: Path) -> str | None:
    """Why this checkout's ``bench.corecost`` cannot run ``workload`` with the
    ``disque`` of ``tree`` (its last error line), None when it can."""
    done = subprocess.run([sys.executable, "-P", str(limits.CORECOST), workload,
                           str(PROBE_JOBS)], env=_tree_env(tree), cwd="/", capture_output=True,
                          text=True)
    return None if done.returncode == 0 else limits.last_error(done.stderr)


def corecost_measurement(workload: str, jobs: int, current: float, baseline: float | None,
                         core_builds: dict[str, str], baseline_problem: str | None) -> Measurement:
    """Current instructions per job against the baseline's (None: it could not run)."""
    details: dict[str, Any] = {"core_build": core_builds}
    if baseline is None:
        details["baseline"] = "skipped: this harness cannot run %s on the baseline tree (%s)" % (
            workload, baseline_problem)
    return Measurement(
        name="corecost_" + workload.replace("-", "_"),
        description="callgrind, bench.corecost %s %d --callgrind (this checkout's harness, "
                    "each build's disque): instructions per job, current build vs baseline "
                    "build" % (workload, jobs),
        value=round(current, 1), unit="instructions/job",
        reference=None if baseline is None else Reference("baseline build", round(baseline, 1)),
        details=details)


def corecost(servers: Servers, settings: Settings, builds: list[Build]) -> list[Measurement]:
    """Instructions per job of bench.corecost's paths and per cron pass, each build."""
    limits.require_valgrind()
    jobs = CORECOST_QUICK_JOBS if settings.quick else CORECOST_JOBS
    trees = {b.label: b.tree for b in builds}
    built = {label: core_build(tree) for label, tree in trees.items()}
    out = []
    for workload in CORECOST_WORKLOADS:
        problem = corecost_problem(workload, trees["baseline"])
        if problem is not None:
            log.warning("  corecost %s: the baseline tree cannot run it: %s", workload, problem)
        baseline = (None if problem is not None
                    else limits.instructions_per_job(workload, jobs, trees["baseline"]))
        current = limits.instructions_per_job(workload, jobs, trees["current"])
        log.info("  corecost %-12s baseline %10s current %10.1f instructions/job", workload,
                 "-" if baseline is None else "%.1f" % baseline, current)
        out.append(corecost_measurement(workload, jobs, current, baseline, built, problem))
    return out


COMPARISONS = {"ping": ping, "addjob": addjob, "cluster_addjob": cluster_addjob,
               "aof_addjob": aof_addjob, "corecost": corecost}
GROUPS: dict[str, list[str]] = {"single": ["ping", "addjob"], "cluster": ["cluster_addjob"],
                                "aof": ["aof_addjob"]}


def sections(build_list: list[Build]) -> dict[str, Section]:
    """The comparison sections with the builds bound, in run order."""
    return {name: functools.partial(fn, builds=build_list) for name, fn in COMPARISONS.items()}


def summary(measurements: list[Measurement]) -> list[str]:
    """Tables of the comparison for the log: the wall-clock workloads, then the
    instruction counts."""
    timed = [m for m in measurements if "redis" in m.details]
    counted = [m for m in measurements if "core_build" in m.details]
    lines = []
    if timed:
        lines.append("%-26s %9s %9s %8s %9s %9s  %-31s %-31s" % (
            "workload (req/s)", "baseline", "current", "cur/base", "redis", "cur/redis",
            "paired rounds [95 %] verdict", "CPU/request [95 %] verdict"))
    for m in timed:
        assert m.reference is not None
        lines.append("%-26s %9.0f %9.0f %8.3f %9.0f %9.3f  %-31s %-31s" % (
            m.name, m.reference.value, m.value, m.ratio or 0.0, m.details["redis"]["value"],
            m.details["current_vs_redis"], _interval_text(m.details["paired"], m.details["verdict"]),
            _interval_text(m.details["cpu_paired"], m.details["cpu_verdict"])))
    if counted:
        lines.append("%-26s %9s %9s %8s" % ("workload (instr./job)", "baseline", "current",
                                            "cur/base"))
    for m in counted:
        if m.reference is None:
            lines.append("%-26s %9s %9.0f %8s  baseline skipped" % (m.name, "-", m.value, "-"))
        else:
            lines.append("%-26s %9.0f %9.0f %8.4f" % (m.name, m.reference.value, m.value,
                                                      m.ratio or 0.0))
    return lines


def _interval_text(interval: dict[str, float] | None, said: str) -> str:
    if interval is None:
        return said
    return "%.3f [%.3f-%.3f] %s" % (interval["geomean"], interval["low"], interval["high"], said)
