"""The skiplist's serving order with priorities (docs/priorities.md): a model
test against a sorted list keyed by (priority descending, ctime, id), and
the fast paths that keep jobs without PRIORITY as cheap as before.

Hypothesis draws from this run's seed: a failure prints it and the command
that replays it (tests/support/seeds.py).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from disque.build import COMPILED, core_build
from disque.jobs.job import DEFAULT_PRIORITY, MAX_PRIORITY, Job
from disque.queues.skiplist import MAX_LEVEL, SkipList, _before, _next
from tests.support.seeds import run_seed

pytestmark = pytest.mark.seeded

_TALL = "048DHLPTXdhlptx"  # low two bits 0: tall towers
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def make_job(random_part: str, ctime: int, priority: int = DEFAULT_PRIORITY) -> Job:
    job_id = ("D-a1b2c3d4-" + random_part + "-05a1").encode()
    assert len(job_id) == 40
    job = Job(job_id, b"q", b"", 1, ctime, 0, 0, 1)
    job.priority = priority
    return job


def key(job: Job) -> tuple:
    """The model's order: higher priority first, then oldest, then smallest ID."""
    return -job.priority, job.ctime, job.id


def chain(sl: SkipList, level: int) -> list[Job]:
    item = sl._head[level]
    out = []
    while item is not None:
        out.append(item)
        item = _next(item, level)
    return out


_random_part = st.text(alphabet=st.sampled_from(_TALL) | st.sampled_from(_ALPHABET),
                       min_size=24, max_size=24)
_priority = st.integers(0, MAX_PRIORITY) | st.just(DEFAULT_PRIORITY)


@seed(run_seed())
class PrioritySkipListModel(RuleBasedStateMachine):
    """Inserts (anywhere, after the tail, at the tail's priority), removes,
    pops and membership tests in any order, mirrored on a sorted list."""

    def __init__(self) -> None:
        super().__init__()
        self.sl = SkipList()
        self.model: list[Job] = []
        self.ids: set[bytes] = set()

    def _insert(self, job: Job) -> None:
        if job.id in self.ids:
            return
        self.ids.add(job.id)
        self.sl.insert(job)
        self.model.append(job)
        self.model.sort(key=key)

    @rule(part=_random_part, ctime=st.integers(0, 6), priority=_priority)
    def insert(self, part, ctime, priority):
        self._insert(make_job(part, ctime, priority))

    @rule(part=_random_part, priority=_priority)
    def insert_newest(self, part, priority):
        # A new job: a ctime above all, any priority (the fast path when it
        # is not above the tail's, a search when it is).
        ctime = max((j.ctime for j in self.model), default=0) + 1
        self._insert(make_job(part, ctime, priority))

    @precondition(lambda self: self.model)
    @rule(part=_random_part, older=st.booleans())
    def insert_at_tail_priority(self, part, older):
        # Same priority as the tail: after it when newer (the fast path),
        # somewhere inside its band when older (a requeued job).
        tail = self.model[-1]
        ctime = tail.ctime - 1 if older else tail.ctime + 1
        self._insert(make_job(part, ctime, tail.priority))

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove(self, data):
        job = data.draw(st.sampled_from(self.model))
        self.sl.remove(job)
        self.model.remove(job)
        self.ids.discard(job.id)
        assert job._sl is None and job._slprev is None and job._slup is None

    @rule()
    def pop_first(self):
        job = self.sl.pop_first()
        if not self.model:
            assert job is None
            return
        assert job is self.model.pop(0)
        self.ids.discard(job.id)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), priority=_priority)
    def contains(self, data, priority):
        job = data.draw(st.sampled_from(self.model))
        assert job in self.sl
        # Same ctime, another priority or ID: not in the list.
        outsider = make_job("Z" * 24, job.ctime, priority)
        if outsider.id not in self.ids:
            assert outsider not in self.sl
        twin = make_job(job.id[11:35].decode(), job.ctime, job.priority)
        assert twin not in self.sl  # same key, another object

    @rule()
    def clear_sometimes(self):
        if len(self.model) > 30:
            self.sl.clear()
            self.model.clear()
            self.ids.clear()

    @invariant()
    def same_order_both_ways(self):
        assert len(self.sl) == len(self.model)
        assert list(self.sl.iter_from_head()) == self.model
        assert list(self.sl.iter_from_tail()) == self.model[::-1]
        assert self.sl.first() is (self.model[0] if self.model else None)
        assert self.sl.last() is (self.model[-1] if self.model else None)

    @invariant()
    def every_level_is_sorted(self):
        for level in range(MAX_LEVEL):
            items = chain(self.sl, level)
            assert items == sorted(items, key=key)
            assert self.sl._last[level] is (items[-1] if items else None)


PrioritySkipListModel.TestCase.settings = settings(max_examples=60, stateful_step_count=60,
                                                   deadline=None)
TestPrioritySkipListModel = PrioritySkipListModel.TestCase


def test_higher_priority_first_then_oldest():
    sl = SkipList()
    old5 = make_job("A" * 24, 1, 5)
    old0 = make_job("B" * 24, 2, 0)
    new9 = make_job("C" * 24, 3, 9)
    new5 = make_job("D" * 24, 4, 5)
    newer9 = make_job("E" * 24, 5, 9)
    for job in (old5, old0, new9, new5, newer9):
        sl.insert(job)
    assert list(sl.iter_from_head()) == [new9, newer9, old5, new5, old0]
    assert list(sl.iter_from_tail()) == [old0, new5, old5, newer9, new9]
    assert [sl.pop_first() for _ in range(5)] == [new9, newer9, old5, new5, old0]


def test_before_is_the_serving_order():
    a = make_job("A" * 24, 10, 9)
    b = make_job("B" * 24, 1, 8)
    assert _before(a, b) and not _before(b, a)  # priority beats age
    c = make_job("C" * 24, 10, 9)
    assert _before(a, c) and not _before(c, a)  # same priority and ctime: the ID
    d = make_job("A" * 24, 9, 9)
    assert _before(d, a)  # same priority: the older


def test_remove_and_contains_find_a_job_in_its_band():
    # Tall towers everywhere, so remove must search every level of the
    # right band (a (ctime, id) search would look in the wrong place).
    sl = SkipList()
    jobs = [make_job("D" * 20 + "%04d" % i, 100 - i, i % 10) for i in range(40)]
    for job in jobs:
        sl.insert(job)
    for job in jobs[::3]:
        assert job in sl
        sl.remove(job)
        assert job not in sl
    rest = sorted((j for k, j in enumerate(jobs) if k % 3), key=key)
    assert list(sl.iter_from_head()) == rest
    for level in range(MAX_LEVEL):
        assert chain(sl, level) == sorted(chain(sl, level), key=key)


def test_large_random_workload_stays_sorted(run_seed):
    rng = random.Random(run_seed)
    sl = SkipList()
    model = []
    for i in range(3000):
        part = "".join(rng.choice(_ALPHABET) for _ in range(24))
        job = make_job(part, rng.randrange(200), rng.choice((5, 5, 5, rng.randrange(10))))
        sl.insert(job)
        model.append(job)
        if i % 3 == 0:
            sl.remove(model.pop(rng.randrange(len(model))))
    model.sort(key=key)
    assert list(sl.iter_from_head()) == model
    assert [sl.pop_first() for _ in range(len(model))] == model


@pytest.mark.skipif(core_build() == COMPILED,
                    reason="patches the pure-Python SkipList (make test-pure runs it)")
@pytest.mark.parametrize("priorities", [
    [5] * 50,  # no PRIORITY at all: today's jobs
    [9] * 50,  # one priority, whichever
    [9] * 10 + [7] * 10 + [5] * 10 + [0] * 20,  # each new job no higher than the tail's
])
def test_appending_in_order_never_searches(monkeypatch, priorities):
    """New jobs of the tail's priority (every job without PRIORITY) or a
    lower one go after the tail without a search, as before priorities."""
    searches = []
    for name in ("_predecessors", "_last_before"):  # the two searches
        original = getattr(SkipList, name)

        def counting(self, item, original=original):
            searches.append(item)
            return original(self, item)

        monkeypatch.setattr(SkipList, name, counting)
    sl = SkipList()
    jobs = [make_job("%024d" % i, 1000 + i, p) for i, p in enumerate(priorities)]
    for job in jobs:
        sl.insert(job)
    while sl:
        sl.pop_first()
    assert searches == []
    # A job above the tail's priority is the one new job that searches.
    sl.insert(make_job("Y" * 24, 5000, 4))
    sl.insert(make_job("Z" * 24, 5001, 6))  # level 1: _last_before
    sl.insert(make_job("D" * 24, 5002, 7))  # a tall tower: _predecessors
    assert [j.ctime for j in searches] == [5001, 5002]
