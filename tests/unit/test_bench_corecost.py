"""Tests for the bench/ parts around the instruction counts (``bench.corecost``):
the commands and reports of the ``schedule_unused`` section and of the
``corecost`` comparison of two trees. No valgrind here: what runs is the
harness itself, without callgrind, for a few commands.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench import compare, limits, schedule
from bench.run import parse_args, select_sections
from bench.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_corecost_is_a_comparison_section_outside_the_groups():
    sections, groups = compare.COMPARISONS, compare.GROUPS
    assert select_sections(None, sections, groups)[-1] == "corecost"
    assert select_sections(["corecost"], sections, groups) == ["corecost"]
    assert select_sections(["single"], sections, groups) == ["ping", "addjob"]
    args = parse_args(["--baseline-tree", "/tmp/old", "--only", "corecost", "--quick"])
    assert (args.baseline_tree, args.only, args.quick) == (Path("/tmp/old"), ["corecost"], True)


def test_corecost_section_gets_the_builds():
    builds = [compare.Build("baseline", Path("/b")), compare.Build("current", Path("/c"))]
    bound = compare.sections(builds)["corecost"]
    assert bound.func is compare.corecost and bound.keywords == {"builds": builds}


def test_callgrind_runs_this_checkouts_harness_file_off_its_own_directory():
    argv = limits.corecost_command("cron", 4800, "/tmp/x/callgrind.out")
    assert argv[:4] == ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                        "--callgrind-out-file=/tmp/x/callgrind.out"]
    assert argv[5:] == ["-P", str(REPO / "bench" / "corecost.py"), "cron", "4800", "--callgrind"]


def test_last_error_line_leaves_out_valgrind_lines():
    stderr = ("==41== Callgrind, a call-graph generating cache profiler\n"
              "Traceback (most recent call last):\n"
              "AssertionError: b\"-ERR unknown command 'SCHEDULE'\\r\\n\"\n"
              "==41== Events    : Ir\n\n")
    assert limits.last_error(stderr) == "AssertionError: b\"-ERR unknown command 'SCHEDULE'\\r\\n\""
    assert limits.last_error("==41== only valgrind\n") == "no output"


def test_the_harness_runs_every_compared_workload_and_the_schedule_ones_here():
    for workload in (*compare.CORECOST_WORKLOADS, "cron-schedules"):
        assert compare.corecost_problem(workload, REPO) is None, workload
    assert compare.CORECOST_JOBS % 16 == 0 and compare.CORECOST_QUICK_JOBS % 16 == 0


def test_a_tree_that_cannot_run_a_workload_is_named_with_its_error(tmp_path):
    (tmp_path / "disque").mkdir()
    (tmp_path / "disque" / "__init__.py").write_text("raise ImportError('not this disque')\n")
    assert compare.corecost_problem("cron", tmp_path) == "ImportError: not this disque"
    assert "unknown workload 'nope'" in compare.corecost_problem("nope", REPO)


def test_corecost_measurement_against_the_baseline_or_without_it():
    built = {"baseline": "compiled-mypyc", "current": "compiled-mypyc"}
    m = compare.corecost_measurement("addjob-run", 4800, 7284.04, 7276.0, built, None)
    assert (m.name, m.unit, m.value, m.reference.value) == (
        "corecost_addjob_run", "instructions/job", 7284.0, 7276.0)
    assert round(m.ratio, 4) == 1.0011 and m.passed is None
    assert m.details == {"core_build": built}
    skipped = compare.corecost_measurement("cron", 960, 2000.0, None, built,
                                           "AttributeError: 'Node' object has no attribute 'cron'")
    assert skipped.reference is None and skipped.ratio is None
    assert skipped.details["baseline"].startswith("skipped: this harness cannot run cron")
    assert "no attribute 'cron'" in skipped.details["baseline"]
    lines = compare.summary([m, skipped])
    assert lines[0].split()[:2] == ["workload", "(instr./job)"]
    assert lines[1].split() == ["corecost_addjob_run", "7276", "7284", "1.0011"]
    assert lines[2].split() == ["corecost_cron", "-", "2000", "-", "baseline", "skipped"]


def test_a_second_of_cron_passes_in_addjobs():
    assert schedule.per_second(1500.0, 9000.0) == {"cron_instructions_per_second": 15000.0,
                                                   "addjobs_per_second_equivalent": 1.667}


@pytest.mark.parametrize("section", [schedule.schedule_unused,
                                     compare.sections([])["corecost"]])
def test_instruction_sections_need_valgrind(monkeypatch, section):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="apt-get install valgrind"):
        section(None, Settings.for_quick_run())
