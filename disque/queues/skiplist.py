"""A skiplist of jobs ordered by ``(ctime, id)``, linked through the jobs.

The links live in two slots of the job itself (``_sl``: next item per
level, ``_slprev``: previous item on level 0), so a queued job costs one
small list and no node object. Levels come from the job ID's random
characters (p = 1/4), which keeps the structure deterministic without a
random source. Appending after the current tail, the common case for new
jobs, and popping the head need no search.
"""

from __future__ import annotations

MAX_LEVEL = 32


def _level_of(job_id: bytes) -> int:
    level = 1
    i = 11
    while level < MAX_LEVEL and i < 35 and job_id[i] & 3 == 0:
        level += 1
        i += 1
    return level


def _before(a, b) -> bool:
    ac = a.ctime
    bc = b.ctime
    return ac < bc or (ac == bc and a.id < b.id)


class SkipList:
    """Ordered set of jobs: O(log n) insert/remove, O(1) head pop and length."""

    __slots__ = ("_head", "_last", "_len")

    def __init__(self) -> None:
        self._head: list = [None] * MAX_LEVEL  # first item per level
        self._last: list = [None] * MAX_LEVEL  # last item per level
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __contains__(self, item) -> bool:
        return item._sl is not None and self._find(item) is item

    def insert(self, item) -> None:
        """Insert ``item`` (which must not be in any skiplist)."""
        level = 1 if item.id[11] & 3 else _level_of(item.id)
        links = [None] * level
        item._sl = links
        last = self._last
        tail = last[0]
        if tail is None or _before(tail, item):
            item._slprev = tail
            head = self._head
            for i in range(level):
                prev = last[i]
                if prev is None:
                    head[i] = item
                else:
                    prev._sl[i] = item
                last[i] = item
        else:
            preds = self._predecessors(item)
            head = self._head
            for i in range(level):
                prev = preds[i]
                if prev is None:
                    nxt = head[i]
                    head[i] = item
                else:
                    nxt = prev._sl[i]
                    prev._sl[i] = item
                links[i] = nxt
                if nxt is None:
                    last[i] = item
            item._slprev = preds[0]
            if links[0] is not None:
                links[0]._slprev = item
        self._len += 1

    def remove(self, item) -> None:
        """Remove ``item``, which must be in this skiplist."""
        links = item._sl
        if len(links) == 1:
            self._unlink(item, (item._slprev,))
        else:
            self._unlink(item, self._predecessors(item))

    def pop_first(self):
        """Remove and return the smallest item, or None when empty."""
        item = self._head[0]
        if item is not None:
            self._unlink(item, (None,) * len(item._sl))
        return item

    def first(self):
        """The smallest item without removing it."""
        return self._head[0]

    def iter_from_head(self):
        """Items in ascending order (do not modify while iterating)."""
        item = self._head[0]
        while item is not None:
            yield item
            item = item._sl[0]

    def iter_from_tail(self):
        """Items in descending order (do not modify while iterating)."""
        item = self._last[0]
        while item is not None:
            yield item
            item = item._slprev

    def clear(self) -> None:
        """Unlink every item."""
        item = self._head[0]
        while item is not None:
            nxt = item._sl[0]
            item._sl = None
            item._slprev = None
            item = nxt
        self._head = [None] * MAX_LEVEL
        self._last = [None] * MAX_LEVEL
        self._len = 0

    def _predecessors(self, item) -> list:
        """For every level, the last item ordered before ``item`` (None = head)."""
        preds = [None] * MAX_LEVEL
        head = self._head
        prev = None
        for i in range(MAX_LEVEL - 1, -1, -1):
            nxt = head[i] if prev is None else prev._sl[i]
            while nxt is not None and nxt is not item and _before(nxt, item):
                prev = nxt
                nxt = prev._sl[i]
            preds[i] = prev
        return preds

    def _find(self, item):
        preds = self._predecessors(item)
        first = preds[0]
        return self._head[0] if first is None else first._sl[0]

    def _unlink(self, item, preds) -> None:
        links = item._sl
        head = self._head
        last = self._last
        for i in range(len(links)):
            prev = preds[i]
            nxt = links[i]
            if prev is None:
                head[i] = nxt
            else:
                prev._sl[i] = nxt
            if nxt is None:
                last[i] = prev
        nxt = links[0]
        if nxt is not None:
            nxt._slprev = item._slprev
        item._sl = None
        item._slprev = None
        self._len -= 1
