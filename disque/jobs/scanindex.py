"""Stateless cursors for QSCAN and JSCAN.

Every item gets a sequence number when it is added; slots live in pages
of 1024. A cursor is the next sequence number to look at, walking down
from the top, so an item present for the whole iteration is returned
exactly once and a scan always ends (spec: commands.md QSCAN, index.md
decision 8). Emptied pages are dropped.
"""

from __future__ import annotations

from typing import Any, Final, Generic, Protocol, TypeVar

_PAGE_BITS: Final = 10
_PAGE_SIZE: Final = 1 << _PAGE_BITS
_PAGE_MASK: Final = _PAGE_SIZE - 1


class Sequenced(Protocol):
    """What the index asks of an item: a writable sequence number (-1 = none)."""

    seq: int


T = TypeVar("T", bound=Sequenced)


class ScanIndex(Generic[T]):
    """Items with a writable ``seq`` attribute."""

    __slots__ = ("_pages", "_next")

    def __init__(self) -> None:
        # A page holds items or None, and its live count in the extra last slot.
        self._pages: dict[int, list[Any]] = {}
        self._next = 1  # cursor 0 means "start", so numbering starts at 1

    def add(self, item: T) -> None:
        """Give ``item`` the next sequence number."""
        seq = self._next
        self._next = seq + 1
        page = self._pages.get(seq >> _PAGE_BITS)
        if page is None:
            page = self._pages[seq >> _PAGE_BITS] = [None] * _PAGE_SIZE + [0]
        page[seq & _PAGE_MASK] = item
        page[_PAGE_SIZE] += 1  # live items, kept in the page's extra last slot
        item.seq = seq

    def remove(self, item: T) -> None:
        """Forget ``item``."""
        seq = item.seq
        page_no = seq >> _PAGE_BITS
        page = self._pages.get(page_no)
        if page is None or page[seq & _PAGE_MASK] is not item:
            return
        page[seq & _PAGE_MASK] = None
        item.seq = -1
        page[_PAGE_SIZE] -= 1
        if not page[_PAGE_SIZE] and page_no != self._next >> _PAGE_BITS:
            del self._pages[page_no]

    def clear(self) -> None:
        """Forget everything (sequence numbers keep growing)."""
        self._pages.clear()

    def scan(self, cursor: int, budget: int) -> tuple[int, list[T]]:
        """Return (next cursor, items) visiting at most ``budget`` slots.

        The walk goes downward from the highest sequence number in use when
        it started (cursor 0), so items added later are not chased and the
        scan ends even while the set keeps changing; a returned cursor of 0
        means the bottom was reached.
        """
        seq = self._next - 1 if cursor == 0 else min(cursor, self._next - 1)
        items: list[T] = []
        pages = self._pages
        while seq > 0 and budget > 0:
            page_no = seq >> _PAGE_BITS
            page = pages.get(page_no)
            page_start = page_no << _PAGE_BITS
            if page is None:
                seq = page_start - 1
                budget -= 1
                continue
            stop = max(page_start - 1, seq - budget)
            for i in range(seq & _PAGE_MASK, (stop & _PAGE_MASK) if stop >= page_start else -1, -1):
                item = page[i]
                if item is not None:
                    items.append(item)
            budget -= seq - stop
            seq = stop
        return max(seq, 0), items
