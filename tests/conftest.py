"""Shared fixtures: real servers on free loopback ports, always stopped."""

from __future__ import annotations

import shutil

import pytest

from tests.support.process import DisqueProcess


@pytest.fixture
def server_factory(tmp_path):
    """Start disque-server processes; every one is stopped at teardown."""
    started: list[DisqueProcess] = []

    def start(config: str = "", name: str | None = None, **kwargs) -> DisqueProcess:
        proc = DisqueProcess(tmp_path / (name or "node%d" % len(started)), config=config, **kwargs)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def server(server_factory) -> DisqueProcess:
    """One fresh node."""
    return server_factory()


@pytest.fixture
def redis_cli():
    """Path of the real redis-cli binary (installed by .ci/run)."""
    path = shutil.which("redis-cli")
    if path is None:
        pytest.fail("redis-cli is not installed (apt-get install redis-tools)")
    return path
