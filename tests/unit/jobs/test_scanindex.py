"""Tests for disque/jobs/scanindex.py: QSCAN/JSCAN cursors (spec: commands.md QSCAN,
index.md decision 8: every item present for the whole iteration is returned
at least once; cursor 0 ends)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from disque.jobs.scanindex import ScanIndex


class Item:
    __slots__ = ("seq", "name")

    def __init__(self, name: int) -> None:
        self.seq = -1
        self.name = name

    def __repr__(self) -> str:
        return "Item(%d)" % self.name


def full_scan(index: ScanIndex, budget: int = 10) -> list:
    cursor, out = 0, []
    for _ in range(100_000):
        cursor, items = index.scan(cursor, budget)
        out.extend(items)
        if cursor == 0:
            return out
    raise AssertionError("scan did not terminate")


def test_empty_index_ends_at_once():
    assert ScanIndex().scan(0, 10) == (0, [])


def test_add_remove_and_seq():
    index = ScanIndex()
    items = [Item(i) for i in range(5)]
    for item in items:
        index.add(item)
    assert [i.seq for i in items] == [1, 2, 3, 4, 5]
    index.remove(items[2])
    assert items[2].seq == -1
    index.remove(items[2])  # removing twice is harmless
    # The walk goes from the newest sequence number down.
    assert full_scan(index) == [items[4], items[3], items[1], items[0]]


def test_small_budget_pages_through_everything_exactly_once():
    index = ScanIndex()
    items = [Item(i) for i in range(3000)]
    for item in items:
        index.add(item)
    for budget in (1, 7, 100, 5000):
        assert full_scan(index, budget) == items[::-1]


def test_cursor_zero_is_returned_only_at_the_end():
    index = ScanIndex()
    for i in range(50):
        index.add(Item(i))
    cursor, items = index.scan(0, 10)
    assert cursor != 0 and len(items) == 10
    cursor, items = index.scan(cursor, 1000)
    assert cursor == 0 and len(items) == 40


def test_emptied_pages_are_dropped_and_skipped():
    index = ScanIndex()
    items = [Item(i) for i in range(5000)]
    for item in items:
        index.add(item)
    for item in items[:4500]:
        index.remove(item)
    assert len(index._pages) <= 2
    assert full_scan(index, 50) == items[4500:][::-1]


def test_clear_keeps_numbering():
    index = ScanIndex()
    a, b = Item(1), Item(2)
    index.add(a)
    index.clear()
    assert full_scan(index) == []
    index.add(b)
    assert b.seq == 2
    assert full_scan(index) == [b]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 300), st.integers(1, 40), st.integers(0, 2 ** 32), st.integers(0, 30))
def test_items_present_throughout_are_returned_while_others_churn(initial, budget, seed, churn):
    rng = random.Random(seed)
    index = ScanIndex()
    counter = iter(range(10 ** 9))
    stable = [Item(next(counter)) for _ in range(initial)]
    volatile = []
    for item in stable:
        index.add(item)
        if rng.random() < 0.3:  # interleave removable items between stable ones
            extra = Item(next(counter))
            index.add(extra)
            volatile.append(extra)
    stable_ids = {id(i) for i in stable}
    seen = []
    cursor = 0
    for calls in range(100_000):
        cursor, items = index.scan(cursor, budget)
        assert len(items) <= budget
        seen.extend(items)
        if cursor == 0:
            break
        # Between calls other items come and go; stable ones never leave.
        # (Sequence numbers only grow, so a scan ends only if additions stop
        # outpacing it: churn stops after a while.)
        for _ in range(rng.randrange(churn + 1) if calls < 200 else 0):
            if volatile and rng.random() < 0.5:
                index.remove(volatile.pop(rng.randrange(len(volatile))))
            else:
                extra = Item(next(counter))
                index.add(extra)
                volatile.append(extra)
    else:
        raise AssertionError("scan did not terminate")
    returned = {id(i) for i in seen}
    assert stable_ids <= returned
    # Only items that were present at some point are returned, never a removed one
    # returned after its removal (it has seq -1 and is gone from its slot).
    assert all(i.seq >= 0 or id(i) not in stable_ids for i in seen)
