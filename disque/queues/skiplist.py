"""A skiplist of jobs in serving order, linked through the jobs.

The order is ``(priority descending, ctime, id)`` (spec: jobs-and-ids.md
§5, with docs/priorities.md's priority in front): higher priorities first,
then oldest first. A job's priority never changes while it is queued.

The links live in slots of the job itself: ``_sl`` is the next item on
level 0, ``_slprev`` the previous one, and ``_slup`` the list of next
items on levels 1 and up (None for the three quarters of items that have
only level 0), so a queued job costs no extra object at all in the common
case. Levels come from the job ID's random characters (p = 1/4), which
keeps the structure deterministic without a random source. Appending
after the current tail (new jobs: same priority as the tail and a later
ctime, or a lower priority) and popping the head need no search.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from disque.jobs.job import Job

MAX_LEVEL: Final = 32
_NO_PREDECESSORS: Final[tuple[None, ...]] = (None,) * MAX_LEVEL  # the head has none on any level


def _level_of(job_id: bytes) -> int:
    level = 1
    i = 11
    while level < MAX_LEVEL and i < 35 and job_id[i] & 3 == 0:
        level += 1
        i += 1
    return level


def _before(a: Job, b: Job) -> bool:
    """``a`` is served before ``b``: higher priority, then older, then smaller ID."""
    ap = a.priority
    bp = b.priority
    if ap != bp:
        return ap > bp
    ac = a.ctime
    bc = b.ctime
    return ac < bc or (ac == bc and a.id < b.id)


def _next(item: Job, level: int) -> Job | None:
    # Levels above 0 are only asked of items that have them; an assert on
    # _slup would run in the search loop.
    return item._sl if level == 0 else item._slup[level - 1]  # type: ignore[index]


def _set_next(item: Job, level: int, nxt: Job | None) -> None:
    if level == 0:
        item._sl = nxt
    else:
        item._slup[level - 1] = nxt  # type: ignore[index]  # as in _next


class SkipList:
    """Ordered set of jobs: O(log n) insert/remove, O(1) head pop and length.

    Every job in one skiplist must have a distinct ``(priority, ctime, id)``
    (IDs are unique) and keep it while it is in."""

    __slots__ = ("_head", "_last", "_len")

    def __init__(self) -> None:
        self._head: list[Job | None] = [None] * MAX_LEVEL  # first item per level
        self._last: list[Job | None] = [None] * MAX_LEVEL  # last item per level
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __contains__(self, item: Job) -> bool:
        first = self._last_before(item)
        return (self._head[0] if first is None else first._sl) is item

    def insert(self, item: Job) -> None:
        """Insert ``item`` (which must not be in any skiplist)."""
        item_id = item.id
        level = 1 if item_id[11] & 3 else _level_of(item_id)
        item._slup = [None] * (level - 1) if level > 1 else None
        last = self._last
        tail = last[0]
        # _before(tail, item), inlined: equal priorities (every job without
        # PRIORITY) cost one comparison more than a (ctime, id) order.
        if tail is None or (tail.priority == item.priority and (tail.ctime < item.ctime or (
                tail.ctime == item.ctime and tail.id < item_id))) or tail.priority > item.priority:
            # Append after the tail: no search (the common case for new jobs).
            item._sl = None
            item._slprev = tail
            if tail is None:
                self._head[0] = item
            else:
                tail._sl = item
            last[0] = item
            if level > 1:
                head = self._head
                for i in range(1, level):
                    prev = last[i]
                    if prev is None:
                        head[i] = item
                    else:
                        # last[i] of a level i >= 1 has that level (as in _next).
                        prev._slup[i - 1] = item  # type: ignore[index]
                    last[i] = item
        elif level == 1:
            # Three quarters of the items: only level 0 to link, no list of
            # predecessors (a requeue, or a priority above the tail's).
            prev = self._last_before(item)
            if prev is None:
                nxt = self._head[0]
                self._head[0] = item
            else:
                nxt = prev._sl
                prev._sl = item
            item._sl = nxt
            item._slprev = prev
            if nxt is None:
                last[0] = item
            else:
                nxt._slprev = item
        else:
            preds = self._predecessors(item)
            head = self._head
            for i in range(level):
                prev = preds[i]
                if prev is None:
                    nxt = head[i]
                    head[i] = item
                else:
                    nxt = _next(prev, i)
                    _set_next(prev, i, item)
                _set_next(item, i, nxt)
                if nxt is None:
                    last[i] = item
            item._slprev = preds[0]
            if item._sl is not None:
                item._sl._slprev = item
        self._len += 1

    def remove(self, item: Job) -> None:
        """Remove ``item``, which must be in this skiplist."""
        if item._slup is None:
            self._unlink(item, (item._slprev,))
        else:
            self._unlink(item, self._predecessors(item))

    def pop_first(self) -> Job | None:
        """Remove and return the smallest item, or None when empty."""
        item = self._head[0]
        if item is not None:
            self._unlink(item, _NO_PREDECESSORS)
        return item

    def first(self) -> Job | None:
        """The smallest item (the next one served) without removing it."""
        return self._head[0]

    def last(self) -> Job | None:
        """The largest item (the last one served) without removing it."""
        return self._last[0]

    def iter_from_head(self) -> Iterator[Job]:
        """Items in ascending order (do not modify while iterating)."""
        item = self._head[0]
        while item is not None:
            yield item
            item = item._sl

    def iter_from_tail(self) -> Iterator[Job]:
        """Items in descending order (do not modify while iterating)."""
        item = self._last[0]
        while item is not None:
            yield item
            item = item._slprev

    def iter_after(self, item: Job, backwards: bool) -> Iterator[Job]:
        """Items ordered after ``item`` (before it, last first, when
        ``backwards``), which may have left the list meanwhile: a walk over
        several loop turns goes on from the last item it saw (do not modify
        while iterating)."""
        prev = self._last_before(item)
        nxt: Job | None
        if backwards:
            nxt = prev
        else:
            nxt = self._head[0] if prev is None else prev._sl
            if nxt is item:
                nxt = item._sl
        while nxt is not None:
            yield nxt
            nxt = nxt._slprev if backwards else nxt._sl

    def clear(self) -> None:
        """Unlink every item."""
        item = self._head[0]
        while item is not None:
            nxt = item._sl
            item._sl = item._slprev = item._slup = None
            item = nxt
        self._head = [None] * MAX_LEVEL
        self._last = [None] * MAX_LEVEL
        self._len = 0

    def _predecessors(self, item: Job) -> list[Job | None]:
        """For every level, the last item ordered before ``item`` (None = head)."""
        preds: list[Job | None] = [None] * MAX_LEVEL
        self._search(item, preds)
        return preds

    def _last_before(self, item: Job) -> Job | None:
        """The last item ordered before ``item`` on level 0 (None = the head):
        ``_predecessors(item)[0]`` without the list."""
        return self._search(item, None)

    def _search(self, item: Job, preds: list[Job | None] | None) -> Job | None:
        """Descend from the highest level in use to level 0, stopping on each
        before the first item not ordered before ``item`` (or ``item``
        itself); fill ``preds`` when given; return level 0's predecessor.
        ``_before`` and ``_next`` are inlined: this loop is every search."""
        head = self._head
        i = MAX_LEVEL - 1
        while head[i] is None:
            if i == 0:
                return None  # empty
            i -= 1
        priority = item.priority
        ctime = item.ctime
        item_id = item.id
        prev: Job | None = None
        nxt: Job | None
        while True:
            if prev is None:
                nxt = head[i]
            elif i == 0:
                nxt = prev._sl
            else:
                nxt = prev._slup[i - 1]  # type: ignore[index]  # as in _next
            while nxt is not None and nxt is not item:
                other = nxt.priority
                if other < priority or (other == priority and (nxt.ctime > ctime or (
                        nxt.ctime == ctime and nxt.id >= item_id))):
                    break  # not _before(nxt, item)
                prev = nxt
                nxt = nxt._sl if i == 0 else nxt._slup[i - 1]  # type: ignore[index]
            if preds is not None:
                preds[i] = prev
            if i == 0:
                return prev
            i -= 1

    def _unlink(self, item: Job, preds: Sequence[Job | None]) -> None:
        head = self._head
        last = self._last
        up = item._slup
        for i in range(1 + len(up) if up else 1):
            prev = preds[i]
            nxt = _next(item, i)
            if prev is None:
                head[i] = nxt
            else:
                _set_next(prev, i, nxt)
            if nxt is None:
                last[i] = prev
        nxt = item._sl
        if nxt is not None:
            nxt._slprev = item._slprev
        item._sl = item._slprev = item._slup = None
        self._len -= 1
