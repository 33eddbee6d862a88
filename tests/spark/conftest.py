"""One local[2,4] SparkSession for the whole test session, on loopback and quiet:
two threads, and a failed task is tried up to 4 times, as on a cluster (plain
local[2] never retries one; tests/spark/test_writer_dedup.py needs retries).

Every test module here sets ``pytestmark = pytest.mark.spark``. ``make test``
installs the ``spark`` extra and ``.ci/run`` installs Java, so a missing
piece is a failure, not a skip.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    """The SparkSession (created once; workers run this interpreter)."""
    if shutil.which("java") is None:
        pytest.fail("Java is not installed (apt-get install openjdk-17-jre-headless)")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from disque.spark.session import local_session

    session = local_session("disque-tests", master="local[2,4]",
                            conf={"spark.sql.streaming.stopTimeout": "30s"})
    yield session
    session.stop()


@pytest.fixture
def node(server_factory):
    """One fresh disque-server and a client for it: (process, "127.0.0.1:port", client)."""
    from disque.client import DisqueClient

    proc = server_factory()
    address = "127.0.0.1:%d" % proc.port
    client = DisqueClient(address)
    yield proc, address, client
    client.close()


@pytest.fixture
def without_matplotlib(monkeypatch):
    """Imports of matplotlib fail, as when the charts extra is not installed
    (submodules imported earlier would still be found: they go too)."""
    imported = [name for name in sys.modules if name.startswith("matplotlib.")]
    for name in ["matplotlib", *imported]:
        monkeypatch.setitem(sys.modules, name, None)
