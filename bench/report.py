"""A report of ``make bench`` as the tables of docs/benchmarks.md.

``python -m bench.report [bench/results/latest.json]`` prints, for each
section of the run, one Markdown table: what was measured (the command or
workload), its figure, the reference measured in the same run, their
ratio and the target, under a line naming the run's date, commit, machine
load and each section's CPU steal.

``--fill docs/benchmarks.md`` rewrites the tables of a page instead: each
block between ``<!-- bench: SECTION[,SECTION...] -->`` and ``<!-- /bench -->``
becomes those sections' tables from the report (a section the report lacks
leaves its block as it was), so every figure there is one run's, named by
its commit.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterable

from bench.run import DEFAULT_OUTPUT

MARKS = {True: " ✓", False: " ✗", None: ""}
BLOCK = re.compile(r"(<!-- bench: ([\w,]+) -->\n)(.*?)(<!-- /bench -->)", re.DOTALL)


def figure(value: float, unit: str) -> str:
    """A value as the docs write it: thousands grouped, three significant decimals at most."""
    if abs(value) >= 1000:
        text = "{:,.0f}".format(value)
    elif abs(value) >= 10:
        text = "{:.1f}".format(value).rstrip("0").rstrip(".")
    else:
        text = "{:.3f}".format(value).rstrip("0").rstrip(".")
    return "%s %s" % (text, unit) if unit else text


def target_text(entry: dict[str, Any]) -> str:
    """The target as "≥ 0.8 × reference" or "≤ 25 ms", marked met or missed."""
    target = entry.get("target")
    if not target:
        return "—"
    bound = figure(target["value"], "" if target["on"] == "ratio" else entry["unit"])
    suffix = " ×" if target["on"] == "ratio" else ""
    return "%s %s%s%s" % ("≥" if target["op"] == ">=" else "≤", bound, suffix,
                          MARKS[entry.get("pass")])


def cell(text: str) -> str:
    """Text fit for a table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def rows(entries: Iterable[dict[str, Any]]) -> Iterable[str]:
    """One table row per measurement."""
    for entry in entries:
        reference = entry.get("reference")
        same_run = ("%s: %s" % (reference["name"], figure(reference["value"], entry["unit"]))
                    if reference else "—")
        ratio = entry.get("ratio")
        yield "| %s | %s | %s | %s | %s |" % (
            cell(entry["description"]), figure(entry["value"], entry["unit"]), cell(same_run),
            "—" if ratio is None else "%.3f" % ratio, target_text(entry))


def run_line(report: dict[str, Any]) -> str:
    """The run's date, commit, machine and load."""
    machine = report["machine"]
    commit = machine.get("git_commit", "")[:7] + (" (uncommitted changes)"
                                                  if machine.get("git_dirty") else "")
    return ("Run of %s on %s, %s, load average %s at the start; %d of %d targets met."
            % (machine["date"][:16].replace("T", " "), commit, machine.get("cpu_model", ""),
               machine.get("load_average", ["?"])[0], report["summary"]["passed"],
               report["summary"]["targets"]))


def tables(report: dict[str, Any], names: list[str]) -> Iterable[str]:
    """One table of the named sections' measurements, in the order named, under a
    line giving each section's steal; nothing when the report measured none of them."""
    steal = report["machine"].get("steal_percent_by_section", {})
    by_section: dict[str, list[dict[str, Any]]] = {}
    for entry in report["measurements"]:
        by_section.setdefault(entry.get("section", "?"), []).append(entry)
    measured = [name for name in names if by_section.get(name)]
    if not measured:
        return
    yield ""
    yield "Steal: %s." % ", ".join("`%s` %s %%" % (name, steal.get(name, "?"))
                                   for name in measured)
    yield ""
    yield "| measured | figure | same-run reference | ratio | target |"
    yield "|---|---:|---|---:|---|"
    for name in measured:
        yield from rows(by_section[name])


def render(report: dict[str, Any]) -> Iterable[str]:
    """The run's line, then a table per section in run order, then what was skipped."""
    yield run_line(report)
    for name in report["sections"]:
        yield from tables(report, [name])
    for each in report.get("skipped", []):
        yield ""
        yield "`%s` skipped: %s" % (each["section"], each["reason"])


def fill(page: str, report: dict[str, Any]) -> str:
    """The page with each bench block holding its sections' tables from the report."""
    measured = {entry.get("section") for entry in report["measurements"]}

    def block(match: re.Match[str]) -> str:
        names = match.group(2).split(",")
        if not measured.intersection(names):
            return match.group(0)
        lines = [run_line(report), *tables(report, names), ""]
        return match.group(1) + "\n".join(lines) + "\n" + match.group(4)
    return BLOCK.sub(block, page)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", nargs="?", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--fill", type=Path, metavar="PAGE",
                        help="rewrite the page's bench blocks instead of printing")
    args = parser.parse_args(argv)
    report = json.loads(args.report.read_text())
    if args.fill:
        args.fill.write_text(fill(args.fill.read_text(), report))
        return 0
    for line in render(report):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
