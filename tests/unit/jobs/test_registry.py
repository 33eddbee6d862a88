"""JobRegistry on its own: what it charges, what it may evict, ctime order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from disque.jobs.job import ACKED, DELIVERED, Job
from disque.jobs.registry import JobRegistry, is_evictable
from disque.context.memory import BASE_MEMORY, DUMMY_ACK_COST, JOB_COST, MemoryAccount


def job(job_id: bytes, body: bytes | None = b"12345", retry: int = 300) -> Job:
    return Job(job_id.ljust(40, b"0"), b"q" if body is not None else None, body, 1, 1, 10, 0,
               retry)


def test_add_and_remove_charge_and_give_back_memory():
    memory = MemoryAccount(0)
    registry = JobRegistry(memory)
    first, dummy = job(b"A"), job(b"B", body=None)
    registry.add(first)
    registry.add(dummy)
    assert memory.used == BASE_MEMORY + JOB_COST + 5 + DUMMY_ACK_COST
    assert registry.get(first.id) is first and first.id in registry and len(registry) == 2
    registry.remove(first)
    assert memory.used == BASE_MEMORY + DUMMY_ACK_COST
    assert registry.get(first.id) is None and first.seq == -1


def test_only_safe_jobs_become_eviction_candidates():
    registry = JobRegistry(MemoryAccount(0))
    keep, acked, delivered_once = job(b"A"), job(b"B"), job(b"C", retry=0)
    acked.state = ACKED
    delivered_once.flags |= DELIVERED
    for j in (keep, acked, delivered_once):
        registry.add(j)
    assert list(registry.evictable) == [acked, delivered_once]
    assert [is_evictable(j) for j in (keep, acked, delivered_once)] == [False, True, True]
    registry.remove(acked)
    assert list(registry.evictable) == [delivered_once]


def test_ctime_strictly_increases_within_a_millisecond():
    registry = JobRegistry(MemoryAccount(0))
    first = registry.new_ctime(1000)
    second = registry.new_ctime(1000)
    earlier_clock = registry.new_ctime(999)  # a clock step back never reorders jobs
    assert first == 1000 * 1_000_000 and second == first + 1 and earlier_clock == second + 1


@given(st.lists(st.integers(min_value=0, max_value=4_000_000_000_000), max_size=40))
def test_ctime_follows_the_rule_for_any_clock(clock):
    """Whatever the clock does (repeats, steps back): ms × 10^6, or one more
    than the previous creation time when that is not greater."""
    registry = JobRegistry(MemoryAccount(0))
    last = 0
    for now in clock:
        expected = max(now * 1_000_000, last + 1)
        last = registry.new_ctime(now)
        assert last == expected


def test_clear_forgets_every_job_and_index():
    registry = JobRegistry(MemoryAccount(0))
    for i in range(3):
        registry.add(job(b"%d" % i))
    registry.clear()
    assert len(registry) == 0 and not registry.evictable
    assert registry.scan.scan(0, 100) == (0, [])
