"""Makes ``spark.read.format("disque")`` work once the package is installed.

Spark imports every top-level ``pyspark_*`` module and registers its
``DefaultSource`` under ``DefaultSource.name()``.
"""

from disque.spark.source import DisqueDataSource as DefaultSource

__all__ = ["DefaultSource"]
