"""Spark connectors for Disque (needs the ``spark`` extra: pyspark, pyarrow and
redis-py).

* ``format("disque")``: write DataFrames as jobs (batch and streaming), read a
  queue as an at-least-once stream, or take a snapshot of what the nodes hold.
* ``format("disque-aof")``: AOF files as a DataFrame of records.
* ``disque-pipeline report``: per-queue statistics from AOF files.

Installing the package makes both formats known to Spark (the top-level
``pyspark_disque*`` modules); ``register(spark)`` does it explicitly.
"""

from __future__ import annotations


def register(spark) -> None:
    """Register ``disque`` and ``disque-aof`` with a SparkSession."""
    from disque.spark.aofsource import DisqueAofDataSource
    from disque.spark.source import DisqueDataSource

    spark.dataSource.register(DisqueDataSource)
    spark.dataSource.register(DisqueAofDataSource)
