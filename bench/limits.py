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


def instructions_per_job(workload: str, jobs: int) -> float:
    """Instructions per command of a ``bench.corecost`` workload, counted by
    callgrind over the measured commands only."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                        "--callgrind-out-file=" + out, sys.executable, "-m", "bench.corecost",
                        workload, str(jobs), "--callgrind"],
                       cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": "0"}, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for line in Path(out).read_text().splitlines():
            if line.startswith("totals:"):
                return int(line.split()[1]) / jobs
    raise RuntimeError("callgrind wrote no totals for %s" % workload)


def limits(servers: Servers, settings: Settings) -> list[Measurement]:
    """Instructions per GETJOB with a queue limit, and per ADDJOB with a user
    quota, against the same commands without (callgrind; needs valgrind)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise RuntimeError("this section counts instructions with valgrind: "
                           "apt-get install valgrind")
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
