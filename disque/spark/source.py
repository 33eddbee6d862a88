"""Reading Disque from Spark: an at-least-once stream of jobs, and a snapshot of queues.

Streaming (``spark.readStream.format("disque")``): the driver-side reader
fetches jobs with GETJOB NOHANG COUNT, ships them to executors inside the
InputPartitions as Arrow data, and sends ACKJOB only once the sink committed
the batch (Spark asks for the next batch after writing the commit log entry).
Fetching the next batch and the ACKJOBs run on a background thread while the
executors work (``courier``). The offset is just a batch counter: Disque keeps
no replayable log, but it redelivers unacknowledged jobs after RETRY, so a
batch lost to a crash comes back by itself (at-least-once, no loss).

Batch (``spark.read.format("disque")``): every job the nodes hold, through
JSCAN ... REPLY all (or QPEEK), one partition per node. Nothing is consumed.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Iterator

import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    InputPartition)
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from disque.client import DEFAULT_GETJOB_COUNT, PRIORITY_FAILING, DisqueClient
from disque.spark.columns import (SNAPSHOT_FIELDS, STREAM_FIELDS, BatchBuilder, check_schema,
                                  ipc_batches, ipc_bytes, queue_text, struct)
from disque.spark.courier import BatchServer, Courier, FetchedJobs, pull_batch
from disque.spark.keepalive import DEFAULT_KEEPALIVE_DELAY_MS, KeepAlive
from disque.spark.options import ConnectionOptions, OptionError, Options

log = logging.getLogger("disque.spark")

DEFAULT_MAX_JOBS_PER_TRIGGER = 10_000
DEFAULT_FETCH = DEFAULT_GETJOB_COUNT
SNAPSHOT_ROWS_PER_BATCH = 10_000
# How the partitions' rows reach the executors (option transport).
TRANSPORT_DRIVER = "driver"        # pulled from the driver-side reader over TCP
TRANSPORT_PARTITION = "partition"  # inside the pickled InputPartition, through Spark


class JobsPartition(InputPartition):
    """Jobs fetched on the driver, as one Arrow IPC stream: the executor hands Spark the
    batches without a per-row step. The stream is either inside the partition (``arrow``) or
    held by the driver's ``BatchServer`` under ``token`` at ``address``."""

    def __init__(self, rows: int, arrow: bytes | None = None,
                 address: tuple[str, int] | None = None, token: bytes | None = None) -> None:
        super().__init__(rows)
        self.arrow, self.address, self.token = arrow, address, token


@dataclass
class _DriverState:
    """What the long-lived driver-side reader process remembers between calls."""

    courier: Courier
    keepalive: KeepAlive
    server: BatchServer | None  # transport=driver
    batches: dict[int, FetchedJobs] = field(default_factory=dict)  # not committed yet
    acks: list[tuple[Future, FetchedJobs]] = field(default_factory=list)  # committed, ACK sent
    prefetched: Future | None = None   # the next batch's fetch, under way
    leftover: FetchedJobs | None = None  # fetched beyond a batch's read limit
    prefetch_wanted: bool = False
    budget: int | None = None   # trigger(availableNow=True): jobs left to take
    last_offset: int = 0


class DisqueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """At-least-once micro-batches of jobs; ACKJOB once Spark committed them."""

    def __init__(self, schema: StructType, options: Any) -> None:
        # Runs in several processes (spark-notes pitfall 5): no connection here.
        opts = Options(options)
        self.queues = opts.list("queue")
        if not self.queues:
            raise OptionError("readStream.format('disque') needs option 'queue' "
                              "(one queue or a comma-separated list)")
        check_schema(schema, STREAM_FIELDS, "readStream.format('disque')")
        self.schema = schema
        self.connection = ConnectionOptions.parse(opts)
        self.max_jobs = opts.int("maxJobsPerTrigger", DEFAULT_MAX_JOBS_PER_TRIGGER, minimum=1)
        self.num_partitions = opts.int("numPartitions", 1, minimum=1)
        self.fetch_size = opts.int("batchSize", DEFAULT_FETCH, minimum=1)
        self.keep_alive = opts.bool("keepAlive", True)
        self.keep_alive_delay = opts.int("keepAliveDelay", DEFAULT_KEEPALIVE_DELAY_MS,
                                         minimum=0) / 1000
        self.prefetch = opts.bool("prefetch", True)
        self.transport = (opts.get("transport") or TRANSPORT_DRIVER).lower()
        if self.transport not in (TRANSPORT_DRIVER, TRANSPORT_PARTITION):
            raise OptionError("option 'transport' must be %s or %s, got %r"
                              % (TRANSPORT_DRIVER, TRANSPORT_PARTITION, self.transport))
        # Where executors reach the driver; Spark's own SPARK_LOCAL_IP, else every interface
        # under the driver's host name.
        self.driver_host = opts.get("driverHost") or os.environ.get("SPARK_LOCAL_IP") or None
        self._state: _DriverState | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_state"] = None  # sockets and threads stay on the driver
        return state

    def _driver(self) -> _DriverState:
        if self._state is None:
            keepalive = KeepAlive(self.connection)
            courier = Courier(self.connection, self.queues, self.fetch_size,
                              BatchBuilder(self.schema), keepalive if self.keep_alive else None,
                              self.keep_alive_delay)
            server = None
            if self.transport == TRANSPORT_DRIVER:
                server = BatchServer(self.driver_host or "", self.driver_host)
            self._state = _DriverState(courier, keepalive, server)
        return self._state

    # -- offsets -----------------------------------------------------------------

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_jobs)

    def prepareForTriggerAvailableNow(self) -> None:
        """Take what is queued now and no more, so the query ends even with busy producers."""
        state = self._driver()
        state.budget = state.courier.queued()
        log.info("availableNow: %d jobs queued in %s", state.budget, self.queues)
        # The first batch is coming: fetch it while Spark sets the query up.
        want = min(self.max_jobs, state.budget)
        if self.prefetch and want > 0 and state.prefetched is None and state.leftover is None:
            state.prefetched = state.courier.fetch(want)

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        state = self._driver()
        if start is not None:
            # Spark plans the next batch only once the sink committed the one ending at
            # ``start`` (its entry is in the checkpoint's commit log): acknowledge it now.
            # commit() comes only when a batch after it is planned, which on an idle
            # queue never happens (spark-notes pitfall 2).
            self._acknowledge(state, int(start["batch"]))
        self._settle(state, wait=False)
        current = int(start["batch"]) if start else state.last_offset
        following = current + 1
        if following in state.batches:  # asked again before that batch ran
            state.last_offset = following
            return {"batch": following}
        want = self._wanted(limit)
        if state.budget is not None:
            want = min(want, state.budget)
        fetched = self._take(state, want) if want > 0 else None
        if fetched is None:
            # Nothing new: the query may end here (availableNow), so the ACKs sent for
            # the batches committed so far must have been answered.
            self._settle(state, wait=True)
            return {"batch": current}
        state.batches[following] = fetched
        if state.budget is not None:
            # Counted once handed out: a requeued job fetched again takes none of it.
            state.budget -= len(fetched.ids)
        # A full batch means more is probably queued: fetch it while this one runs.
        state.prefetch_wanted = self.prefetch and len(fetched.ids) == want
        state.last_offset = following
        return {"batch": following}

    def _wanted(self, limit: Any) -> int:
        if isinstance(limit, ReadMaxRows):
            return max(0, int(limit.max_rows))
        # ReadAllAvailable: the budget bounds availableNow; otherwise keep the
        # driver's memory bounded anyway.
        return self.max_jobs

    def _take(self, state: _DriverState, want: int) -> FetchedJobs | None:
        """The next batch's jobs: left over, prefetched, or fetched now."""
        fetched, state.leftover = state.leftover, None
        if fetched is None:
            pending, state.prefetched = state.prefetched, None
            fetched = pending.result() if pending is not None else None
            if fetched is None:  # nothing prefetched, or the queues were empty then
                fetched = state.courier.fetch(want).result()
        if fetched is None:
            return None
        if len(fetched.ids) > want:
            fetched, state.leftover = fetched.split(want, next(state.courier.keys))
            if self.keep_alive:
                state.keepalive.track(state.leftover.key, state.leftover.ids,
                                      self.keep_alive_delay)
        return fetched

    # -- planning and reading ------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        state = self._driver()
        if state.prefetch_wanted and state.prefetched is None and state.leftover is None:
            want = self.max_jobs if state.budget is None else min(self.max_jobs, state.budget)
            if want > 0:
                state.prefetched = state.courier.fetch(want)
        state.prefetch_wanted = False
        first, last = int(start["batch"]) if start else 0, int(end["batch"])
        # A batch planned by a previous run (restart from the checkpoint) is not here:
        # its jobs were never acked and the queue delivers them again.
        rows = [state.batches[b].rows for b in range(first + 1, last + 1) if b in state.batches]
        if not rows:
            return []
        table = pa.Table.from_batches(rows, schema=rows[0].schema)
        parts = min(self.num_partitions, table.num_rows)
        size = -(-table.num_rows // parts)
        partitions = []
        for i in range(0, table.num_rows, size):
            piece = table.slice(i, size)
            data = ipc_bytes(piece)
            if state.server is None:
                partitions.append(JobsPartition(piece.num_rows, arrow=data))
            else:
                partitions.append(JobsPartition(piece.num_rows, address=state.server.address,
                                                token=state.server.hold(last, data)))
        return partitions

    def read(self, partition: JobsPartition) -> Iterator[Any]:
        data = partition.arrow
        if data is None:
            data = pull_batch(partition.address, partition.token)
        yield from ipc_batches(data)

    def commit(self, end: dict) -> None:
        """The sink has every batch up to ``end``. ``latestOffset`` acknowledged them already
        when Spark asked for the batch after them; this catches any it did not."""
        self._acknowledge(self._driver(), int(end["batch"]))

    def _acknowledge(self, state: _DriverState, last: int) -> None:
        """Hand the courier the ACKJOBs of every batch up to ``last``; ``latestOffset`` makes
        sure they were answered before the query can end."""
        for batch in sorted(b for b in state.batches if b <= last):
            fetched = state.batches.pop(batch)
            state.acks.append((state.courier.acknowledge(fetched.ids), fetched))
        if state.server is not None:
            state.server.release(last)
        self._settle(state, wait=False)

    def _settle(self, state: _DriverState, wait: bool) -> None:
        """Forget the batches whose ACKJOBs were answered (all of them if ``wait``); an ACK
        that failed fails the query here."""
        while state.acks and (wait or state.acks[0][0].done()):
            future, fetched = state.acks.pop(0)
            future.result()
            state.keepalive.forget(fetched.key)

    def stop(self) -> None:
        if self._state is not None:
            state = self._state
            if state.prefetched is not None:
                state.prefetched.cancel()
            try:
                self._settle(state, wait=True)
            finally:
                state.keepalive.stop()
                state.courier.close()
                if state.server is not None:
                    state.server.close()


# -- batch snapshot ---------------------------------------------------------------


class NodePartition(InputPartition):
    """One node to scan."""

    def __init__(self, host: str, port: int, node_id: str | None) -> None:
        super().__init__(node_id)
        self.host, self.port, self.node_id = host, port, node_id


class DisqueSnapshotReader(DataSourceReader):
    """Every job the nodes hold (JSCAN REPLY all), or queued jobs in order (QPEEK)."""

    def __init__(self, schema: StructType, options: Any) -> None:
        opts = Options(options)
        check_schema(schema, SNAPSHOT_FIELDS, "read.format('disque')")
        self.schema = schema
        self.connection = ConnectionOptions.parse(opts)
        self.queues = opts.list("queue")
        self.states = opts.list("state")
        self.mode = (opts.get("mode") or "jscan").lower()
        if self.mode not in ("jscan", "qpeek"):
            raise OptionError("option 'mode' must be jscan or qpeek, got %r" % self.mode)
        self.count = opts.int("count", minimum=1)
        self.all_nodes = opts.bool("allNodes", True)

    def partitions(self) -> list[InputPartition]:
        with self.connection.client() as client:
            client.connect()  # picks the best node with HELLO, which lists the others
            nodes = [n for n in client.known if n.priority < PRIORITY_FAILING]
            if not self.all_nodes or not nodes:
                return [NodePartition(client.node.host, client.node.port, client.node_id)]
        return [NodePartition(n.host, n.port, n.node_id) for n in nodes]

    def read(self, partition: NodePartition) -> Iterator[Any]:
        builder = BatchBuilder(self.schema)
        client = self.connection.client([(partition.host, partition.port)], use_hello=False)
        rows: list[dict] = []
        try:
            for row in self._rows(client, partition.node_id):
                rows.append(row)
                if len(rows) >= SNAPSHOT_ROWS_PER_BATCH:
                    yield self._batch(builder, rows)
                    rows = []
            if rows:
                yield self._batch(builder, rows)
        finally:
            client.close()

    def _rows(self, client: DisqueClient, node_id: str | None) -> Iterator[dict]:
        if self.mode == "qpeek":
            queues = self.queues or sorted(set(client.qscan()))
            for queue in queues:
                count = self.count or client.qlen(queue)
                if count <= 0:
                    continue
                for job in client.qpeek(queue, count):
                    yield {"queue": queue_text(job.queue), "id": job.id, "body": job.body,
                           "state": "queued", "node": node_id}
            return
        for queue in self.queues or [None]:
            for info in client.jscan(queue, self.states):
                yield {"queue": None if info.get("queue") is None else queue_text(info["queue"]),
                       "id": info["id"], "body": info.get("body"), "nacks": info.get("nacks"),
                       "additional_deliveries": info.get("additional-deliveries"),
                       "state": info.get("state"), "repl": info.get("repl"),
                       "ttl": info.get("ttl"), "ctime": info.get("ctime"),
                       "delay": info.get("delay"), "retry": info.get("retry"), "node": node_id}

    def _batch(self, builder: BatchBuilder, rows: list[dict]):
        columns = {name: [r.get(name) for r in rows] for name in builder.names}
        return builder.batch(columns, len(rows))


class DisqueDataSource(DataSource):
    """``format("disque")``: snapshot and at-least-once stream reader, batch and stream writer."""

    @classmethod
    def name(cls) -> str:
        return "disque"

    def schema(self) -> StructType:
        return struct(STREAM_FIELDS)

    def reader(self, schema: StructType) -> DataSourceReader:
        return DisqueSnapshotReader(schema, self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return DisqueStreamReader(schema, self.options)

    # The writer is imported when used: the stream reader's processes (one per query on the
    # driver) then skip its imports, a tenth of a second each.
    def writer(self, schema: StructType, overwrite: bool):
        from disque.spark.sink import DisqueBatchWriter
        return DisqueBatchWriter(schema, self.options)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from disque.spark.sink import DisqueStreamWriter
        return DisqueStreamWriter(schema, self.options)
