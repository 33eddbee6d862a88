"""ADDJOB DEDUPID: which job a producer's token named, for ``dedup-window`` seconds.

A token is remembered by every node that holds a copy of its job (it
travels with the job, and loads with it from the AOF), from the job's
creation time on, and keeps answering after the job is acked: a producer
retrying an ADDJOB that did succeed gets the first job's ID back. An
entry is dropped when its job's creation failed (NOREPL: on the origin
when it deletes the job, on replicas when its DELJOB reaches a copy that
was never acked), so a retry can create it. docs/dedup.md says what this
guarantees across nodes.
"""

from __future__ import annotations

from typing import Final

from disque.jobs.job import Job, dedup_token, extras_of


# A queue's arrival groups are compacted once this many are dropped.
_COMPACT_GROUPS: Final = 1024


class _QueueTokens:
    """One queue's tokens in the order they came, and when: the entries of
    ``ids`` (token -> job ID, b"" once forgotten) fall in groups of one
    arrival time each: group ``g`` (from index ``first`` on) came at
    ``times[g]`` and starts at entry number ``starts[g]``, counted over
    every entry ever added (``dropped`` of them are gone from the front).
    An entry costs no tuple, time or count object of its own."""

    __slots__ = ("ids", "times", "starts", "first", "dropped")

    def __init__(self) -> None:
        self.ids: dict[bytes, bytes] = {}
        self.times: list[int] = []
        self.starts: list[int] = []
        self.first = 0
        self.dropped = 0

    def arrived(self, ms: int) -> None:
        """The last entry of ``ids`` was added at ``ms``."""
        times = self.times
        if len(times) == self.first or times[-1] != ms:
            times.append(ms)
            self.starts.append(self.dropped + len(self.ids) - 1)

    def drop_until(self, oldest_ms: int) -> int:
        """Drop the entries that came at ``oldest_ms`` or before, from the
        front; return how many named a job (not forgotten ones)."""
        times = self.times
        first = self.first
        while first < len(times) and times[first] <= oldest_ms:
            first += 1
        if first == self.first:
            return 0
        ids = self.ids
        end = self.starts[first] if first < len(times) else self.dropped + len(ids)
        drop = end - self.dropped
        self.dropped = end
        it = iter(ids)
        tokens = [next(it) for _ in range(drop)]
        live = 0
        for token in tokens:
            if ids.pop(token):
                live += 1
        if first >= _COMPACT_GROUPS or first == len(times):
            del times[:first]
            del self.starts[:first]
            first = 0
        self.first = first
        return live


class DedupIndex:
    """Per queue name, the tokens of the last ``dedup-window`` seconds.

    An ADDJOB costs one ``setdefault`` (no key or entry object: the value
    is the job's ID); the cron drops entries once they are older than the
    window, so a token answers until the cron tick after its window ends
    (1/hz, 100 ms by default), never before. Of two jobs with one token
    (two nodes took it apart), a node keeps the first it learns of.
    """

    __slots__ = ("_queues", "_count")

    def __init__(self) -> None:
        self._queues: dict[bytes, _QueueTokens] = {}
        self._count = 0  # entries that name a job

    def __len__(self) -> int:
        return self._count

    def _tokens(self, queue: bytes) -> _QueueTokens:
        tokens = self._queues.get(queue)
        if tokens is None:
            tokens = self._queues[queue] = _QueueTokens()
        return tokens

    def find(self, queue: bytes, token: bytes, window_ms: int) -> bytes | None:
        """The ID of the job ``token`` names for ``queue``, or None (always
        None while the window is 0: deduplication is off)."""
        tokens = self._queues.get(queue)
        if tokens is None or not window_ms:
            return None
        return tokens.ids.get(token) or None

    def claim(self, queue: bytes, token: bytes, job_id: bytes, now_ms: int,
              window_ms: int) -> bytes | None:
        """ADDJOB made ``job_id`` with ``token``: remember it, unless the token
        names a job already, whose ID is returned (and ``job_id`` is dropped
        by the caller). One lookup on the way that creates a job: the ADDJOB
        path of ``find`` then ``remember``. A window of 0 indexes nothing."""
        if not window_ms:
            return None
        return self._take(queue, token, job_id, now_ms)

    def remember(self, queue: bytes, token: bytes, job_id: bytes, created_ms: int) -> None:
        """``token`` named ``job_id`` (a copy, a loaded job), created at
        ``created_ms``; a token that names another job keeps it."""
        self._take(queue, token, job_id, created_ms)

    def _take(self, queue: bytes, token: bytes, job_id: bytes, ms: int) -> bytes | None:
        """Let ``token`` name ``job_id`` (since ``ms``) unless it names a job:
        None when it does now, else the ID it names (``job_id`` itself when
        already known)."""
        tokens = self._tokens(queue)
        ids = tokens.ids
        size = len(ids)
        known = ids.setdefault(token, job_id)
        if len(ids) != size:
            tokens.arrived(ms)
        elif known:
            return known
        else:
            ids[token] = job_id  # forgotten (its first job failed): taken again, in its place
        self._count += 1
        return None

    def forget(self, queue: bytes, token: bytes, job_id: bytes) -> None:
        """The job was never created after all (its replication failed): the
        token is free (its entry stays in place until its time is up)."""
        tokens = self._queues.get(queue)
        if tokens is not None and tokens.ids.get(token) == job_id:
            tokens.ids[token] = b""
            self._count -= 1

    def remember_job(self, job: Job) -> None:
        """Index ``job``'s token, if it has one (a copy, a loaded job), from
        its creation time."""
        token = dedup_token(job)
        queue = _indexed_queue(job)
        if token is not None and queue is not None:
            self.remember(queue, token, job.id, job.ctime // 1_000_000)

    def forget_job(self, job: Job) -> None:
        """``job``'s token, if it has one, names no job any more: a copy deleted
        before any ACK (DELJOB from an origin whose ADDJOB failed, or FASTACK),
        or a job whose ADDJOB failed here."""
        token = dedup_token(job)
        queue = _indexed_queue(job)
        if token is not None and queue is not None:
            self.forget(queue, token, job.id)

    def expire(self, now_ms: int, window_ms: int) -> None:
        """Drop the entries older than the window (from the server's cron).
        Entries of copies may come a little out of creation order, and then
        go a little late."""
        oldest = now_ms - window_ms
        empty: list[bytes] = []
        for queue, tokens in self._queues.items():
            self._count -= tokens.drop_until(oldest)
            if not tokens.ids:
                empty.append(queue)
        for queue in empty:
            del self._queues[queue]

    def clear(self) -> None:
        """Forget every token (DEBUG FLUSHALL)."""
        self._queues.clear()
        self._count = 0


def _indexed_queue(job: Job) -> bytes | None:
    """The queue a job's token is indexed under: the one its ADDJOB named
    (a dead letter's origin)."""
    ext = extras_of(job)
    if ext is not None and ext.origin is not None:
        return ext.origin
    return job.queue
