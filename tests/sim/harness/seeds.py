"""Reproducible seeded runs.

Every simulated scenario is a function of one integer seed. Tests take
their seeds from ``seeds(name, count)``:

* ``SIM_SEED=1234`` runs only that seed (to replay a failure);
* ``SIM_SEEDS=1000`` changes how many seeds each randomized test runs;
* ``SIM_BASE_SEED=99`` shifts the seed range (to explore new histories);
* ``SIM_TRACE=1`` prints every connection, message and crash to stderr.

``replay_hint`` is appended to every failure so the report says how to
re-run exactly the failing history.
"""

from __future__ import annotations

import os
import zlib


def seeds(name: str, count: int) -> list[int]:
    """The seeds a test runs (distinct per test name, stable across runs)."""
    forced = os.environ.get("SIM_SEED")
    if forced:
        return [int(s) for s in forced.split(",")]
    count = int(os.environ.get("SIM_SEEDS", count))
    base = int(os.environ.get("SIM_BASE_SEED", 0)) + zlib.crc32(name.encode()) % 100_000 * 1000
    return [base + i for i in range(count)]


def replay_hint(test_id: str, seed: int) -> str:
    """How to re-run exactly one failing history (``test_id``: path::function)."""
    return ("seed %d -- re-run with: SIM_SEED=%d .venv/bin/python -m pytest '%s' "
            "(add SIM_TRACE=1 -s for a full event trace)" % (seed, seed, test_id))
