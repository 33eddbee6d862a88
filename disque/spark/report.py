"""``disque-pipeline report``: per-queue statistics from AOF files, as Parquet and a chart.

    disque-pipeline report --aof '/var/lib/disque/*.aof' --out report/

Writes ``report/queue_stats/`` (one row per queue), ``report/timeseries/``
(jobs created and deleted per queue and time bucket), ``report/jobs_over_time.png``
(drawn with matplotlib, the ``charts`` extra; without it the report skips the
chart and says so in the summary) and ``report/summary.json``. How the numbers
are derived (docs/aof-format.md, "Reading it offline"):

* created: distinct job IDs with a LOADJOB record (replicas log the same ID).
* deleted: distinct IDs with a DELJOB whose reason ends the job (not ``moved``,
  nor a rewrite such as ``queue-changed``, ``holders-changed`` or ``nack-reason``,
  which a LOADJOB of the same job follows); the earliest such record gives the
  deletion time and reason.
* lifetime: deletion time minus ``ctime / 10^6``, for jobs with both records.
* nacks / additional deliveries: the highest counter any record shows for the
  job (known only for jobs with a LOADJOB or a DELJOB carrying counters).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from typing import Any, Sequence

from disque.jobs.journal import REASON_MOVED, REWRITE_REASONS

CREATED_COLOR = "#1f77b4"
DELETED_COLOR = "#ff7f0e"
SERIES = (("created", CREATED_COLOR, "created"),
          ("deleted", DELETED_COLOR, "deleted (acked, expired, deleted, evicted)"))
CHART_DPI = 100
CHART_WIDTH_IN = 9.6          # 960 px
CHART_TITLE_IN = 0.9          # the title and the legend
CHART_PANEL_IN = 1.9          # per queue
CHARTS_MISSING = ("matplotlib is not installed, so the report has no chart: "
                  "pip install 'disque-server[charts]'")
CHART_NAME = "jobs_over_time.png"
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
    not_departures = [REASON_MOVED.decode()] + sorted(r.decode() for r in REWRITE_REASONS)
    terminal = F.col("reason").isNull() | ~F.col("reason").isin(*not_departures)
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


class ChartUnavailable(Exception):
    """matplotlib (the ``charts`` extra) is not installed: the report goes without its chart."""


def bucket_label(bucket_ms: int) -> str:
    """A bucket's length for labels: ``1 min``, ``30 s``, ``2 h``, ``1 day``."""
    seconds = bucket_ms // 1000
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return "%d %s%s" % (count, unit, "s" if unit == "day" and count > 1 else "")
    return "%d s" % seconds


def figure_size_in(panels: int) -> tuple[float, float]:
    """The chart's size in inches (at CHART_DPI): a title band, then one panel per queue."""
    return CHART_WIDTH_IN, CHART_TITLE_IN + max(1, panels) * CHART_PANEL_IN


def charted_queues(points: Sequence[dict], top: int) -> list[str]:
    """The ``top`` queues with the most jobs created and deleted, busiest first."""
    totals: dict[str, int] = {}
    for p in points:
        totals[p["queue"]] = totals.get(p["queue"], 0) + p["created"] + p["deleted"]
    return sorted(totals, key=lambda q: (-totals[q], q))[:top]


def draw_chart(points: Sequence[dict], bucket_ms: int, path: str, top: int = 8) -> list[str]:
    """Small multiples: jobs created and deleted per time bucket, one panel per queue.

    ``points`` are timeseries rows (queue, bucket_ms, created, deleted). The ``top``
    queues by jobs created and deleted get a panel; returns their names. Raises
    ChartUnavailable without matplotlib, which only this chart needs."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise ChartUnavailable(CHARTS_MISSING) from exc

    queues = charted_queues(points, top)
    figure = Figure(figsize=figure_size_in(len(queues)), dpi=CHART_DPI, layout="constrained")
    FigureCanvasAgg(figure)   # Agg, whatever backend pyplot would pick: no display needed
    unit = bucket_label(bucket_ms)
    figure.suptitle("Jobs created and deleted per %s, by queue" % unit, x=0.01, ha="left",
                     fontsize="large")
    if not queues:
        axes = figure.add_subplot()
        axes.set_axis_off()
        axes.text(0.5, 0.5, "No jobs in the AOF files", ha="center", va="center",
                  fontsize="large", transform=axes.transAxes)
        figure.savefig(path)
        return []
    # Buckets without a record are zeros. A step spans its bucket, so each
    # series repeats its last value at the end of the last bucket.
    buckets = range(min(p["bucket_ms"] for p in points),
                    max(p["bucket_ms"] for p in points) + bucket_ms, bucket_ms)
    times = [datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
             for ms in (*buckets, buckets[-1] + bucket_ms)]
    panels = figure.subplots(len(queues), 1, sharex=True, squeeze=False)[:, 0]
    for axes, queue in zip(panels, queues):
        series = {p["bucket_ms"]: p for p in points if p["queue"] == queue}
        totals = []
        for key, color, label in SERIES:
            values = [series[ms][key] if ms in series else 0 for ms in buckets]
            axes.step(times, values + values[-1:], where="post", color=color, linewidth=1.6,
                      label=label)
            if key == "created":
                axes.fill_between(times, values + values[-1:], step="post", color=color,
                                  alpha=0.15, linewidth=0)
            totals.append("%d %s" % (sum(values), key))
        axes.set_title("queue %s: %s" % (queue, ", ".join(totals)), loc="left",
                       fontsize="medium")
        axes.set_ylabel("jobs / %s" % unit)
        axes.set_ylim(bottom=0)
        axes.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
        axes.set_xlim(times[0], times[-1])
        axes.grid(True, color="0.9")
        axes.spines[["top", "right"]].set_visible(False)
    locator = AutoDateLocator(tz=timezone.utc)
    panels[-1].xaxis.set_major_locator(locator)
    panels[-1].xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=timezone.utc))
    panels[-1].set_xlabel("time (UTC), %s buckets" % unit)
    figure.align_ylabels(panels)
    figure.legend(*panels[0].get_legend_handles_labels(), loc="outside upper right",
                  ncols=len(SERIES), frameon=False)
    figure.savefig(path)
    return queues


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
    chart_path = os.path.join(out, CHART_NAME)
    chart: str | None = chart_path
    skipped: str | None = None
    try:
        charted = draw_chart(points, bucket_ms, chart_path, top)
    except ChartUnavailable as exc:
        chart, charted, skipped = None, [], str(exc)
        sys.stderr.write("disque-pipeline: %s\n" % skipped)
    summary = {"queues": queues, "bucket_ms": bucket_ms, "chart": chart,
               "charted_queues": charted, "chart_skipped": skipped}
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

    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        sys.stderr.write("disque-pipeline: %s. The report runs on Spark: install the spark "
                         "extra (pip install 'disque-server[spark]', or from a clone: "
                         ".venv/bin/pip install -e '.[spark]') and a Java runtime.\n" % exc)
        return 2

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
