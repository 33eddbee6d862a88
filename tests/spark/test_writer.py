"""df.write.format("disque"): rows become jobs (ADDJOBS), options reach them, refusals
fail the task."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark
import pyarrow  # noqa: F401  (the spark extra: installed by make test)
import pyspark  # noqa: F401


def _jobs(client, queue):
    return {info["id"]: info for info in client.jscan(queue)}


def test_ten_thousand_rows_become_ten_thousand_jobs(spark, node):
    proc, address, client = node
    df = spark.range(10_000).selectExpr(
        "cast(concat('body-', id, '\\r\\n', repeat('x', cast(id % 7 as int))) as binary) as body",
        "case when id % 4 = 0 then 'w-even' else 'w-odd' end as queue")
    (df.repartition(3).write.format("disque").option("nodes", address)
     .option("retry", 17).option("ttl", 3600).option("batchSize", 700).mode("append").save())

    assert client.qlen("w-even") == 2_500
    assert client.qlen("w-odd") == 7_500
    expected = {("w-even" if i % 4 == 0 else "w-odd",
                 b"body-%d\r\n" % i + b"x" * (i % 7)) for i in range(10_000)}
    jobs = {**_jobs(client, "w-even"), **_jobs(client, "w-odd")}
    assert len(jobs) == 10_000
    assert {(j["queue"], j["body"]) for j in jobs.values()} == expected
    assert {(j["retry"], j["state"], j["repl"]) for j in jobs.values()} == {(17, "queued", 1)}
    assert all(3000 < j["ttl"] <= 3600 for j in jobs.values())
    some = next(iter(jobs))
    shown = client.show(some)
    assert shown["retry"] == 17 and shown["body"] == jobs[some]["body"]


def test_string_bodies_queue_option_and_delay(spark, node):
    proc, address, client = node
    df = spark.createDataFrame([("hello %d" % i,) for i in range(50)], "body string")
    (df.write.format("disque").option("NODES", address).option("Queue", "delayed")
     .option("delay", 60).option("retry", 5).option("async", "true").mode("append").save())
    jobs = _jobs(client, "delayed")
    assert client.qlen("delayed") == 0  # delayed: not queued yet
    assert sorted(j["body"] for j in jobs.values()) == sorted(b"hello %d" % i for i in range(50))
    assert {(j["state"], j["delay"], j["retry"]) for j in jobs.values()} == {("active", 60, 5)}


def test_a_refused_job_fails_the_task_with_the_server_error(spark, node):
    proc, address, client = node
    client.add_job("full", b"a")
    client.add_job("full", b"b")
    df = spark.createDataFrame([(b"first",), (b"second",)], "body binary").coalesce(1)
    with pytest.raises(Exception) as failure:
        (df.write.format("disque").option("nodes", address).option("queue", "full")
         .option("maxlen", 2).mode("append").save())
    message = str(failure.value)
    assert "MAXLEN Queue is already longer than the specified MAXLEN count" in message
    assert "ADDJOBS refused row 0 of partition 0 (queue 'full', body b'first')" in message
    assert client.qlen("full") == 2


def test_null_bodies_and_queues(spark, node):
    proc, address, client = node
    df = spark.createDataFrame([("a", "named"), ("b", None), (None, "named")],
                               "body string, queue string").coalesce(1)
    with pytest.raises(Exception, match=r"row 2 of partition 0 \(queue 'named'\) has a null "
                                        r"body"):
        df.write.format("disque").option("nodes", address).option("queue", "fallback") \
            .option("batchSize", 1).mode("append").save()
    # A null queue takes the option's; the rows before the bad one were written.
    assert (client.qlen("named"), client.qlen("fallback")) == (1, 1)
    with pytest.raises(Exception, match="row 1 of partition 0 has a null queue and no 'queue' "
                                        "option is set"):
        df.limit(2).write.format("disque").option("nodes", address).mode("append").save()


def test_missing_body_or_queue_is_refused_before_running(spark, node):
    proc, address, client = node
    with pytest.raises(Exception, match="needs a 'body' column"):
        spark.range(3).write.format("disque").option("nodes", address).option(
            "queue", "q").mode("append").save()
    with pytest.raises(Exception, match="needs a 'queue' column or the 'queue' option"):
        spark.range(3).selectExpr("cast(id as string) as body").write.format("disque").option(
            "nodes", address).mode("append").save()


def test_snapshot_reader_consumes_nothing(spark, node):
    proc, address, client = node
    ids = client.add_jobs([("snap", b"job %d" % i) for i in range(30)], retry=120)
    client.add_jobs([("other", b"o")])
    taken = client.get_jobs("snap", count=5, nohang=True)  # 5 active, 25 queued

    peek = (spark.read.format("disque").option("nodes", address).option("mode", "qpeek")
            .option("queue", "snap").load().collect())
    assert len(peek) == 25 and {r.queue for r in peek} == {"snap"}
    assert [r.id for r in peek] == [j.id for j in client.qpeek("snap", 25)]

    snapshot = (spark.read.format("disque").schema(
        "id string, queue string, body binary, state string, retry long, nacks long, node string")
        .option("nodes", address).load())
    rows = {r.id: r for r in snapshot.collect()}
    assert set(rows) == set(ids) | {j for j in rows if rows[j].queue == "other"}
    assert len(rows) == 31
    assert {rows[j.id].state for j in taken} == {"active"}
    assert sum(r.state == "queued" for r in rows.values()) == 26
    assert {r.retry for r in rows.values() if r.queue == "snap"} == {120}
    assert {r.node for r in rows.values()} == {client.node_id}

    queued_only = (spark.read.format("disque").option("nodes", address).option("queue", "snap")
                   .option("state", "queued").load().count())
    assert queued_only == 25
    assert client.qlen("snap") == 25 and client.qlen("other") == 1


class _ScriptedClient:
    """Replies as a node would: the round trip's ADDJOBS replies, then add_many's."""

    def __init__(self, replies: list, resent: list) -> None:
        self.replies, self.resent, self.sent = replies, list(resent), []

    def pipeline_encoded(self, data, count):
        self.sent.append((b"".join(bytes(d) for d in data), count))
        return self.replies

    def add_many(self, queue, bodies, dedupids=None, **options):
        self.sent.append((queue, bodies, dedupids))
        return self.resent.pop(0)


def _writer(**options):
    from disque.spark.options import AddJobOptions, ConnectionOptions
    from disque.spark.sink import JobWriter

    return JobWriter(ConnectionOptions(), AddJobOptions(queue="q", timeout_ms=0, **options))


LEAVING = ("NOREPL Not enough reachable nodes for the requested replication level, since I'm "
           "unable to hold a copy of the message for the following reason: I'm leaving the "
           "cluster")


def test_jobs_a_leaving_node_refused_go_again_and_other_refusals_fail():
    import pyarrow as pa

    from disque.client import AddJobsEncoder, ResponseError
    from disque.spark.sink import Chunk, DisqueWriteError, RowBatch, encode_rows

    encoder = AddJobsEncoder((0,))
    bodies = pa.array([b"a", b"b", b"c"], pa.large_binary())
    rows = RowBatch(bodies, encode_rows(bodies), None, 10, None)
    client = _ScriptedClient([[b"D-1", ResponseError(LEAVING), b"D-3"]], [["D-2"]])
    _writer()._send(client, encoder, rows, [Chunk("q", 0, 3)], 7)
    assert client.sent == [(b"*7\r\n$7\r\nADDJOBS\r\n$1\r\nq\r\n$1\r\n0\r\n$6\r\nBODIES\r\n"
                            b"$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n", 1),
                           ("q", [b"b"], None)]

    client = _ScriptedClient(
        [[ResponseError(LEAVING), ResponseError("MAXLEN Queue is already longer"), b"D-3"]],
        [[ResponseError("NOREPL Not enough reachable nodes")]])
    with pytest.raises(DisqueWriteError, match=r"row 10 of partition 7 \(queue 'q', body b'a'\)"
                       r": NOREPL .* \(and 1 more jobs of the same round trip\)"):
        _writer()._send(client, encoder, rows, [Chunk("q", 0, 3)], 7)


def test_a_refused_command_fails_each_of_its_rows():
    import pyarrow as pa

    from disque.client import AddJobsEncoder, ResponseError
    from disque.spark.sink import Chunk, DisqueWriteError, RowBatch, encode_rows

    bodies = pa.array([b"a", b"b", b"c", b"d"], pa.large_binary())
    order = pa.array([1, 3, 0, 2], pa.uint64())  # grouped by queue: rows 1 and 3, then 0, 2
    rows = RowBatch(bodies.take(order), encode_rows(bodies.take(order)), order, 100, None)
    client = _ScriptedClient([[b"D-1", b"D-2"],
                              ResponseError("NOPERM User u has no permissions")], [])
    with pytest.raises(DisqueWriteError, match=r"row 100 of partition 0 \(queue 'y', body "
                       r"b'a'\): NOPERM .* \(and 1 more"):
        _writer()._send(client, AddJobsEncoder((0,)), rows,
                        [Chunk("x", 0, 2), Chunk("y", 2, 4)], 0)


def test_column_wise_rows_are_addjobs_words_byte_for_byte():
    import pyarrow as pa

    from disque.client import AddJobsEncoder
    from disque.client.arguments import addjob_options
    from disque.spark.sink import _wire_bytes, encode_rows
    from tests.support.cluster import encode_command

    bodies = pa.array([b"", b"a", b"b\r\nc", "é".encode() * 40], pa.large_binary())
    words = (0,) + addjob_options(retry=7)
    encoder = AddJobsEncoder(words)
    command = encoder.head("queué", 3) + bytes(_wire_bytes(encode_rows(bodies).slice(1, 3)))
    assert command == encode_command("ADDJOBS", "queué", *words, "BODIES",
                                     *bodies.to_pylist()[1:])
