"""Writing DataFrames into Disque: every row becomes one ADDJOB.

Each partition opens one connection and pipelines its ADDJOBs in chunks of
``batchSize``. A job the server refuses fails the task with the job's position,
queue, a preview of its body and the server's error text. Jobs already added
stay added (a queue has no rollback), and a retried task adds its jobs again:
the sink is at-least-once, like Disque itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import BinaryType, StringType, StructType

from disque.client import ResponseError
from disque.spark.options import AddJobOptions, ConnectionOptions, Options


class DisqueWriteError(RuntimeError):
    """The server refused a job."""


@dataclass
class DisqueCommitMessage(WriterCommitMessage):
    """What one partition wrote."""

    partition: int
    jobs: int


def check_input_schema(schema: StructType, options: AddJobOptions) -> None:
    """Fail at planning time: ``body`` is required, ``queue`` comes from a column or the option."""
    fields = {f.name: f.dataType for f in schema.fields}
    body = fields.get("body")
    if body is None:
        raise ValueError("format('disque') needs a 'body' column (binary or string); got %s"
                         % (", ".join(fields) or "no columns"))
    if not isinstance(body, (BinaryType, StringType)):
        raise ValueError("column 'body' must be binary or string, not %s" % body.simpleString())
    queue = fields.get("queue")
    if queue is not None and not isinstance(queue, StringType):
        raise ValueError("column 'queue' must be a string, not %s" % queue.simpleString())
    if queue is None and not options.queue:
        raise ValueError("format('disque') needs a 'queue' column or the 'queue' option")


def _preview(body: bytes, limit: int = 40) -> str:
    text = repr(body[:limit])
    return text + ("... (%d bytes)" % len(body) if len(body) > limit else "")


def _partition_id() -> int:
    from pyspark import TaskContext
    context = TaskContext.get()
    return context.partitionId() if context is not None else -1


def _columns(batch: pa.RecordBatch) -> tuple[list, list | None]:
    """(bodies, queues or None) of one Arrow batch."""
    names = batch.schema.names
    bodies = batch.column(names.index("body")).to_pylist()
    queues = batch.column(names.index("queue")).to_pylist() if "queue" in names else None
    return bodies, queues


class JobWriter:
    """Pipelined ADDJOB for one partition's rows (runs on an executor)."""

    def __init__(self, connection: ConnectionOptions, addjob: AddJobOptions) -> None:
        self.connection = connection
        self.addjob = addjob

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DisqueCommitMessage:
        partition = _partition_id()
        tail = self.addjob.tail()
        default_queue = self.addjob.queue
        size = self.addjob.batch_size
        written = 0
        client = self.connection.client()
        pending: list[tuple] = []
        try:
            for batch in iterator:
                bodies, queues = _columns(batch)
                for i, body in enumerate(bodies):
                    queue = queues[i] if queues is not None else None
                    if queue is None:
                        queue = default_queue
                    row = written + len(pending)
                    if queue is None:
                        raise DisqueWriteError("row %d of partition %d has a null queue and no "
                                               "'queue' option is set" % (row, partition))
                    if body is None:
                        raise DisqueWriteError("row %d of partition %d (queue %r) has a null body"
                                               % (row, partition, queue))
                    if isinstance(body, str):
                        body = body.encode("utf-8")
                    pending.append(("ADDJOB", queue, body) + tail)
                    if len(pending) >= size:
                        written += self._flush(client, pending, written, partition)
                        pending = []
            if pending:
                written += self._flush(client, pending, written, partition)
        finally:
            client.close()
        return DisqueCommitMessage(partition, written)

    @staticmethod
    def _flush(client, commands: list[tuple], first_row: int, partition: int) -> int:
        replies = client.pipeline(commands)
        failed = [i for i, r in enumerate(replies) if isinstance(r, ResponseError)]
        if failed:
            i = failed[0]
            queue, body = commands[i][1], commands[i][2]
            raise DisqueWriteError(
                "ADDJOB refused for row %d of partition %d (queue %r, body %s): %s%s"
                % (first_row + i, partition, queue, _preview(body), replies[i],
                   "" if len(failed) == 1 else " (and %d more jobs of the same chunk)"
                   % (len(failed) - 1)))
        return len(commands)


def _parse(schema: StructType, options: Any) -> tuple[ConnectionOptions, AddJobOptions]:
    opts = Options(options)
    addjob = AddJobOptions.parse(opts)
    check_input_schema(schema, addjob)
    connection = ConnectionOptions.parse(opts, min_socket_timeout=addjob.timeout_ms / 1000 + 10)
    return connection, addjob


class DisqueBatchWriter(DataSourceArrowWriter):
    """``df.write.format("disque")``."""

    def __init__(self, schema: StructType, options: Any) -> None:
        self._writer = JobWriter(*_parse(schema, options))

    def write(self, iterator):
        return self._writer.write(iterator)

    def commit(self, messages) -> None:
        pass  # every job is in the queue as soon as ADDJOB answered

    def abort(self, messages) -> None:
        pass  # added jobs cannot be taken back; consumers see them


class DisqueStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("disque")``: at-least-once (a retried batch adds its jobs again)."""

    def __init__(self, schema: StructType, options: Any) -> None:
        self._writer = JobWriter(*_parse(schema, options))

    def write(self, iterator):
        return self._writer.write(iterator)

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass
