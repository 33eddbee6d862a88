"""One seed per test run for the randomized real-process tests.

``DISQUE_TEST_SEED=<n>`` replays a run; otherwise a fresh seed is drawn
once per run. A failing test that used it (the ``run_seed`` fixture, or the
``seeded`` marker for Hypothesis tests decorated with ``@seed(run_seed())``)
shows the seed and the command that replays it (tests/conftest.py).
"""

from __future__ import annotations

import os
import random

ENV = "DISQUE_TEST_SEED"
_seed: int | None = None


def run_seed() -> int:
    """This run's seed: ``$DISQUE_TEST_SEED`` or one drawn once per run."""
    global _seed
    if _seed is None:
        text = os.environ.get(ENV, "")
        _seed = int(text) if text else random.SystemRandom().randrange(1 << 32)
    return _seed


def replay_hint(nodeid: str) -> str:
    """The command that runs ``nodeid`` again with this run's seed."""
    return "seed %d; replay: %s=%d pytest '%s'" % (run_seed(), ENV, run_seed(), nodeid)
