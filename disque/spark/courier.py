"""The stream reader's round trips to the node, on one thread beside Spark's.

Spark runs a micro-batch as: ``latestOffset`` (the reader fetches the
jobs), the offset log and ``commit`` of the previous batch (the reader
acknowledges its jobs), ``partitions``, then the executors. Fetching and
acknowledging there would leave Spark waiting on the node twice per batch.
The courier does both on its own thread and connection, in the order they
were asked for: ``commit`` hands it the ACKJOBs of a batch and returns, and
``partitions`` asks it to fetch the next batch, so the node answers while
the executors process the current one.
"""

from __future__ import annotations

import itertools
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from operator import itemgetter
from typing import Sequence

import pyarrow as pa

from disque.client import DisqueClient
from disque.spark.columns import BatchBuilder, queue_column
from disque.spark.keepalive import KeepAlive, first_working_delay
from disque.spark.options import ConnectionOptions

# Where each stream column sits in a GETJOB WITHCOUNTERS entry:
# [queue, id, body, "nacks", nacks, "additional-deliveries", additional deliveries].
_ID = itemgetter(1)
_ENTRY_COLUMNS = {"queue": itemgetter(0), "body": itemgetter(2), "nacks": itemgetter(4),
                  "additional_deliveries": itemgetter(6)}


@dataclass
class FetchedJobs:
    """Jobs from one fetch: their IDs for ACKJOB, their rows for Spark."""

    key: int  # the keep-alive group renewing them
    ids: list[bytes]
    rows: pa.RecordBatch

    def split(self, count: int, key: int) -> tuple["FetchedJobs", "FetchedJobs"]:
        """The first ``count`` jobs, and the rest under keep-alive group ``key``."""
        return (FetchedJobs(self.key, self.ids[:count], self.rows.slice(0, count)),
                FetchedJobs(key, self.ids[count:], self.rows.slice(count)))


class Courier:
    """Fetches and acknowledges jobs on a background thread; every call returns a Future."""

    def __init__(self, connection: ConnectionOptions, queues: Sequence[str], fetch_size: int,
                 builder: BatchBuilder, keepalive: KeepAlive | None,
                 keepalive_delay: float) -> None:
        self.connection = connection
        self.queues = list(queues)
        self.fetch_size = fetch_size
        self.builder = builder
        self.keepalive = keepalive
        self.keepalive_delay = keepalive_delay
        self.keys = itertools.count(1)
        # Fetched and not acknowledged yet, as the node sees it: only the courier's
        # thread touches it, in the order the fetches and ACKs were asked for.
        self._outstanding: set[bytes] = set()
        self._client: DisqueClient | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="disque-courier")

    def fetch(self, want: int) -> "Future[FetchedJobs | None]":
        """Up to ``want`` jobs (None if the queues are empty), kept alive from now on."""
        return self._thread.submit(self._fetch, want)

    def acknowledge(self, ids: list[bytes]) -> "Future[int]":
        """ACKJOB for ``ids``, after everything asked for before."""
        return self._thread.submit(self._acknowledge, ids)

    def queued(self) -> int:
        """QLEN summed over the queues (waits for the answer)."""
        return self._thread.submit(
            lambda: sum(self._connected().qlen(q) for q in self.queues)).result()

    def close(self) -> None:
        """Finish what was asked for, then drop the connection."""
        self._thread.shutdown(wait=True, cancel_futures=True)
        if self._client is not None:
            self._client.close()

    def _connected(self) -> DisqueClient:
        if self._client is None:
            self._client = self.connection.client()
        return self._client

    def _acknowledge(self, ids: list[bytes]) -> int:
        acked = self._connected().ack_jobs(ids)
        self._outstanding.difference_update(ids)
        return acked

    def _fetch(self, want: int) -> FetchedJobs | None:
        client = self._connected()
        entries = client.get_job_entries(*self.queues, want=want, count=self.fetch_size)
        ids = list(map(_ID, entries))
        if len(set(ids)) < len(ids) or not self._outstanding.isdisjoint(ids):
            # Requeued while in flight (its retry ran out before the first WORKING) and
            # handed out again: the batch holding it acknowledges it; Spark sees it once.
            entries = _unseen(entries, self._outstanding)
            ids = list(map(_ID, entries))
        if not entries:
            return None
        self._outstanding.update(ids)
        key = next(self.keys)
        if self.keepalive is not None:
            info = client.show(ids[0])
            retry = info.get("retry") if info is not None else None
            self.keepalive.track(key, ids, first_working_delay(retry, self.keepalive_delay))
        # One C-level pass per column (map over itemgetter), not a Python loop per job.
        columns: dict[str, list] = {name: list(map(pick, entries))
                                    for name, pick in _ENTRY_COLUMNS.items()}
        columns["id"] = ids
        columns["queue"] = queue_column(columns["queue"])
        return FetchedJobs(key, ids, self.builder.batch(columns, len(ids)))


def _unseen(entries: list[list], outstanding: set[bytes]) -> list[list]:
    """``entries`` without the jobs in ``outstanding``, each job once."""
    seen = set(outstanding)
    unseen = []
    for entry in entries:
        if entry[1] not in seen:
            seen.add(entry[1])
            unseen.append(entry)
    return unseen
