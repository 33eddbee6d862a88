"""A streaming source and a batch sink that cost nothing: what Spark alone
does with the stream reader's and the writer's shapes.

``bench.spark_bench`` runs the source next to ``readStream.format("disque")``,
with the same schema, read limit, partitions, trigger and sink, so the same
run shows how much of the reader's time is Spark's own (planning, offset and
commit logs, tasks, Arrow into rows). Its rows are slices of one Arrow batch
built once per Python worker; nothing is fetched or acknowledged. The sink
takes the writer's place in ``df.write``: the same Arrow batches reach its
Python worker, which only counts their rows.
"""

from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceStreamReader,
                                    InputPartition, WriterCommitMessage)
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from disque.spark.columns import STREAM_FIELDS, BatchBuilder, struct

NAME = "disque-bench-null"
BODY = b"x" * 64
_rows: pa.RecordBatch | None = None  # per worker process


def _rows_of(count: int, schema: StructType) -> pa.RecordBatch:
    """``count`` job-like rows, built once and sliced afterwards."""
    global _rows
    if _rows is None or _rows.num_rows < count:
        ids = ["D-00000000-%024d-0000" % i for i in range(count)]
        _rows = BatchBuilder(schema).batch(
            {"queue": ["bench"] * count, "id": ids, "body": [BODY] * count,
             "nacks": [0] * count, "additional_deliveries": [0] * count}, count)
    return _rows.slice(0, count)


class _Range(InputPartition):
    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


class _NullStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, schema: StructType, options: Any) -> None:
        self.schema = schema
        self.total = int(options["rows"])
        self.max_rows = int(options["maxJobsPerTrigger"])
        self.partition_count = int(options["numPartitions"])

    def initialOffset(self) -> dict:
        return {"row": 0}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        first = int(start["row"]) if start else 0
        step = limit.max_rows if isinstance(limit, ReadMaxRows) else self.max_rows
        return {"row": min(self.total, first + step)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        count = int(end["row"]) - (int(start["row"]) if start else 0)
        if count <= 0:
            return []
        size = -(-count // min(self.partition_count, count))
        return [_Range(min(size, count - i)) for i in range(0, count, size)]

    def read(self, partition: _Range) -> Iterator[pa.RecordBatch]:
        yield _rows_of(partition.count, self.schema)

    def commit(self, end: dict) -> None:
        pass


class _Rows(WriterCommitMessage):
    def __init__(self, count: int) -> None:
        self.count = count


class _NullWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Rows:
        return _Rows(sum(batch.num_rows for batch in iterator))


class NullSource(DataSource):
    """``format("disque-bench-null")``: options rows, maxJobsPerTrigger,
    numPartitions when read; a sink that drops every row when written to."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return struct(STREAM_FIELDS)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _NullStreamReader(schema, self.options)

    def writer(self, schema: StructType, overwrite: bool) -> _NullWriter:
        return _NullWriter()
