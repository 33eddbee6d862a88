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
    """Replies as a node would: the chunk's one-line replies, then each resend's."""

    def __init__(self, lines: bytes, resends: list) -> None:
        self.lines, self.resends, self.sent = lines, list(resends), []

    def pipeline_lines(self, data, count):
        self.sent.append((bytes(data), count))
        return self.lines

    def pipeline(self, commands):
        self.sent.append(list(commands))
        return self.resends.pop(0)


PENDING = b"-PENDING Job D-1 with this DEDUPID is waiting for its replicas, retry later\r\n"


def test_pending_jobs_are_asked_again_until_answered():
    import pyarrow as pa

    from disque.client import AddJobEncoder, ResponseError
    from disque.spark.sink import (DEDUPID_WORDS, JobWriter, RowTokens, encode_addjobs,
                                   token_prefix)

    encoder = AddJobEncoder((0,) + DEDUPID_WORDS)
    bodies = pa.array([b"a", b"b", b"c"], pa.large_binary())
    commands = encode_addjobs(encoder, "q", bodies, RowTokens(token_prefix("w", "b", 0), 0))
    pending = ResponseError(PENDING[1:-2].decode())
    client = _ScriptedClient(b"+D-1\r\n" + PENDING + PENDING, [
        [pending, b"D-3"], [b"D-2"]])
    JobWriter._send(client, commands, "q", bodies, 0, 0, 0, pending_wait=5.0)
    assert client.sent[1:] == [[commands[1].as_py(), commands[2].as_py()],
                               [commands[1].as_py()]]

    # Still pending when the wait is over: the task fails with the node's words.
    from disque.spark.sink import DisqueWriteError

    client = _ScriptedClient(PENDING + b"+D-2\r\n+D-3\r\n", [[pending]] * 100)
    with pytest.raises(DisqueWriteError, match=r"row 0 of partition 0 .*PENDING Job D-1"):
        JobWriter._send(client, commands, "q", bodies, 0, 0, 0, pending_wait=0.05)


def test_column_wise_tokens_are_the_encoders_byte_for_byte():
    import pyarrow as pa

    from disque.client import AddJobEncoder
    from disque.spark.sink import (DEDUPID_WORDS, RowTokens, _wire_bytes, encode_addjobs,
                                   row_token, token_prefix)

    words = (0, "RETRY", 7)
    encoder = AddJobEncoder(words + DEDUPID_WORDS)
    bodies = pa.array([b"", b"a", b"b\r\nc", "é".encode() * 40], pa.large_binary())
    queues = pa.array(["q", "queué", "", "q"])
    prefix = token_prefix("0123456789abcdef", "b", 3)
    for first in (0, 41, 2**40 + 3):
        def expected(queue_names):
            return [AddJobEncoder(words + ("DEDUPID", row_token(prefix, first + i))).encode(
                q, [b])[0] for i, (q, b) in enumerate(zip(queue_names, bodies.to_pylist()))]

        tokens = RowTokens(prefix, first)
        assert encode_addjobs(encoder, "q", bodies, tokens).to_pylist() == expected(["q"] * 4)
        each = encode_addjobs(encoder, queues, bodies, tokens)
        assert each.to_pylist() == expected(queues.to_pylist())
        assert bytes(_wire_bytes(each.slice(1, 2))) == b"".join(each.to_pylist()[1:3])
    # Tokens of one partition differ by row, and of two partitions or writes by prefix.
    assert len({row_token(token_prefix(w, e, p), r) for w in ("a", "b") for e in ("b", "0")
                for p in (1, 12) for r in (0, 1, 256)}) == 24


def test_dedup_option():
    from disque.spark.options import AddJobOptions, OptionError, Options

    assert AddJobOptions.parse(Options({})).dedup is True
    assert AddJobOptions.parse(Options({"DEDUP": "false"})).dedup is False
    with pytest.raises(OptionError, match="dedup"):
        AddJobOptions.parse(Options({"dedup": "maybe"}))
