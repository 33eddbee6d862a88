"""``disque-pipeline report``: per-queue statistics from AOF files, as Parquet and a PNG chart.

    disque-pipeline report --aof '/var/lib/disque/*.aof' --out report/

Writes ``report/queue_stats/`` (one row per queue), ``report/timeseries/``
(jobs created and deleted per queue and time bucket), ``report/jobs_over_time.png``
and ``report/summary.json``. How the numbers are derived (docs/aof-format.md,
"Reading it offline"):

* created: distinct job IDs with a LOADJOB record (replicas log the same ID).
* deleted: distinct IDs with a DELJOB whose reason ends the job (not ``moved``);
  the earliest such record gives the deletion time and reason.
* lifetime: deletion time minus ``ctime / 10^6``, for jobs with both records.
* nacks / additional deliveries: the highest counter any record shows for the
  job (known only for jobs with a LOADJOB or a DELJOB carrying counters).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Sequence

from disque.spark.png import DARK_GREY, GREY, Canvas, text_width

CREATED_COLOR = (31, 119, 180)
DELETED_COLOR = (255, 127, 14)
NICE_BUCKETS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
                  21600, 43200, 86400, 172800, 604800)
TARGET_BUCKETS = 60
NO_TIME = 1 << 62   # sorts after every real time in min_by


def choose_bucket_ms(span_ms: int, target: int = TARGET_BUCKETS) -> int:
    """The smallest "nice" bucket giving at most ``target`` buckets over ``span_ms``."""
    for seconds in NICE_BUCKETS_S:
        if span_ms / (seconds * 1000) <= target:
            return seconds * 1000
    return NICE_BUCKETS_S[-1] * 1000


def job_table(records):
    """One row per job ID: queue, created_ms, deleted_ms, reason, lifetime_ms, counters."""
    from pyspark.sql import functions as F

    loads = (records.where(F.col("record") == "LOADJOB").groupBy("id").agg(
        F.max("queue").alias("load_queue"),
        F.min("ctime_ms").alias("created_ms"),
        F.max("nacks").alias("load_nacks"),
        F.max("additional_deliveries").alias("load_deliveries")))
    deljobs = records.where(F.col("record") == "DELJOB")
    terminal = F.col("reason").isNull() | ~F.col("reason").isin("moved")
    time_key = F.coalesce(F.col("time"), F.lit(NO_TIME))
    dels = deljobs.groupBy("id").agg(
        F.max("queue").alias("del_queue"),
        F.min(F.when(terminal, F.col("time"))).alias("deleted_ms"),
        F.max(F.when(terminal, F.lit(1)).otherwise(F.lit(0))).alias("is_deleted"),
        F.min_by(F.when(terminal, F.coalesce(F.col("reason"), F.lit("unknown"))),
                 F.when(terminal, time_key)).alias("reason"),
        F.max(F.when(F.col("reason") == "moved", F.lit(1)).otherwise(F.lit(0))).alias("moved"),
        F.max("nacks").alias("del_nacks"),
        F.max("additional_deliveries").alias("del_deliveries"))
    jobs = loads.join(dels, "id", "full_outer")
    return jobs.select(
        "id",
        F.coalesce("load_queue", "del_queue").alias("queue"),
        "created_ms",
        "deleted_ms",
        F.coalesce(F.col("is_deleted"), F.lit(0)).cast("boolean").alias("deleted"),
        "reason",
        F.coalesce(F.col("moved"), F.lit(0)).cast("boolean").alias("moved"),
        (F.col("deleted_ms") - F.col("created_ms")).alias("lifetime_ms"),
        F.greatest("load_nacks", "del_nacks").alias("nacks"),
        F.greatest("load_deliveries", "del_deliveries").alias("additional_deliveries"))


def queue_statistics(jobs):
    """Per-queue statistics from ``job_table``."""
    from pyspark.sql import functions as F

    def count_if(condition):
        return F.sum(F.when(condition, 1).otherwise(0)).cast("long")

    return (jobs.groupBy("queue").agg(
        count_if(F.col("created_ms").isNotNull()).alias("jobs_created"),
        count_if(F.col("deleted")).alias("jobs_deleted"),
        count_if(F.col("created_ms").isNotNull() & ~F.col("deleted")).alias("jobs_live"),
        count_if(F.col("reason") == "acked").alias("acked"),
        count_if(F.col("reason") == "expired").alias("expired"),
        count_if(F.col("reason") == "deleted").alias("deleted"),
        count_if(F.col("reason") == "evicted").alias("evicted"),
        count_if(F.col("moved")).alias("moved"),
        F.count("lifetime_ms").alias("lifetimes_known"),
        F.percentile("lifetime_ms", F.lit(0.5)).alias("lifetime_p50_ms"),
        F.percentile("lifetime_ms", F.lit(0.99)).alias("lifetime_p99_ms"),
        F.avg("lifetime_ms").alias("lifetime_avg_ms"),
        F.max("lifetime_ms").alias("lifetime_max_ms"),
        F.count("nacks").alias("counters_known"),
        F.sum("nacks").cast("long").alias("nacks"),
        F.sum("additional_deliveries").cast("long").alias("additional_deliveries"),
        count_if(F.col("nacks") > 0).alias("jobs_nacked"),
        count_if(F.col("additional_deliveries") > 0).alias("jobs_redelivered"),
        F.least(F.min("created_ms"), F.min("deleted_ms")).alias("first_ms"),
        F.greatest(F.max("created_ms"), F.max("deleted_ms")).alias("last_ms"),
    ).orderBy("queue"))


def timeseries(jobs, bucket_ms: int):
    """Jobs created and deleted per queue and ``bucket_ms`` time bucket."""
    from pyspark.sql import functions as F

    def bucketed(time_col, name):
        return (jobs.where(F.col(time_col).isNotNull() if name == "created"
                           else F.col("deleted") & F.col(time_col).isNotNull())
                .select("queue", (F.floor(F.col(time_col) / bucket_ms) * bucket_ms)
                        .cast("long").alias("bucket_ms"))
                .groupBy("queue", "bucket_ms").agg(F.count(F.lit(1)).alias(name)))

    created = bucketed("created_ms", "created")
    deleted = bucketed("deleted_ms", "deleted")
    return (created.join(deleted, ["queue", "bucket_ms"], "full_outer")
            .na.fill(0, ["created", "deleted"]).orderBy("queue", "bucket_ms"))


def _clock(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000))


def draw_chart(points: Sequence[dict], bucket_ms: int, path: str, top: int = 8) -> list[str]:
    """Small multiples: created (blue) and deleted (orange) jobs per bucket, one panel per queue.

    ``points`` are timeseries rows (queue, bucket_ms, created, deleted). The ``top``
    queues by jobs created get a panel; returns their names."""
    totals: dict[str, int] = {}
    for p in points:
        totals[p["queue"]] = totals.get(p["queue"], 0) + p["created"] + p["deleted"]
    queues = sorted(totals, key=lambda q: (-totals[q], q))[:top]
    width, panel_h, margin_l, margin_r, top_h, gap = 960, 150, 70, 20, 40, 34
    height = top_h + max(1, len(queues)) * (panel_h + gap) + 10
    canvas = Canvas(width, height)
    x = canvas.text(margin_l, 10, "JOBS PER %s" % _bucket_label(bucket_ms), scale=2)
    for label, color in (("CREATED", CREATED_COLOR), ("DELETED", DELETED_COLOR)):
        x += 30
        canvas.rect(x, 14, x + 12, 24, color)
        x = canvas.text(x + 18, 14, label, DARK_GREY)
    if not queues:
        canvas.text(margin_l, top_h + 20, "NO JOBS IN THE AOF", DARK_GREY, scale=2)
        canvas.save(path)
        return []
    t0 = min(p["bucket_ms"] for p in points)
    t1 = max(p["bucket_ms"] for p in points)
    steps = max(1, (t1 - t0) // bucket_ms)
    plot_w = width - margin_l - margin_r
    for n, queue in enumerate(queues):
        y_top = top_h + n * (panel_h + gap) + 16
        y_bottom = y_top + panel_h - 16
        series = {p["bucket_ms"]: p for p in points if p["queue"] == queue}
        peak = max(max(p["created"], p["deleted"]) for p in series.values()) or 1
        canvas.text(margin_l, y_top - 14, "QUEUE %s  (MAX %d)" % (queue, peak), scale=1)
        canvas.line(margin_l, y_bottom, width - margin_r, y_bottom, GREY)
        canvas.line(margin_l, y_top, margin_l, y_bottom, GREY)
        canvas.text(margin_l - 6 - text_width(str(peak)), y_top, str(peak), DARK_GREY)
        canvas.text(margin_l - 12, y_bottom - 7, "0", DARK_GREY)

        def xy(bucket: int, value: int) -> tuple[int, int]:
            px = margin_l + int((bucket - t0) / bucket_ms / steps * plot_w) if t1 > t0 \
                else margin_l + plot_w // 2
            py = y_bottom - int(value / peak * (y_bottom - y_top))
            return px, py

        for key, color in (("created", CREATED_COLOR), ("deleted", DELETED_COLOR)):
            previous = None
            for bucket in range(t0, t1 + 1, bucket_ms):
                point = xy(bucket, series[bucket][key] if bucket in series else 0)
                if previous is not None:
                    canvas.line(*previous, *point, color, width=2)
                canvas.rect(point[0] - 1, point[1] - 1, point[0] + 1, point[1] + 1, color)
                previous = point
        canvas.text(margin_l, y_bottom + 5, _clock(t0), DARK_GREY)
        label = _clock(t1)
        canvas.text(width - margin_r - text_width(label), y_bottom + 5, label, DARK_GREY)
    canvas.save(path)
    return queues


def _bucket_label(bucket_ms: int) -> str:
    seconds = bucket_ms // 1000
    for unit, size in (("DAY", 86400), ("H", 3600), ("MIN", 60)):
        if seconds >= size and seconds % size == 0:
            return "%d %s" % (seconds // size, unit)
    return "%d S" % seconds


def run_report(spark, patterns: Sequence[str], out: str, bucket_s: int | None = None,
               top: int = 8) -> dict[str, Any]:
    """Compute and write the report; returns the summary also saved as summary.json."""
    os.makedirs(out, exist_ok=True)
    records = (spark.read.format("disque-aof").option("path", ",".join(patterns)).load()
               .select("record", "time", "id", "queue", "ctime_ms", "nacks",
                       "additional_deliveries", "reason"))
    jobs = job_table(records).cache()
    try:
        stats = queue_statistics(jobs).cache()
        queues = [r.asDict() for r in stats.collect()]
        stats.write.mode("overwrite").parquet(os.path.join(out, "queue_stats"))
        stats.unpersist()
        starts = [q["first_ms"] for q in queues if q["first_ms"] is not None]
        ends = [q["last_ms"] for q in queues if q["last_ms"] is not None]
        if bucket_s:
            bucket_ms = bucket_s * 1000
        elif starts:
            bucket_ms = choose_bucket_ms(max(ends) - min(starts))
        else:
            bucket_ms = 60_000
        series = timeseries(jobs, bucket_ms).cache()
        points = [r.asDict() for r in series.collect()]
        series.write.mode("overwrite").parquet(os.path.join(out, "timeseries"))
        series.unpersist()
    finally:
        jobs.unpersist()
    chart = os.path.join(out, "jobs_over_time.png")
    charted = draw_chart(points, bucket_ms, chart, top)
    summary = {"queues": queues, "bucket_ms": bucket_ms, "chart": chart,
               "charted_queues": charted}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, default=str)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``disque-pipeline``."""
    parser = argparse.ArgumentParser(prog="disque-pipeline",
                                     description="Spark jobs over Disque data.")
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="per-queue statistics from AOF files")
    report.add_argument("--aof", action="append", required=True,
                        help="AOF file, directory or glob (repeatable)")
    report.add_argument("--out", required=True, help="output directory")
    report.add_argument("--bucket", type=int, default=None,
                        help="chart/time-series bucket in seconds (default: automatic)")
    report.add_argument("--top", type=int, default=8, help="queues shown in the chart")
    report.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from disque.spark import register
    from disque.spark.session import local_session

    existing = SparkSession.getActiveSession()  # e.g. called from a notebook or a test
    spark = existing or local_session("disque-pipeline-report", master=args.master)
    register(spark)
    try:
        summary = run_report(spark, args.aof, args.out, args.bucket, args.top)
    finally:
        if existing is None:
            spark.stop()
    json.dump(summary, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
