"""bench.report: a run's JSON as the docs' tables."""

from bench.measurement import Measurement, Reference, Target
from bench.report import figure, fill, render
from bench.run import build_report
from bench.settings import Settings


def report_of(*measurements: Measurement) -> dict:
    info = {"date": "2026-12-08T01:00:00+00:00", "git_commit": "abcdef0123", "git_dirty": False,
            "cpu_model": "cpu", "load_average": [0.5, 0, 0],
            "steal_percent_by_section": {"addjob": 0.1}}
    return build_report(list(measurements), [], Settings(), ["addjob"], info, 1.0)


def test_each_section_gets_a_table_with_figure_reference_ratio_and_target():
    met = Measurement("addjob_p1", "ADDJOB q <64 B> 0 -P 1", 90_000.0, "req/s",
                      reference=Reference("redis-server LPUSH", 100_000.0),
                      target=Target("ratio", ">=", 0.8), section="addjob")
    missed = Measurement("addjob_p16", "ADDJOB | -P 16", 20_000.0, "req/s",
                         reference=Reference("redis-server LPUSH", 100_000.0),
                         target=Target("ratio", ">=", 0.3), section="addjob")
    lines = list(render(report_of(met, missed)))
    assert lines[0].startswith("Run of 2026-12-08 01:00 on abcdef0, cpu, load average 0.5")
    assert "1 of 2 targets met" in lines[0]
    assert "Steal: `addjob` 0.1 %." in lines
    assert ("| ADDJOB q <64 B> 0 -P 1 | 90,000 req/s | redis-server LPUSH: 100,000 req/s "
            "| 0.900 | ≥ 0.8 × ✓ |") in lines
    assert "| ADDJOB \\| -P 16 | 20,000 req/s | redis-server LPUSH: 100,000 req/s | 0.200 " \
           "| ≥ 0.3 × ✗ |" in lines


def test_a_measurement_without_reference_or_target_shows_dashes():
    alone = Measurement("memory", "RSS per job", 483.25, "B", section="addjob")
    assert "| RSS per job | 483.2 B | — | — | — |" in list(render(report_of(alone)))


def test_figures_are_grouped_and_trimmed():
    assert figure(1234567.8, "req/s") == "1,234,568 req/s"
    assert figure(12.0, "ms") == "12 ms"
    assert figure(0.3456, "ms") == "0.346 ms"


def test_fill_rewrites_the_blocks_of_measured_sections_and_leaves_the_others():
    measured = Measurement("addjob_p1", "ADDJOB -P 1", 90_000.0, "req/s", section="addjob")
    page = ("# Page\n<!-- bench: addjob -->\nold table\n<!-- /bench -->\ntext\n"
            "<!-- bench: aof_load -->\nkept\n<!-- /bench -->\n")
    filled = fill(page, report_of(measured))
    assert "old table" not in filled and "| ADDJOB -P 1 | 90,000 req/s | — | — | — |" in filled
    assert filled.startswith("# Page\n<!-- bench: addjob -->\nRun of 2026-12-08 01:00 on abcdef0")
    assert "text\n<!-- bench: aof_load -->\nkept\n<!-- /bench -->\n" in filled
    assert fill(filled, report_of(measured)) == filled
