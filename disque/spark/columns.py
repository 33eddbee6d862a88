"""Column sets of the Disque formats, and Arrow batches built to Spark's exact schema."""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (ArrayType, BinaryType, DataType, LongType, StringType,
                               StructField, StructType)

# What the streaming reader yields, and the default schema of format("disque").
STREAM_FIELDS: dict[str, DataType] = {
    "queue": StringType(),
    "id": StringType(),
    "body": BinaryType(),
    "nacks": LongType(),
    "additional_deliveries": LongType(),
}

# The batch (snapshot) reader fills any of these, chosen with .schema(...).
SNAPSHOT_FIELDS: dict[str, DataType] = {
    **STREAM_FIELDS,
    "state": StringType(),
    "repl": LongType(),
    "ttl": LongType(),
    "ctime": LongType(),
    "delay": LongType(),
    "retry": LongType(),
    "node": StringType(),
}

# format("disque-aof"): one row per AOF record. `body` only with option body=true.
AOF_FIELDS: dict[str, DataType] = {
    "file": StringType(),
    "record": StringType(),
    "time": LongType(),
    "id": StringType(),
    "queue": StringType(),
    "ctime": LongType(),
    "ctime_ms": LongType(),
    "body_length": LongType(),
    "body": BinaryType(),
    "repl": LongType(),
    "etime": LongType(),
    "delay": LongType(),
    "retry": LongType(),
    "nacks": LongType(),
    "additional_deliveries": LongType(),
    "flags": LongType(),
    "nodes_delivered": ArrayType(StringType()),
    "state": StringType(),
    "reason": StringType(),
}


def struct(fields: Mapping[str, DataType], names: Sequence[str] | None = None) -> StructType:
    """A StructType of ``names`` (default: all) taken from ``fields``."""
    return StructType([StructField(n, fields[n], True) for n in (names or list(fields))])


def check_schema(schema: StructType, allowed: Mapping[str, DataType], what: str) -> None:
    """Reject a user schema asking for columns (or types) the reader cannot produce."""
    for field in schema.fields:
        expected = allowed.get(field.name)
        if expected is None:
            raise ValueError("%s cannot produce column %r; known columns: %s"
                             % (what, field.name, ", ".join(allowed)))
        if type(field.dataType) is not type(expected):
            raise ValueError("%s column %r must be %s, not %s"
                             % (what, field.name, expected.simpleString(),
                                field.dataType.simpleString()))


class BatchBuilder:
    """Accumulate column values and emit RecordBatches matching a Spark schema exactly."""

    def __init__(self, schema: StructType) -> None:
        self.schema = schema
        self.names = schema.fieldNames()
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")

    def batch(self, columns: Mapping[str, Sequence[Any]], length: int) -> pa.RecordBatch:
        """A RecordBatch from ``columns`` (missing ones become nulls)."""
        arrays = []
        for name, field in zip(self.names, self.arrow_schema):
            values = columns.get(name)
            if values is None:
                arrays.append(pa.nulls(length, type=field.type))
            else:
                arrays.append(pa.array(values, type=field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)


def queue_text(queue: str) -> str:
    """A queue name Arrow accepts: the client decodes with surrogateescape, Arrow wants UTF-8."""
    try:
        queue.encode("utf-8")
        return queue
    except UnicodeEncodeError:
        return queue.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def queue_column(queues: list[bytes]) -> list[bytes] | list[str]:
    """Raw queue names as Arrow string values: as they are when UTF-8 (the usual case, checked
    once per distinct name), else decoded with replacement characters like ``queue_text``."""
    names = {q: q.decode("utf-8", "replace") for q in set(queues)}
    if all(text.encode("utf-8") == raw for raw, text in names.items()):
        return queues
    return [names[q] for q in queues]


def ipc_bytes(table: pa.Table) -> bytes:
    """``table`` as one Arrow IPC stream (what a partition carries to an executor)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def ipc_batches(data: bytes) -> Iterator[pa.RecordBatch]:
    """The record batches of an Arrow IPC stream made by ``ipc_bytes``."""
    yield from pa.ipc.open_stream(data)
