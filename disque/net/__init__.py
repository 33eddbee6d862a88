"""The network adapters: client connections, the cluster bus over TCP and its
authentication, and TLS for both."""

from __future__ import annotations

from typing import Any


# Typed Any: asyncio's stubs name str hosts only; uvloop, which runs the
# node, takes bytes as well.
def loop_host(host: str) -> Any:
    """``host`` as the event loop is given it: an ASCII name or address as
    bytes, which the loop resolves as they are. uvloop encodes a str host with
    the IDNA codec, whose first use loads unicodedata and stringprep: about
    1.5 ms of a node's start-up, for the same bytes as any ASCII host's."""
    return host.encode("ascii") if host.isascii() else host


def loop_hosts(hosts: list[str]) -> Any:
    """Listen addresses for the loop (``loop_host`` each); None for every address."""
    return [loop_host(host) for host in hosts] or None
