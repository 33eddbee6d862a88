"""Writing DataFrames into Disque: every row becomes one job, added with ADDJOBS.

Each partition opens one connection. Its rows go to the node in ADDJOBS
commands (docs/commands.md "Bulk add") of at most ``batchSize`` rows of one
queue, a few commands per round trip; with a ``queue`` column the rows of
an Arrow batch are grouped by queue first (in their order within each
queue). A job the server refuses fails the task with the job's position,
queue, a preview of its body and the server's error text. Jobs already added
stay added (a queue has no rollback).

Every job carries a DEDUPID (option ``dedup``, on by default; docs/dedup.md)
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
from disque.client.arguments import AddJobsEncoder
from disque.client.errors import is_leaving
from disque.spark.options import AddJobOptions, ConnectionOptions, Options

# ADDJOBS commands per round trip.
PIPELINE = 4


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


def token_prefix(write_id: str, epoch: str, partition: int) -> bytes:
    """What every DEDUPID of one partition of one write (or micro-batch) starts with."""
    return b"spark:%s:%s:%d:" % (write_id.encode(), epoch.encode(), partition)


def row_token(prefix: bytes, row: int) -> bytes:
    """The DEDUPID of a partition's ``row`` (what ``encode_rows`` builds column-wise)."""
    return prefix + row.to_bytes(ROW_BYTES, "little")


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
_DOLLAR = _binary(b"$")
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


def _position_bytes(positions: pa.Array) -> pa.Array:
    """Each int64 position as its 8 little-endian bytes (large binary); the
    array must start at offset 0 and have no nulls (``pc.add``'s result)."""
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(ROW_BYTES), len(positions),
                                                 [None, positions.buffers()[1]])
    return fixed.cast(pa.large_binary())


def encode_rows(bodies: pa.Array, prefix: bytes | None = None,
                positions: pa.Array | None = None) -> pa.Array:
    """Each row's words in an ADDJOBS, built column-wise by Arrow (a few tens
    of ns per row where formatting each in Python costs a few hundred): its
    body as a bulk string, after its DEDUPID ``row_token(prefix, position)``
    with a ``prefix``. ``bodies`` is large binary without nulls,
    ``positions`` int64 at offset 0 without nulls."""
    pieces = []
    if prefix is not None:
        assert positions is not None
        pieces += [_binary(b"$%d\r\n%s" % (len(prefix) + ROW_BYTES, prefix)),
                   _position_bytes(positions), _binary(b"\r\n$")]
    else:
        pieces.append(_DOLLAR)
    pieces += [_decimal_lengths(bodies), _CRLF, bodies, _CRLF]
    return pc.binary_join_element_wise(*pieces, _NOTHING)


def _wire_bytes(words: pa.Array) -> pa.Buffer:
    """The values of a large-binary array laid end to end, without copying:
    its data buffer between its first and last offsets."""
    offsets, data = words.buffers()[1:]
    (first,) = _OFFSET.unpack_from(offsets, words.offset * _OFFSET.size)
    (last,) = _OFFSET.unpack_from(offsets, (words.offset + len(words)) * _OFFSET.size)
    return data[first:last]


PENDING_PREFIX = "PENDING"


def is_pending(error: BaseException) -> bool:
    """The node holds the job of this DEDUPID but its first ADDJOB still waits for
    replicas: asking again later gets its ID, or creates it if that ADDJOB failed."""
    return str(error).startswith(PENDING_PREFIX)


@dataclass
class RowBatch:
    """Rows of one Arrow batch ready to send: grouped by queue, each row's
    ADDJOBS words encoded, and where each came from.

    ``order[i]`` is the batch row of the i-th row here (None: the batch's
    order); ``first_row`` the partition position of the batch's first row."""

    bodies: pa.Array
    words: pa.Array
    order: pa.Array | None
    first_row: int
    prefix: bytes | None

    def row(self, i: int) -> int:
        """The partition position of the i-th row here."""
        return self.first_row + (i if self.order is None else self.order[i].as_py())

    def token(self, i: int) -> bytes | None:
        return None if self.prefix is None else row_token(self.prefix, self.row(i))


@dataclass(frozen=True)
class Chunk:
    """One ADDJOBS: rows ``start`` to ``stop`` (excluded) of a RowBatch, all of ``queue``."""

    queue: str
    start: int
    stop: int


class JobWriter:
    """ADDJOBS for one partition's rows (runs on an executor).

    ``write_id`` names a batch write (``new_write_id``, drawn on the driver);
    without it (a stream) the query's and micro-batch's IDs name the write.
    With ``addjob.dedup`` off, or outside a stream without ``write_id``, the
    jobs carry no DEDUPID."""

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
        encoder = AddJobsEncoder(self.addjob.tail(), dedupids=prefix is not None)
        default_queue = self.addjob.queue
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
                    self._write_rows(client, encoder, bodies.slice(0, rows),
                                     default_queue if queues is None else queues.slice(0, rows),
                                     written, prefix, partition)
                    written += rows
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

    def _write_rows(self, client, encoder: AddJobsEncoder, bodies: pa.Array,
                    queues: pa.Array | str, first_row: int, prefix: bytes | None,
                    partition: int) -> None:
        """ADDJOBS for rows ``first_row``... of the partition, ``batchSize`` rows
        of one queue per command."""
        size = self.addjob.batch_size
        order = None
        if isinstance(queues, str):
            runs = [(queues, 0, len(bodies))]
        else:
            order = pc.sort_indices(queues)  # stable: a queue's rows keep their order
            bodies = bodies.take(order)
            encoded = pc.run_end_encode(queues.take(order))
            ends = encoded.run_ends.to_pylist()
            runs = list(zip(encoded.values.to_pylist(), [0] + ends[:-1], ends))
        positions = None
        if prefix is not None:
            offsets = _counting(len(bodies)) if order is None else order.cast(pa.int64())
            positions = pc.add(offsets, pa.scalar(first_row, pa.int64()))  # offset 0
        rows = RowBatch(bodies, encode_rows(bodies, prefix, positions), order, first_row, prefix)
        chunks = [Chunk(queue, start, min(start + size, stop))
                  for queue, begin, stop in runs for start in range(begin, stop, size)]
        for i in range(0, len(chunks), PIPELINE):
            self._send(client, encoder, rows, chunks[i:i + PIPELINE], partition)

    def _send(self, client, encoder: AddJobsEncoder, rows: RowBatch, chunks: list[Chunk],
              partition: int) -> None:
        """ADDJOBS for ``chunks`` in one round trip; a refused job fails the
        task. Jobs a leaving node refused go to another node; jobs answered
        -PENDING (their DEDUPID's first ADDJOB, say a failed attempt's or a
        speculative copy's, still waits for replicas) go again, every few ms
        for up to ``addjob.pending_wait()`` seconds."""
        data: list[Any] = []
        for chunk in chunks:
            data.append(encoder.head(chunk.queue, chunk.stop - chunk.start))
            data.append(_wire_bytes(rows.words.slice(chunk.start, chunk.stop - chunk.start)))
        errors: dict[int, tuple[Chunk, ResponseError]] = {}
        for chunk, reply in zip(chunks, client.pipeline_encoded(data, len(chunks))):
            if isinstance(reply, ResponseError):  # the whole command: every row of it
                errors.update((i, (chunk, reply)) for i in range(chunk.start, chunk.stop))
            elif not all(type(r) is bytes for r in reply):
                errors.update((chunk.start + j, (chunk, r)) for j, r in enumerate(reply)
                              if isinstance(r, ResponseError))
        leaving = [i for i, (_, error) in errors.items() if is_leaving(error)]
        if leaving:
            self._resend(client, rows, leaving, errors)
        pending = [i for i, (_, error) in errors.items() if is_pending(error)]
        if pending:
            deadline = time.monotonic() + self.addjob.pending_wait()
            pause = 0.005
            while pending and time.monotonic() < deadline:
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, 0.25)
                self._resend(client, rows, pending, errors)
                pending = [i for i in pending if i in errors and is_pending(errors[i][1])]
        if errors:
            i = min(errors, key=rows.row)
            chunk, error = errors[i]
            raise DisqueWriteError(
                "ADDJOBS refused row %d of partition %d (queue %r, body %s): %s%s"
                % (rows.row(i), partition, chunk.queue, _preview(rows.bodies[i].as_py()),
                   error, "" if len(errors) == 1 else
                   " (and %d more jobs of the same round trip)" % (len(errors) - 1)))

    def _resend(self, client, rows: RowBatch, which: list[int],
                errors: dict[int, tuple[Chunk, ResponseError]]) -> None:
        """Add rows ``which`` again (``add_many`` takes them to another node if
        this one is leaving); ``errors`` keeps the refusals that remain."""
        by_queue: dict[str, list[int]] = {}
        for i in which:
            by_queue.setdefault(errors[i][0].queue, []).append(i)
        options = self.addjob.keywords()
        for queue, indexes in by_queue.items():
            bodies = [rows.bodies[i].as_py() for i in indexes]
            tokens = None if rows.prefix is None else [rows.token(i) for i in indexes]
            replies = client.add_many(queue, bodies, dedupids=tokens, **options)
            for i, reply in zip(indexes, replies):
                if isinstance(reply, ResponseError):
                    errors[i] = (errors[i][0], reply)
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
