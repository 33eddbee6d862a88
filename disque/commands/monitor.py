"""MONITOR: stream every command processed by the node (the lines are
``commands.access.format_monitor_line``, fed by ``Node.call``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disque.protocol.resp import OK

if TYPE_CHECKING:
    from disque.context.clients import ClientState
    from disque.state.nodestate import NodeState


def monitor(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """Turn this connection into a monitor."""
    if not client.monitor:
        client.monitor = True
        node.monitors[client] = None
    return OK


TABLE: Final = (
           ("monitor", 1, "ar", monitor),
       )
