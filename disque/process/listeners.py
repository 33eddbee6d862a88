"""The node's client-facing listeners: the TCP port, the TLS port, the unix
socket and the metrics port's HTTP service. They are bound while the
server starts and serve once the node may answer (``serve``): a node that
answers PING is reachable on the bus, as the original's is."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from typing import TYPE_CHECKING, Callable, Protocol

from disque.net import loop_hosts
from disque.process.startup import StartupError, cannot_listen

if TYPE_CHECKING:
    from disque.config import Config
    from disque.net.connection import ClientConnection
    from disque.net.tls import HandshakeFailures

DEFAULT_TLS_HANDSHAKE_TIMEOUT = 60.0  # asyncio's, when client-request-timeout is 0


class HttpListener(Protocol):
    """The metrics port's service (``disque.http.service.HttpService``), as
    the listeners open it."""

    async def listen(self, hosts: list[str] | None, port: int, backlog: int,
                     context: ssl.SSLContext | None,
                     handshake_timeout: float | None) -> asyncio.AbstractServer:
        """Bind the HTTP listener, serving at once."""


class Listeners:
    """Every listener of the process but the bus's, closed together."""

    def __init__(self, config: Config, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.loop = loop
        self.servers: list[asyncio.AbstractServer] = []
        self.tls_handshakes: HandshakeFailures | None = None  # tls-port's failed handshakes

    async def open_clients(self, factory: Callable[[], ClientConnection]) -> None:
        """Bind the TLS port, the TCP port and the unix socket, without serving yet."""
        config = self.config
        if config.tls_port:
            await self._open_tls(factory)
        if config.port:
            try:
                self.servers.append(await self.loop.create_server(
                    factory, loop_hosts(config.bind), config.port, backlog=config.tcp_backlog,
                    reuse_address=True, start_serving=False))
            except OSError as exc:
                raise cannot_listen("Server TCP", config.bind, config.port, exc) from None
        if config.unixsocket:
            await self._open_unix(factory)

    async def _open_tls(self, factory: Callable[[], ClientConnection]) -> None:
        """TLS on tls-port beside the plain port: the same connection class on
        the same loop; the handshake is bounded by client-request-timeout."""
        from disque.net import tls  # loaded only by a node that uses TLS
        config = self.config
        self.tls_handshakes = tls.HandshakeFailures(config.tls_port)
        try:
            context = tls.server_context(config, failures=self.tls_handshakes)
        except tls.TlsConfigError as exc:
            raise StartupError("Can't configure TLS: %s" % exc) from None
        try:
            self.servers.append(await self.loop.create_server(
                factory, loop_hosts(config.bind), config.tls_port, backlog=config.tcp_backlog,
                reuse_address=True, ssl=context, ssl_handshake_timeout=self._handshake_timeout(),
                start_serving=False))
        except OSError as exc:
            raise cannot_listen("Server TLS", config.bind, config.tls_port, exc) from None

    async def _open_unix(self, factory: Callable[[], ClientConnection]) -> None:
        config = self.config
        try:
            os.unlink(config.unixsocket)
        except FileNotFoundError:
            pass
        try:
            self.servers.append(await self.loop.create_unix_server(
                factory, config.unixsocket, backlog=config.tcp_backlog, start_serving=False))
        except OSError as exc:
            raise StartupError("Opening Unix socket %s: %s" % (config.unixsocket, exc)) from None
        if config.unixsocketperm:
            os.chmod(config.unixsocket, config.unixsocketperm)

    async def open_http(self, http: HttpListener) -> None:
        """Serve /metrics and the dashboard on metrics-port, at the client
        port's addresses (over TLS when tls-port is set)."""
        config = self.config
        context = None
        handshake_timeout = None
        if config.tls_port:
            from disque.net import tls  # loaded only by a node that uses TLS
            # HTTPS with the client port's certificate. Browsers and scrapers are
            # not asked for a certificate, whatever tls-auth-clients says: the
            # dashboard's actions need an ACL login (docs/dashboard.md).
            try:
                context = tls.server_context(config, auth_clients="no")
            except tls.TlsConfigError as exc:
                raise StartupError("Can't configure TLS: %s" % exc) from None
            handshake_timeout = self._handshake_timeout()
        try:
            self.servers.append(await http.listen(config.bind or None, config.metrics_port,
                                                  config.tcp_backlog, context,
                                                  handshake_timeout))
        except OSError as exc:
            raise cannot_listen("the metrics HTTP", config.bind, config.metrics_port,
                                exc) from None

    def _handshake_timeout(self) -> float:
        return self.config.client_request_timeout or DEFAULT_TLS_HANDSHAKE_TIMEOUT

    async def serve(self) -> None:
        """Start accepting (those already serving stay so)."""
        for server in self.servers:
            if not server.is_serving():
                await server.start_serving()

    def close(self) -> None:
        """Stop accepting on every listener; the unix socket's file goes."""
        for server in self.servers:
            server.close()
        if self.config.unixsocket:
            try:
                os.unlink(self.config.unixsocket)
            except OSError:
                pass


def tune_tcp_socket(sock: socket.socket, keepalive: int) -> None:
    """A TCP client's options: TCP_NODELAY always, keepalive probes every
    ``keepalive`` seconds when set (tcp-keepalive)."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if keepalive > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, keepalive)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, keepalive // 3))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    except OSError:
        pass
