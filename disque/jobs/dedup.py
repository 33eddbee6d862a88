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

from disque.jobs.job import Job


class DedupIndex:
    """Per queue name, token -> (job ID, unix ms it was created at).

    One dict per queue, in the order tokens came (an ADDJOB costs one
    ``setdefault`` and one small tuple, no key object); old entries leave
    from the front of each dict.
    """

    __slots__ = ("_queues", "_count")

    def __init__(self) -> None:
        self._queues: dict[bytes, dict[bytes, tuple[bytes, int]]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def find(self, queue: bytes, token: bytes, now_ms: int, window_ms: int) -> bytes | None:
        """The ID of the job created with ``token`` for ``queue`` less than
        ``window_ms`` ago, or None."""
        tokens = self._queues.get(queue)
        if tokens is None:
            return None
        entry = tokens.get(token)
        if entry is None or now_ms - entry[1] >= window_ms:
            return None
        return entry[0]

    def claim(self, queue: bytes, token: bytes, job_id: bytes, now_ms: int,
              window_ms: int) -> bytes | None:
        """ADDJOB made ``job_id`` with ``token``: remember it, unless the token
        names a job made less than ``window_ms`` ago, whose ID is returned
        (and ``job_id`` is dropped by the caller). One lookup on the way
        that creates a job: the ADDJOB path of ``find`` then ``remember``.
        A window of 0 (dedup off) indexes nothing."""
        if not window_ms:
            return None
        tokens = self._queues.get(queue)
        if tokens is None:
            tokens = self._queues[queue] = {}
        entry = (job_id, now_ms)
        known = tokens.setdefault(token, entry)
        # Not ``known is entry``: compiled, a tuple is a C struct boxed anew
        # at each use; the ID inside is the same object.
        if known[0] is job_id:
            self._count += 1
            return None
        if now_ms - known[1] < window_ms:
            return known[0]
        del tokens[token]  # an entry the cron has not dropped yet: replaced at the end
        tokens[token] = entry
        return None

    def remember(self, queue: bytes, token: bytes, job_id: bytes, created_ms: int) -> None:
        """``token`` named ``job_id``; of two jobs with one token the older wins."""
        tokens = self._queues.get(queue)
        if tokens is None:
            tokens = self._queues[queue] = {}
        entry = tokens.get(token)
        if entry is not None:
            if entry[0] == job_id or entry[1] <= created_ms:
                return  # known, or an older job holds the token (two nodes took it apart)
            del tokens[token]  # re-inserted at the end: the order stays roughly by time
            self._count -= 1
        tokens[token] = (job_id, created_ms)
        self._count += 1

    def forget(self, queue: bytes, token: bytes, job_id: bytes) -> None:
        """The job was never created after all (its replication failed)."""
        tokens = self._queues.get(queue)
        if tokens is not None:
            entry = tokens.get(token)
            if entry is not None and entry[0] == job_id:
                del tokens[token]
                self._count -= 1

    def forget_job(self, job: Job) -> None:
        """``job``'s token, if it has one, names no job any more: a copy deleted
        before any ACK (DELJOB from an origin whose ADDJOB failed, or FASTACK)."""
        ext = job.ext
        if ext is None or ext.dedupid is None:
            return
        queue = ext.origin if ext.origin is not None else job.queue  # as it was indexed
        if queue is not None:
            self.forget(queue, ext.dedupid, job.id)

    def expire(self, now_ms: int, window_ms: int) -> None:
        """Drop the entries older than the window, from the front of each
        queue's dict (from the server's cron). Entries of copies may come a
        little out of creation order, and then go a little late."""
        oldest = now_ms - window_ms
        empty: list[bytes] = []
        for queue, tokens in self._queues.items():
            old: list[bytes] = []
            for token, entry in tokens.items():
                if entry[1] > oldest:
                    break
                old.append(token)
            for token in old:
                del tokens[token]
            self._count -= len(old)
            if not tokens:
                empty.append(queue)
        for queue in empty:
            del self._queues[queue]

    def clear(self) -> None:
        """Forget every token (DEBUG FLUSHALL)."""
        self._queues.clear()
        self._count = 0
