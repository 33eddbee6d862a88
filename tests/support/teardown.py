"""How fixtures judge the servers they started, once the test is done."""

from __future__ import annotations

import pytest


def expected_log(request) -> tuple[str, ...]:
    """The regexes of every ``expect_log`` marker on the requesting test."""
    return tuple(p for mark in request.node.iter_markers("expect_log") for p in mark.args)


def fail_on(problems: list[str]) -> None:
    """Fail the current test (from a fixture's teardown) if a server misbehaved."""
    if problems:
        pytest.fail("servers misbehaved:\n" + "\n".join(problems), pytrace=False)
