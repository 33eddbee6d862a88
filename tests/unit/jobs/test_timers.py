"""Tests for disque/jobs/timers.py: the bucketed timer structure behind every
job's ``awakeme`` (spec: jobs-and-ids.md §6)."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from disque.jobs.job import Job
from disque.jobs.timers import NEVER, TimerWheel


def timed_job(n: int) -> Job:
    """A real Job (the wheel is typed for Jobs, which the compiled core
    checks); the wheel needs only its writable awakeme."""
    return Job(b"%05d" % n, b"q", b"", 0, n, 0, 0, 0)


def test_empty_wheel():
    wheel = TimerWheel()
    assert len(wheel) == 0
    assert wheel.earliest == NEVER
    assert wheel.next_due() == NEVER
    assert wheel.pop_due(10 ** 15) == []


def test_due_items_come_out_in_time_order_and_are_reset():
    wheel = TimerWheel()
    items = [timed_job(i) for i in range(5)]
    for item, when in zip(items, [5000, 1000, 3000, 1004, 20]):
        wheel.schedule(item, when)
    assert len(wheel) == 5
    assert wheel.next_due() <= 20
    due = wheel.pop_due(3000)
    # Every due item is processed in the same pass, earliest bucket first and
    # in scheduling order within a bucket: lists keep runs reproducible.
    assert due == [items[4], items[1], items[3], items[2]]
    assert all(item.awakeme == 0 for item in due)
    assert items[0].awakeme == 5000
    assert len(wheel) == 1
    assert wheel.pop_due(4999) == []
    assert wheel.pop_due(5000) == [items[0]]
    assert wheel.next_due() == NEVER


def test_items_of_the_current_bucket_not_yet_due_stay():
    wheel = TimerWheel()
    a, b = timed_job(1), timed_job(2)
    wheel.schedule(a, 1001)
    wheel.schedule(b, 1006)  # same 8 ms bucket
    assert wheel.pop_due(1003) == [a]
    assert b.awakeme == 1006
    assert wheel.pop_due(1005) == []
    assert wheel.pop_due(1006) == [b]


def test_same_bucket_items_come_out_in_scheduling_order():
    wheel = TimerWheel()
    items = [timed_job(i) for i in (3, 1, 2)]
    for item in items:
        wheel.schedule(item, 800)
    assert wheel.pop_due(800) == items


def test_a_cancelled_job_is_not_kept_by_its_bucket():
    wheel = TimerWheel()
    items = [timed_job(i) for i in range(100)]
    for item in items:
        wheel.schedule(item, 10_000)
    for item in items[:60]:
        wheel.cancel(item)
    bucket = wheel._buckets[10_000 >> 3]
    assert bucket.live == 40 and len(bucket.jobs) <= 80
    for item in items[60:]:
        wheel.cancel(item)
    assert bucket.jobs == [] and len(wheel) == 0


def test_out_and_back_again_fires_once():
    wheel = TimerWheel()
    item = timed_job(1)
    wheel.schedule(item, 1000)
    wheel.schedule(item, 9000)
    wheel.schedule(item, 1003)
    assert len(wheel) == 1
    assert wheel.pop_due(10_000) == [item]


def test_rescheduling_moves_the_item():
    wheel = TimerWheel()
    item = timed_job(1)
    wheel.schedule(item, 1000)
    wheel.schedule(item, 50_000)
    assert wheel.pop_due(1000) == []
    assert len(wheel) == 1
    wheel.schedule(item, 2000)
    assert wheel.pop_due(2000) == [item]
    wheel.schedule(item, 2000)  # after a pop the item can be scheduled again
    assert wheel.pop_due(2000) == [item]


def test_rescheduling_to_the_same_time_is_a_no_op():
    wheel = TimerWheel()
    item = timed_job(1)
    wheel.schedule(item, 1000)
    wheel.schedule(item, 1000)
    assert len(wheel) == 1
    assert wheel.pop_due(1000) == [item]


def test_cancel():
    wheel = TimerWheel()
    a, b = timed_job(1), timed_job(2)
    wheel.schedule(a, 1000)
    wheel.schedule(b, 1000)
    wheel.cancel(a)
    assert a.awakeme == 0
    wheel.cancel(a)  # cancelling twice is harmless
    assert wheel.pop_due(5000) == [b]
    wheel.cancel(timed_job(3))  # never scheduled


def test_a_partly_due_bucket_arms_the_next_timer_at_its_rest():
    """Arming at the bucket's start would make the server spin through run_timers
    until the rest of the bucket falls due."""
    wheel = TimerWheel()
    a, b = timed_job(1), timed_job(2)
    wheel.schedule(a, 8001)
    wheel.schedule(b, 8006)
    assert wheel.next_due() == 8001
    assert wheel.pop_due(8003) == [a]
    assert wheel.earliest == wheel.next_due() == 8006
    assert wheel.pop_due(8005) == []
    assert wheel.pop_due(8006) == [b]
    assert wheel.next_due() == NEVER


def test_earliest_is_a_lower_bound_and_next_due_refreshes_it():
    wheel = TimerWheel()
    a, b = timed_job(1), timed_job(2)
    wheel.schedule(a, 10_000)
    assert wheel.earliest <= 10_000
    wheel.schedule(b, 500)
    assert wheel.earliest <= 500
    wheel.cancel(b)
    assert wheel.earliest <= 500  # still a valid lower bound
    assert 10_000 - 8 < wheel.next_due() <= 10_000  # emptied bucket dropped
    assert wheel.earliest == wheel.next_due()


def test_clear():
    wheel = TimerWheel()
    items = [timed_job(i) for i in range(10)]
    for i, item in enumerate(items):
        wheel.schedule(item, 100 * (i + 1))
    wheel.clear()
    assert len(wheel) == 0
    assert all(item.awakeme == 0 for item in items)
    assert wheel.earliest == NEVER
    assert wheel.pop_due(10 ** 9) == []


class TimerModel(RuleBasedStateMachine):
    """The wheel against a dict of item -> due time."""

    def __init__(self) -> None:
        super().__init__()
        self.wheel = TimerWheel()
        self.items = [timed_job(i) for i in range(12)]
        self.model: dict = {}
        self.now = 1_000_000

    @rule(i=st.integers(0, 11), offset=st.integers(-50, 2000))
    def schedule(self, i, offset):
        when = max(1, self.now + offset)
        self.wheel.schedule(self.items[i], when)
        self.model[self.items[i]] = when

    @rule(i=st.integers(0, 11))
    def cancel(self, i):
        self.wheel.cancel(self.items[i])
        self.model.pop(self.items[i], None)

    @rule(step=st.integers(0, 700))
    def advance_and_pop(self, step):
        self.now += step
        due = self.wheel.pop_due(self.now)
        expected = {item for item, when in self.model.items() if when <= self.now}
        assert set(due) == expected
        assert len(due) == len(expected)
        buckets = [self.model[item] >> 3 for item in due]
        assert buckets == sorted(buckets)  # earliest bucket first
        for item in due:
            del self.model[item]
            assert item.awakeme == 0

    @invariant()
    def consistent(self):
        assert len(self.wheel) == len(self.model)
        for item in self.items:
            assert item.awakeme == self.model.get(item, 0)
            assert (item in self.wheel) == (item in self.model)
        if self.model:
            assert self.wheel.earliest <= min(self.model.values())
            # A lower bound within the first item's bucket (exact unless cancelled).
            due = min(self.model.values())
            assert due >> 3 << 3 <= self.wheel.next_due() <= due
        else:
            assert self.wheel.next_due() == NEVER


TimerModel.TestCase.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
TestTimerModel = TimerModel.TestCase
