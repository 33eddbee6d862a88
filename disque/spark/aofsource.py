"""``format("disque-aof")``: AOF files as a DataFrame of records, one partition per file.

    spark.read.format("disque-aof").load("/var/lib/disque/*.aof")

Options: ``path`` (globs, comma-separated; or the argument of load()),
``body`` (true: include job bodies; default false, only ``body_length``),
``allowTruncated`` (default true: skip a partial last record).
"""

from __future__ import annotations

import glob
import os
from typing import Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from disque.spark.aoflog import read_records
from disque.spark.columns import AOF_FIELDS, BatchBuilder, check_schema, struct
from disque.spark.options import OptionError, Options

ROWS_PER_BATCH = 65536


def expand_paths(patterns: list[str]) -> list[str]:
    """Files matching the globs (a plain directory means every ``*.aof`` in it), sorted."""
    files: set[str] = set()
    for pattern in patterns:
        if os.path.isdir(pattern):
            pattern = os.path.join(pattern, "*.aof")
        matched = glob.glob(pattern)
        if not matched and not glob.has_magic(pattern) and os.path.isfile(pattern):
            matched = [pattern]
        files.update(os.path.abspath(m) for m in matched if os.path.isfile(m))
    return sorted(files)


def aof_schema(with_body: bool) -> StructType:
    """The default schema: every record field, ``body`` only when asked for."""
    return struct(AOF_FIELDS, [n for n in AOF_FIELDS if with_body or n != "body"])


class AofFilePartition(InputPartition):
    """One AOF file."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class DisqueAofReader(DataSourceReader):
    """Parses each file on an executor and yields Arrow batches."""

    def __init__(self, schema: StructType, options: Any) -> None:
        opts = Options(options)
        check_schema(schema, AOF_FIELDS, "read.format('disque-aof')")
        self.schema = schema
        self.patterns = opts.list("path") + opts.list("paths")
        if not self.patterns:
            raise OptionError("format('disque-aof') needs a path: .load('dir/*.aof')")
        self.with_body = "body" in schema.fieldNames()
        self.allow_truncated = opts.bool("allowTruncated", True)

    def partitions(self) -> list[InputPartition]:
        files = expand_paths(self.patterns)
        if not files:
            raise FileNotFoundError("no AOF file matches %s" % ", ".join(self.patterns))
        return [AofFilePartition(f) for f in files]

    def read(self, partition: AofFilePartition) -> Iterator[Any]:
        builder = BatchBuilder(self.schema)
        for columns in read_records(partition.path, self.with_body, ROWS_PER_BATCH,
                                    self.allow_truncated):
            yield builder.batch(columns, len(columns["record"]))


class DisqueAofDataSource(DataSource):
    """``format("disque-aof")``: read Disque AOF files (docs/aof-format.md)."""

    @classmethod
    def name(cls) -> str:
        return "disque-aof"

    def schema(self) -> StructType:
        return aof_schema(Options(self.options).bool("body", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        return DisqueAofReader(schema, self.options)
