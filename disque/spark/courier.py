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

import gc
import itertools
import secrets
import socket
import struct
import threading
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
        # A reply is a list and six other objects per job, gone once the columns are built.
        # With the cyclic collector on, they trigger collections that walk them and the
        # process's whole heap (the runner holds all of pyspark): every other 50,000-job
        # fetch took 2-3 times as long. Nothing here makes cycles.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._fetch_now(want)
        finally:
            if enabled:
                gc.enable()

    def _fetch_now(self, want: int) -> FetchedJobs | None:
        client = self._connected()
        entries = client.get_job_entries(*self.queues, want=want, count=self.fetch_size)
        ids = list(map(_ID, entries))
        fresh = set(ids)
        if len(fresh) < len(ids) or not self._outstanding.isdisjoint(fresh):
            # Requeued while in flight (its retry ran out before the first WORKING) and
            # handed out again: the batch holding it acknowledges it; Spark sees it once.
            entries = _unseen(entries, self._outstanding)
            ids = list(map(_ID, entries))
            fresh = set(ids)
        if not entries:
            return None
        self._outstanding |= fresh
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


# -- the partitions' rows, from the driver straight to the executors -------------------

# A pull: the 16-byte token; the answer: the length (8 bytes, big-endian, -1 for a token the
# driver no longer holds), then that many bytes of Arrow IPC stream.
TOKEN_BYTES = 16
_LENGTH = struct.Struct(">q")
PULL_TIMEOUT = 60.0


class BatchServer:
    """Serves the Arrow IPC bytes of each planned partition to the executor that reads it.

    Shipping the rows inside the pickled InputPartition takes them through the JVM twice (the
    planner's reply, then the task and an Arrow row on its way to the Python worker): about a
    fifth of the reader's Spark-side CPU per job. Here the partition carries a random token
    and the executor's ``read()`` pulls the bytes from this thread of the driver-side reader
    over one TCP connection. A partition stays served until its batch is acknowledged, so a
    retried task finds it again."""

    def __init__(self, bind: str = "", advertise: str | None = None) -> None:
        self._listener = socket.create_server((bind, 0), backlog=64)
        self.address = (advertise or bind or socket.getfqdn(), self._listener.getsockname()[1])
        self._held: dict[bytes, tuple[int, bytes]] = {}  # token -> (batch, IPC bytes)
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="disque-batch-server",
                                        daemon=True)
        self._thread.start()

    def hold(self, batch: int, data: bytes) -> bytes:
        """Serve ``data`` (of micro-batch ``batch``) until ``release``; returns its token."""
        token = secrets.token_bytes(TOKEN_BYTES)
        with self._lock:
            self._held[token] = (batch, data)
        return token

    def release(self, last: int) -> None:
        """Stop serving the partitions of every batch up to ``last`` (acknowledged)."""
        with self._lock:
            for token in [t for t, (b, _) in self._held.items() if b <= last]:
                del self._held[token]

    def held(self) -> int:
        with self._lock:
            return len(self._held)

    def close(self) -> None:
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() below on Linux
        except OSError:
            pass
        self._listener.close()
        self._thread.join(timeout=5)
        with self._lock:
            self._held.clear()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), name="disque-batch-send",
                             daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(PULL_TIMEOUT)
                token = _recv_exactly(conn, TOKEN_BYTES)
                with self._lock:
                    entry = self._held.get(bytes(token))
                if entry is None:
                    conn.sendall(_LENGTH.pack(-1))
                    return
                data = entry[1]
                conn.sendall(_LENGTH.pack(len(data)))
                conn.sendall(data)
            except OSError:
                pass  # the task went away; a retry pulls again


def pull_batch(address: tuple[str, int], token: bytes) -> bytearray:
    """The bytes ``BatchServer`` holds under ``token`` (on an executor)."""
    try:
        conn = socket.create_connection(tuple(address), timeout=PULL_TIMEOUT)
    except OSError as exc:
        raise ConnectionError(
            "cannot reach the driver's disque reader at %s:%d for this partition's rows (%s); "
            "set option driverHost to an address executors can reach, or option "
            "transport=partition to ship the rows inside the partitions" % (*address, exc)
        ) from exc
    with conn:
        conn.sendall(token)
        (length,) = _LENGTH.unpack(_recv_exactly(conn, _LENGTH.size))
        if length < 0:
            raise RuntimeError(
                "the driver's disque reader at %s:%d no longer holds this partition (its "
                "batch was acknowledged, or the query restarted); its jobs are delivered again "
                "after their RETRY if they were not acknowledged" % tuple(address))
        return _recv_exactly(conn, length)


def _recv_exactly(conn: socket.socket, size: int) -> bytearray:
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = conn.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("connection closed after %d of %d bytes" % (got, size))
        got += n
    return data
