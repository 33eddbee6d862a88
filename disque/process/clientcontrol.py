"""What the process does to its open client connections beyond serving
them: CLIENT LIST, KILL and PAUSE, and the cron's timeouts (an idle
client, a request stalled mid-way)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Callable

from disque.context import log
from disque.context.log import logger
from disque.net.connection import REQUEST_TIMEOUT_LOG

if TYPE_CHECKING:
    from disque.config import Config
    from disque.context.clients import ClientState
    from disque.serving.interfaces import LimitCounters
    from disque.net.connection import ClientConnection


class ClientControl:
    """Admin and cron actions over the connections by ID (``clients``, the
    server's own dict, which connections add themselves to)."""

    def __init__(self, clients: dict[int, ClientConnection], config: Config,
                 limits: LimitCounters, loop: Callable[[], asyncio.AbstractEventLoop]) -> None:
        self.clients = clients
        self.config = config
        self.limits = limits
        self.loop = loop
        self.paused = False  # CLIENT PAUSE in force: connections do not read
        self.paused_until = 0.0  # monotonic seconds

    def describe(self, now_ms: int) -> bytes:
        """CLIENT LIST's text."""
        return "".join(c.describe(now_ms) + "\n" for c in self.clients.values()).encode()

    def kill(self, caller: ClientState, addr: str | None, client_id: int | None,
             skip_caller: bool) -> int:
        """CLIENT KILL: close the matching connections (the caller after its
        reply); return how many."""
        killed = 0
        for client in list(self.clients.values()):
            if addr is not None and client.addr != addr:
                continue
            if client_id is not None and client.id != client_id:
                continue
            if client is caller and skip_caller:
                continue
            if client is caller:
                client.close_after_reply = True
            else:
                client.close()
            killed += 1
        return killed

    def pause(self, ms: int) -> None:
        """CLIENT PAUSE: stop reading from every connection for ``ms``."""
        # A shorter pause given during a longer one does not end it early.
        self.paused_until = max(self.paused_until, time.monotonic() + ms / 1000)
        self.paused = True
        for client in self.clients.values():
            transport = client.transport
            assert transport is not None  # a listed client is connected
            transport.pause_reading()
        self.loop().call_later(ms / 1000, self._resume)

    def _resume(self) -> None:
        remaining = self.paused_until - time.monotonic()
        if remaining > 0:  # a longer pause came, or the timer fired early
            self.loop().call_later(remaining, self._resume)
            return
        self.paused = False
        for client in list(self.clients.values()):
            held = client.held_input
            if held is not None:
                client.held_input = None
                client.data_received(held)
        for client in self.clients.values():
            transport = client.transport
            if client.reading and not client.closing:
                assert transport is not None  # a listed client is connected
                transport.resume_reading()

    def close_idle(self, now_ms: int) -> None:
        """timeout: close a client idle that long (not blocked, not MONITOR)."""
        timeout = self.config.timeout
        if not timeout:
            return
        limit = now_ms - timeout * 1000
        for client in list(self.clients.values()):
            if client.atime < limit and client.blocked is None and not client.monitor:
                logger.log(log.VERBOSE, "Closing idle client %s", client.addr)
                client.close()

    def close_stalled(self, now_ms: int) -> None:
        """client-request-timeout: close a client holding part of a request
        that received no byte for that long (slowloris); a slow upload that
        keeps sending is never cut, as the time counts from its last byte."""
        timeout = self.config.client_request_timeout
        if not timeout:
            return
        limit = now_ms - timeout * 1000
        for client in list(self.clients.values()):
            if client.atime < limit and not client.closing and client.parser.held():
                logger.warning(REQUEST_TIMEOUT_LOG, client.addr, timeout)
                self.limits.request_timeout += 1
                client.close()
