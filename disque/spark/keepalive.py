"""Keep fetched jobs from being redelivered while Spark processes them.

GETJOB does not restart a job's retry clock: a job that waited in its queue
may be requeued anywhere between ~0 and RETRY seconds after delivery
(spec: jobs-and-ids.md §6). So this driver-side thread sends WORKING for a
batch's jobs as soon as they are fetched (WORKING also pulls back a job that
was requeued meanwhile), learns each job's retry from the reply, and repeats
WORKING before that period runs out until the batch is acknowledged
(spark-notes pitfall 7: a cold batch can take longer than RETRY).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Mapping

from disque.client import ResponseError
from disque.spark.options import ConnectionOptions

log = logging.getLogger("disque.spark")

# WORKING again after this fraction of the retry period: WORKING sets the next
# requeue to now + retry ± 250 ms of jitter, so 0.4 leaves room even for RETRY 1.
RENEW_FRACTION = 0.4
MAX_SLEEP = 1.0


@dataclass
class _Group:
    ids: list[str]
    due: float = field(default=0.0)


def renewable(retries: Mapping[str, int | ResponseError]) -> tuple[list[str], int]:
    """The jobs WORKING can keep alive (retry > 0), and their shortest retry."""
    ids = [i for i, r in retries.items() if isinstance(r, int) and r > 0]
    shortest = min((retries[i] for i in ids), default=0)
    return ids, shortest


class KeepAlive:
    """A daemon thread sending WORKING for each in-flight batch before its jobs' retry ends."""

    def __init__(self, connection: ConnectionOptions) -> None:
        self.connection = connection
        self._groups: dict[int, _Group] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def track(self, batch: int, ids: list[str]) -> None:
        """Start renewing ``batch``'s jobs. The first WORKING goes out at once, from the
        thread, so fetching the next batch does not wait for it."""
        if not ids:
            return
        with self._lock:
            self._groups[batch] = _Group(list(ids), 0.0)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="disque-keepalive", daemon=True)
            self._thread.start()
        self._wake.set()

    def forget(self, batch: int) -> None:
        """Stop renewing ``batch`` (it was acknowledged)."""
        with self._lock:
            self._groups.pop(batch, None)

    def stop(self) -> None:
        """End the thread (best effort: Spark does not always call the reader's stop())."""
        self._stopped.set()
        self._wake.set()

    def _due(self) -> tuple[list[tuple[int, list[str]]], float]:
        now = time.monotonic()
        due, next_due = [], now + MAX_SLEEP
        with self._lock:
            for batch, group in self._groups.items():
                if group.due <= now:
                    due.append((batch, list(group.ids)))
                else:
                    next_due = min(next_due, group.due)
        return due, next_due

    def _renew(self, client, batch: int, ids: list[str]) -> None:
        replies = client.working_many(ids)
        alive, retry = renewable(replies)
        with self._lock:
            group = self._groups.get(batch)
            if group is None:
                return  # acknowledged meanwhile
            if not alive:
                del self._groups[batch]
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
                for batch, ids in due:
                    try:
                        self._renew(client, batch, ids)
                    except Exception as exc:  # keep trying: losing the thread means duplicates
                        log.warning("WORKING for batch %d failed: %s", batch, exc)
                        with self._lock:
                            if batch in self._groups:
                                self._groups[batch].due = time.monotonic() + 0.2
                if not due:
                    self._wake.wait(max(0.0, next_due - time.monotonic()))
        finally:
            client.close()
