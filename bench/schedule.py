"""What periodic jobs (docs/schedules.md) cost a node that has none, in
instructions of the compiled core under callgrind (``bench.corecost``).

A node without a schedule pays for the feature in its cron pass only (a
test of the empty table, ``hz`` times a second); ADDJOB's path does not
change. The section counts a cron pass with no schedule, with the pass
over 100 schedules none of which is due as its reference, and an ADDJOB,
so that a second's cron passes read as a number of ADDJOBs. Against the
code before the feature it is ``bench.run --baseline-tree DIR --only
corecost`` (``bench.compare``).
"""

from __future__ import annotations

import logging

from bench.limits import JOBS, QUICK_JOBS, instructions_per_job, require_valgrind
from bench.measurement import Measurement, Reference, Section
from bench.servers import Servers
from bench.settings import Settings

log = logging.getLogger("bench")
HZ = 10  # cron passes a second at the default hz


def per_second(cron_pass: float, addjob: float) -> dict[str, float]:
    """A second of cron passes at ``HZ``, in instructions and in ADDJOBs."""
    return {"cron_instructions_per_second": round(cron_pass * HZ, 1),
            "addjobs_per_second_equivalent": round(cron_pass * HZ / addjob, 3)}


def schedule_unused(servers: Servers, settings: Settings) -> list[Measurement]:
    """Instructions per cron pass with no schedule (100 schedules as reference)
    and per ADDJOB (callgrind; needs valgrind)."""
    require_valgrind()
    passes = QUICK_JOBS if settings.quick else JOBS
    bare = instructions_per_job("cron", passes)
    loaded = instructions_per_job("cron-schedules", passes)
    addjob = instructions_per_job("addjob", passes)
    log.info("  cron pass %8.0f instructions, with 100 schedules %8.0f; ADDJOB %8.0f",
             bare, loaded, addjob)
    return [
        Measurement("cron_pass_instructions",
                    "callgrind, %d Node.cron() passes of a lone node, the clock 100 ms later "
                    "each, compiled core when built: no schedule vs 100 schedules "
                    "(EVERY 3600, none due)" % passes,
                    round(bare, 1), "instructions/pass",
                    reference=Reference("cron-schedules", round(loaded, 1)),
                    details=per_second(bare, addjob)),
        Measurement("addjob_instructions",
                    "callgrind, %d ADDJOB q <64 B> 0 through Node.call, compiled core when "
                    "built: the unit for the cron figures" % passes,
                    round(addjob, 1), "instructions/job"),
    ]


SECTIONS: dict[str, Section] = {"schedule_unused": schedule_unused}
