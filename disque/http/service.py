"""The node's HTTP listener on metrics-port: /metrics and the dashboard.

aiohttp serves it on the node's own event loop, so a scrape reads the
node's state between two inputs, with no lock and no thread. The listening
sockets are plain asyncio servers that ``Server`` closes with its client
listeners; ``close`` then ends the connections still open (Prometheus
keeps one alive between scrapes). With ``tls-port`` set, the port speaks
HTTPS with the client port's certificate (``Server._start_http``).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client.exposition import choose_encoder

from disque.http import actions, dashboard
from disque.http.hosts import HostCheck
from disque.http.metrics import server_registry
from disque.context.log import logger

if TYPE_CHECKING:
    from disque.http.observed import DashboardServer

METRICS_PATH = "/metrics"
ACCEPT = "Accept"
# At shutdown a request still running gets this long (a scrape takes milliseconds).
SHUTDOWN_TIMEOUT_S = 1.0


class HttpService:
    """The aiohttp application of metrics-port and its listeners."""

    def __init__(self, server: DashboardServer) -> None:
        self.server = server
        self.registry = server_registry(server)
        self.runner: web.AppRunner | None = None

    def build_app(self) -> web.Application:
        """/metrics here, the dashboard's routes from disque.http.dashboard;
        every request's ``Host`` checked first (disque.http.hosts)."""
        app = web.Application(client_max_size=actions.MAX_BODY,
                              middlewares=[HostCheck(self.server.config).middleware])
        app.router.add_get(METRICS_PATH, self.metrics)
        dashboard.add_routes(app, self.server)
        return app

    async def listen(self, hosts: list[str] | None, port: int, backlog: int,
                     context: ssl.SSLContext | None = None,
                     handshake_timeout: float | None = None) -> asyncio.AbstractServer:
        """Start serving on ``port`` at ``hosts`` (None: every address), over
        TLS with ``context``; OSError when the port cannot be bound."""
        runner = self.runner
        if runner is None:
            # Errors in a handler go to the server's log; no access log.
            runner = web.AppRunner(self.build_app(), handle_signals=False, access_log=None,
                                   logger=logger, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
            await runner.setup()
            self.runner = runner
        protocol_factory = runner.server
        assert protocol_factory is not None  # AppRunner.setup() made it
        loop = asyncio.get_running_loop()
        return await loop.create_server(protocol_factory, hosts, port, backlog=backlog,
                                        reuse_address=True, ssl=context,
                                        ssl_handshake_timeout=handshake_timeout)

    async def close(self) -> None:
        """End the open HTTP connections (the listeners are closed by then)."""
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def metrics(self, request: web.Request) -> web.Response:
        """The Prometheus exposition, in the format the scraper accepts."""
        encoder, content_type = choose_encoder(request.headers.get(ACCEPT, ""))
        return web.Response(body=encoder(self.registry), headers={"Content-Type": content_type})
