"""spark.readStream.format("disque"): at-least-once micro-batches, ACKJOB after the sink commits."""

from __future__ import annotations

import time

import pytest

from tests.support.process import wait_until

pytestmark = pytest.mark.spark
import pyarrow  # noqa: F401  (the spark extra: installed by make test)
import pyspark  # noqa: F401

QUERY_TIMEOUT = 60


def _stream(spark, address, queue, **options):
    reader = spark.readStream.format("disque").option("nodes", address).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _unacked(client, queue):
    return [info["id"] for info in client.jscan(queue) if info["state"] != "acked"]


def _stop(query):
    if query.isActive:
        query.stop()


def _run_to_end(query) -> None:
    """Wait for an availableNow query to stop by itself, without an error."""
    try:
        assert query.awaitTermination(QUERY_TIMEOUT), "availableNow query did not stop"
    finally:
        _stop(query)
    assert query.exception() is None


def test_sink_failure_and_restart_lose_nothing(spark, node, tmp_path):
    proc, address, client = node
    total = 300
    ids = set(client.add_jobs([("atl", b"job-%d" % i) for i in range(total)], retry=2))
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")
    failures = []

    def write_batch(df, batch_id):
        rows = df.select("id", "body").collect()
        if batch_id == 1 and not failures:
            # Half of the batch reaches the sink, then the sink fails before committing.
            half = rows[:len(rows) // 2]
            if half:
                spark.createDataFrame(half, "id string, body binary").write.mode(
                    "append").parquet(sink)
            failures.append(batch_id)
            raise RuntimeError("injected sink failure in batch %d" % batch_id)
        if rows:
            spark.createDataFrame(rows, "id string, body binary").write.mode(
                "append").parquet(sink)

    query = (_stream(spark, address, "atl", maxJobsPerTrigger=100, numPartitions=2)
             .writeStream.foreachBatch(write_batch).option("checkpointLocation", checkpoint)
             .trigger(processingTime="200 milliseconds").start())
    try:
        with pytest.raises(Exception, match="injected sink failure"):
            query.awaitTermination(QUERY_TIMEOUT)
    finally:
        _stop(query)
    assert failures == [1]
    # Batch 0 was acked when batch 1 was planned; batch 1 was fetched but never acked:
    # Disque requeues its 100 jobs after RETRY (2 s).
    wait_until(lambda: client.qlen("atl") == total - 100, timeout=20,
               message="the failed batch's jobs to be queued again")

    restarted = (_stream(spark, address, "atl", maxJobsPerTrigger=100)
                 .writeStream.foreachBatch(write_batch).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
    _run_to_end(restarted)

    written = spark.read.parquet(sink).collect()
    assert {r.id for r in written} == ids                      # at least once: none lost
    assert {r.body for r in written} == {b"job-%d" % i for i in range(total)}
    assert len(written) <= total + 50                          # only the failed half twice
    assert client.qlen("atl") == 0
    assert _unacked(client, "atl") == []


@pytest.mark.parametrize("transport", ["driver", "partition"])
def test_available_now_drains_and_stops_without_duplicates(spark, node, tmp_path, transport):
    proc, address, client = node
    bodies = {b"drain-%d" % i for i in range(1000)}
    client.add_jobs([("drain", b) for b in bodies], retry=30)
    # The streaming writer pipes the jobs into another queue; the executors get the rows
    # from the driver's reader over TCP, or inside the partitions.
    query = (_stream(spark, address, "drain", maxJobsPerTrigger=300, numPartitions=2,
                     transport=transport)
             .selectExpr("body", "'piped' as queue")
             .writeStream.format("disque").option("nodes", address).option("retry", 60)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    _run_to_end(query)
    # 4 batches of jobs; the last one acked when Spark asked for more, without a fifth.
    assert query.lastProgress["batchId"] == 3
    assert client.qlen("drain") == 0
    assert _unacked(client, "drain") == []
    piped = [info["body"] for info in client.jscan("piped")]
    assert len(piped) == 1000 and set(piped) == bodies
    assert client.qlen("piped") == 1000


def test_idle_queue_gets_its_last_batch_acked(spark, node):
    proc, address, client = node
    client.add_jobs([("idle", b"first-%d" % i) for i in range(50)], retry=1)
    query = (_stream(spark, address, "idle", numPartitions=2)
             .writeStream.format("memory").queryName("idle_sink")
             .trigger(processingTime="300 milliseconds").start())
    try:
        def sink_count():
            return spark.sql("select count(*) as n from idle_sink").first().n

        wait_until(lambda: sink_count() == 50, timeout=QUERY_TIMEOUT, interval=0.2,
                   message="50 jobs in the sink")
        # Nothing else arrives, yet the last batch must be acknowledged (spark-notes pitfall 2).
        wait_until(lambda: not _unacked(client, "idle"), timeout=15, interval=0.2,
                   message="the last batch to be acked on an idle queue")
        assert client.qlen("idle") == 0
        time.sleep(2.5)  # > RETRY 1 s: an unacked job would have come back by now
        assert sink_count() == 50

        client.add_jobs([("idle", b"second-%d" % i) for i in range(20)], retry=1)
        wait_until(lambda: sink_count() == 70, timeout=QUERY_TIMEOUT, interval=0.2,
                   message="20 more jobs in the sink")
        wait_until(lambda: not _unacked(client, "idle"), timeout=15, interval=0.2,
                   message="the second wave to be acked")
        rows = spark.sql("select id, body, nacks, additional_deliveries from idle_sink").collect()
    finally:
        _stop(query)
    assert len({r.id for r in rows}) == 70                    # no duplicates without failures
    assert {r.body for r in rows} == ({b"first-%d" % i for i in range(50)}
                                      | {b"second-%d" % i for i in range(20)})
    assert {(r.nacks, r.additional_deliveries) for r in rows} == {(0, 0)}


def test_slow_batches_are_kept_alive_with_working(spark, node, tmp_path):
    proc, address, client = node
    client.add_jobs([("slow", b"slow-%d" % i) for i in range(40)], retry=1)
    seen, requeued = [], []

    def slow_sink(df, batch_id):
        ids = [r.id for r in df.select("id").collect()]
        if ids:
            time.sleep(2.5)  # over two RETRY periods: without WORKING they would be requeued
            requeued.append(client.qlen("slow"))
        seen.extend(ids)

    query = (_stream(spark, address, "slow", maxJobsPerTrigger=40)
             .writeStream.foreachBatch(slow_sink)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    _run_to_end(query)
    assert len(seen) == 40 and len(set(seen)) == 40
    assert requeued == [0]
    assert client.qlen("slow") == 0 and _unacked(client, "slow") == []
