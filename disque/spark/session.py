"""A local SparkSession set up the way this machine needs it (shared/spark-notes.md)."""

from __future__ import annotations

import os
import sys


def local_session(app: str = "disque", master: str = "local[2]", register: bool = True,
                  conf: dict[str, str] | None = None):
    """A SparkSession on loopback, quiet, whose Python workers run this interpreter."""
    # Workers must run the interpreter that has our packages, not whatever python3 is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               # A busy machine can take longer than the default 15 s to start a worker.
               .config("spark.python.authenticate.socketTimeout", "120s"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if register:
        from disque.spark import register as register_formats
        register_formats(spark)
    return spark
