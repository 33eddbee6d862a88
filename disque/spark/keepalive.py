"""Keep fetched jobs from being redelivered while Spark processes them.

GETJOB does not restart a job's retry clock: a job that waited in its queue
may be requeued anywhere between ~0 and RETRY seconds after delivery
(spec: jobs-and-ids.md §6). So this driver-side thread sends WORKING for a
group of fetched jobs once they have been in flight for a delay (WORKING also
pulls back a job that was requeued meanwhile), learns each job's retry from
the reply, and repeats WORKING before that period runs out until the group is
acknowledged (spark-notes pitfall 7: a cold batch can take longer than RETRY).

The delay keeps WORKING off the path of batches that are acknowledged within
it: on the node a pipelined WORKING costs more than GETJOB and ACKJOB of the
same job together. The stream reader makes it a small fraction of the jobs'
RETRY (``first_working_delay``), so few jobs can be requeued before their
first WORKING; such a job goes back into its queue until WORKING pulls it
out, the reader drops it if its own next fetch takes it, and only another
consumer of the queue can get it twice meanwhile (at-least-once allows that).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from disque.client import ResponseError
from disque.spark.options import ConnectionOptions

log = logging.getLogger("disque.spark")

# WORKING again after this fraction of the retry period: WORKING sets the next
# requeue to now + retry ± 250 ms of jitter, so 0.4 leaves room even for RETRY 1.
RENEW_FRACTION = 0.4
MAX_SLEEP = 1.0
# The longest a batch may be in flight before its first WORKING (option keepAliveDelay),
# and the share of the jobs' RETRY that makes it shorter.
DEFAULT_KEEPALIVE_DELAY_MS = 5000
FIRST_WORKING_FRACTION = 0.1
# WORKINGs per round trip; the thread gives up on an acknowledged batch between chunks.
WORKING_CHUNK = 500


@dataclass
class _Group:
    ids: Sequence[str | bytes]
    due: float = field(default=0.0)


def first_working_delay(retry: int | None, longest: float) -> float:
    """Seconds from the fetch to the first WORKING for jobs with this ``retry``: a tenth of it,
    at most ``longest``. Unknown or 0 (at-most-once jobs, never requeued): ``longest``."""
    if not retry or retry <= 0:
        return longest
    return min(longest, retry * FIRST_WORKING_FRACTION)


def renewable(retries: Mapping[Any, int | ResponseError]) -> tuple[list, int]:
    """The jobs WORKING can keep alive (retry > 0), and their shortest retry."""
    ids = [i for i, r in retries.items() if isinstance(r, int) and r > 0]
    shortest = min((retries[i] for i in ids), default=0)
    return ids, shortest


class KeepAlive:
    """A daemon thread sending WORKING for each group of in-flight jobs before their retry ends."""

    def __init__(self, connection: ConnectionOptions) -> None:
        self.connection = connection
        self._groups: dict[int, _Group] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def track(self, key: int, ids: Sequence[str | bytes], delay: float) -> None:
        """Start renewing a group of jobs: the first WORKING goes out from the thread after
        ``delay`` seconds, unless ``forget(key)`` came first."""
        if not ids:
            return
        with self._lock:  # the stream reader tracks from its courier thread and its own
            self._groups[key] = _Group(ids, time.monotonic() + delay)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="disque-keepalive",
                                                daemon=True)
                self._thread.start()
        self._wake.set()

    def forget(self, key: int) -> None:
        """Stop renewing the group ``key`` (it was acknowledged)."""
        with self._lock:
            self._groups.pop(key, None)

    def stop(self) -> None:
        """End the thread (best effort: Spark does not always call the reader's stop())."""
        self._stopped.set()
        self._wake.set()

    def _due(self) -> tuple[list[tuple[int, Sequence[str | bytes]]], float]:
        now = time.monotonic()
        due, next_due = [], now + MAX_SLEEP
        with self._lock:
            for key, group in self._groups.items():
                if group.due <= now:
                    due.append((key, group.ids))  # replaced, never mutated, by _renew
                else:
                    next_due = min(next_due, group.due)
        return due, next_due

    def _renew(self, client, key: int, ids: Sequence[str | bytes]) -> None:
        replies: dict[Any, int | ResponseError] = {}
        for first in range(0, len(ids), WORKING_CHUNK):
            with self._lock:
                if key not in self._groups:
                    return  # acknowledged meanwhile
            replies.update(client.working_many(ids[first:first + WORKING_CHUNK]))
        alive, retry = renewable(replies)
        with self._lock:
            group = self._groups.get(key)
            if group is None:
                return  # acknowledged meanwhile
            if not alive:
                del self._groups[key]
                return
            group.ids = alive
            group.due = time.monotonic() + retry * RENEW_FRACTION

    def _run(self) -> None:
        client = self.connection.client()
        parent = os.getppid()
        try:
            # Spark does not call stop() when a query is stopped (spark-notes pitfall 4):
            # if the JVM that started this process went away, stop renewing.
            while not self._stopped.is_set() and os.getppid() == parent:
                self._wake.clear()  # before looking, so a track() from now on wakes us
                due, next_due = self._due()
                for key, ids in due:
                    try:
                        self._renew(client, key, ids)
                    except Exception as exc:  # keep trying: losing the thread means duplicates
                        log.warning("WORKING for %d fetched jobs failed: %s", len(ids), exc)
                        with self._lock:
                            if key in self._groups:
                                self._groups[key].due = time.monotonic() + 0.2
                if not due:
                    self._wake.wait(max(0.0, next_due - time.monotonic()))
        finally:
            client.close()
