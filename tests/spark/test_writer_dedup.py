"""The sink's DEDUPIDs: a Spark task that fails after sending part of its rows
and is tried again leaves exactly one job per row (docs/dedup.md, docs/spark.md).

The failure is injected by attempt number: a UDF makes one row's body null on
a task's first attempt only, and the writer sends the rows before it, then
fails the task (test_writer.py: "the rows before the bad one were written").
The session is local[2,4] (conftest.py), so Spark tries the task again.
"""

from __future__ import annotations

import pytest

from tests.support.process import wait_until

pytestmark = pytest.mark.spark
import pyarrow  # noqa: F401  (the spark extra: installed by make test)
import pyspark  # noqa: F401

ROWS = 4000
PARTITIONS = 4
PER_PARTITION = ROWS // PARTITIONS
FAIL_AT = 600  # the row of each partition whose body is null on the first attempt
QUERY_TIMEOUT = 120


def _failing_first_attempt(spark, rows=ROWS, partitions=PARTITIONS, fail_at=FAIL_AT):
    """``body``: b"row-<id>", but null at the partition's row ``fail_at`` on attempt 0."""
    from pyspark.sql.functions import col, udf

    per_partition = rows // partitions

    @udf("binary")
    def body(i):
        from pyspark import TaskContext

        if TaskContext.get().attemptNumber() == 0 and i % per_partition == fail_at:
            return None
        return b"row-%d" % i

    return spark.range(0, rows, 1, partitions).select(body(col("id")).alias("body"))


def _bodies(client, queue):
    return sorted(info["body"] for info in client.jscan(queue))


def test_retried_tasks_leave_exactly_one_job_per_row(spark, node):
    proc, address, client = node
    df = _failing_first_attempt(spark)
    df.write.format("disque").option("nodes", address).option("queue", "once") \
        .option("batchSize", 100).mode("append").save()
    # Every task failed once after sending FAIL_AT rows, then wrote all of its rows.
    assert client.qlen("once") == ROWS
    assert _bodies(client, "once") == sorted(b"row-%d" % i for i in range(ROWS))
    some = next(iter(client.jscan("once")))["id"]
    token = client.show(some)["dedupid"]
    assert isinstance(token, bytes) and token.startswith(b"spark:") and len(token) < 64


def test_without_dedup_the_retried_rows_are_added_twice(spark, node):
    """The control: the same failing write with dedup off duplicates exactly the rows
    the failed attempts had sent (so the test above can fail)."""
    proc, address, client = node
    df = _failing_first_attempt(spark)
    df.write.format("disque").option("nodes", address).option("queue", "twice") \
        .option("dedup", "false").option("batchSize", 100).mode("append").save()
    assert client.qlen("twice") == ROWS + PARTITIONS * FAIL_AT
    some = next(iter(client.jscan("twice")))["id"]
    assert client.show(some).get("dedupid") is None


def test_two_writes_of_the_same_rows_are_two_writes(spark, node):
    """Tokens name the write: running the same DataFrame write again adds its jobs again."""
    proc, address, client = node
    df = spark.range(0, 300, 1, 3).selectExpr("cast(id as string) as body")
    for _ in range(2):
        df.write.format("disque").option("nodes", address).option("queue", "again") \
            .mode("append").save()
    assert client.qlen("again") == 600


def test_a_stream_names_its_tokens_by_query_and_micro_batch(spark, node, tmp_path):
    """Each micro-batch's task fails once, is tried again, and leaves one job per row;
    the two micro-batches' rows have the same partition and positions, and do not
    collide: their tokens differ by the micro-batch's ID."""
    proc, address, client = node
    source = tmp_path / "in"
    for part in range(2):  # two files: two micro-batches with maxFilesPerTrigger 1
        spark.range(part * 400, part * 400 + 400, 1, 1).selectExpr(
            "cast(id as long) as id").coalesce(1).write.parquet(str(source / ("p%d" % part)))
    from pyspark.sql.functions import col, udf

    @udf("binary")
    def body(i):
        from pyspark import TaskContext

        if TaskContext.get().attemptNumber() == 0 and i % 200 == 50:
            return None
        return b"row-%d" % i

    stream = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1)
              .option("recursiveFileLookup", "true").parquet(str(source))
              .select(body(col("id")).alias("body")))
    query = (stream.writeStream.format("disque").option("nodes", address)
             .option("queue", "streamed").option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(QUERY_TIMEOUT), "availableNow query did not stop"
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None
    wait_until(lambda: client.qlen("streamed") >= 800, timeout=20, message="800 jobs")
    assert client.qlen("streamed") == 800
    assert _bodies(client, "streamed") == sorted(b"row-%d" % i for i in range(800))
    query_id = query.id.replace("-", "").encode()
    epochs = {client.show(info["id"])["dedupid"].split(b":")[2]
              for info in client.jscan("streamed")}
    prefixes = {client.show(info["id"])["dedupid"].split(b":")[1]
                for info in client.jscan("streamed")}
    assert prefixes == {query_id} and epochs == {b"0", b"1"}


class _ScriptedClient:
    """Replies as a node would: the round trip's ADDJOBS replies, then each resend's."""

    def __init__(self, replies: list, resends: list) -> None:
        self.replies, self.resends, self.sent = replies, list(resends), []

    def pipeline_encoded(self, data, count):
        self.sent.append((b"".join(bytes(d) for d in data), count))
        return self.replies

    def add_many(self, queue, bodies, dedupids=None, **options):
        self.sent.append((queue, bodies, dedupids))
        return self.resends.pop(0)


PENDING = "PENDING Job D-1 with this DEDUPID is waiting for its replicas, retry later"


def test_pending_jobs_are_asked_again_until_answered():
    import pyarrow as pa

    from disque.client import AddJobsEncoder, ResponseError
    from disque.spark.options import AddJobOptions, ConnectionOptions
    from disque.spark.sink import (Chunk, DisqueWriteError, JobWriter, RowBatch, encode_rows,
                                   row_token, token_prefix)

    prefix = token_prefix("w", "b", 0)
    bodies = pa.array([b"a", b"b", b"c"], pa.large_binary())
    positions = pa.array([0, 1, 2], pa.int64())
    rows = RowBatch(bodies, encode_rows(bodies, prefix, positions), None, 0, prefix)
    encoder = AddJobsEncoder((0,), dedupids=True)
    writer = JobWriter(ConnectionOptions(), AddJobOptions(queue="q", timeout_ms=0))
    pending = ResponseError(PENDING)
    client = _ScriptedClient([[b"D-1", pending, pending]], [[pending, "D-3"], ["D-2"]])
    writer._send(client, encoder, rows, [Chunk("q", 0, 3)], 0)
    tokens = [row_token(prefix, i) for i in range(3)]
    assert client.sent[1:] == [("q", [b"b", b"c"], tokens[1:]), ("q", [b"b"], tokens[1:2])]

    # Still pending when the wait is over: the task fails with the node's words.
    class ShortWait(AddJobOptions):
        def pending_wait(self) -> float:
            return 0.05

    writer = JobWriter(ConnectionOptions(), ShortWait(queue="q", timeout_ms=0))
    client = _ScriptedClient([[pending, b"D-2", b"D-3"]], [[pending]] * 10_000)
    with pytest.raises(DisqueWriteError, match=r"row 0 of partition 0 .*PENDING Job D-1"):
        writer._send(client, encoder, rows, [Chunk("q", 0, 3)], 0)
    assert len(client.sent) > 2  # asked again meanwhile


def test_column_wise_tokens_are_addjobs_words_byte_for_byte():
    import pyarrow as pa

    from disque.client import AddJobsEncoder
    from disque.spark.sink import _wire_bytes, encode_rows, row_token, token_prefix
    from disque.tools.resp_client import encode_command

    bodies = pa.array([b"", b"a", b"b\r\nc", "é".encode() * 40], pa.large_binary())
    prefix = token_prefix("0123456789abcdef", "b", 3)
    encoder = AddJobsEncoder((0, "RETRY", 7), dedupids=True)
    for first in (0, 41, 2**40 + 3):
        positions = pa.array([first + 3, first, first + 2, first + 1], pa.int64())
        words = encode_rows(bodies, prefix, positions)
        pairs = [w for p, b in zip(positions.to_pylist(), bodies.to_pylist())
                 for w in (row_token(prefix, p), b)]
        assert encoder.head("q", 4) + bytes(_wire_bytes(words)) == encode_command(
            "ADDJOBS", "q", 0, "RETRY", 7, "DEDUPIDS", *pairs)
        assert bytes(_wire_bytes(words.slice(1, 2))) == encode_command(*pairs[2:6])[4:]
    # Tokens of one partition differ by row, and of two partitions or writes by prefix.
    assert len({row_token(token_prefix(w, e, p), r) for w in ("a", "b") for e in ("b", "0")
                for p in (1, 12) for r in (0, 1, 256)}) == 24


def test_dedup_option():
    from disque.spark.options import AddJobOptions, OptionError, Options

    assert AddJobOptions.parse(Options({})).dedup is True
    assert AddJobOptions.parse(Options({"DEDUP": "false"})).dedup is False
    with pytest.raises(OptionError, match="dedup"):
        AddJobOptions.parse(Options({"dedup": "maybe"}))
