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
import pyarrow.compute as pc
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import BinaryType, StringType, StructType

from disque.client import ResponseError
from disque.client.arguments import AddJobEncoder
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


def _bodies(batch: pa.RecordBatch) -> pa.Array:
    """The ``body`` column as binary (Arrow strings are UTF-8 already: no per-row encode)."""
    bodies = batch.column(batch.schema.get_field_index("body"))
    if pa.types.is_string(bodies.type):
        return bodies.cast(pa.binary())
    if pa.types.is_large_string(bodies.type):
        return bodies.cast(pa.large_binary())
    return bodies


def _first_null(column: pa.Array) -> int | None:
    """The position of the column's first null, if any."""
    if column.null_count == 0:
        return None
    return pc.index(column.is_null(), True).as_py()


class JobWriter:
    """Pipelined ADDJOB for one partition's rows (runs on an executor)."""

    def __init__(self, connection: ConnectionOptions, addjob: AddJobOptions) -> None:
        self.connection = connection
        self.addjob = addjob

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DisqueCommitMessage:
        partition = _partition_id()
        encoder = AddJobEncoder(self.addjob.tail())
        default_queue = self.addjob.queue
        size = self.addjob.batch_size
        written = 0
        client = self.connection.client()
        # Encoded ADDJOBs not sent yet, with each one's queue and body for error messages.
        commands: list[bytes] = []
        queues: list[str] = []
        bodies: list[bytes] = []
        try:
            for batch in iterator:
                batch_bodies = _bodies(batch)
                queue_index = batch.schema.get_field_index("queue")
                batch_queues = batch.column(queue_index) if queue_index >= 0 else None
                if batch_queues is not None and default_queue is not None:
                    batch_queues = batch_queues.fill_null(default_queue)
                # The rows before the first one the node cannot take are written, then
                # that row fails the task, as writing row by row would.
                null_body = _first_null(batch_bodies)
                null_queue = (_first_null(batch_queues) if batch_queues is not None
                              else None if default_queue is not None else 0)
                rows = min([batch.num_rows] + [i for i in (null_body, null_queue)
                                                if i is not None])
                new_bodies = batch_bodies.slice(0, rows).to_pylist()
                if batch_queues is None:
                    commands += encoder.encode(default_queue, new_bodies)
                    queues += [default_queue] * rows
                else:
                    new_queues = batch_queues.slice(0, rows).to_pylist()
                    commands += encoder.encode_each(new_queues, new_bodies)
                    queues += new_queues
                bodies += new_bodies
                while len(commands) >= size:
                    written += self._flush(client, commands[:size], queues, bodies, written,
                                           partition)
                    del commands[:size], queues[:size], bodies[:size]
                if rows < batch.num_rows:
                    row = written + len(commands)
                    if rows == null_queue:
                        raise DisqueWriteError("row %d of partition %d has a null queue and no "
                                               "'queue' option is set" % (row, partition))
                    queue = (default_queue if batch_queues is None
                             else batch_queues[rows].as_py())
                    raise DisqueWriteError("row %d of partition %d (queue %r) has a null body"
                                           % (row, partition, queue))
            if commands:
                written += self._flush(client, commands, queues, bodies, written, partition)
        finally:
            client.close()
        return DisqueCommitMessage(partition, written)

    @staticmethod
    def _flush(client, commands: list[bytes], queues: list[str], bodies: list[bytes],
               first_row: int, partition: int) -> int:
        replies = client.pipeline(commands)
        failed = [i for i, r in enumerate(replies) if isinstance(r, ResponseError)]
        if failed:
            i = failed[0]
            raise DisqueWriteError(
                "ADDJOB refused for row %d of partition %d (queue %r, body %s): %s%s"
                % (first_row + i, partition, queues[i], _preview(bodies[i]), replies[i],
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
