"""Tests for the parts of the bench/ harness that read other programs' output.

No servers here: redis-benchmark CSV, /proc files, RESP replies and the
job-body timestamps are fed as literal text and bytes.
"""

from __future__ import annotations

import pytest

from bench import compare
from bench.loadgen import (
    CycleError,
    DisqueDialect,
    RedisListDialect,
    body_stamp,
    percentile,
    stamped_body,
)
from bench.machine import parse_cpu_model, parse_cpu_ticks, steal_percent
from bench import original
from bench.measurement import Measurement, Reference, SectionSkipped, Target
from bench.redis_benchmark import BenchmarkError, parse_csv
from bench.run import build_report, run_sections, select_sections
from bench.servers import parse_cpu_seconds, parse_cpu_split, parse_vmrss
from bench.settings import Settings
from disque.tools.resp_client import ReplyParser, encode_command

REDIS7_CSV = (
    '"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",'
    '"p99_latency_ms","max_latency_ms"\n'
    '"ADDJOB q xxxx 0","28129.39","1.740","0.224","1.575","2.791","3.711","46.111"\n'
)


# ------------------------------------------------------------ redis-benchmark


def test_csv_redis7_header_and_row():
    result = parse_csv(REDIS7_CSV)
    assert result.test == "ADDJOB q xxxx 0"
    assert result.rps == 28129.39
    assert result.columns["p50_latency_ms"] == 1.575
    assert result.columns["max_latency_ms"] == 46.111


def test_csv_config_warning_on_stdout_is_ignored():
    # redis-benchmark prints this (to stderr in 7.0) against servers without CONFIG GET.
    output = "WARNING: Could not fetch server CONFIG\n" + REDIS7_CSV + "\n"
    assert parse_csv(output).rps == 28129.39


def test_csv_last_row_wins():
    output = (REDIS7_CSV
              + '"PING_MBULK","59701.49","0.813","0.128","0.807","1.031","1.463","20.511"\n')
    result = parse_csv(output)
    assert (result.test, result.rps) == ("PING_MBULK", 59701.49)


def test_csv_extra_columns_of_newer_versions():
    output = ('"test","rps","avg_latency_ms","p50_latency_ms","p99_9_latency_ms"\n'
              '"LPUSH","123456.78","0.5","0.4","2.5"\n')
    result = parse_csv(output)
    assert result.rps == 123456.78
    assert result.columns == {"avg_latency_ms": 0.5, "p50_latency_ms": 0.4,
                              "p99_9_latency_ms": 2.5}


def test_csv_old_versions_without_header():
    output = '"PING_INLINE","50890.59"\n"PING_BULK","61349.69"\n'
    result = parse_csv(output)
    assert (result.test, result.rps, result.columns) == ("PING_BULK", 61349.69, {})


def test_csv_header_only_is_an_error():
    # What redis-benchmark leaves on stdout when it exits on an error reply.
    with pytest.raises(BenchmarkError, match="no result row"):
        parse_csv(REDIS7_CSV.splitlines()[0] + "\n")


def test_csv_non_numeric_rps_is_an_error():
    with pytest.raises(BenchmarkError, match="not a number"):
        parse_csv('"test","rps"\n"PING","fast"\n')


# ------------------------------------------------------------ /proc


def test_vmrss_in_bytes():
    status = "Name:\tpython\nVmPeak:\t  300000 kB\nVmRSS:\t   28356 kB\nRssAnon:\t 20000 kB\n"
    assert parse_vmrss(status) == 28356 * 1024


def test_vmrss_missing_is_an_error():
    with pytest.raises(ValueError, match="no VmRSS"):
        parse_vmrss("Name:\tzombie\nState:\tZ (zombie)\n")


def test_cpu_model():
    cpuinfo = ("processor\t: 0\nvendor_id\t: GenuineIntel\n"
               "model name\t: Intel(R) Xeon(R) Processor\nmodel\t\t: 85\n\nprocessor\t: 1\n"
               "model name\t: Intel(R) Xeon(R) Processor\n")
    assert parse_cpu_model(cpuinfo) == "Intel(R) Xeon(R) Processor"
    assert parse_cpu_model("processor\t: 0\nfeatures\t: fp asimd\n") is None


# ------------------------------------------------------------ job bodies and replies


def test_cpu_ticks_and_steal_share():
    stat = ("cpu  1200524 0 305755 2710111 5517 0 117564 158340 7 0\n"
            "cpu0 600000 0 150000 1355000 2700 0 58000 79000 0 0\n")
    assert parse_cpu_ticks(stat) == (158340, 1200524 + 305755 + 2710111 + 5517 + 117564 + 158340)
    with pytest.raises(ValueError):
        parse_cpu_ticks("intr 12 34\n")
    assert steal_percent((100, 1000), (500, 2000)) == 40.0
    assert steal_percent(None, (500, 2000)) is None
    assert steal_percent((100, 1000), (100, 1000)) is None


def test_stamped_body_round_trip():
    body = stamped_body(1_234_567_890_123, 64)
    assert len(body) == 64
    assert body_stamp(body) == 1_234_567_890_123


def test_percentile_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile([7], 99) == 7
    with pytest.raises(ValueError):
        percentile([], 50)


def _reply(data: bytes) -> object:
    return ReplyParser().parse(data)


def test_disque_dialect_commands_and_getjob_reply():
    dialect = DisqueDialect(b"q")
    assert dialect.produce(b"body") == encode_command(b"ADDJOB", b"q", b"body", b"0")
    assert DisqueDialect(b"q", replicate=3).produce(b"b") == encode_command(
        b"ADDJOB", b"q", b"b", b"0", b"REPLICATE", b"3")
    assert dialect.fetch() == encode_command(b"GETJOB", b"TIMEOUT", b"100", b"COUNT", b"16",
                                             b"FROM", b"q")
    reply = _reply(b"*2\r\n*3\r\n$1\r\nq\r\n$4\r\nD-01\r\n$2\r\nb1\r\n"
                   b"*3\r\n$1\r\nq\r\n$4\r\nD-02\r\n$2\r\nb2\r\n")
    assert dialect.fetched(reply) == ([b"b1", b"b2"], [b"D-01", b"D-02"])
    assert dialect.fetched(_reply(b"*-1\r\n")) == ([], [])
    assert dialect.ack([b"D-01", b"D-02"]) == encode_command(b"ACKJOB", b"D-01", b"D-02")
    assert dialect.produced(_reply(b"+D-01\r\n"))
    assert not dialect.produced(_reply(b"-NOREPL Not enough reachable nodes\r\n"))
    with pytest.raises(CycleError, match="GETJOB failed: NOREPL"):
        dialect.fetched(_reply(b"-NOREPL Not enough reachable nodes\r\n"))


def test_redis_dialect_blmpop_reply():
    dialect = RedisListDialect(b"q")
    assert dialect.fetch() == encode_command(b"BLMPOP", b"0.1", b"1", b"q", b"RIGHT",
                                             b"COUNT", b"16")
    reply = _reply(b"*2\r\n$1\r\nq\r\n*2\r\n$2\r\nb1\r\n$2\r\nb2\r\n")
    assert dialect.fetched(reply) == ([b"b1", b"b2"], [])
    assert dialect.fetched(_reply(b"*-1\r\n")) == ([], [])
    assert dialect.ack([b"x"]) is None
    assert dialect.produced(_reply(b":3\r\n"))


# ------------------------------------------------------------ report and CLI


def test_measurement_ratio_target_and_json():
    m = Measurement("addjob_p1", "d", 60_000.0, "req/s", samples=[59_000.0, 60_000.0, 61_000.0],
                    reference=Reference("redis-server LPUSH q", 100_000.0),
                    target=Target("ratio", ">=", 0.6))
    assert m.ratio == 0.6 and m.passed is True
    out = m.to_dict()
    assert out["ratio"] == 0.6 and out["pass"] is True
    assert out["target"] == {"on": "ratio", "op": ">=", "value": 0.6}
    memory = Measurement("memory_rss_per_job", "d", 816.5, "bytes/job",
                         target=Target("value", "<=", 800))
    assert memory.passed is False and "ratio" not in memory.to_dict()
    assert Measurement("ping_p1", "d", 1.0, "req/s").passed is None


def test_select_sections_by_group_name_and_order():
    cluster = ["cluster_addjob", "federation", "cluster_secret", "original_latency",
               "original_replicate", "original_federation", "original_mesh"]
    assert select_sections(None) == ["startup", "ping", "addjob", "extensions", "bulk_add",
                                     "cycle", "memory", *cluster, "aof_addjob", "aof_load",
                                     "metrics", "worker", "tls", "limits",
                                     "schedule_unused"]
    assert select_sections(["startup"]) == ["startup"]
    assert select_sections(["single"]) == ["ping", "addjob", "extensions", "bulk_add", "cycle",
                                           "memory"]
    assert select_sections(["cluster"]) == cluster
    assert select_sections(["aof"]) == ["aof_addjob", "aof_load"]
    assert select_sections(["metrics"]) == ["metrics"]
    assert select_sections(["tls"]) == ["tls"]
    assert select_sections(["memory,addjob"]) == ["addjob", "memory"]
    assert select_sections(["memory", "ping"]) == ["ping", "memory"]
    with pytest.raises(ValueError, match="unknown section"):
        select_sections(["nope"])


def test_cpu_seconds_from_proc_stat_with_spaces_in_the_name():
    stat = ("4242 (python -m x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 "
            "250 50 0 0 20 0 3 0 100 1000000 500 18446744073709551615")
    assert parse_cpu_seconds(stat, 100) == 3.0
    assert parse_cpu_split(stat, 100) == (2.5, 0.5)


def test_select_comparison_sections():
    sections, groups = compare.COMPARISONS, compare.GROUPS
    assert select_sections(None, sections, groups) == ["ping", "addjob", "cluster_addjob",
                                                       "aof_addjob", "corecost"]
    assert select_sections(["addjob,cluster"], sections, groups) == ["addjob", "cluster_addjob"]
    with pytest.raises(ValueError, match="unknown section 'federation'"):
        select_sections(["federation"], sections, groups)


def test_comparison_measurement_pairs_rounds():
    workload = compare.Workload("addjob_p1", ("ADDJOB", "q", "x", "0"), ("LPUSH", "q", "x"), 1,
                                1000, "ADDJOB")
    m = compare._measurement(Settings(), workload, baseline=[100.0, 80.0, 120.0, 100.0],
                             current=[95.0, 84.0, 114.0, 100.0],
                             reference=[400.0, 400.0, 400.0, 400.0],
                             baseline_cpu=[20.0, 20.0, 20.0, 20.0],
                             current_cpu=[20.0, 25.0, 20.0, 20.0])
    assert m.reference.value == 100.0 and m.value == 97.5 and round(m.ratio, 3) == 0.975
    assert m.passed is True  # at most 5 % slower
    assert m.details["round_ratios"] == [0.95, 1.05, 0.95, 1.0]
    assert m.details["first_in_round"] == ["baseline", "current", "baseline", "current"]
    assert m.details["current_vs_redis"] == 0.244 and m.details["baseline_vs_redis"] == 0.25
    assert m.details["cpu_ratio"] == 1.0 and m.details["cpu_round_ratios"][1] == 0.8
    assert compare.summary([m])[1].split()[:4] == ["addjob_p1", "100", "98", "0.975"]


def test_comparison_tree_must_be_a_disque_checkout(tmp_path):
    with pytest.raises(ValueError, match="not a disque checkout"):
        compare.check_tree(tmp_path)


def test_comparison_interval_and_verdict():
    steady = compare.paired_interval([1.0, 1.01, 0.99, 1.0])
    assert steady["low"] > 0.97 and steady["high"] < 1.03
    assert compare.verdict(steady) == "no regression"
    assert compare.verdict(compare.paired_interval([0.8, 0.81, 0.79, 0.8])) == "regression"
    assert compare.verdict(compare.paired_interval([0.7, 1.3, 0.9, 1.1])) == "inconclusive"
    assert compare.paired_interval([1.0]) is None and compare.verdict(None) == "inconclusive"


def test_sections_against_the_original_skip_without_its_binary(monkeypatch, tmp_path):
    monkeypatch.setenv("DISQUE_REFERENCE_SERVER", str(tmp_path / "absent"))
    for section in (original.original_latency, original.original_replicate,
                    original.original_federation):
        with pytest.raises(SectionSkipped, match="not present"):
            section(None, Settings.for_quick_run())  # type: ignore[arg-type]


def test_a_skipped_section_is_reported_as_skipped_not_as_an_error():
    def absent(servers, settings):
        raise SectionSkipped("nothing to compare with")

    skipped: list[dict[str, str]] = []
    measurements, errors, _ = run_sections(["absent"], Settings.for_quick_run(), None,
                                           {"absent": absent}, skipped)
    assert (measurements, errors) == ([], [])
    assert skipped == [{"section": "absent", "reason": "nothing to compare with"}]
    report = build_report([], errors, Settings.for_quick_run(), ["absent"], {}, 0.0,
                          skipped=skipped)
    assert report["skipped"] == skipped and report["errors"] == []
