"""format("disque-aof") and the report, on generated AOF files and on a real server's AOF."""

from __future__ import annotations

import glob
import json
import os
import random
from dataclasses import dataclass

import pytest

from disque.spark.report import main as pipeline_main
from disque.spark.report import run_report
from tests.spark import aofgen
from tests.spark.charts import check_chart
from tests.support.process import wait_until

pytestmark = pytest.mark.spark
import pyarrow  # noqa: F401  (the spark extra: installed by make test)
import pyspark  # noqa: F401

T0 = 1_700_000_000_000  # ms
REASONS = ["acked"] * 12 + ["expired"] * 2 + ["deleted", "evicted"]


@dataclass
class GeneratedJob:
    id: str
    queue: str
    ctime_ms: int
    body: bytes
    nodes: tuple[int, ...]          # which files hold a copy
    deleted_ms: int | None = None   # earliest terminal DELJOB
    reason: str | None = None
    nacks: int = 0
    deliveries: int = 0
    moved: bool = False
    rewritten: bool = False         # a rewrite's DELJOB and LOADJOB follow its first LOADJOB


REWRITES = (b"nack-reason", b"queue-changed", b"holders-changed")


def generate(directory, seed=7):
    """Two nodes' AOFs with replicas, moves, orphans, a bare DELJOB, a torn tail, and
    one record in five with the msgpack payload of earlier versions.

    Returns the ground truth: every job, and the DELJOB-only IDs (created before a rewrite)."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    events = {0: [], 1: []}   # node -> [(record ms, bytes)]
    jobs = []
    for i in range(400):
        queue = ("emails", "emails", "thumbs", "slow")[i % 4]
        ctime = T0 + i * 137 + rng.randrange(50)
        body = b"payload %d\r\n%s" % (i, b"z" * rng.randrange(20))
        holders = (0, 1) if i % 3 == 0 else (i % 2,)
        job = GeneratedJob(aofgen.job_id(i).decode(), queue, ctime, body, holders)
        for n in holders:
            events[n].append((ctime + n, aofgen.loadjob(
                job.id.encode(), queue.encode(), body, ctime, ctime + n, tie=i % 3,
                nodes=tuple(aofgen.node_id(h) for h in holders),
                legacy=i % 5 == 0)))  # a file an upgrade went on appending to
        if i % 11 == 0:
            # A rewrite, not a departure: a NACK's reason (or a queue or holders
            # change) is a DELJOB followed by a LOADJOB of the job as it is now.
            rewrite = REWRITES[i % len(REWRITES)]
            job.rewritten = True
            for n in holders:
                events[n].append((ctime + 2, aofgen.deljob(job.id.encode(), ctime + 2,
                                                            queue.encode(), 0, 0, rewrite)))
                events[n].append((ctime + 2, aofgen.loadjob(
                    job.id.encode(), queue.encode(), body, ctime, ctime + 2, tie=i % 3,
                    nodes=tuple(aofgen.node_id(h) for h in holders))))
        if i % 17 == 0 and holders == (0, 1):
            job.moved = True
            events[0].append((ctime + 3, aofgen.deljob(job.id.encode(), ctime + 3,
                                                        queue.encode(), 0, 0, b"moved")))
            holders = (1,)
        if rng.random() < 0.8:
            life = rng.randrange(10, 60_000) if queue != "slow" else rng.randrange(100_000, 900_000)
            job.reason = rng.choice(REASONS)
            job.nacks, job.deliveries = rng.choice((0, 0, 0, 1, 2)), rng.choice((0, 0, 1))
            job.deleted_ms = ctime + life
            for k, n in enumerate(holders):
                at = job.deleted_ms + 7 * k   # replicas learn it a little later
                events[n].append((at, aofgen.deljob(job.id.encode(), at, queue.encode(),
                                                    job.nacks, job.deliveries,
                                                    job.reason.encode())))
        jobs.append(job)
    # Jobs whose LOADJOB was lost to a rewrite: deleted, never seen created.
    orphans = []
    for k in range(5):
        jid = aofgen.job_id(10_000 + k).decode()
        orphans.append(jid)
        events[1].append((T0 + 5_000 + k, aofgen.deljob(jid.encode(), T0 + 5_000 + k,
                                                        b"thumbs", 3, 1, b"acked")))
    # The original server's bare DELJOB for a live "slow" job: deleted, reason unknown.
    bare = next(j for j in jobs if j.queue == "slow" and j.reason is None and j.nodes == (1,))
    bare.reason, bare.deleted_ms = "unknown", None
    events[1].append((T0 + 999_999_999, aofgen.bare_deljob(bare.id.encode())))
    paths = []
    for n, items in events.items():
        path = os.path.join(directory, "node%d.aof" % n)
        with open(path, "wb") as f:
            for _, record in sorted(items, key=lambda e: e[0]):
                f.write(record)
            if n == 1:
                f.write(b"*3\r\n$7\r\nLOADJOB\r\n$120\r\n\x93partial")  # torn last write
        paths.append(path)
    return jobs, orphans, paths


def percentile(values, p):
    """Linear interpolation between closest ranks, as Spark's percentile()."""
    values = sorted(values)
    position = p * (len(values) - 1)
    low = int(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


def expected_stats(jobs, orphans):
    stats = {}
    for queue in sorted({j.queue for j in jobs}):
        mine = [j for j in jobs if j.queue == queue]
        extra = len(orphans) if queue == "thumbs" else 0
        lifetimes = [j.deleted_ms - j.ctime_ms for j in mine if j.deleted_ms is not None]
        stats[queue] = {
            "jobs_created": len(mine),
            "jobs_deleted": sum(j.reason is not None for j in mine) + extra,
            "jobs_live": sum(j.reason is None for j in mine),
            "acked": sum(j.reason == "acked" for j in mine) + extra,
            "expired": sum(j.reason == "expired" for j in mine),
            "deleted": sum(j.reason == "deleted" for j in mine),
            "evicted": sum(j.reason == "evicted" for j in mine),
            "moved": sum(j.moved for j in mine),
            "lifetimes_known": len(lifetimes),
            "lifetime_p50_ms": percentile(lifetimes, 0.5),
            "lifetime_p99_ms": percentile(lifetimes, 0.99),
            "lifetime_max_ms": max(lifetimes),
            "nacks": sum(j.nacks for j in mine) + 3 * extra,
            "additional_deliveries": sum(j.deliveries for j in mine) + extra,
            "jobs_nacked": sum(j.nacks > 0 for j in mine) + extra,
            "jobs_redelivered": sum(j.deliveries > 0 for j in mine) + extra,
        }
    return stats


def test_records_with_bodies(spark, tmp_path):
    jobs, orphans, paths = generate(str(tmp_path))
    df = spark.read.format("disque-aof").option("body", "true").load(str(tmp_path / "*.aof"))
    assert df.rdd.getNumPartitions() == 2
    rows = df.collect()
    loads = [r for r in rows if r.record == "LOADJOB"]
    assert len(loads) == sum(len(j.nodes) * (2 if j.rewritten else 1) for j in jobs)
    by_id = {j.id: j for j in jobs}
    for r in loads:
        job = by_id[r.id]
        assert (r.queue, r.body, r.body_length, r.ctime_ms) == (
            job.queue, job.body, len(job.body), job.ctime_ms)
        assert r.state == "queued" and r.retry == 300 and len(r.nodes_delivered) == len(job.nodes)
    bare = [r for r in rows if r.record == "DELJOB" and r.time is None]
    assert len(bare) == 1 and bare[0].reason is None
    assert {r.file for r in rows} == {os.path.abspath(p) for p in paths}
    # Without body=true only the lengths are read.
    assert "body" not in spark.read.format("disque-aof").load(paths[0]).columns


def test_report_numbers(spark, tmp_path):
    jobs, orphans, paths = generate(str(tmp_path / "aof"))
    out = str(tmp_path / "report")
    summary = run_report(spark, [str(tmp_path / "aof" / "*.aof")], out)

    expected = expected_stats(jobs, orphans)
    got = {r["queue"]: r for r in summary["queues"]}
    assert set(got) == set(expected)
    for queue, numbers in expected.items():
        for key, value in numbers.items():
            assert got[queue][key] == pytest.approx(value), (queue, key)
    # The same numbers were written as Parquet.
    parquet = {r.queue: r for r in spark.read.parquet(os.path.join(out, "queue_stats")).collect()}
    assert parquet["emails"].jobs_created == expected["emails"]["jobs_created"]

    series = spark.read.parquet(os.path.join(out, "timeseries")).collect()
    bucket = summary["bucket_ms"]
    emails = expected["emails"]["jobs_created"]
    assert sum(r.created for r in series if r.queue == "emails") == emails
    created_in_first = sum(1 for j in jobs if j.queue == "thumbs"
                           and j.ctime_ms // bucket == T0 // bucket)
    assert [r.created for r in series if r.queue == "thumbs" and r.bucket_ms
            == T0 // bucket * bucket] == [created_in_first]

    chart = os.path.join(out, "jobs_over_time.png")
    assert (summary["chart"], summary["chart_skipped"]) == (chart, None)
    assert summary["charted_queues"][0] == "emails"
    assert sorted(summary["charted_queues"]) == ["emails", "slow", "thumbs"]
    check_chart(chart, panels=3)


def test_report_without_matplotlib(spark, tmp_path, without_matplotlib, capsys):
    generate(str(tmp_path / "aof"))
    out = tmp_path / "report"
    summary = run_report(spark, [str(tmp_path / "aof" / "*.aof")], str(out))
    assert (summary["chart"], summary["charted_queues"]) == (None, [])
    assert "pip install 'disque-server[charts]'" in summary["chart_skipped"]
    assert summary["chart_skipped"] in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["chart_skipped"] \
        == summary["chart_skipped"]
    assert sorted(p.name for p in out.iterdir()) == ["queue_stats", "summary.json", "timeseries"]


def test_pipeline_cli_on_a_real_server_aof(spark, server_factory, tmp_path, capsys):
    proc = server_factory(config="appendonly yes\n")
    from disque.client import DisqueClient

    with DisqueClient("127.0.0.1:%d" % proc.port) as client:
        client.add_jobs([("real", b"line\r\n%d" % i) for i in range(20)], retry=30)
        taken = client.get_jobs("real", count=10, nohang=True)
        assert client.ack_jobs([j.id for j in taken]) == 10
        client.nack([client.get_jobs("real", nohang=True)[0].id])
    aof = proc.dir / "disque.aof"
    wait_until(lambda: aof.exists() and aof.read_bytes().count(b"DELJOB") == 10, timeout=10,
               message="the AOF to hold 10 DELJOB records")

    out = str(tmp_path / "report")
    assert pipeline_main(["report", "--aof", str(proc.dir / "*.aof"), "--out", out]) == 0
    printed = json.loads(capsys.readouterr().out)
    (real,) = printed["queues"]
    assert (real["queue"], real["jobs_created"], real["jobs_deleted"], real["acked"],
            real["jobs_live"], real["lifetimes_known"]) == ("real", 20, 10, 10, 10, 10)
    assert 0 <= real["lifetime_p50_ms"] <= real["lifetime_p99_ms"] < 60_000
    check_chart(os.path.join(out, "jobs_over_time.png"), panels=1)
    records = spark.read.format("disque-aof").option("body", "true").load(str(aof))
    assert sorted(r.body for r in records.where("record = 'LOADJOB'").collect()) == sorted(
        b"line\r\n%d" % i for i in range(20))


def test_aof_paths_must_match(spark, tmp_path):
    with pytest.raises(Exception, match="no AOF file matches"):
        spark.read.format("disque-aof").load(str(tmp_path / "missing-*.aof")).count()
    assert glob.glob(str(tmp_path / "*")) == []
