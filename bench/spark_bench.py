"""Spark connector throughput against one disque-server node; JSON on stdout.

    .venv/bin/python -m bench.spark_bench [--rows 200000] [--partitions 2]

Measures, in one run and against the same kind of fresh node:
* ``redis_benchmark_addjob_p16``: redis-benchmark -c 50 -n ROWS -P 16 ADDJOB q <64 bytes> 0,
  the node's own pipelined ADDJOB rate (the reference);
* ``writer``: df.write.format("disque") of ROWS rows with 64-byte bodies, jobs/s;
* ``stream_read``: readStream.format("disque") with trigger(availableNow=True) into the
  noop sink, every job acknowledged (ACKJOB in commit), jobs/s over the whole query
  (start to stop, WORKING keep-alive on).

Both Spark measurements follow a small warm-up run of the same path.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench import redis_benchmark
from bench.servers import Servers

BODY_BYTES = 64
ADDJOB = ["ADDJOB", "q", "x" * BODY_BYTES, "0"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2, help="writer partitions")
    parser.add_argument("--batch-size", type=int, default=500, help="ADDJOBs per round trip")
    parser.add_argument("--max-jobs-per-trigger", type=int, default=50_000)
    args = parser.parse_args(argv)

    from disque.client import DisqueClient
    from disque.spark.session import local_session

    result: dict = {"rows": args.rows, "body_bytes": BODY_BYTES, "cpus": os.cpu_count()}
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

        def write(rows: int, queue: str) -> float:
            df = spark.range(rows).selectExpr(body).repartition(args.partitions).cache()
            df.count()  # materialise first: time the sink, not the source
            start = time.perf_counter()
            (df.write.format("disque").option("nodes", address).option("queue", queue)
             .option("batchSize", args.batch_size).mode("append").save())
            elapsed = time.perf_counter() - start
            df.unpersist()
            return elapsed

        write(5_000, "warmup")  # JVM, Python workers and the data source code paths
        client.execute("DEBUG", "FLUSHALL")
        elapsed = write(args.rows, "bench")
        queued = client.qlen("bench")
        result["writer"] = {"seconds": round(elapsed, 3), "jobs_per_s": round(args.rows / elapsed),
                            "jobs_queued": queued, "partitions": args.partitions,
                            "batch_size": args.batch_size}

        def drain(queue: str):
            start = time.perf_counter()
            query = (spark.readStream.format("disque").option("nodes", address)
                     .option("queue", queue)
                     .option("maxJobsPerTrigger", args.max_jobs_per_trigger)
                     .option("numPartitions", 2).load()
                     .writeStream.format("noop")
                     .option("checkpointLocation", os.path.join(work, "checkpoint-" + queue))
                     .trigger(availableNow=True).start())
            if not query.awaitTermination(600):
                query.stop()
            return query, time.perf_counter() - start

        client.add_jobs([("warmup", b"x" * BODY_BYTES)] * 5_000)
        drain("warmup")  # the streaming code paths, like write() above
        query, elapsed = drain("bench")
        rows_read = sum(p["numInputRows"] for p in query.recentProgress)
        result["stream_read"] = {
            "seconds": round(elapsed, 3), "jobs_per_s": round(rows_read / elapsed),
            "jobs_read": rows_read, "batches": len(query.recentProgress),
            "left_in_queue": client.qlen("bench"),
            "left_registered": sum(1 for _ in client.jscan("bench")),
            "max_jobs_per_trigger": args.max_jobs_per_trigger}
        result["writer_vs_redis_benchmark"] = round(
            result["writer"]["jobs_per_s"] / result["redis_benchmark_addjob_p16"], 3)
        client.close()
    finally:
        if spark is not None:
            spark.stop()
        servers.close()
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
