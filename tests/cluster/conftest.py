"""Cluster fixtures: real multi-node clusters, every node always stopped and
judged at teardown (an unexpected exit or error log line fails the test)."""

from __future__ import annotations

import pytest

from tests.support.cluster import Cluster
from tests.support.teardown import expected_log, fail_on


def _factory(base_dir, started: list, patterns: tuple[str, ...] = (), shared: bool = False):
    def start(size: int, config: str = "", appendonly: bool = False, join: bool = True,
              **kwargs) -> Cluster:
        cluster = Cluster(base_dir / ("cluster%d" % len(started)), size, config=config,
                          appendonly=appendonly, **kwargs)
        cluster.expect_log(*patterns)
        for node in cluster.nodes:
            node.shared = shared
        started.append(cluster)  # before start(): a half-started cluster is stopped too
        return cluster.start(join=join)
    return start


@pytest.fixture
def cluster_factory(tmp_path, request):
    """Start clusters of real processes; every node is stopped and judged at teardown."""
    started: list[Cluster] = []
    yield _factory(tmp_path, started, expected_log(request))
    fail_on([problem for cluster in started for problem in cluster.verify()])


@pytest.fixture(scope="module")
def module_cluster_factory(tmp_path_factory):
    """Like ``cluster_factory`` for clusters shared by the tests of one module
    (only for tests that leave every node running and the cluster healthy);
    judged once the module's last test is done."""
    started: list[Cluster] = []
    yield _factory(tmp_path_factory.mktemp("shared"), started, shared=True)
    fail_on([problem for cluster in started for problem in cluster.verify()])
