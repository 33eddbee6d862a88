"""``python -m bench.run``: run the selected sections and print one JSON report.

The report goes to stdout and to bench/results/latest.json; progress goes
to stderr. A section that fails is reported under ``errors`` and the run
goes on with the next one; the exit status is 1 if any section failed.
Missed targets are results, not failures, and do not change the status.

With ``--baseline-tree DIR`` the run compares two builds of disque instead:
the disque of DIR (e.g. a ``git worktree`` of the commit before a refactor)
against this checkout's (or ``--current-tree``'s), in alternating rounds of
the same run, each workload with the redis-server figure of the same rounds;
see ``bench.compare``. ``--only addjob,cluster`` keeps it to ADDJOB -P 1,
-P 16 and the 3-node REPLICATE 3 run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench import (aof, cluster, compare, limits, machine, mesh, metrics, schedule, single, startup,
                   tls, worker)
from bench.measurement import Measurement, Section, SectionSkipped
from bench.servers import Servers
from bench.settings import Settings

SECTIONS: dict[str, Section] = {**startup.SECTIONS, **single.SECTIONS, **cluster.SECTIONS,
                                **mesh.SECTIONS,
                                **aof.SECTIONS, **metrics.SECTIONS, **worker.SECTIONS,
                                **tls.SECTIONS, **limits.SECTIONS, **schedule.SECTIONS}
GROUPS: dict[str, list[str]] = {"startup": list(startup.SECTIONS),
                                "single": list(single.SECTIONS),
                                "cluster": [*cluster.SECTIONS, *mesh.SECTIONS],
                                "aof": list(aof.SECTIONS),
                                "metrics": list(metrics.SECTIONS),
                                "worker": list(worker.SECTIONS),
                                "tls": list(tls.SECTIONS)}
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "latest.json"
COMPARE_OUTPUT = DEFAULT_OUTPUT.with_name("compare.json")  # with --baseline-tree
log = logging.getLogger("bench")


def select_sections(only: list[str] | None, sections: dict[str, Any] = SECTIONS,
                    groups: dict[str, list[str]] = GROUPS) -> list[str]:
    """Section names for ``--only`` values (names or groups, comma-separated), in run order."""
    if not only:
        return list(sections)
    wanted: set[str] = set()
    for item in (part.strip() for value in only for part in value.split(",")):
        if item in groups:
            wanted.update(groups[item])
        elif item in sections:
            wanted.add(item)
        elif item:
            raise ValueError("unknown section %r (choose from %s)"
                             % (item, ", ".join([*groups, *sections])))
    return [name for name in sections if name in wanted]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.run", description=__doc__.split("\n")[0],
        epilog="Comparing two builds: git worktree add /tmp/disque-baseline <commit>; "
               "python -m bench.run --baseline-tree /tmp/disque-baseline --only addjob,cluster "
               "measures that commit's disque and this checkout's in alternating rounds "
               "(baseline, current, then current, baseline, ...) of one run, next to "
               "redis-server, and reports current/baseline per workload (throughput and "
               "server CPU per request) with a 95 %% interval and a verdict against 0.95. "
               "Sections then: %s (groups %s). Prefer many short rounds, e.g. "
               "--repeats 10 --requests 50000; --current-tree compares two other trees."
               % (", ".join(compare.COMPARISONS), ", ".join(compare.GROUPS)))
    parser.add_argument("--only", action="append", metavar="SECTIONS",
                        help="comma-separated sections or groups (%s); repeatable"
                             % ", ".join([*GROUPS, *SECTIONS]))
    parser.add_argument("--quick", action="store_true",
                        help="smaller n, shorter cycles, 100k jobs for memory")
    parser.add_argument("--port-base", type=int, metavar="PORT",
                        help="use consecutive free ports from PORT instead of random ones")
    parser.add_argument("--repeats", type=int, help="redis-benchmark samples per server")
    parser.add_argument("--requests", type=int, help="redis-benchmark -n")
    parser.add_argument("--duration", type=float, help="seconds measured per cycle run")
    parser.add_argument("--memory-jobs", type=int, help="jobs loaded by the memory section")
    parser.add_argument("--output", type=Path,
                        help="where to write the JSON report (default: %s, or %s with "
                             "--baseline-tree)" % (DEFAULT_OUTPUT, COMPARE_OUTPUT.name))
    parser.add_argument("--baseline-tree", type=Path, metavar="DIR",
                        help="compare the disque of this source tree (baseline) with the "
                             "current one instead of running the usual sections")
    parser.add_argument("--current-tree", type=Path, metavar="DIR",
                        help="with --baseline-tree: the current build's tree "
                             "(default: this checkout)")
    parser.add_argument("--list", action="store_true", help="list sections and exit")
    return parser.parse_args(argv)


def make_settings(args: argparse.Namespace) -> Settings:
    """Full or quick defaults, with explicit options on top."""
    settings = Settings.for_quick_run() if args.quick else Settings()
    overrides = {"repeats": args.repeats, "requests": args.requests,
                 "cycle_duration": args.duration, "memory_jobs": args.memory_jobs}
    return dataclasses.replace(settings, **{k: v for k, v in overrides.items() if v is not None})


def run_sections(names: list[str], settings: Settings, port_base: int | None,
                 sections: dict[str, Section] = SECTIONS,
                 skipped: list[dict[str, str]] | None = None
                 ) -> tuple[list[Measurement], list[dict[str, str]], dict[str, float | None]]:
    """Run sections in order; a failing section is recorded and the next one still runs,
    one that cannot run here is added to ``skipped`` with its reason.
    Also returns each section's share of CPU time stolen by the hypervisor: other
    guests of the host took it, and the ratios of such a section are much noisier."""
    measurements: list[Measurement] = []
    errors: list[dict[str, str]] = []
    steal: dict[str, float | None] = {}
    with Servers(port_base) as servers:
        for name in names:
            log.info("section %s", name)
            started = time.monotonic()
            ticks = machine.cpu_ticks()
            try:
                measured = sections[name](servers, settings)
                for measurement in measured:
                    measurement.section = name
                measurements.extend(measured)
            except SectionSkipped as exc:
                log.warning("section %s skipped: %s", name, exc)
                if skipped is not None:
                    skipped.append({"section": name, "reason": str(exc)})
            except Exception as exc:  # report it and keep the other sections' numbers
                log.exception("section %s failed", name)
                errors.append({"section": name, "error": "%s: %s" % (type(exc).__name__, exc)})
            for death in servers.reap():
                log.error("%s", death)
                errors.append({"section": name, "error": death})
            steal[name] = machine.steal_percent(ticks, machine.cpu_ticks())
            log.info("section %s took %.1f s, %s %% of CPU time stolen", name,
                     time.monotonic() - started, steal[name])
    return measurements, errors, steal


def build_report(measurements: list[Measurement], errors: list[dict[str, str]],
                 settings: Settings, sections: list[str], info: dict[str, object],
                 elapsed: float, comparison: dict[str, object] | None = None,
                 skipped: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The JSON document: machine, settings, measurements, a pass/fail summary."""
    judged = [m for m in measurements if m.passed is not None]
    return {
        "machine": info,
        "settings": dataclasses.asdict(settings),
        **({"comparison": comparison} if comparison is not None else {}),
        "sections": sections,
        "measurements": [m.to_dict() for m in measurements],
        "summary": {
            "targets": len(judged),
            "passed": sum(1 for m in judged if m.passed),
            "failed": [m.name for m in judged if not m.passed],
        },
        "skipped": skipped or [],
        "errors": errors,
        "elapsed_s": round(elapsed, 1),
    }


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C, so the servers are stopped on the way out."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``make bench``."""
    args = parse_args(argv)
    listed: dict[str, Any] = compare.COMPARISONS if args.baseline_tree else SECTIONS
    if args.list:
        for name, section in listed.items():
            print("%-14s %s" % (name, (section.__doc__ or "").split("\n")[0]))
        return 0
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="[bench %(asctime)s] %(message)s", datefmt="%H:%M:%S")
    sections, comparison = SECTIONS, None
    try:
        if args.current_tree and not args.baseline_tree:
            raise ValueError("--current-tree needs --baseline-tree")
        if args.baseline_tree:
            builds = compare.builds(args.baseline_tree, args.current_tree)
            sections = compare.sections(builds)
            comparison = {b.label: b.describe() for b in builds}
            names = select_sections(args.only, sections, compare.GROUPS)
        else:
            names = select_sections(args.only)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    settings = make_settings(args)
    signal.signal(signal.SIGTERM, _terminate)
    info = machine.describe()
    started = time.monotonic()
    skipped: list[dict[str, str]] = []
    try:
        measurements, errors, info["steal_percent_by_section"] = run_sections(
            names, settings, args.port_base, sections, skipped)
    except KeyboardInterrupt:
        log.error("interrupted; servers stopped, no report written")
        return 130
    info["load_average_end"] = machine.load_average()
    report = build_report(measurements, errors, settings, names, info,
                          time.monotonic() - started, comparison, skipped)
    text = json.dumps(report, indent=2)
    output = args.output or (DEFAULT_OUTPUT if comparison is None else COMPARE_OUTPUT)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text + "\n")
    print(text)
    log.info("report written to %s", output)
    for each in skipped:
        log.warning("skipped %s: %s", each["section"], each["reason"])
    if comparison is not None:
        for build in comparison.items():
            log.info("%-8s %s", *build)
        for line in compare.summary(measurements):
            log.info("%s", line)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
