"""One client connection: the asyncio protocol around ``ClientCommands``.

What a connection does with the bytes it reads is the compiled core's
(``disque/serving``): ``ClientCommands.data_received`` parses them and
runs the commands, in slices, and the replies made in steps;
``ClientOutput`` collects the replies, writes them and holds them to the
output limits; ``OutputBatch.flush`` writes every client's replies once
per loop turn, after the AOF. This class adds what only asyncio gives: the
connection accepted (protected mode, maxclients, socket options) and lost,
the transport's flow control (reading pauses while its write buffer is
above its high-water mark), and CLIENT LIST's line.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Protocol, cast

from disque.protocol import errors
from disque.commands.access import PROTECTED_MODE_DENIED, is_loopback, protected_mode_refuses
from disque.serving.commands import MAX_PENDING_COMMANDS, ClientCommands
from disque.serving.interfaces import ServingNode, ServingServer
from disque.serving.output import WRITE_HIGH_WATER

REQUEST_TIMEOUT_LOG = "Closing client %s: no byte of its unfinished request for %d s"


class ConnectionServer(ServingServer, Protocol):
    """What a client connection needs of the server that accepted it:
    ``disque.server.Server``, or the simulator's ``WireServer``."""

    # Counted by the connection (INFO stats).
    connections_received: int
    rejected_connections: int

    @property
    def node(self) -> ServingNode:
        """The node the commands run on."""

    @property
    def clients(self) -> dict[int, ClientConnection]:
        """The open connections by client ID (maxclients, CLIENT LIST)."""

    def next_client_id(self) -> int:
        """A new connection's ID."""

    def tune_tcp_socket(self, sock: socket.socket) -> None:
        """Socket options of a TCP client."""


class ClientConnection(ClientCommands, asyncio.Protocol):
    """asyncio protocol for one client (``ClientCommands`` runs what it
    reads, ``ClientOutput`` writes the replies)."""

    __slots__ = ("fd",)

    server: ConnectionServer

    def __init__(self, server: ConnectionServer) -> None:
        node = server.node
        ClientCommands.__init__(self, server.next_client_id(), node.state.now, server, node)
        self.fd = -1

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
