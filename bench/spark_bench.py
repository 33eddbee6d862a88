"""Spark connector throughput against one disque-server node; JSON on stdout.

    .venv/bin/python -m bench.spark_bench [--rows 200000] [--partitions 2]

Measures, in one run and against the same kind of fresh node:
* ``redis_benchmark_addjob_p16``: redis-benchmark -c 50 -n ROWS -P 16 ADDJOB q <64 bytes> 0,
  the node's own pipelined ADDJOB rate (the reference);
* ``writer``: df.write.format("disque") of ROWS rows with 64-byte bodies, jobs/s;
* ``writer_spark_only``: the same write into a sink that drops the rows
  (``bench.spark_null_source``): the most the writer could reach in this run;
* ``stream_read``: readStream.format("disque") with trigger(availableNow=True) into the
  noop sink, every job acknowledged (ACKJOB in commit), jobs/s over the whole query
  (start to stop, WORKING keep-alive on);
* ``stream_read_spark_only``: the same query on a source that fetches and acknowledges
  nothing (``bench.spark_null_source``): the most the reader could reach in this run.

Both Spark measurements follow a small warm-up run of the same path. Each
also reports the CPU time per job of the node and of Spark (the JVM and its
Python processes): on a shared machine wall-clock rates drift with the load,
CPU time much less, so compare those between runs; the load average and the
steal of the run say how busy the machine was.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from bench import machine, redis_benchmark
from bench.servers import REPO, Servers

BODY_BYTES = 64
ADDJOB = ["ADDJOB", "q", "x" * BODY_BYTES, "0"]
TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and every process under it, with the children they reaped
    (a Python worker that exited is counted in the process that waited for it)."""
    children: dict[int, list[int]] = {}
    seconds: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        fields = stat[stat.rindex(")") + 2:].split()
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        seconds[pid] = sum(int(f) for f in fields[11:15]) / TICKS  # utime stime cutime cstime
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += seconds.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


class CpuMeter:
    """CPU time per job of the node and of Spark (the JVM, its Python processes) over a span."""

    def __init__(self, node) -> None:
        self.node = node
        self._start = self._now()

    def _now(self) -> tuple[float, float, float]:
        return (self.node.cpu_seconds(), tree_cpu_seconds(os.getpid()), time.process_time())

    def per_job(self, jobs: int) -> dict[str, float]:
        node0, tree0, own0 = self._start
        node1, tree1, own1 = self._now()
        spark = (tree1 - tree0) - (node1 - node0) - (own1 - own0)
        return {"node_cpu_us_per_job": round((node1 - node0) / jobs * 1e6, 2),
                "spark_cpu_us_per_job": round(spark / jobs * 1e6, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2, help="writer partitions")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="the writer's batchSize option (default: the sink's)")
    parser.add_argument("--max-jobs-per-trigger", type=int, default=50_000)
    parser.add_argument("--writer-only", action="store_true",
                        help="measure the writer (and its references), not the stream reader")
    args = parser.parse_args(argv)

    from bench.spark_null_source import NAME as NULL_SOURCE
    from bench.spark_null_source import NullSource
    from disque.client import DisqueClient
    from disque.spark.session import local_session

    # Spark's Python workers import the null source's module from this checkout.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

    result: dict = {"rows": args.rows, "body_bytes": BODY_BYTES, "cpus": os.cpu_count(),
                    "load_average_before": machine.load_average()}
    ticks = machine.cpu_ticks()
    servers = Servers()
    work = str(servers.root)
    spark = None
    try:
        with servers.fresh_disque("spark-reference") as reference:
            result["redis_benchmark_addjob_p16"] = redis_benchmark.run(
                reference.port, ADDJOB, clients=50, requests=args.rows, pipeline=16).rps
        node = servers.disque()
        address = "127.0.0.1:%d" % node.port
        client = DisqueClient(address)
        spark = local_session("disque-spark-bench")
        body = "cast(lpad(cast(id as string), %d, 'x') as binary) as body" % BODY_BYTES

        def write(rows: int, queue: str, sink: str = "disque") -> float:
            df = spark.range(rows).selectExpr(body).repartition(args.partitions).cache()
            df.count()  # materialise first: time the sink, not the source
            cpu = CpuMeter(node)
            start = time.perf_counter()
            writer = df.write.format(sink).option("nodes", address).option("queue", queue)
            if args.batch_size is not None:
                writer = writer.option("batchSize", args.batch_size)
            writer.mode("append").save()
            elapsed = time.perf_counter() - start
            df.unpersist()
            return elapsed, cpu.per_job(rows)

        write(5_000, "warmup")  # JVM, Python workers and the data source code paths
        client.execute("DEBUG", "FLUSHALL")
        elapsed, cpu = write(args.rows, "bench")
        queued = client.qlen("bench")
        result["writer"] = {"seconds": round(elapsed, 3), "jobs_per_s": round(args.rows / elapsed),
                            "jobs_queued": queued, "partitions": args.partitions,
                            "batch_size": args.batch_size, **cpu}
        # The same write into a sink that drops the rows: Spark's own share.
        spark.dataSource.register(NullSource)
        write(5_000, "warmup", NULL_SOURCE)
        elapsed, cpu = write(args.rows, "bench", NULL_SOURCE)
        result["writer_spark_only"] = {
            "seconds": round(elapsed, 3), "rows_per_s": round(args.rows / elapsed),
            "spark_cpu_us_per_row": cpu["spark_cpu_us_per_job"]}
        result["writer_vs_redis_benchmark"] = round(
            result["writer"]["jobs_per_s"] / result["redis_benchmark_addjob_p16"], 3)
        result["writer_spark_only_vs_redis_benchmark"] = round(
            result["writer_spark_only"]["rows_per_s"] / result["redis_benchmark_addjob_p16"], 3)
        if not args.writer_only:
            _measure_reader(spark, node, client, address, work, args, result)
        client.close()
        result["load_average_after"] = machine.load_average()
        result["steal_percent"] = machine.steal_percent(ticks, machine.cpu_ticks())
    finally:
        if spark is not None:
            spark.stop()
        servers.close()
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _measure_reader(spark, node, client, address: str, work: str, args: argparse.Namespace,
                    result: dict) -> None:
    """The stream reader against its null source (``result``'s stream_read entries)."""
    from bench.spark_null_source import NAME as NULL_SOURCE

    def stream(source: str, checkpoint: str, **options):
        cpu = CpuMeter(node)
        start = time.perf_counter()
        reader = (spark.readStream.format(source)
                  .option("maxJobsPerTrigger", args.max_jobs_per_trigger)
                  .option("numPartitions", 2))
        for key, value in options.items():
            reader = reader.option(key, value)
        query = (reader.load().writeStream.format("noop")
                 .option("checkpointLocation", os.path.join(work, checkpoint))
                 .trigger(availableNow=True).start())
        if not query.awaitTermination(600):
            query.stop()
        rows_read = sum(p["numInputRows"] for p in query.recentProgress)
        return query, rows_read, time.perf_counter() - start, cpu

    def drain(queue: str):
        return stream("disque", "checkpoint-" + queue, nodes=address, queue=queue)

    client.add_jobs([("warmup", b"x" * BODY_BYTES)] * 5_000)
    drain("warmup")  # the streaming code paths, like write() above
    query, rows_read, elapsed, cpu = drain("bench")
    result["stream_read"] = {
        "seconds": round(elapsed, 3), "jobs_per_s": round(rows_read / elapsed),
        "jobs_read": rows_read, "batches": len(query.recentProgress),
        "left_in_queue": client.qlen("bench"),
        "left_registered": sum(1 for _ in client.jscan("bench")),
        "max_jobs_per_trigger": args.max_jobs_per_trigger, **cpu.per_job(rows_read)}
    # The same query on a source that costs nothing: Spark's own share of the time.
    stream(NULL_SOURCE, "checkpoint-null-warmup", rows=5_000)
    query, rows_read, elapsed, cpu = stream(NULL_SOURCE, "checkpoint-null", rows=args.rows)
    result["stream_read_spark_only"] = {
        "seconds": round(elapsed, 3), "rows_per_s": round(rows_read / elapsed),
        "batches": len(query.recentProgress),
        "spark_cpu_us_per_row": cpu.per_job(rows_read)["spark_cpu_us_per_job"]}
    result["stream_read_vs_spark_only"] = round(
        result["stream_read"]["jobs_per_s"] / result["stream_read_spark_only"]["rows_per_s"],
        3)


if __name__ == "__main__":
    sys.exit(main())
