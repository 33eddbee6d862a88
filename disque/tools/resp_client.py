"""The RESP client of the tools beside the server: ``disque-cluster`` and the
benchmark load generators.

Three parts share one request encoder and hiredis' reply parser:

- ``Connection``: a blocking socket for short administrative exchanges
  (one command, or a pipeline written at once); an error reply raises
  ``CommandError``.
- ``ReplyStream``: an ``asyncio.Protocol`` that writes pre-encoded requests
  and hands each reply, in order, to a callback. A load generator shares
  the cores with the servers it measures, so a reply costs one hiredis
  ``gets`` and one call: no future, task or streams layer per reply.
- ``PipelinedClient``: a ``ReplyStream`` whose ``request`` resolves to the
  replies of the commands it wrote, for callers that await.

The asynchronous parts leave error replies as ``hiredis.ReplyError`` values
rather than raising, so a load generator counts them and goes on. The user
client, with connection pools and cluster routing, is ``disque.client``; the
server's own parser is ``disque.protocol.request_hiredis``.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

import hiredis

Arg: TypeAlias = str | int | bytes
ReplyError = hiredis.ReplyError  # the type of an error reply's value
DEFAULT_HOST = "127.0.0.1"
RECV_BYTES = 65536


class CommandError(Exception):
    """A server answered a command with an error reply."""


def encode_bulk(arg: bytes) -> bytes:
    """One RESP bulk string: ``$<len>\\r\\n<arg>\\r\\n``."""
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


def encode_command(*args: Arg) -> bytes:
    """A command as a RESP array of bulk strings; str and int arguments are
    sent as their UTF-8 text, as redis-cli would."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if not isinstance(arg, (bytes, bytearray)):
            arg = str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


class ReplyParser:
    """Values of replies that arrive whole, such as the bytes an in-process
    node returns for one command."""

    __slots__ = ("_reader",)

    def __init__(self) -> None:
        self._reader = hiredis.Reader()

    def parse(self, data: bytes) -> Any:
        """The value of the complete reply ``data`` (an error reply is a ``ReplyError``)."""
        reader = self._reader
        reader.feed(data)
        value = reader.gets()
        if value is False:
            raise ValueError("incomplete RESP reply: %r" % data[:80])
        return value


# ------------------------------------------------------------------ blocking

class Connection:
    """A blocking connection to one server; use it as a context manager."""

    def __init__(self, port: int, host: str = DEFAULT_HOST, timeout: float | None = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._reader = hiredis.Reader()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def call(self, *args: Arg) -> Any:
        """Send one command and return its reply; an error reply raises ``CommandError``."""
        return self.pipeline([args])[0]

    def pipeline(self, commands: Iterable[Sequence[Arg]]) -> list[Any]:
        """Send every command in one write, then read their replies in order.
        All replies are read before an error reply raises ``CommandError``, so
        the connection stays usable."""
        request = [encode_command(*command) for command in commands]
        self.sock.sendall(b"".join(request))
        replies = [self._next_reply() for _ in request]
        for reply in replies:
            if isinstance(reply, ReplyError):
                raise CommandError(str(reply))
        return replies

    def send_only(self, *args: Arg) -> None:
        """Send a command whose reply may never come (SHUTDOWN closes the connection)."""
        self.sock.sendall(encode_command(*args))

    def _next_reply(self) -> Any:
        reader = self._reader
        while (reply := reader.gets()) is False:
            data = self.sock.recv(RECV_BYTES)
            if not data:
                raise ConnectionError("the server closed the connection")
            reader.feed(data)
        return reply


# ------------------------------------------------------------------ asyncio

ReplyCallback: TypeAlias = "Callable[[ReplyStream, Any], None]"
LostCallback: TypeAlias = "Callable[[ReplyStream, Exception | None], None]"


class ReplyStream(asyncio.Protocol):
    """One connection: ``send`` writes pre-encoded commands, and each reply
    goes to ``on_reply(stream, reply)`` in the order the commands were sent.
    ``in_flight`` counts the commands sent and not yet answered."""

    def __init__(self, on_reply: ReplyCallback, on_lost: LostCallback | None = None) -> None:
        self._on_reply = on_reply
        self._on_lost = on_lost
        self._reader = hiredis.Reader()
        self.transport: asyncio.Transport | None = None
        self.in_flight = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport for writes."""
        self.transport = transport  # type: ignore[assignment]

    def send(self, payload: bytes, count: int) -> None:
        """Write ``payload``, which holds ``count`` commands, in one write."""
        assert self.transport is not None
        self.in_flight += count
        self.transport.write(payload)

    def data_received(self, data: bytes) -> None:
        """Hand each complete reply to the callback."""
        reader, on_reply = self._reader, self._on_reply
        reader.feed(data)
        while (reply := reader.gets()) is not False:
            self.in_flight -= 1
            on_reply(self, reply)

    def connection_lost(self, exc: Exception | None) -> None:
        """Tell the owner, which decides whether the commands in flight fail its run."""
        if self._on_lost is not None:
            self._on_lost(self, exc)

    def close(self) -> None:
        """Close the connection."""
        if self.transport is not None:
            self.transport.close()


async def open_stream(port: int, on_reply: ReplyCallback, on_lost: LostCallback | None = None,
                      host: str = DEFAULT_HOST) -> ReplyStream:
    """An open ``ReplyStream`` to host:port."""
    _, stream = await asyncio.get_running_loop().create_connection(
        lambda: ReplyStream(on_reply, on_lost), host, port)
    return stream


class PipelinedClient(ReplyStream):
    """A ``ReplyStream`` whose ``request`` resolves to the list of its replies."""

    def __init__(self) -> None:
        super().__init__(self._collect, self._fail_pending)
        self._pending: deque[tuple[asyncio.Future, int, list]] = deque()

    def request(self, payload: bytes, count: int) -> asyncio.Future:
        """Write ``payload`` (``count`` pipelined commands); the future gets their replies."""
        future = asyncio.get_running_loop().create_future()
        self._pending.append((future, count, []))
        self.send(payload, count)
        return future

    def _collect(self, stream: ReplyStream, reply: Any) -> None:
        future, count, replies = self._pending[0]
        replies.append(reply)
        if len(replies) == count:
            self._pending.popleft()
            if not future.done():
                future.set_result(replies)

    def _fail_pending(self, stream: ReplyStream, exc: Exception | None) -> None:
        # A benchmark must not hang on a server that died.
        while self._pending:
            future = self._pending.popleft()[0]
            if not future.done():
                future.set_exception(ConnectionError("connection lost: %s" % (exc or "EOF")))


async def connect(port: int, host: str = DEFAULT_HOST) -> PipelinedClient:
    """An open ``PipelinedClient`` to host:port."""
    _, client = await asyncio.get_running_loop().create_connection(PipelinedClient, host, port)
    return client
