"""Cluster fixtures: real multi-node clusters, every node always stopped."""

from __future__ import annotations

import pytest

from tests.support.cluster import Cluster


def _factory(base_dir, started: list):
    def start(size: int, config: str = "", appendonly: bool = False, join: bool = True,
              **kwargs) -> Cluster:
        cluster = Cluster(base_dir / ("cluster%d" % len(started)), size, config=config,
                          appendonly=appendonly, **kwargs)
        started.append(cluster)  # before start(): a half-started cluster is stopped too
        return cluster.start(join=join)
    return start


@pytest.fixture
def cluster_factory(tmp_path):
    """Start clusters of real processes; every node is stopped at teardown."""
    started: list[Cluster] = []
    yield _factory(tmp_path, started)
    for cluster in started:
        cluster.stop_all()


@pytest.fixture(scope="module")
def module_cluster_factory(tmp_path_factory):
    """Like ``cluster_factory`` for clusters shared by the tests of one module
    (only for tests that leave every node running and the cluster healthy)."""
    started: list[Cluster] = []
    yield _factory(tmp_path_factory.mktemp("shared"), started)
    for cluster in started:
        cluster.stop_all()
