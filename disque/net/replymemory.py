"""maxmemory-clients: what replies waiting for their clients hold, in total.

A client's replies wait in its transport's write buffer until it reads
them, and a reply made in steps (``commands/streams.py``) holds what it has
still to send. client-output-buffer-limit bounds one client; this bounds
all of them together. Past the limit, the client holding the most is
closed, then the next, until the total is under it (Redis 7's client
eviction), each one logged (at most once a second) and counted in INFO
limits.

The total is kept without visiting every client each loop turn: a
client's figure is taken after each write to it, and it can only shrink
in between (the transport drains), so the total kept is never below the
truth. Only when it passes the limit are the figures taken again, and
only from the clients holding something.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from disque.config import Config
from disque.context.log import LogThrottle, logger
from disque.serving.interfaces import MemoryHolder

CLOSE_LOG_INTERVAL_MS = 1000
CLOSED_LOG = ("Client %s closed: its replies not yet sent held %d bytes, the most of any client, "
              "while all clients' held %d, more than maxmemory-clients (%d)%s")


class ClosedCounter(Protocol):
    """Where the closings are counted (``LimitCounters``)."""

    client_memory: int


def memory_limit(config: Config) -> int:
    """maxmemory-clients in bytes (0: no limit): a byte value, or its
    percentage of maxmemory."""
    amount, percent = config.maxmemory_clients
    return amount if not percent else config.maxmemory * percent // 100


class ReplyMemory:
    """The account of every client's replies not yet sent, and the limit."""

    __slots__ = ("loop", "config", "counters", "holding", "total", "check_due", "log")

    def __init__(self, loop: asyncio.AbstractEventLoop, config: Config,
                 counters: ClosedCounter) -> None:
        self.loop = loop
        self.config = config
        self.counters = counters
        self.holding: set[MemoryHolder] = set()  # clients whose figure is not 0
        self.total = 0
        self.check_due = False
        self.log = LogThrottle(CLOSE_LOG_INTERVAL_MS)

    def note(self, client: MemoryHolder, held: int) -> None:
        """``client``'s replies hold ``held`` bytes now (after a write to it)."""
        self._set(client, held)
        if not self.check_due and self.total > memory_limit(self.config) > 0:
            # Between callbacks: never in the middle of a client's commands.
            self.check_due = True
            self.loop.call_soon(self.enforce)

    def check(self) -> None:
        """From the cron: close clients now if the total is over the limit
        (lowered by CONFIG SET, say), though nothing was written since."""
        if self.total > memory_limit(self.config) > 0:
            self.enforce()

    def forget(self, client: MemoryHolder) -> None:
        """``client`` is gone, with what it held."""
        self.total -= client.noted_memory
        client.noted_memory = 0
        self.holding.discard(client)

    def enforce(self) -> None:
        """Take every figure again; while the total is over the limit, close
        the client holding the most."""
        self.check_due = False
        limit = memory_limit(self.config)
        if not limit:
            return
        for client in list(self.holding):
            self._set(client, client.reply_memory())
        while self.total > limit and self.holding:
            client = max(self.holding, key=_held)
            held, total = client.noted_memory, self.total
            self.forget(client)
            self.counters.client_memory += 1
            unlogged = self.log.admit(time.monotonic_ns() // 1_000_000)
            if unlogged >= 0:
                logger.warning(CLOSED_LOG, client.addr, held, total, limit,
                               " (%d more closed since the last report)" % unlogged
                               if unlogged else "")
            client.close_for_memory()

    def _set(self, client: MemoryHolder, held: int) -> None:
        self.total += held - client.noted_memory
        client.noted_memory = held
        if held:
            self.holding.add(client)
        else:
            self.holding.discard(client)


def _held(client: MemoryHolder) -> int:
    return client.noted_memory
