"""One client connection: bytes in, commands to the node, replies out.

The path of a request: ``ClientConnection.data_received`` (here) parses
the bytes with the ``RequestParser`` and holds what is read to
client-query-buffer-limit; ``ClientCommands._execute``
(``net/clientcommands``) runs the commands, in slices, and the replies
made in steps; ``ClientOutput`` (``net/clientoutput``) collects the
replies, writes them and holds them to the output limits; and
``OutputBatch.flush`` (``net/outputbatch``) writes every client's replies
once per loop turn, after the AOF. Reading also pauses while the
transport's write buffer is above its high-water mark, and a request
longer than a read is read one read per loop turn.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Protocol, cast

from disque.protocol import errors
from disque.commands.access import (PROTECTED_MODE_DENIED, is_loopback, needs_auth,
                                    protected_mode_refuses)
from disque.context.log import logger
from disque.net.clientcommands import (MAX_PENDING_COMMANDS, ClientCommands, CommandNode,
                                       CommandServer)
from disque.net.clientoutput import WRITE_HIGH_WATER
from disque.protocol.request import ARG_OVERHEAD, ProtocolError, RequestParser
from disque.protocol.request_hiredis import HiredisRequestParser
from disque.protocol.resp import error

if TYPE_CHECKING:
    from disque.config import Config

QUERY_BUFFER_EXCEEDED = ("ERR client-query-buffer-limit reached: a request may not make the "
                         "node hold more than %d bytes; closing the connection")
QUERY_BUFFER_UNAUTHENTICATED = ("NOAUTH Authentication required before sending more than %d "
                                "bytes of a request; closing the connection")
REQUEST_TIMEOUT_LOG = "Closing client %s: no byte of its unfinished request for %d s"


class ConnectionServer(CommandServer, Protocol):
    """What a client connection needs of the server that accepted it:
    ``disque.server.Server``, or the simulator's ``WireServer``."""

    # Counted by the connection (INFO stats).
    connections_received: int
    rejected_connections: int
    net_input_bytes: int

    @property
    def node(self) -> CommandNode:
        """The node the commands run on."""

    @property
    def config(self) -> Config:
        """Limits, protected mode, the unix socket's path."""

    @property
    def clients(self) -> dict[int, ClientConnection]:
        """The open connections by client ID (maxclients, CLIENT LIST)."""

    def next_client_id(self) -> int:
        """A new connection's ID."""

    def tune_tcp_socket(self, sock: socket.socket) -> None:
        """Socket options of a TCP client."""


class ClientConnection(asyncio.Protocol, ClientCommands):
    """asyncio protocol for one client: the reading side (``ClientCommands``
    runs what it reads, ``ClientOutput`` writes the replies)."""

    __slots__ = ("parser", "fd", "held_input")

    server: ConnectionServer

    def __init__(self, server: ConnectionServer) -> None:
        node = server.node
        ClientCommands.__init__(self, server.next_client_id(), node.state.now, server, node)
        self.parser: RequestParser = HiredisRequestParser(server.config.proto_max_bulk_len)
        self.fd = -1
        self.held_input: bytes | None = None  # read during CLIENT PAUSE, run when it ends

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream server gives its protocols stream transports; the base
        # class's signature names the wider type.
        stream = self.transport = cast(asyncio.Transport, transport)
        server = self.server
        server.connections_received += 1
        peer = stream.get_extra_info("peername")
        sock = stream.get_extra_info("socket")
        if sock is not None:
            self.fd = sock.fileno()
        if isinstance(peer, tuple):
            host = peer[0]
            self.addr = ("[%s]:%d" % (host, peer[1])) if ":" in host else "%s:%d" % peer[:2]
            self.local = is_loopback(host)
        else:
            self.addr = "%s:0" % (server.config.unixsocket or "unix")
            self.local = True
        self.tls = stream.get_extra_info("ssl_object") is not None
        if protected_mode_refuses(server.config, self.local):
            self.node.state.access_stats.protected_mode_denied += 1
            stream.write(PROTECTED_MODE_DENIED)
            stream.close()
            self.closing = True
            return
        if len(server.clients) >= server.config.maxclients:
            server.rejected_connections += 1
            stream.write(errors.MAX_CLIENTS)
            stream.close()
            self.closing = True
            return
        server.clients[self.id] = self
        stream.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            server.tune_tcp_socket(sock)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.output = None
        self.stream = None
        self.memory.forget(self)
        server = self.server
        if server.clients.pop(self.id, None) is None:
            self.transport = None
            return
        self.node.client_gone(self)
        server.arm_timer()
        self.transport = None  # break the protocol <-> transport cycle (the GC may not)

    def pause_writing(self) -> None:
        self.paused_for_output = True
        self._set_reading(False)

    def resume_writing(self) -> None:
        self.paused_for_output = False
        if self.noted_memory:
            self._note_memory()  # drained: the account's figure shrinks
        if self.blocked is None and self.pending is not None:
            self.resume()  # the rest of a pipeline held back by the full output
        elif self.protocol_error is None and (self.pending is None
                                              or len(self.pending) < MAX_PENDING_COMMANDS):
            self._set_reading(True)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return  # what a closed connection had in flight runs nothing (QUIT, POST)
        server = self.server
        if server.clients_paused:
            # A connection made during CLIENT PAUSE reads once before the
            # transport can be paused (it starts reading after connection_made).
            self.held_input = data if self.held_input is None else self.held_input + data
            transport = self.transport
            assert transport is not None  # asyncio reads only after connection_made
            transport.pause_reading()
            return
        server.net_input_bytes += len(data)
        self.atime = self.node.state.now
        commands: list[list[bytes]] = []
        try:
            self.parser.feed(data, commands)
        except ProtocolError as exc:
            self.protocol_error = str(exc)
            self._set_reading(False)
        if commands:
            if self.blocked is not None or self.pending is not None:
                self.pending = (self.pending or []) + commands
                self.read_ahead += sum([len(arg) + ARG_OVERHEAD for cmd in commands for arg in cmd])
                if len(self.pending) >= MAX_PENDING_COMMANDS:
                    self._set_reading(False)
            else:
                self._execute(commands)
        if self.protocol_error is not None and self.blocked is None and self.pending is None:
            self._protocol_error(self.protocol_error)
        elif not self.closing:
            cut = self.parser.held()
            held = cut + self.read_ahead
            if held:
                self._check_query_buffer(held)
            if cut and self.reading and not self.closing:
                # A request longer than a read (ACKJOB of 100,000 IDs): one
                # read of it per loop turn. libuv reads a socket up to 32
                # times in a row, and parsing 2 MB of small arguments held
                # every other client up for 60 ms.
                self._set_reading(False)
                self.batch.loop.call_soon(self._read_on)

    def _read_on(self) -> None:
        """Read the rest of a long request, unless reading stopped meanwhile
        for a reason of its own (full output, a pipeline's rest waiting, too
        much read ahead of a blocked command, a protocol error)."""
        pending = self.pending
        if (not self.reading and not self.closing and self.protocol_error is None
                and not self.paused_for_output
                and (pending is None or (self.blocked is not None
                                         and len(pending) < MAX_PENDING_COMMANDS))):
            self._set_reading(True)

    def _check_query_buffer(self, held: int) -> None:
        """Close a client whose input not yet run (an unfinished request, and
        what it sent while blocked) holds more than it may: the small
        allowance before it authenticated, else client-query-buffer-limit."""
        server = self.server
        config = server.config
        if held > config.unauthenticated_query_buffer_limit and needs_auth(config, self):
            server.limits.unauthenticated_buffer += 1
            self._close_for_limit(held, QUERY_BUFFER_UNAUTHENTICATED
                                  % config.unauthenticated_query_buffer_limit)
        elif held > config.client_query_buffer_limit:
            server.limits.query_buffer += 1
            self._close_for_limit(held, QUERY_BUFFER_EXCEEDED % config.client_query_buffer_limit)

    def _close_for_limit(self, held: int, message: str) -> None:
        logger.warning("Closing client %s: %d bytes held of requests not yet run. %s",
                       self.addr, held, message)
        self._set_reading(False)
        self._write(error(message))
        self.close()

    def describe(self, now_ms: int) -> str:
        """One CLIENT LIST line."""
        flags = ""
        if self.monitor:
            flags += "O"
        if self.blocked is not None:
            flags += "b"
        if self.close_after_reply or self.closing:
            flags += "c"
        if self.fd >= 0 and self.addr.startswith(self.server.config.unixsocket or "\0"):
            flags += "U"
        qbuf = self.parser.buffered()
        omem = self.reply_memory()
        events = "r" if self.reading else ""
        if omem:
            events += "w"
        return ("id=%d addr=%s fd=%d name=%s age=%d idle=%d flags=%s qbuf=%d qbuf-free=%d "
                "obl=0 oll=0 omem=%d events=%s cmd=%s" % (
                    self.id, self.addr, self.fd, self.name.decode("latin-1"),
                    (now_ms - self.ctime) // 1000, (now_ms - self.atime) // 1000,
                    flags or "N", qbuf, max(0, 32768 - qbuf), omem, events,
                    self.last_cmd.decode("latin-1")))
