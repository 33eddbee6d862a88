"""The stream reader's driver side against a real node, called the way Spark calls it.

No SparkSession: ``latestOffset``, ``partitions``, ``read`` and ``commit`` run
in the order a micro-batch runs them, which makes prefetching, acknowledging
in the background and dropping requeued jobs observable job by job.
"""

from __future__ import annotations

import pickle

import pytest

from tests.support.process import wait_until

pytestmark = pytest.mark.spark
import pyarrow  # noqa: F401  (the spark extra: installed by make test)
from pyspark.sql.streaming.datasource import ReadMaxRows

from disque.spark.columns import STREAM_FIELDS, struct
from disque.spark.keepalive import first_working_delay
from disque.spark.source import DisqueStreamReader


def _reader(address, queue, **options):
    options = {"nodes": address, "queue": queue, **{k: str(v) for k, v in options.items()}}
    return DisqueStreamReader(struct(STREAM_FIELDS), options)


def _rows(reader, start, end):
    """What the executors would get for the batch, through a pickled partition like Spark's."""
    rows = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(pickle.loads(pickle.dumps(partition))):
            rows += batch.to_pylist()
    return rows


def _unacked(client, queue):
    return [info["id"] for info in client.jscan(queue) if info["state"] != "acked"]


def test_next_batch_is_fetched_while_spark_runs_this_one(node):
    proc, address, client = node
    ids = client.add_jobs([("pre", b"job-%d" % i) for i in range(250)], retry=60)
    reader = _reader(address, "pre", maxJobsPerTrigger=100, numPartitions=3)
    try:
        limit = reader.getDefaultReadLimit()
        first = reader.latestOffset(reader.initialOffset(), limit)
        assert client.qlen("pre") == 150
        rows = _rows(reader, reader.initialOffset(), first)
        assert [r["id"] for r in rows] == ids[:100]
        assert rows[1] == {"queue": "pre", "id": ids[1], "body": b"job-1", "nacks": 0,
                           "additional_deliveries": 0}
        # partitions() of a full batch asked for the next one in the background.
        wait_until(lambda: client.qlen("pre") == 50, message="the prefetch of batch 2")
        second = reader.latestOffset(first, limit)
        reader.commit(first)
        assert [r["id"] for r in _rows(reader, first, second)] == ids[100:200]
        third = reader.latestOffset(second, limit)
        reader.commit(second)
        assert [r["id"] for r in _rows(reader, second, third)] == ids[200:]
        # Not a full batch: nothing more is fetched ahead. The committed batches' ACKJOBs
        # complete in the background.
        assert client.qlen("pre") == 0
        wait_until(lambda: len(_unacked(client, "pre")) == 50, message="batches 1-2 acked")
        # Asking for more after the last batch acknowledges it; nothing new, so by the
        # time the answer comes (the query may end) every ACKJOB was answered.
        assert reader.latestOffset(third, limit) == third
        assert _unacked(client, "pre") == []
    finally:
        reader.stop()


def test_jobs_are_acknowledged_once_spark_asks_for_the_next_batch(node):
    proc, address, client = node
    ids = client.add_jobs([("late", b"x")] * 30, retry=60)
    reader = _reader(address, "late", prefetch="false")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(30))
        assert len(_rows(reader, start, end)) == 30
        # The sink is writing the batch: nothing is acknowledged.
        assert {client.show(i)["state"] for i in ids} == {"active"}
        # Spark wrote the batch to its commit log and asks for the next one.
        assert reader.latestOffset(end, ReadMaxRows(30)) == end
        assert _unacked(client, "late") == []
        reader.commit(end)  # Spark's own confirmation, once it plans another batch: a no-op
    finally:
        reader.stop()


def test_a_smaller_read_limit_leaves_the_rest_for_the_next_batch(node):
    proc, address, client = node
    ids = client.add_jobs([("limit", b"x")] * 100, retry=60)
    reader = _reader(address, "limit", maxJobsPerTrigger=60)
    try:
        start = reader.initialOffset()
        first = reader.latestOffset(start, ReadMaxRows(60))
        assert len(_rows(reader, start, first)) == 60
        wait_until(lambda: client.qlen("limit") == 0, message="the prefetch of 40 jobs")
        second = reader.latestOffset(first, ReadMaxRows(25))
        reader.commit(first)
        assert [r["id"] for r in _rows(reader, first, second)] == ids[60:85]
        third = reader.latestOffset(second, ReadMaxRows(25))
        reader.commit(second)
        assert [r["id"] for r in _rows(reader, second, third)] == ids[85:]
    finally:
        reader.stop()


def test_a_job_requeued_while_in_flight_is_delivered_once(node):
    proc, address, client = node
    ids = client.add_jobs([("requeued", b"job-%d" % i) for i in range(20)], retry=1)
    # No WORKING: the jobs go back to the queue while their batch is still in flight.
    reader = _reader(address, "requeued", keepAlive="false", maxJobsPerTrigger=10)
    limit = reader.getDefaultReadLimit()
    try:
        reader.prepareForTriggerAvailableNow()  # 20 jobs to take
        start = reader.initialOffset()
        first = reader.latestOffset(start, limit)
        wait_until(lambda: client.qlen("requeued") == 20, timeout=15,
                   message="the first batch's jobs to be requeued")
        assert [r["id"] for r in _rows(reader, start, first)] == ids[:10]
        # partitions() fetched the next batch ahead: the requeued jobs first (queues are
        # in creation order), taken off the queue again and dropped.
        wait_until(lambda: client.qlen("requeued") == 10, message="the prefetch")
        second = reader.latestOffset(first, limit)
        # The dropped jobs did not count against the 10 still to take (availableNow).
        assert [r["id"] for r in _rows(reader, first, second)] == ids[10:]
        assert reader.latestOffset(second, limit) == second
        assert client.qlen("requeued") == 0 and _unacked(client, "requeued") == []
    finally:
        reader.stop()


def test_first_working_comes_after_a_tenth_of_the_retry():
    assert first_working_delay(1, 5.0) == pytest.approx(0.1)
    assert first_working_delay(30, 5.0) == pytest.approx(3.0)
    assert first_working_delay(300, 5.0) == 5.0
    assert first_working_delay(0, 5.0) == 5.0 and first_working_delay(None, 2.0) == 2.0


def test_executors_pull_the_rows_from_the_driver_until_the_batch_is_acked(node):
    proc, address, client = node
    ids = client.add_jobs([("pull", b"job-%d" % i) for i in range(30)], retry=60)
    reader = _reader(address, "pull", prefetch="false", numPartitions=2)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(30))
        partitions = reader.partitions(start, end)
        # The partitions carry a token, not the rows: the executors pull those over TCP.
        assert [p.arrow for p in partitions] == [None, None]
        assert len(pickle.dumps(partitions)) < 1000
        rows = [row for p in partitions for b in reader.read(pickle.loads(pickle.dumps(p)))
                for row in b.to_pylist()]
        assert [r["id"] for r in rows] == ids
        # A retried task pulls the same rows again, until the batch is acknowledged.
        again = [row for b in reader.read(partitions[1]) for row in b.to_pylist()]
        assert again == rows[15:]
        assert reader.latestOffset(end, ReadMaxRows(30)) == end
        assert _unacked(client, "pull") == []
        with pytest.raises(RuntimeError, match="no longer holds this partition"):
            list(reader.read(partitions[0]))
        assert reader._state.server.held() == 0
    finally:
        reader.stop()


def test_a_forged_token_gets_nothing(node):
    from disque.spark.courier import pull_batch

    proc, address, client = node
    client.add_jobs([("forged", b"secret")] * 3, retry=60)
    reader = _reader(address, "forged", prefetch="false")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(3))
        (partition,) = reader.partitions(start, end)
        with pytest.raises(RuntimeError, match="no longer holds"):
            pull_batch(partition.address, bytes(len(partition.token)))
    finally:
        reader.stop()


def test_transport_partition_ships_the_rows_inside_the_partitions(node):
    proc, address, client = node
    ids = client.add_jobs([("inside", b"job-%d" % i) for i in range(20)], retry=60)
    reader = _reader(address, "inside", prefetch="false", transport="partition")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(20))
        (partition,) = reader.partitions(start, end)
        assert partition.arrow is not None and partition.token is None
        assert reader._state.server is None
        assert [r["id"] for r in _rows(reader, start, end)] == ids
    finally:
        reader.stop()


def test_transport_must_be_driver_or_partition():
    from disque.spark.options import OptionError

    with pytest.raises(OptionError, match="transport"):
        _reader("127.0.0.1:7711", "q", transport="carrier-pigeon")


def test_available_now_fetches_the_first_batch_while_the_query_starts(node):
    proc, address, client = node
    ids = client.add_jobs([("early", b"job-%d" % i) for i in range(30)], retry=60)
    reader = _reader(address, "early", maxJobsPerTrigger=20)
    try:
        reader.prepareForTriggerAvailableNow()
        wait_until(lambda: client.qlen("early") == 10, message="the first batch's fetch")
        start = reader.initialOffset()
        first = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert [r["id"] for r in _rows(reader, start, first)] == ids[:20]
        second = reader.latestOffset(first, reader.getDefaultReadLimit())
        assert [r["id"] for r in _rows(reader, first, second)] == ids[20:]
        assert reader.latestOffset(second, reader.getDefaultReadLimit()) == second
        assert _unacked(client, "early") == []
    finally:
        reader.stop()


def test_without_prefetch_available_now_fetches_nothing_before_the_first_batch(node):
    proc, address, client = node
    client.add_jobs([("late-start", b"x")] * 5, retry=60)
    reader = _reader(address, "late-start", prefetch="false")
    try:
        reader.prepareForTriggerAvailableNow()
        assert client.qlen("late-start") == 5
    finally:
        reader.stop()


def test_a_fetch_pauses_the_garbage_collector_and_restores_it(node):
    import gc

    from disque.spark.columns import BatchBuilder
    from disque.spark.courier import Courier
    from disque.spark.options import ConnectionOptions, Options

    proc, address, client = node
    client.add_jobs([("gc", b"x")] * 10, retry=60)
    courier = Courier(ConnectionOptions.parse(Options({"nodes": address})), ["gc"], 4,
                      BatchBuilder(struct(STREAM_FIELDS)), None, 5.0)
    seen = []
    fetch_now = courier._fetch_now
    courier._fetch_now = lambda want: seen.append(gc.isenabled()) or fetch_now(want)
    try:
        assert gc.isenabled()
        assert len(courier.fetch(5).result().ids) == 5
        assert seen == [False] and gc.isenabled()
        gc.disable()
        try:
            assert len(courier.fetch(5).result().ids) == 5
            assert not gc.isenabled()  # left as the caller had it
        finally:
            gc.enable()
    finally:
        courier.close()


def test_an_unreachable_driver_says_how_to_ship_the_rows_otherwise():
    import socket

    from disque.spark.courier import BatchServer, pull_batch

    server = BatchServer("127.0.0.1")
    token = server.hold(1, b"rows")
    address = server.address
    assert bytes(pull_batch(address, token)) == b"rows"
    server.close()
    assert not server._thread.is_alive()  # close() woke the accept loop
    with pytest.raises(ConnectionError, match="transport=partition"):
        pull_batch(address, token)
    # Nothing listens there any more: a fresh socket may bind the port again.
    socket.create_server(address).close()
