"""The short fuzz run of ``make test`` (docs/security.md, "Fuzzing"): each
fuzz target replays its stored corpus (fuzz/corpus/<name>), then runs a
few thousand new inputs mutated from it with this run's seed; the property
tests run with a few examples each. ``make fuzz`` is the long run."""

from __future__ import annotations

import logging

import pytest

from fuzz import aof, bus, command, properties, resp
from fuzz.common import corpus_inputs, mutate, replay, run_random

# New inputs per target: a few seconds each on the pure-Python core.
NEW_INPUTS = {"resp": 5000, "bus": 3000, "command": 3000, "aof": 3000}
PROPERTY_EXAMPLES = 25


@pytest.fixture(autouse=True)
def disque_logger():
    """The targets trap what the node logs: put its logger back afterwards."""
    log = logging.getLogger("disque")
    saved = log.handlers[:], log.level, log.propagate
    yield
    log.handlers[:], log.level, log.propagate = saved


@pytest.mark.parametrize("module", [resp, command, bus, aof], ids=lambda m: m.__name__)
def test_target_replays_its_corpus_and_survives_new_inputs(module, run_seed):
    target = module.build()
    corpus = corpus_inputs(target)
    assert target.corpus.is_dir() and len(corpus) >= 5, "no stored corpus for %s" % target.name
    assert replay(target, corpus) == len(corpus)
    count = NEW_INPUTS[target.name]
    assert run_random(target, count, run_seed, corpus) == count


@pytest.mark.parametrize("name", sorted(properties.PROPERTIES))
def test_property(name):
    properties.PROPERTIES[name](PROPERTY_EXAMPLES)


def test_a_crash_names_its_input_and_seed():
    """The harness reports what it cannot survive, with what replays it."""
    def fragile(data: bytes) -> None:
        if b"\xff" in data:
            raise KeyError("boom")

    target = resp.build()
    target.one_input = fragile
    with pytest.raises(Exception, match=r"crashed on input .* seed 7, input \d+"):
        run_random(target, 10_000, 7, [b"\xfe" * 20])


def test_mutations_stay_within_the_target_size():
    import random

    rng = random.Random(3)
    pool = [b"*1\r\n$4\r\nPING\r\n", b"x" * 100]
    sizes = {len(mutate(rng, rng.choice(pool), pool, 64, [b"$"])) for _ in range(2000)}
    assert max(sizes) <= 64 and len(sizes) > 20
