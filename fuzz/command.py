"""Fuzz target ``command``: command argument parsing and execution
(``Node.call`` with random argv, time moving, clients leaving, a peer's
bus messages), on one in-process node per input.

The steps are those of tests/unit/test_node_fuzz.py's ``Fuzzer``, with its
choices read from the input (``ByteRandom``) instead of a seeded generator,
so coverage-guided mutation steers them: every command name of the table,
their options and nonsense in between. Nothing may escape ``node.call``,
every reply must be one well-formed RESP value, and the node's bookkeeping
(queues, timers, blocked clients, memory accounting, scan indexes) must be
consistent after the input's steps. ``python -m fuzz.command --runs N``.
"""

from __future__ import annotations

import sys

from fuzz.common import ByteRandom, Target, main

MAX_STEPS = 48


def _seeds() -> list[bytes]:
    # Arbitrary bytes are as good a start as any: each one is a sequence of
    # choices. Runs of one value repeat one kind of step.
    return [bytes(range(256)), bytes(range(255, -1, -1)), b"\x00" * 64, b"\x01" * 64,
            b"\x10\x20\x30\x40" * 40, b"\xff\x00" * 80, bytes(i * 37 % 256 for i in range(300))]


def build() -> Target:
    """Node.call with random argv as a fuzz target."""
    from fuzz.common import trap_errors
    from tests.unit.test_node_fuzz import Fuzzer

    trap = trap_errors()

    def one_input(data: bytes) -> None:
        if not data:
            return
        rng = ByteRandom(data[1:])
        fuzzer = Fuzzer(rng, with_peer=bool(data[0] & 1))
        steps = 0
        while not rng.exhausted and steps < MAX_STEPS:
            fuzzer.step()
            steps += 1
        fuzzer.check()
        trap.check()

    return Target("command", one_input, _seeds, max_len=1024)


if __name__ == "__main__":
    sys.exit(main(build))
