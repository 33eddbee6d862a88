"""Writing DataFrames into Disque: every row becomes one ADDJOB.

Each partition opens one connection and pipelines its ADDJOBs in chunks of
``batchSize``. A job the server refuses fails the task with the job's position,
queue, a preview of its body and the server's error text. Jobs already added
stay added (a queue has no rollback).

Every ADDJOB carries a DEDUPID (option ``dedup``, on by default; docs/dedup.md)
made of the write's identity (a random ID drawn on the driver for a batch
write; the query's ID and the micro-batch's ID for a stream), the partition and
the row's position in it, so a retried task (or a speculative copy) gets the
first attempt's job IDs back from the node instead of adding its jobs again,
as long as the node's ``dedup-window`` outlasts the retry. With ``dedup``
off the sink is at-least-once, like Disque itself.
"""

from __future__ import annotations

import secrets
import struct
import time
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


# Local properties Spark sets on the tasks of a streaming query's micro-batch.
QUERY_ID_PROPERTY = "sql.streaming.queryId"   # kept in the checkpoint: same after a restart
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def _stream_epoch() -> tuple[str, str] | None:
    """(query ID, micro-batch ID) of the running streaming task, or None."""
    from pyspark import TaskContext
    context = TaskContext.get()
    if context is None:
        return None
    query = context.getLocalProperty(QUERY_ID_PROPERTY)
    batch = context.getLocalProperty(BATCH_ID_PROPERTY)
    if not query or batch is None:
        return None
    return query.replace("-", ""), batch


def new_write_id() -> str:
    """A batch write's identity, drawn once on the driver (every task attempt shares it)."""
    return secrets.token_hex(8)


# A row's token is the task's prefix, then the row's position in the partition
# as 8 bytes, an int64 in memory (little-endian on the machines Spark runs on;
# ``row_token`` spells it out): every token of a partition has one length, so the
# words around it are one scalar, and the positions are an int64 column's own
# buffer (3 ns per row, where decimal digits cost 30).
ROW_BYTES = 8
DEDUPID_WORDS = ("DEDUPID", b"")  # the encoder's last words: the token goes in column-wise
_DEDUPID_TAIL = b"$7\r\nDEDUPID\r\n$0\r\n\r\n"


def token_prefix(write_id: str, epoch: str, partition: int) -> bytes:
    """What every DEDUPID of one partition of one write (or micro-batch) starts with."""
    return b"spark:%s:%s:%d:" % (write_id.encode(), epoch.encode(), partition)


def row_token(prefix: bytes, row: int) -> bytes:
    """The DEDUPID of a partition's ``row`` (what ``encode_addjobs`` builds column-wise)."""
    return prefix + row.to_bytes(ROW_BYTES, "little")


@dataclass(frozen=True)
class RowTokens:
    """The DEDUPIDs of consecutive rows: ``row_token(prefix, first + i)``."""

    prefix: bytes
    first: int


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


_counting_cache: list[pa.Array] = [pa.array([], pa.int64())]


def _counting(n: int) -> pa.Array:
    """0, 1, ..., n - 1 as int64 (a slice of one array, grown when needed)."""
    numbers = _counting_cache[0]
    if len(numbers) < n:
        numbers = _counting_cache[0] = pa.array(range(max(n, 2 * len(numbers))), pa.int64())
    return numbers.slice(0, n)


def _row_positions(first: int, n: int) -> pa.Array:
    """first + i for i < n, each as its 8 little-endian bytes (large binary)."""
    numbers = pc.add(_counting(n), pa.scalar(first, pa.int64()))  # a new array: offset 0
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(ROW_BYTES), n,
                                                 [None, numbers.buffers()[1]])
    return fixed.cast(pa.large_binary())


def encode_addjobs(encoder: AddJobEncoder, queues: pa.Array | str, bodies: pa.Array,
                   tokens: RowTokens | None = None) -> pa.Array:
    """The RESP ADDJOB of every row, built column-wise by Arrow (a few tens of
    ns per row where formatting each command in Python costs a few hundred):
    a queue name for all rows, or a column of them, and a large-binary column
    of bodies, neither with nulls. With ``tokens`` every command ends with the
    row's DEDUPID (``row_token``), and ``encoder`` must have been made with
    ``DEDUPID_WORDS`` last."""
    if isinstance(queues, str):
        pieces = [_binary(encoder.prefix(queues) + b"$")]
    else:
        names = queues.cast(pa.large_binary())
        pieces = [_binary(encoder.head + b"$"), _decimal_lengths(names), _CRLF, names,
                  _binary(b"\r\n$")]
    if tokens is None:
        pieces += [_decimal_lengths(bodies), _CRLF, bodies, _binary(encoder.tail)]
    else:
        if not encoder.tail.endswith(_DEDUPID_TAIL):
            raise ValueError("the encoder's words must end with DEDUPID_WORDS")
        tail = encoder.tail[:-len(b"$0\r\n\r\n")] + b"$%d\r\n%s" % (
            len(tokens.prefix) + ROW_BYTES, tokens.prefix)
        pieces += [_decimal_lengths(bodies), _CRLF, bodies, _binary(tail),
                   _row_positions(tokens.first, len(bodies)), _CRLF]
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


PENDING_PREFIX = "PENDING"


def is_pending(error: BaseException) -> bool:
    """The node holds the job of this DEDUPID but its first ADDJOB still waits for
    replicas: asking again later gets its ID, or creates it if that ADDJOB failed."""
    return str(error).startswith(PENDING_PREFIX)


class JobWriter:
    """Pipelined ADDJOB for one partition's rows (runs on an executor).

    ``write_id`` names a batch write (``new_write_id``, drawn on the driver);
    without it (a stream) the query's and micro-batch's IDs name the write.
    With ``addjob.dedup`` off, or outside a stream without ``write_id``, the
    ADDJOBs carry no DEDUPID."""

    def __init__(self, connection: ConnectionOptions, addjob: AddJobOptions,
                 write_id: str | None = None) -> None:
        self.connection = connection
        self.addjob = addjob
        self.write_id = write_id

    def _token_prefix(self, partition: int) -> bytes | None:
        if not self.addjob.dedup:
            return None
        if self.write_id is not None:
            return token_prefix(self.write_id, "b", partition)
        epoch = _stream_epoch()
        if epoch is None:
            return None  # no identity that a retry would share: no DEDUPID
        return token_prefix(epoch[0], epoch[1], partition)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DisqueCommitMessage:
        partition = _partition_id()
        prefix = self._token_prefix(partition)
        words = self.addjob.tail()
        encoder = AddJobEncoder(words if prefix is None else words + DEDUPID_WORDS)
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
                    tokens = None if prefix is None else RowTokens(prefix, written)
                    commands = encode_addjobs(encoder, queues_written, bodies.slice(0, rows),
                                              tokens)
                    for first in range(0, rows, size):
                        chunk = commands.slice(first, size)
                        self._send(client, chunk, queues_written, bodies, first, written,
                                   partition, self.addjob.pending_wait())
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
              first: int, first_row: int, partition: int, pending_wait: float = 0.0) -> None:
        """ADDJOB ``commands`` (rows ``first``... of the batch); a refused job
        fails the task. Jobs a leaving node refused go to another node; jobs
        answered -PENDING (their DEDUPID's first ADDJOB, say a failed attempt's
        or a speculative copy's, still waits for replicas) go again, every few
        ms for up to ``pending_wait`` seconds."""
        errors = _errors(client.pipeline_lines(_wire_bytes(commands), len(commands)))
        leaving = [i for i, error in errors.items() if is_leaving(error)]
        if leaving:
            JobWriter._resend(client, commands, leaving, errors)
        pending = [i for i, error in errors.items() if is_pending(error)]
        if pending:
            deadline = time.monotonic() + pending_wait
            pause = 0.005
            while pending and time.monotonic() < deadline:
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, 0.25)
                JobWriter._resend(client, commands, pending, errors)
                pending = [i for i in pending if i in errors and is_pending(errors[i])]
        if errors:
            i = min(errors)
            queue = queues if isinstance(queues, str) else queues[first + i].as_py()
            raise DisqueWriteError(
                "ADDJOB refused for row %d of partition %d (queue %r, body %s): %s%s"
                % (first_row + i, partition, queue, _preview(bodies[first + i].as_py()),
                   errors[i], "" if len(errors) == 1 else
                   " (and %d more jobs of the same chunk)" % (len(errors) - 1)))


    @staticmethod
    def _resend(client, commands: pa.Array, which: list[int],
                errors: dict[int, ResponseError]) -> None:
        """Send ``commands[i]`` for i in ``which`` again (``pipeline`` takes them to another
        node if this one is leaving); ``errors`` keeps the refusals that remain."""
        for i, reply in zip(which, client.pipeline([commands[i].as_py() for i in which])):
            if isinstance(reply, ResponseError):
                errors[i] = reply
            else:
                del errors[i]


def _parse(schema: StructType, options: Any) -> tuple[ConnectionOptions, AddJobOptions]:
    opts = Options(options)
    addjob = AddJobOptions.parse(opts)
    check_input_schema(schema, addjob)
    connection = ConnectionOptions.parse(opts, min_socket_timeout=addjob.timeout_ms / 1000 + 10)
    return connection, addjob


class DisqueBatchWriter(DataSourceArrowWriter):
    """``df.write.format("disque")``."""

    def __init__(self, schema: StructType, options: Any) -> None:
        # Made on the driver, then pickled to every task: its attempts share the ID.
        self._writer = JobWriter(*_parse(schema, options), write_id=new_write_id())

    def write(self, iterator):
        return self._writer.write(iterator)

    def commit(self, messages) -> None:
        pass  # every job is in the queue as soon as ADDJOB answered

    def abort(self, messages) -> None:
        pass  # added jobs cannot be taken back; consumers see them


class DisqueStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("disque")``: a retried task, or a micro-batch run again
    after a restart from the checkpoint, gets its jobs' IDs back within the node's
    ``dedup-window`` (tokens named by the query's and the micro-batch's IDs)."""

    def __init__(self, schema: StructType, options: Any) -> None:
        self._writer = JobWriter(*_parse(schema, options))

    def write(self, iterator):
        return self._writer.write(iterator)

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass
