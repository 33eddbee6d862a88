"""Writing DataFrames into Disque: every row becomes one ADDJOB.

Each partition opens one connection and pipelines its ADDJOBs in chunks of
``batchSize``. A job the server refuses fails the task with the job's position,
queue, a preview of its body and the server's error text. Jobs already added
stay added (a queue has no rollback), and a retried task adds its jobs again:
the sink is at-least-once, like Disque itself.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import BinaryType, StringType, StructType

from disque.client import ResponseError
from disque.client.arguments import AddJobEncoder
from disque.client.errors import is_leaving
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
    """The ``body`` column as large binary (Arrow strings are UTF-8 already: no per-row encode)."""
    return batch.column(batch.schema.get_field_index("body")).cast(pa.large_binary())


def _first_null(column: pa.Array) -> int | None:
    """The position of the column's first null, if any."""
    if column.null_count == 0:
        return None
    return pc.index(column.is_null(), True).as_py()


def _binary(value: bytes) -> pa.Scalar:
    return pa.scalar(value, pa.large_binary())


_CRLF = _binary(b"\r\n")
_NOTHING = _binary(b"")
_OFFSET = struct.Struct("<q")  # a large-binary array's offsets


def _decimal_lengths(column: pa.Array) -> pa.Array:
    """Each value's length in bytes, as decimal text (a RESP bulk header's)."""
    return pc.binary_length(column).cast(pa.string()).cast(pa.large_binary())


def encode_addjobs(encoder: AddJobEncoder, queues: pa.Array | str, bodies: pa.Array) -> pa.Array:
    """The RESP ADDJOB of every row, built column-wise by Arrow (a few tens of
    ns per row where formatting each command in Python costs a few hundred):
    a queue name for all rows, or a column of them, and a large-binary column
    of bodies, neither with nulls."""
    if isinstance(queues, str):
        pieces = [_binary(encoder.prefix(queues) + b"$")]
    else:
        names = queues.cast(pa.large_binary())
        pieces = [_binary(encoder.head + b"$"), _decimal_lengths(names), _CRLF, names,
                  _binary(b"\r\n$")]
    pieces += [_decimal_lengths(bodies), _CRLF, bodies, _binary(encoder.tail)]
    return pc.binary_join_element_wise(*pieces, _NOTHING)


def _wire_bytes(commands: pa.Array) -> pa.Buffer:
    """The commands of a large-binary array laid end to end, without copying:
    its data buffer between its first and last offsets."""
    offsets, data = commands.buffers()[1:]
    (first,) = _OFFSET.unpack_from(offsets, commands.offset * _OFFSET.size)
    (last,) = _OFFSET.unpack_from(offsets, (commands.offset + len(commands)) * _OFFSET.size)
    return data[first:last]


def _errors(replies: bytes) -> dict[int, ResponseError]:
    """The error replies among one-line replies, by position."""
    if not (replies.startswith(b"-") or b"\n-" in replies):
        return {}
    return {i: ResponseError(line[1:].decode("utf-8", "replace"))
            for i, line in enumerate(replies.split(b"\r\n")) if line.startswith(b"-")}


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
        try:
            for batch in iterator:
                bodies = _bodies(batch)
                queue_index = batch.schema.get_field_index("queue")
                queues = batch.column(queue_index) if queue_index >= 0 else None
                if queues is not None and default_queue is not None:
                    queues = queues.fill_null(default_queue)
                # The rows before the first one the node cannot take are written, then
                # that row fails the task, as writing row by row would.
                null_body = _first_null(bodies)
                null_queue = (_first_null(queues) if queues is not None
                              else None if default_queue is not None else 0)
                rows = min([batch.num_rows] + [i for i in (null_body, null_queue)
                                                if i is not None])
                if rows:
                    queues_written = default_queue if queues is None else queues.slice(0, rows)
                    commands = encode_addjobs(encoder, queues_written, bodies.slice(0, rows))
                    for first in range(0, rows, size):
                        chunk = commands.slice(first, size)
                        self._send(client, chunk, queues_written, bodies, first, written,
                                   partition)
                        written += len(chunk)
                if rows < batch.num_rows:
                    if rows == null_queue:
                        raise DisqueWriteError("row %d of partition %d has a null queue and no "
                                               "'queue' option is set" % (written, partition))
                    queue = default_queue if queues is None else queues[rows].as_py()
                    raise DisqueWriteError("row %d of partition %d (queue %r) has a null body"
                                           % (written, partition, queue))
        finally:
            client.close()
        return DisqueCommitMessage(partition, written)

    @staticmethod
    def _send(client, commands: pa.Array, queues: pa.Array | str, bodies: pa.Array,
              first: int, first_row: int, partition: int) -> None:
        """ADDJOB ``commands`` (rows ``first``... of the batch); a refused job
        fails the task. Jobs a leaving node refused go to another node."""
        errors = _errors(client.pipeline_lines(_wire_bytes(commands), len(commands)))
        leaving = [i for i, error in errors.items() if is_leaving(error)]
        if leaving:
            for i, reply in zip(leaving, client.pipeline([commands[i].as_py() for i in leaving])):
                if isinstance(reply, ResponseError):
                    errors[i] = reply
                else:
                    del errors[i]
        if errors:
            i = min(errors)
            queue = queues if isinstance(queues, str) else queues[first + i].as_py()
            raise DisqueWriteError(
                "ADDJOB refused for row %d of partition %d (queue %r, body %s): %s%s"
                % (first_row + i, partition, queue, _preview(bodies[first + i].as_py()),
                   errors[i], "" if len(errors) == 1 else
                   " (and %d more jobs of the same chunk)" % (len(errors) - 1)))


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
