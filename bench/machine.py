"""Where and when a run happened: results only compare within one machine and one run."""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
from pathlib import Path

from bench import redis_benchmark
from bench.servers import REPO


def parse_cpu_model(cpuinfo: str) -> str | None:
    """The first ``model name`` of /proc/cpuinfo text (None on CPUs that do not report one)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return None


def _output(argv: list[str], cwd: Path = REPO) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    return done.stdout.strip() if done.returncode == 0 else None


def parse_cpu_ticks(stat: str) -> tuple[int, int]:
    """(steal, total) clock ticks of all CPUs from /proc/stat text. Guest time
    is left out of the total: the kernel already counts it as user time."""
    fields = stat.split("\n", 1)[0].split()
    if fields[:1] != ["cpu"] or len(fields) < 9:
        raise ValueError("no aggregate cpu line in /proc/stat")
    ticks = [int(value) for value in fields[1:9]]  # user .. steal
    return ticks[7], sum(ticks)


def cpu_ticks() -> tuple[int, int] | None:
    """``parse_cpu_ticks`` of this machine now; None where /proc/stat is missing."""
    try:
        return parse_cpu_ticks(Path("/proc/stat").read_text())
    except (OSError, ValueError):
        return None


def steal_percent(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """Share of the CPU time between two ``cpu_ticks`` that the hypervisor gave
    to other guests: a run with much of it measured a machine that was not ours."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round(100 * (after[0] - before[0]) / (after[1] - before[1]), 1)


def load_average() -> list[float]:
    """1/5/15-minute load: above nproc, other processes were competing for the cores."""
    return [round(x, 2) for x in os.getloadavg()]


def describe() -> dict[str, object]:
    """Machine, software and source revision of this run."""
    try:
        cpu_model = parse_cpu_model(Path("/proc/cpuinfo").read_text())
    except OSError:
        cpu_model = None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "load_average": load_average(),
        "kernel": platform.release(),
        "python": "%s %s" % (platform.python_implementation(), platform.python_version()),
        "redis_server": _output(["redis-server", "--version"]),
        "redis_benchmark": redis_benchmark.version(),
        **revision(REPO),
    }


def revision(tree: Path) -> dict[str, object]:
    """Commit of a source tree and whether tracked files differ from it."""
    commit = _output(["git", "rev-parse", "HEAD"], tree)
    status = _output(["git", "status", "--porcelain", "--untracked-files=no"], tree)
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}
