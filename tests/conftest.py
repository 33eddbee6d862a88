"""Shared fixtures: real servers on free loopback ports, always stopped and
judged (tests/support/process.py ``verify``): a server that exited badly or
logged an unexpected error fails the test that started it."""

from __future__ import annotations

import shutil

import pytest

from disque.build import core_build
from tests.support.process import DisqueProcess, unverified
from tests.support.seeds import replay_hint, run_seed as _run_seed
from tests.support.teardown import expected_log, fail_on


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "expect_log(*patterns): regexes of error log entries the servers "
        "started by this test are expected to write")
    config.addinivalue_line(
        "markers", "seeded: the test draws from this run's seed (tests/support/seeds.py)")


def pytest_report_header(config):
    """Which build of the core these tests run (make test-pure forces pure Python)."""
    return "disque core: %s" % core_build()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test that drew from the run's seed says how to replay it."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and ("run_seed" in getattr(item, "fixturenames", ())
                          or item.get_closest_marker("seeded")):
        report.sections.append(("random seed", replay_hint(item.nodeid)))


@pytest.fixture
def run_seed() -> int:
    """This run's seed (``DISQUE_TEST_SEED`` replays it); see tests/support/seeds.py."""
    return _run_seed()


@pytest.fixture(autouse=True)
def _servers_behaved(request):
    """Judge every process the test started itself (not through a fixture that
    judges its own), stopping any it left running."""
    before = set(map(id, unverified()))
    yield
    patterns = expected_log(request)
    problems = []
    for proc in unverified():
        if id(proc) in before or proc.shared:
            continue
        proc.expect_log(*patterns)
        problems += proc.verify()
    fail_on(problems)


@pytest.fixture
def server_factory(tmp_path, request):
    """Start disque-server processes; every one is stopped and judged at teardown."""
    started: list[DisqueProcess] = []

    def start(config: str = "", name: str | None = None, **kwargs) -> DisqueProcess:
        proc = DisqueProcess(tmp_path / (name or "node%d" % len(started)), config=config, **kwargs)
        proc.expect_log(*expected_log(request))
        started.append(proc)
        return proc.start()

    yield start
    fail_on([problem for proc in started for problem in proc.verify()])


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
