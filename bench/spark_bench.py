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
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BODY_BYTES = 64


def _free_port() -> int:
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port <= 55535:
            return port
    raise RuntimeError("no free port")


class Node:
    """A disque-server child process in a temporary directory."""

    def __init__(self, workdir: str) -> None:
        self.port = _free_port()
        self.dir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "disque.server", "--port", str(self.port), "--bind",
             "127.0.0.1", "--dir", workdir],
            cwd=workdir, env=dict(os.environ, PYTHONPATH=str(REPO)),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("disque-server did not start on port %d" % self.port)

    @property
    def address(self) -> str:
        return "127.0.0.1:%d" % self.port

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def redis_benchmark_addjob(port: int, rows: int) -> float | None:
    """requests/s of redis-benchmark -c 50 -n rows -P 16 ADDJOB q <64 bytes> 0."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return None
    out = subprocess.run([binary, "-p", str(port), "-c", "50", "-n", str(rows), "-P", "16",
                          "--csv", "ADDJOB", "q", "x" * BODY_BYTES, "0"],
                         capture_output=True, text=True, timeout=600).stdout
    numbers = re.findall(r'^"[^"]*","([0-9.]+)"', out, re.M)
    return float(numbers[-1]) if numbers else None


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
    work = tempfile.mkdtemp(prefix="disque-spark-bench-")
    nodes: list[Node] = []
    spark = None
    try:
        reference = Node(os.path.join(work, "redis-benchmark"))
        nodes.append(reference)
        result["redis_benchmark_addjob_p16"] = redis_benchmark_addjob(reference.port, args.rows)
        reference.stop()

        node = Node(os.path.join(work, "spark"))
        nodes.append(node)
        client = DisqueClient(node.address)
        spark = local_session("disque-spark-bench")
        body = "cast(lpad(cast(id as string), %d, 'x') as binary) as body" % BODY_BYTES

        def write(rows: int, queue: str) -> float:
            df = spark.range(rows).selectExpr(body).repartition(args.partitions).cache()
            df.count()  # materialise first: time the sink, not the source
            start = time.perf_counter()
            (df.write.format("disque").option("nodes", node.address).option("queue", queue)
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
            query = (spark.readStream.format("disque").option("nodes", node.address)
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
        reference_rate = result["redis_benchmark_addjob_p16"]
        if reference_rate:
            result["writer_vs_redis_benchmark"] = round(result["writer"]["jobs_per_s"]
                                                        / reference_rate, 3)
        client.close()
    finally:
        if spark is not None:
            spark.stop()
        for node in nodes:
            node.stop()
        shutil.rmtree(work, ignore_errors=True)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
