"""Which ``Host`` the metrics port answers to, against DNS rebinding.

A page of another site can have its own name resolve to the node's address
and then read the node's answers as its own origin: the browser sends that
name in ``Host``. So the port answers only to the names and addresses that
are the node's (docs/dashboard.md "Host names"):

- what ``bind`` lists, and any IP address when ``bind`` is unset or a
  wildcard (the node listens on every address); loopback always;
- ``localhost`` and this machine's host name;
- what ``dashboard-hosts`` lists (a name a proxy or DNS gives the node;
  ``*``: any, which turns the check off).

Anything else is refused with 421 before a handler runs, /metrics included
(a scraper that reaches the node by a DNS name needs that name listed).
A request without ``Host`` (HTTP/1.0, scripts) is no browser's and passes.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import hdrs, web

from disque.context.log import LogThrottle, logger

if TYPE_CHECKING:
    from disque.config import Config

ANY_HOST = "*"
LOCAL_NAMES = frozenset(("localhost", "localhost.localdomain"))
WILDCARD_BINDS = frozenset(("0.0.0.0", "::", "*", ""))
MISDIRECTED = 421
REFUSED_TEXT = ("This node's dashboard does not answer to the host name in this request. "
                "If it is the node's, add it to dashboard-hosts (docs/dashboard.md).\n")
REFUSED_LOG_MS = 60_000  # one log line a minute about refused hosts
_MAX_LOGGED = 100  # characters of a refused Host the log shows

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def host_part(header: str) -> str:
    """The host of a ``Host`` header, lower-case, without port or brackets."""
    text = header.strip().lower()
    if text.startswith("["):
        return text[1:text.find("]")] if "]" in text else text[1:]
    if text.count(":") == 1:
        return text.partition(":")[0]
    return text


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def own_names() -> frozenset[str]:
    """This machine's names: its host name, short and as given."""
    name = socket.gethostname().lower()
    return frozenset((name, name.partition(".")[0]))


class HostCheck:
    """Refuses requests whose ``Host`` is not one of the node's
    (``middleware``); reads the config at each request, so CONFIG SET
    dashboard-hosts applies at once."""

    def __init__(self, config: Config, machine_names: frozenset[str] | None = None) -> None:
        self.config = config
        self.machine_names = machine_names if machine_names is not None else own_names()
        self.throttle = LogThrottle(REFUSED_LOG_MS)

    def allows(self, host: str) -> bool:
        """``host`` (a ``Host`` header's host part) names this node."""
        config = self.config
        listed = config.dashboard_hosts
        binds = config.bind
        if ANY_HOST in listed or host in listed or "[%s]" % host in listed or host in binds:
            return True
        address = _ip(host)
        if address is None:
            return host in LOCAL_NAMES or host in self.machine_names
        if address.is_loopback:
            return True
        if not binds or any(bind in WILDCARD_BINDS for bind in binds):
            return True
        return any(_ip(bind) == address for bind in binds)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """421 for a request to a host that is not this node's."""
        header = request.headers.get(hdrs.HOST)
        if header is None or self.allows(host_part(header)):
            return await handler(request)
        held = self.throttle.admit(int(time.monotonic() * 1000))
        if held >= 0:
            logger.warning("Dashboard: refused a request from %s for host %r, not one of this "
                           "node's (dashboard-hosts; %d more not logged since the last report)",
                           request.remote, header[:_MAX_LOGGED], held)
        return web.Response(status=MISDIRECTED, text=REFUSED_TEXT,
                            headers={"Cache-Control": "no-store"})
