"""A minimal pipelining RESP client on ``asyncio.Protocol`` with hiredis parsing.

The load generator shares two cores with the server it measures, so the
client side must cost far less per job than the server: no streams layer,
one hiredis ``Reader`` per connection, and a request is one ``write`` of
pre-encoded bytes answered by a known number of replies in order.
Error replies come back as ``hiredis.ReplyError`` values, not exceptions,
so the caller can count them.
"""

from __future__ import annotations

import asyncio
from collections import deque

import hiredis


def bulk(arg: bytes) -> bytes:
    """One RESP bulk string: ``$<len>\\r\\n<arg>\\r\\n``."""
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


def encode(*args: bytes) -> bytes:
    """A command as a RESP array of bulk strings."""
    return b"*%d\r\n" % len(args) + b"".join(bulk(a) for a in args)


class RespClient(asyncio.Protocol):
    """One connection; ``request`` resolves to the list of its replies."""

    def __init__(self) -> None:
        self._reader = hiredis.Reader()
        self._pending: deque[tuple[asyncio.Future, int, list]] = deque()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport for writes."""
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        """Hand each complete reply to the oldest pending request."""
        reader, pending = self._reader, self._pending
        reader.feed(data)
        while (reply := reader.gets()) is not False:
            future, count, replies = pending[0]
            replies.append(reply)
            if len(replies) == count:
                pending.popleft()
                if not future.done():
                    future.set_result(replies)

    def connection_lost(self, exc: Exception | None) -> None:
        """Fail whatever is still waiting: a benchmark must not hang on a dead server."""
        while self._pending:
            future = self._pending.popleft()[0]
            if not future.done():
                future.set_exception(ConnectionError("connection lost: %s" % (exc or "EOF")))

    def request(self, payload: bytes, count: int) -> asyncio.Future:
        """Write ``payload`` (``count`` pipelined commands); the future gets their replies."""
        assert self._transport is not None
        future = asyncio.get_running_loop().create_future()
        self._pending.append((future, count, []))
        self._transport.write(payload)
        return future

    def close(self) -> None:
        """Close the connection."""
        if self._transport is not None:
            self._transport.close()


async def connect(port: int, host: str = "127.0.0.1") -> RespClient:
    """An open ``RespClient`` to host:port."""
    _, client = await asyncio.get_running_loop().create_connection(RespClient, host, port)
    return client
