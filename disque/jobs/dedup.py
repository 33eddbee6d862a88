"""ADDJOB DEDUPID: which job a producer's token named, for ``dedup-window`` seconds.

A token is remembered by every node that holds a copy of its job (it
travels with the job, and loads with it from the AOF), from the job's
creation time on, and keeps answering after the job is acked: a producer
retrying an ADDJOB that did succeed gets the first job's ID back. An
entry is dropped when its job's creation failed (NOREPL), so a retry can
create it. docs/commands.md says what this guarantees across nodes.
"""

from __future__ import annotations

from collections import deque

_Key = tuple[bytes, bytes]  # queue name, token


class DedupIndex:
    """(queue, token) -> job ID and the unix ms it was created at."""

    __slots__ = ("_ids", "_order")

    def __init__(self) -> None:
        self._ids: dict[_Key, tuple[bytes, int]] = {}
        # Entries in the order they came, to drop the old ones; entries of
        # copies may come out of creation order, and then go a little late.
        self._order: deque[tuple[int, _Key]] = deque()

    def __len__(self) -> int:
        return len(self._ids)

    def find(self, queue: bytes, token: bytes, now_ms: int, window_ms: int) -> bytes | None:
        """The ID of the job created with ``token`` for ``queue`` less than
        ``window_ms`` ago, or None."""
        entry = self._ids.get((queue, token))
        if entry is None or now_ms - entry[1] >= window_ms:
            return None
        return entry[0]

    def remember(self, queue: bytes, token: bytes, job_id: bytes, created_ms: int) -> None:
        """``token`` named ``job_id``; of two jobs with one token the older wins."""
        key = (queue, token)
        entry = self._ids.get(key)
        if entry is not None and (entry[0] == job_id or entry[1] <= created_ms):
            return  # known, or an older job holds the token (two nodes took it apart)
        self._ids[key] = (job_id, created_ms)
        self._order.append((created_ms, key))

    def forget(self, queue: bytes, token: bytes, job_id: bytes) -> None:
        """The job was never created after all (its replication failed)."""
        key = (queue, token)
        entry = self._ids.get(key)
        if entry is not None and entry[0] == job_id:
            del self._ids[key]

    def expire(self, now_ms: int, window_ms: int) -> None:
        """Drop the entries older than the window (from the server's cron)."""
        order = self._order
        ids = self._ids
        while order and now_ms - order[0][0] >= window_ms:
            created, key = order.popleft()
            entry = ids.get(key)
            if entry is not None and entry[1] == created:
                del ids[key]

    def clear(self) -> None:
        """Forget every token (DEBUG FLUSHALL)."""
        self._ids.clear()
        self._order.clear()
