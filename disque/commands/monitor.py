"""MONITOR: stream every command processed by the node."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disque.protocol.argsplit import quote_arg
from disque.protocol.resp import OK

if TYPE_CHECKING:
    from disque.context.clients import ClientState
    from disque.node import Node


def format_monitor_line(now_us: int, client: ClientState, argv: list[bytes]) -> bytes:
    """``+<sec>.<usec> [<addr>] "arg" ...`` as a status reply."""
    args = " ".join(quote_arg(a) for a in argv)
    return ("+%d.%06d [%s] %s\r\n" % (now_us // 1_000_000, now_us % 1_000_000, client.addr,
                                      args)).encode()


def monitor(node: Node, client: ClientState, argv: list[bytes]) -> bytes:
    """Turn this connection into a monitor."""
    if not client.monitor:
        client.monitor = True
        node.monitors[client] = None
    return OK


TABLE: Final = (
           ("monitor", 1, "ar", monitor),
       )
