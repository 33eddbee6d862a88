"""What queue delivery limits and user quotas cost (docs/rate-limits.md), in
instructions per command of the compiled core under callgrind
(``bench.corecost``): wall-clock rates drift by ±30 % on this machine, far
more than the few instructions these paths add.

The measurements compare, in the same run and the same tree, GETJOB on a
queue with a limit that never holds a job back against the same GETJOB
without a limit, and ADDJOB by a user with a quota against the same user
without one: the cost of the features in use. Their cost when unused (no
limit, no quota) against the code before them is in docs/benchmarks.md,
measured with ``bench.corecost --callgrind`` on two trees.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.measurement import Measurement, Reference, Section
from bench.servers import Servers
from bench.settings import Settings

log = logging.getLogger("bench")

ROOT = Path(__file__).resolve().parent.parent
CORECOST = ROOT / "bench" / "corecost.py"
JOBS = 5000
QUICK_JOBS = 1000
# (measurement, workload, reference workload, what is compared)
PAIRS = (
    ("getjob_limit_instructions", "getjob-limited", "getjob",
     "GETJOB FROM q, one job each, with QLIMIT q RATE 1000000 BURST 1000000 (never holds a "
     "job back) vs no limit"),
    ("addjob_quota_instructions", "addjob-quota", "addjob-user",
     "ADDJOB q <64 B> 0 by a user with quota-jobs=1000000000 vs the same user without a quota"),
)


def require_valgrind() -> None:
    """An error naming the package when valgrind (with callgrind_control) is absent."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise RuntimeError("this section counts instructions with valgrind: "
                           "apt-get install valgrind")


def corecost_command(workload: str, jobs: int, out: str) -> list[str]:
    """valgrind running this checkout's ``bench.corecost`` file: ``-P`` keeps its
    directory off the path, so ``disque`` comes from PYTHONPATH alone."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            "--callgrind-out-file=" + out, sys.executable, "-P", str(CORECOST),
            workload, str(jobs), "--callgrind"]


def last_error(stderr: str) -> str:
    """The last line of a failed run's output that is not valgrind's (``==pid==``)."""
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("==")]
    return lines[-1] if lines else "no output"


def instructions_per_job(workload: str, jobs: int, tree: Path = ROOT) -> float:
    """Instructions per command of a ``bench.corecost`` workload, counted by
    callgrind over the measured commands only, with the ``disque`` of ``tree``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        done = subprocess.run(corecost_command(workload, jobs, out), cwd=tmp,
                              env={**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise RuntimeError("bench.corecost %s failed with the disque of %s: %s"
                               % (workload, tree, last_error(done.stderr)))
        for line in Path(out).read_text().splitlines():
            if line.startswith("totals:"):
                return int(line.split()[1]) / jobs
    raise RuntimeError("callgrind wrote no totals for %s" % workload)


def limits(servers: Servers, settings: Settings) -> list[Measurement]:
    """Instructions per GETJOB with a queue limit, and per ADDJOB with a user
    quota, against the same commands without (callgrind; needs valgrind)."""
    require_valgrind()
    jobs = QUICK_JOBS if settings.quick else JOBS
    out = []
    for name, workload, bare, label in PAIRS:
        used = instructions_per_job(workload, jobs)
        reference = instructions_per_job(bare, jobs)
        log.info("  %-28s %8.0f instructions/job, without: %8.0f", name, used, reference)
        out.append(Measurement(name, "callgrind, %d commands, compiled core when built: %s"
                               % (jobs, label), round(used, 1), "instructions/job",
                               reference=Reference(bare, round(reference, 1))))
    return out


SECTIONS: dict[str, Section] = {"limits": limits}
