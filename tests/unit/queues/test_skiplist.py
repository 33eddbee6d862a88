"""Tests for disque/queues/skiplist.py: a model test against a sorted list
(spec: jobs-and-ids.md §5, queues ordered by (ctime, id))."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from disque.jobs.job import Job
from disque.queues.skiplist import MAX_LEVEL, SkipList, _level_of, _next

# Characters whose low two bits are 0 raise the level: mixing them in gives tall towers.
_TALL = "048DHLPTXdhlptx"
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def make_job(random_part: str, ctime: int) -> Job:
    job_id = ("D-a1b2c3d4-" + random_part + "-05a1").encode()
    assert len(job_id) == 40
    return Job(job_id, b"q", b"", 1, ctime, 0, 0, 1)


def key(job: Job) -> tuple:
    return job.ctime, job.id


_random_part = st.text(alphabet=st.sampled_from(_TALL) | st.sampled_from(_ALPHABET),
                       min_size=24, max_size=24)


class SkipListModel(RuleBasedStateMachine):
    """Every operation is mirrored on a plain sorted list."""

    def __init__(self) -> None:
        super().__init__()
        self.sl = SkipList()
        self.model: list[Job] = []
        self.ids: set[bytes] = set()

    @rule(part=_random_part, ctime=st.integers(0, 6))
    def insert(self, part, ctime):
        job = make_job(part, ctime)
        if job.id in self.ids:
            return
        self.ids.add(job.id)
        self.sl.insert(job)
        self.model.append(job)
        self.model.sort(key=key)

    @rule(part=_random_part)
    def insert_after_tail(self, part):
        # The append fast path: a ctime larger than everything present.
        ctime = (self.model[-1].ctime + 1) if self.model else 0
        self.insert(part, ctime)

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
        expected = self.model.pop(0)
        assert job is expected
        self.ids.discard(job.id)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def contains(self, data):
        job = data.draw(st.sampled_from(self.model))
        assert job in self.sl
        outsider = make_job("Z" * 24, job.ctime)
        if outsider.id not in self.ids:
            assert outsider not in self.sl

    @precondition(lambda self: self.model)
    @rule(data=st.data(), gone=st.booleans())
    def walk_on_from(self, data, gone):
        # A walk goes on from the last job it saw, in the list or gone from it.
        job = data.draw(st.sampled_from(self.model))
        if gone:
            self.remove_job(job)
        later = [other for other in self.model if key(other) > key(job)]
        earlier = [other for other in self.model if key(other) < key(job)]
        assert list(self.sl.iter_after(job, False)) == later
        assert list(self.sl.iter_after(job, True)) == earlier[::-1]

    def remove_job(self, job):
        self.sl.remove(job)
        self.model.remove(job)
        self.ids.discard(job.id)

    @rule()
    def clear_sometimes(self):
        if len(self.model) > 30:
            self.sl.clear()
            for job in self.model:
                assert job._sl is None and job._slup is None
            self.model.clear()
            self.ids.clear()

    @invariant()
    def same_content_both_ways(self):
        assert len(self.sl) == len(self.model)
        assert bool(self.sl) == bool(self.model)
        assert list(self.sl.iter_from_head()) == self.model
        assert list(self.sl.iter_from_tail()) == self.model[::-1]
        assert self.sl.first() is (self.model[0] if self.model else None)

    @invariant()
    def every_level_is_sorted(self):
        for level in range(MAX_LEVEL):
            item = self.sl._head[level]
            chain = []
            while item is not None:
                chain.append(item)
                item = _next(item, level)
            assert chain == sorted(chain, key=key)
            assert self.sl._last[level] is (chain[-1] if chain else None)


SkipListModel.TestCase.settings = settings(max_examples=40, stateful_step_count=50,
                                           deadline=None)
TestSkipListModel = SkipListModel.TestCase


def test_ties_on_ctime_are_broken_by_id():
    sl = SkipList()
    jobs = [make_job(c * 24, 5) for c in "cAb0"]
    for job in jobs:
        sl.insert(job)
    assert [j.id for j in sl.iter_from_head()] == sorted(j.id for j in jobs)


def test_older_ctime_goes_first_whatever_the_id():
    sl = SkipList()
    late = make_job("A" * 24, 10)
    early = make_job("z" * 24, 9)
    sl.insert(late)
    sl.insert(early)
    assert sl.pop_first() is early
    assert sl.pop_first() is late
    assert sl.pop_first() is None
    assert len(sl) == 0 and not sl


def test_levels_come_from_the_id():
    assert _level_of(make_job("A" * 24, 0).id) == 1  # 'A' & 3 == 1
    assert _level_of(make_job("DD" + "A" * 22, 0).id) == 3
    assert _level_of(make_job("D" * 24, 0).id) == 25  # bounded by the 24 random characters
    assert _level_of(make_job("D" * 24, 0).id) <= MAX_LEVEL


def test_large_random_workload_stays_sorted():
    import random
    rng = random.Random(7)
    sl = SkipList()
    model = []
    for i in range(3000):
        part = "".join(rng.choice(_ALPHABET) for _ in range(24))
        job = make_job(part, rng.randrange(200))
        sl.insert(job)
        model.append(job)
        if i % 3 == 0:
            victim = model.pop(rng.randrange(len(model)))
            sl.remove(victim)
    model.sort(key=key)
    assert list(sl.iter_from_head()) == model
    assert [sl.pop_first() for _ in range(len(model))] == model
