"""What the node core asks of the cluster bus (the I/O side).

``disque.net.bus`` implements it with asyncio sockets and
``tests/sim`` with a simulated network. This base class is the bus of a
node that has none (unit tests): every request is accepted and nothing
is ever delivered.
"""

from __future__ import annotations

from disque.cluster.wire import Wire


class Link:
    """Where a bus message came from.

    ``node_id`` is set when the message arrived on this node's own outbound
    link to that node (possibly a handshake node's temporary ID); it is None
    for inbound connections. Addresses are the socket's, never the message's.
    """

    __slots__ = ("node_id", "peer_ip", "local_ip", "handle")

    def __init__(self, node_id: bytes | None, peer_ip: str, local_ip: str,
                 handle: object = None) -> None:
        self.node_id = node_id
        self.peer_ip = peer_ip
        self.local_ip = local_ip
        self.handle = handle  # the transport's own connection object


class BusTransport:
    """Outbound links and message delivery for one node."""

    # A transport that sends bytes gives the node its Wire: the Outbox
    # then queues packed messages there, without a call per message into
    # the transport (``send`` is for transports of decoded messages).
    wire: Wire | None = None

    def connect(self, node_id: bytes, ip: str, port: int) -> None:
        """Open an outbound link to the bus port ``ip:port`` for ``node_id``.

        The transport later calls ``node.link_up(node_id, link)`` or
        ``node.link_down(node_id)``."""

    def send(self, node_id: bytes, msg: dict) -> None:
        """Send on the outbound link of ``node_id`` (dropped if there is none)."""

    def reply(self, link: Link, msg: dict) -> None:
        """Answer on the connection ``link`` came from (PONG to a PING/MEET)."""

    def close(self, node_id: bytes) -> None:
        """Drop the outbound link of ``node_id`` (it is reconnected by the cron)."""

    def rename(self, old_id: bytes, new_id: bytes) -> None:
        """A handshake node got its real ID: its link now belongs to ``new_id``."""
