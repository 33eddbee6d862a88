"""Simulation tests: a failing seeded scenario says how to replay it."""

from __future__ import annotations

import pytest

from tests.sim.harness.seeds import replay_hint


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    callspec = getattr(item, "callspec", None)
    seed = callspec.params.get("seed") if callspec is not None else None
    if seed is not None:
        test_id = "%s::%s" % (item.nodeid.split("::")[0], item.originalname)
        report.sections.append(("simulation seed", replay_hint(test_id, seed)))
