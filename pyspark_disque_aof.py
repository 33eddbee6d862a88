"""Makes ``spark.read.format("disque-aof")`` work once the package is installed.

Spark imports every top-level ``pyspark_*`` module and registers its
``DefaultSource`` under ``DefaultSource.name()``.
"""

from disque.spark.aofsource import DisqueAofDataSource as DefaultSource

__all__ = ["DefaultSource"]
