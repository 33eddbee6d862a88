"""Job's three counters share one slot (``Job.counts``): each reads back
what was set, the others untouched, and wraps at 16 bits as the original's
uint16 fields did."""

from __future__ import annotations

import pytest
from hypothesis import given, seed
from hypothesis import strategies as st

from disque.jobs.job import Job
from tests.support.seeds import run_seed

pytestmark = pytest.mark.seeded

COUNTERS = ("nacks", "adeliv", "gc_retry")


def new_job() -> Job:
    return Job(b"D-a1b2c3d4-AAAAAAAAAAAAAAAAAAAAAAAA-05a1", b"q", b"b", 1, 0, 0, 0, 60)


@seed(run_seed())
@given(st.lists(st.tuples(st.sampled_from(COUNTERS), st.integers(0, 2**20)), max_size=30))
def test_counters_are_independent_and_16_bit(writes):
    job = new_job()
    model = dict.fromkeys(COUNTERS, 0)
    for name, value in writes:
        setattr(job, name, value)
        model[name] = value & 0xFFFF
        assert {n: getattr(job, n) for n in COUNTERS} == model


def test_increments_wrap_like_uint16():
    job = new_job()
    job.nacks = 0xFFFF
    job.nacks += 1
    job.adeliv += 1
    assert (job.nacks, job.adeliv, job.gc_retry) == (0, 1, 0)
