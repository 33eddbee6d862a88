"""What every part of a node reads and only the node's entry points write.

The node sets ``now`` once per input (a command, a bus frame, a timer
tick), so every rule applied for that input sees the same time, and the
core never reads a clock of its own. The random source is the node's
injected one, which is how the simulator replays a run from a seed.
"""

from __future__ import annotations

import random
from typing import Final

JITTER_RANGE_MS: Final = 500  # uniform in [-250, +249]


def ms_from_seconds(seconds: int) -> int:
    """``seconds * 1000``, written as shifts. The compiled core multiplies
    in machine words only when both factors are below 2^30, which a Unix
    time in seconds is not, and goes through Python ints otherwise;
    shifts and subtractions are checked exactly and stay in machine words."""
    return (seconds << 10) - (seconds << 4) - (seconds << 3)


class Runtime:
    """The current time, the random source and this node's own ID."""

    __slots__ = ("now", "rng", "random", "node_id", "self_delivered")

    def __init__(self, node_id: bytes, rng: random.Random, now: int) -> None:
        self.now = now
        self.rng = rng
        self.random = rng.random
        self.node_id = node_id
        # The nodes-delivered tuple of every local-only job: shared, not one per job.
        self.self_delivered: tuple[bytes, ...] = (node_id,)

    def set_node_id(self, node_id: bytes) -> None:
        """Adopt a new ID (CLUSTER RESET HARD)."""
        self.node_id = node_id
        self.self_delivered = (node_id,)

    def jitter(self) -> int:
        """A random offset that keeps nodes from requeueing in lockstep."""
        return int(self.random() * JITTER_RANGE_MS) - JITTER_RANGE_MS // 2
