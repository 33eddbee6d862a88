"""Fixtures of the HTTP side's unit tests."""

import pytest

from disque.config import Config
from disque.server import Server


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A server with a dashboard (not started): its HTTP side is built on it."""
    monkeypatch.chdir(tmp_path)
    config = Config()
    config.cluster_bus_port = 0
    config.metrics_port = 9711
    return Server(config, ["disque-server"])
