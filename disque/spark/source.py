"""Reading Disque from Spark: an at-least-once stream of jobs, and a snapshot of queues.

Streaming (``spark.readStream.format("disque")``): the driver-side reader
fetches jobs with GETJOB NOHANG COUNT, ships them to executors inside the
InputPartitions, and sends ACKJOB only from ``commit()``, i.e. after the sink
committed the batch. The offset is just a batch counter: Disque keeps no
replayable log, but it redelivers unacknowledged jobs after RETRY, so a batch
lost to a crash comes back by itself (at-least-once, no loss).

Batch (``spark.read.format("disque")``): every job the nodes hold, through
JSCAN ... REPLY all (or QPEEK), one partition per node. Nothing is consumed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterator

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    InputPartition)
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from disque.client import PRIORITY_FAILING, DisqueClient, Job
from disque.spark.columns import (SNAPSHOT_FIELDS, STREAM_FIELDS, BatchBuilder, check_schema,
                                  queue_text, struct)
from disque.spark.keepalive import KeepAlive
from disque.spark.options import ConnectionOptions, OptionError, Options
from disque.spark.sink import DisqueBatchWriter, DisqueStreamWriter

log = logging.getLogger("disque.spark")

DEFAULT_MAX_JOBS_PER_TRIGGER = 10_000
DEFAULT_FETCH = 1_000
SNAPSHOT_ROWS_PER_BATCH = 10_000


def _job_columns(jobs: list[Job]) -> dict[str, list]:
    return {
        "queue": [queue_text(j.queue) for j in jobs],
        "id": [j.id for j in jobs],
        "body": [j.body for j in jobs],
        "nacks": [j.nacks for j in jobs],
        "additional_deliveries": [j.additional_deliveries for j in jobs],
    }


class JobsPartition(InputPartition):
    """Jobs fetched on the driver, travelling to an executor."""

    def __init__(self, jobs: list[Job]) -> None:
        super().__init__(len(jobs))
        self.jobs = [tuple(j) for j in jobs]


@dataclass
class _DriverState:
    """What the long-lived driver-side reader process remembers between calls."""

    client: DisqueClient
    keepalive: KeepAlive
    batches: dict[int, list[Job]] = field(default_factory=dict)  # fetched, not yet acked
    budget: int | None = None   # trigger(availableNow=True): jobs left to take
    last_offset: int = 0


class DisqueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """At-least-once micro-batches of jobs; ACKJOB in commit()."""

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
        self._state: _DriverState | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_state"] = None  # sockets and threads stay on the driver
        return state

    def _driver(self) -> _DriverState:
        if self._state is None:
            self._state = _DriverState(self.connection.client(), KeepAlive(self.connection))
        return self._state

    # -- offsets -----------------------------------------------------------------

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_jobs)

    def prepareForTriggerAvailableNow(self) -> None:
        """Take what is queued now and no more, so the query ends even with busy producers."""
        state = self._driver()
        state.budget = sum(state.client.qlen(q) for q in self.queues)
        log.info("availableNow: %d jobs queued in %s", state.budget, self.queues)

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        state = self._driver()
        current = int(start["batch"]) if start else state.last_offset
        following = current + 1
        if following in state.batches:  # asked again before that batch ran
            state.last_offset = following
            return {"batch": following}
        want = self._wanted(limit)
        if state.budget is not None:
            want = min(want, state.budget)
        jobs = self._fetch(state, want) if want > 0 else []
        if jobs:
            state.batches[following] = jobs
            if state.budget is not None:
                state.budget -= len(jobs)
            if self.keep_alive:
                state.keepalive.track(following, [j.id for j in jobs])
        elif any(state.batches.get(b) for b in state.batches if b <= current):
            # Spark commits a batch only when it plans the next one: on an idle queue
            # the last batch would never be acked (spark-notes pitfall 2). An empty
            # batch makes Spark call commit() for it.
            state.batches[following] = []
        else:
            return {"batch": current}
        state.last_offset = following
        return {"batch": following}

    def _wanted(self, limit: Any) -> int:
        if isinstance(limit, ReadMaxRows):
            return max(0, int(limit.max_rows))
        # ReadAllAvailable: the budget bounds availableNow; otherwise keep the
        # driver's memory bounded anyway.
        return self.max_jobs

    def _fetch(self, state: _DriverState, want: int) -> list[Job]:
        jobs: list[Job] = []
        while len(jobs) < want:
            count = min(self.fetch_size, want - len(jobs))
            got = state.client.get_jobs(*self.queues, count=count, nohang=True,
                                        withcounters=True)
            jobs.extend(got)
            if len(got) < count:
                break
        return jobs

    # -- planning and reading ------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        state = self._driver()
        first, last = int(start["batch"]) if start else 0, int(end["batch"])
        jobs: list[Job] = []
        for batch in range(first + 1, last + 1):
            # A batch planned by a previous run (restart from the checkpoint) is not
            # here: its jobs were never acked and the queue delivers them again.
            jobs.extend(state.batches.get(batch, ()))
        if not jobs:
            return []
        parts = min(self.num_partitions, len(jobs))
        size = -(-len(jobs) // parts)
        return [JobsPartition(jobs[i:i + size]) for i in range(0, len(jobs), size)]

    def read(self, partition: JobsPartition) -> Iterator[Any]:
        jobs = [Job(*j) for j in partition.jobs]
        yield BatchBuilder(self.schema).batch(_job_columns(jobs), len(jobs))

    def commit(self, end: dict) -> None:
        """The sink has every batch up to ``end``: acknowledge their jobs."""
        state = self._driver()
        last = int(end["batch"])
        for batch in sorted(b for b in state.batches if b <= last):
            jobs = state.batches[batch]
            if jobs:
                state.client.ack_jobs([j.id for j in jobs])
            state.keepalive.forget(batch)
            del state.batches[batch]

    def stop(self) -> None:
        if self._state is not None:
            self._state.keepalive.stop()
            self._state.client.close()


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
        client = DisqueClient([(partition.host, partition.port)], password=self.connection.password,
                              socket_timeout=self.connection.socket_timeout, use_hello=False)
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

    def writer(self, schema: StructType, overwrite: bool):
        return DisqueBatchWriter(schema, self.options)

    def streamWriter(self, schema: StructType, overwrite: bool):
        return DisqueStreamWriter(schema, self.options)
