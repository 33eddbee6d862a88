"""Produce/consume cycle load generator: delivered jobs/s and end-to-end latency.

Producers send jobs whose body starts with the send time; consumers fetch
up to 16 jobs per blocking request, compute now - send time for each, and
acknowledge all fetched ids in one command pipelined with the next fetch.
Producers and consumers run in this process, so they share the monotonic
clock and the latency needs no clock synchronisation.

Two modes:
- full load (``rate=None``): each producer keeps one batch of ``batch``
  jobs in flight, and producers pause while more than ``max_backlog`` jobs
  are queued but not yet delivered. Without that bound the faster side
  would fill the queue and the latency would measure the backlog's length.
- fixed rate: one pacer sends open-loop (it never waits for replies), so a
  slow server shows up as latency instead of a lower offered load. The
  producer connections are a pool, as in an application: each job goes out
  on a connection with nothing in flight, or on the least busy one when
  none is idle (a synchronous ADDJOB holds its connection until the
  replicas answer, so jobs queued behind it would wait for that too). The
  stamp is the actual send time, so the generator's own scheduling lag is
  not charged to the server; one pacer instead of a timer per connection
  keeps the generator's own CPU use low on a machine it shares with the
  servers.

Producer connections are ``ReplyStream``s: each reply is one call of
``_Producers.replied``, which counts it and sends a full-load producer's
next batch: no future, callback handle or task wakeup per job, which on two
shared cores is CPU taken from the servers being measured.

Only jobs delivered inside the measurement window (after a warm-up) count.
Producer and consumer ports are separate lists so the same generator
drives a federation (produce on node A, consume on node B).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import uvloop

from disque.tools.resp_client import (PipelinedClient, ReplyError, ReplyStream, connect,
                                      encode_bulk, encode_command, open_stream)

STAMP_DIGITS = 20
PACER_TICK_S = 0.001


class CycleError(RuntimeError):
    """The cycle could not run or measured nothing."""


def stamped_body(now_ns: int, size: int) -> bytes:
    """A job body of ``size`` bytes starting with ``now_ns`` as 20 decimal digits."""
    return (b"%0*d" % (STAMP_DIGITS, now_ns)).ljust(size, b"x")


def body_stamp(body: bytes) -> int:
    """The send time (monotonic ns) stored at the start of a stamped body."""
    return int(body[:STAMP_DIGITS])


def percentile(sorted_values: Sequence[int], p: float) -> int:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        raise ValueError("no values")
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


class QueueDialect(Protocol):
    """How one system produces, fetches and acknowledges jobs, as RESP bytes."""

    def produce(self, body: bytes) -> bytes:
        """One command that enqueues ``body``."""

    def produced(self, reply: object) -> bool:
        """Whether a produce reply means the job was accepted."""

    def fetch(self) -> bytes:
        """One blocking command that returns up to N jobs (or nil on timeout)."""

    def fetched(self, reply: object) -> tuple[list[bytes], list[bytes]]:
        """Bodies and ids (ids may be empty) of a fetch reply."""

    def ack(self, ids: list[bytes]) -> bytes | None:
        """One command acknowledging ``ids``, or None if the system needs none."""


def _fetch_reply(command: bytes, reply: Any) -> Any:
    """The reply of a fetch: jobs, or None after the timeout; an error reply fails the run."""
    if isinstance(reply, ReplyError):
        raise CycleError("%s failed: %s" % (command.decode(), reply))
    return reply


class DisqueDialect:
    """ADDJOB / GETJOB TIMEOUT t COUNT n / ACKJOB."""

    def __init__(self, queue: bytes, count: int = 16, timeout_ms: int = 100,
                 replicate: int | None = None) -> None:
        # ADDJOB's bytes around the body, so that a job costs one encode_bulk.
        tail = [b"0"] if replicate is None else [b"0", b"REPLICATE", b"%d" % replicate]
        self._head = b"*%d\r\n" % (3 + len(tail)) + encode_bulk(b"ADDJOB") + encode_bulk(queue)
        self._tail = b"".join(encode_bulk(arg) for arg in tail)
        self._fetch = encode_command(b"GETJOB", b"TIMEOUT", b"%d" % timeout_ms,
                                     b"COUNT", b"%d" % count, b"FROM", queue)

    def produce(self, body: bytes) -> bytes:
        """ADDJOB <queue> <body> 0 [REPLICATE n]."""
        return self._head + encode_bulk(body) + self._tail

    def produced(self, reply: object) -> bool:
        """A job id (bytes) means accepted; an error reply is a ReplyError value."""
        return isinstance(reply, bytes)

    def fetch(self) -> bytes:
        """GETJOB TIMEOUT t COUNT n FROM <queue>."""
        return self._fetch

    def fetched(self, reply: object) -> tuple[list[bytes], list[bytes]]:
        """GETJOB replies [[queue, id, body], ...] or nil after the timeout."""
        if _fetch_reply(b"GETJOB", reply) is None:
            return [], []
        return [job[2] for job in reply], [job[1] for job in reply]

    def ack(self, ids: list[bytes]) -> bytes | None:
        """ACKJOB <id> ... for everything one GETJOB returned."""
        return encode_command(b"ACKJOB", *ids)


class RedisListDialect:
    """LPUSH / BLMPOP ... COUNT n: the same cycle on redis-server lists, as a reference."""

    def __init__(self, key: bytes, count: int = 16, timeout_ms: int = 100) -> None:
        self._head = b"*3\r\n" + encode_bulk(b"LPUSH") + encode_bulk(key)
        self._fetch = encode_command(b"BLMPOP", b"%g" % (timeout_ms / 1000), b"1", key,
                                     b"RIGHT", b"COUNT", b"%d" % count)

    def produce(self, body: bytes) -> bytes:
        """LPUSH <key> <body>."""
        return self._head + encode_bulk(body)

    def produced(self, reply: object) -> bool:
        """LPUSH answers the new list length."""
        return isinstance(reply, int)

    def fetch(self) -> bytes:
        """BLMPOP <timeout> 1 <key> RIGHT COUNT n."""
        return self._fetch

    def fetched(self, reply: object) -> tuple[list[bytes], list[bytes]]:
        """BLMPOP replies [key, [elements]] or nil after the timeout."""
        if _fetch_reply(b"BLMPOP", reply) is None:
            return [], []
        return reply[1], []

    def ack(self, ids: list[bytes]) -> bytes | None:
        """Lists need no acknowledgement."""
        return None


@dataclass(frozen=True)
class CycleConfig:
    """Shape of one cycle run."""

    duration: float = 10.0
    warmup: float = 1.0
    rate: float | None = None  # jobs/s over all producers; None = full load
    producers: int = 4
    consumers: int = 4
    batch: int = 16  # full load: jobs per producer write
    max_backlog: int = 512  # full load: queued-but-undelivered jobs before producers pause
    body_bytes: int = 64
    drain_timeout: float = 10.0


@dataclass
class CycleResult:
    """What one cycle measured."""

    duration: float
    latencies_ns: list[int]  # sorted, jobs delivered inside the window
    sent: int
    produced: int
    produce_errors: int
    delivered: int
    acked: int

    @property
    def rate(self) -> float:
        """Jobs delivered per second inside the measurement window."""
        return len(self.latencies_ns) / self.duration

    def latency_ms(self, p: float) -> float:
        """End-to-end latency percentile in milliseconds."""
        return percentile(self.latencies_ns, p) / 1e6

    def details(self) -> dict[str, object]:
        """Counters for the report, so a lost or refused job is visible."""
        return {"window_s": self.duration, "delivered_in_window": len(self.latencies_ns),
                "sent": self.sent, "accepted": self.produced,
                "produce_errors": self.produce_errors, "delivered_total": self.delivered,
                "acked": self.acked}


class _Producers:
    """The producer connections, driven at full load or as a pool at a fixed rate."""

    def __init__(self) -> None:
        self.connections: list[ReplyStream] = []
        self.idle: list[ReplyStream] = []  # fixed rate: nothing in flight
        self.paused: list[ReplyStream] = []  # full load: waiting for room
        self.busy_turn = 0
        self.error: Exception | None = None
        self.cycle: _Cycle | None = None  # set once connected: the clock starts then

    async def connect(self, port: int) -> None:
        """Open one more producer connection."""
        conn = await open_stream(port, self.replied, self.lost)
        self.connections.append(conn)
        self.idle.append(conn)

    def replied(self, conn: ReplyStream, reply: object) -> None:
        """Count a produce reply; a connection with nothing left in flight
        sends its next batch (full load) or becomes idle (fixed rate)."""
        cycle = self.cycle
        assert cycle is not None
        if cycle.dialect.produced(reply):
            cycle.produced += 1
        else:
            cycle.produce_errors += 1
        if not conn.in_flight:
            if cycle.config.rate is None:
                self.next_batch(conn)
            else:
                self.idle.append(conn)

    def lost(self, conn: ReplyStream, exc: Exception | None) -> None:
        """A connection lost with jobs in flight fails the run instead of hanging it."""
        if conn.in_flight:
            self.error = ConnectionError("connection lost: %s" % (exc or "EOF"))

    def next_batch(self, conn: ReplyStream) -> None:
        """Full load: ``conn`` sends a batch, waits for room, or is done."""
        cycle = self.cycle
        assert cycle is not None
        now = time.monotonic_ns()
        if now >= cycle.window_end:
            cycle.producing -= 1
        elif cycle.produced - cycle.delivered >= cycle.config.max_backlog:
            self.paused.append(conn)
        else:
            batch = cycle.config.batch
            cycle.sent += batch
            conn.send(cycle.dialect.produce(stamped_body(now, cycle.config.body_bytes)) * batch,
                      batch)

    def resume(self) -> None:
        """Full load: paused connections go on while there is room."""
        cycle = self.cycle
        assert cycle is not None
        while self.paused and (cycle.produced - cycle.delivered < cycle.config.max_backlog
                               or time.monotonic_ns() >= cycle.window_end):
            self.next_batch(self.paused.pop())

    def send_one(self, payload: bytes) -> None:
        """Fixed rate: one job on an idle connection, else queued behind the
        next busy one in turn."""
        if self.idle:
            conn = self.idle.pop()
        else:
            conn = self.connections[self.busy_turn % len(self.connections)]
            self.busy_turn += 1
        conn.send(payload, 1)

    def in_flight(self) -> bool:
        """Some job sent has no reply yet."""
        if self.error is not None:
            raise self.error
        return any(conn.in_flight for conn in self.connections)

    def close(self) -> None:
        """Close every connection."""
        for conn in self.connections:
            conn.close()


class _Cycle:
    """Shared counters and the clock of one run; all coroutines run on one loop."""

    def __init__(self, config: CycleConfig, dialect: QueueDialect,
                 producers: _Producers) -> None:
        self.config = config
        self.dialect = dialect
        self.producers = producers
        now = time.monotonic_ns()
        self.window_start = now + int(config.warmup * 1e9)
        self.window_end = self.window_start + int(config.duration * 1e9)
        self.drain_deadline = self.window_end + int(config.drain_timeout * 1e9)
        self.producing = config.producers
        self.sent = self.produced = self.produce_errors = self.delivered = self.acked = 0
        self.latencies: list[int] = []

    def record(self, now: int, bodies: list[bytes]) -> None:
        """Jobs fetched at ``now``: count them, keep their latency if inside the window."""
        self.delivered += len(bodies)
        if self.window_start <= now < self.window_end:
            self.latencies.extend(now - body_stamp(b) for b in bodies)
        if self.producers.paused:
            self.producers.resume()

    def finished(self) -> bool:
        """Producers are done and everything accepted was delivered (or the drain timed out)."""
        return (self.producing == 0 and self.delivered >= self.produced) \
            or time.monotonic_ns() > self.drain_deadline

    async def produce_full(self) -> None:
        """Closed loop: each connection keeps one batch in flight (sent from
        its reply callback), paused while the backlog is at its bound."""
        producers = self.producers
        for conn in list(producers.connections):
            producers.next_batch(conn)
        while self.producing and time.monotonic_ns() < self.drain_deadline:
            producers.in_flight()  # raises if a connection was lost
            if producers.paused and time.monotonic_ns() >= self.window_end:
                producers.resume()  # the window closed while they waited: they are done
            await asyncio.sleep(PACER_TICK_S * 10)

    async def produce_paced(self, rate: float) -> None:
        """Open loop at ``rate`` jobs/s over a pool of connections (see the module doc)."""
        interval = 1e9 / rate
        due = time.monotonic_ns()
        produce, size = self.dialect.produce, self.config.body_bytes
        send_one = self.producers.send_one
        while (now := time.monotonic_ns()) < self.window_end:
            if now >= due:
                n = int((now - due) // interval) + 1
                self.sent += n
                body = produce(stamped_body(now, size))
                for _ in range(n):
                    send_one(body)
                due += n * interval
            # The loop's timers tick in milliseconds: a shorter sleep would spin.
            await asyncio.sleep(max(PACER_TICK_S, (due - time.monotonic_ns()) / 1e9))
        while self.producers.in_flight():
            await asyncio.sleep(PACER_TICK_S)
        self.producing = 0

    async def consume(self, client: PipelinedClient) -> None:
        """Fetch, and acknowledge the previous fetch in the same write, until the run drains."""
        dialect, fetch, ids = self.dialect, self.dialect.fetch(), []
        while True:
            ack = dialect.ack(ids) if ids else None
            if self.finished():
                if ack is not None:
                    self.count_acks(await client.request(ack, 1))
                return
            if ack is None:
                replies = await client.request(fetch, 1)
            else:
                replies = await client.request(ack + fetch, 2)
                self.count_acks(replies[:1])
            now = time.monotonic_ns()
            bodies, ids = dialect.fetched(replies[-1])
            if bodies:
                self.record(now, bodies)

    def count_acks(self, replies: list) -> None:
        """ACKJOB answers how many jobs it acknowledged."""
        if not isinstance(replies[0], int):
            raise CycleError("ACKJOB failed: %s" % replies[0])
        self.acked += replies[0]


async def _run(dialect: QueueDialect, producer_ports: Sequence[int],
               consumer_ports: Sequence[int], config: CycleConfig) -> CycleResult:
    producers = _Producers()
    consumers: list[PipelinedClient] = []
    try:
        for i in range(config.producers):
            await producers.connect(producer_ports[i % len(producer_ports)])
        for i in range(config.consumers):
            consumers.append(await connect(consumer_ports[i % len(consumer_ports)]))
        cycle = producers.cycle = _Cycle(config, dialect, producers)
        async with asyncio.timeout(config.warmup + config.duration + config.drain_timeout + 30):
            async with asyncio.TaskGroup() as tasks:
                for consumer in consumers:
                    tasks.create_task(cycle.consume(consumer))
                if config.rate is None:
                    tasks.create_task(cycle.produce_full())
                else:
                    tasks.create_task(cycle.produce_paced(config.rate))
    finally:
        producers.close()
        for client in consumers:
            client.close()
    if not cycle.latencies:
        raise CycleError("no job was delivered inside the measurement window")
    return CycleResult(config.duration, sorted(cycle.latencies), cycle.sent, cycle.produced,
                       cycle.produce_errors, cycle.delivered, cycle.acked)


def run(dialect: QueueDialect, producer_ports: Sequence[int], consumer_ports: Sequence[int],
        config: CycleConfig) -> CycleResult:
    """Run one cycle on a fresh uvloop event loop and return what it measured."""
    return uvloop.run(_run(dialect, producer_ports, consumer_ports, config))
