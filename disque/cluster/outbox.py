"""Where the core's bus messages go out: to one node, to a job's holders, to all.

Sending is best effort: a node without an established link is skipped,
and the failure detector and the retry timers make up for it (spec:
cluster-bus.md §1). The transport behind it is the bus adapter in a
server, the simulated network in tests/sim, nothing in unit tests.
"""

from __future__ import annotations

from disque.cluster import messages as m
from disque.cluster.membership import Membership
from disque.cluster.transport import BusTransport, Link
from disque.cluster.wire import Wire
from disque.jobs.job import Job
from disque.context.runtime import Runtime


def _wire_of(transport: BusTransport) -> Wire | None:
    """The transport's Wire; test doubles that only log messages have none."""
    wire: Wire | None = getattr(transport, "wire", None)
    return wire


class Outbox:
    """Everything the core asks of the cluster bus: messages out, links to
    open and close, and the header the transport puts on each frame."""

    __slots__ = ("transport", "wire", "membership", "runtime", "port", "_header", "sent")

    def __init__(self, runtime: Runtime, membership: Membership, transport: BusTransport,
                 port: int) -> None:
        self.transport = transport
        self.wire = _wire_of(transport)
        self.membership = membership
        self.runtime = runtime
        self.port = port
        self._header: dict | None = None
        # Messages handed to the transport, by type (the metrics' bus messages out).
        self.sent: dict[str, int] = dict.fromkeys(sorted(m.ALL_TYPES), 0)

    def use(self, transport: BusTransport) -> None:
        """Send through ``transport`` from now on (and its Wire, if it has one)."""
        self.transport = transport
        self.wire = _wire_of(transport)

    def has_link(self, node_id: bytes) -> bool:
        """An outbound bus link to ``node_id`` is up."""
        node = self.membership.nodes.get(node_id)
        return node is not None and node.link

    def send_to(self, node_id: bytes, msg: dict) -> None:
        """Send to one node; skipped silently when there is no link (best effort)."""
        node = self.membership.nodes.get(node_id)
        if node is not None and node.link and node_id != self.runtime.node_id:
            self.membership.messages_sent += 1
            self.sent[msg[m.TYPE]] += 1
            wire = self.wire
            if wire is not None:
                wire.send(node_id, msg)
            else:
                self.transport.send(node_id, msg)

    def send_to_holders(self, job: Job, msg: dict) -> None:
        """Send to every other node that may hold a copy of ``job``."""
        own = self.runtime.node_id
        for node_id in job.delivered:
            if node_id != own:
                self.send_to(node_id, msg)

    def broadcast(self, msg: dict) -> None:
        """Send to every node with a link."""
        for node_id in list(self.membership.nodes):
            self.send_to(node_id, msg)

    def reply(self, link: Link, msg: dict) -> None:
        """Answer on the connection ``link`` came from (PONG to a PING or MEET)."""
        self.sent[msg[m.TYPE]] += 1
        self.transport.reply(link, msg)

    def connect(self, node_id: bytes, ip: str, port: int) -> None:
        """Ask the transport to open the outbound link of ``node_id``."""
        self.transport.connect(node_id, ip, port)

    def close(self, node_id: bytes) -> None:
        """Drop the outbound link of ``node_id``."""
        self.transport.close(node_id)

    def rename(self, old_id: bytes, new_id: bytes) -> None:
        """A handshake node's link now belongs to its real ID."""
        self.transport.rename(old_id, new_id)

    def header(self) -> dict:
        """The common header of this node's messages (spec: cluster-bus.md §1);
        the transport sends it once per frame. The same dict is returned
        until a field changes, so the transport can keep it packed."""
        myself = self.membership.myself
        header = self._header
        own = self.runtime.node_id
        if (header is None or header[m.FLAGS] != myself.flags or header[m.SENDER] != own
                or header[m.PORT] != self.port or header.get(m.BPORT, 0) != myself.bport
                or header.get(m.TPORT, 0) != myself.tport):
            header = {m.VERSION: m.PROTOCOL_VERSION, m.SENDER: own,
                      m.PORT: self.port, m.FLAGS: myself.flags}
            if myself.bport:
                header[m.BPORT] = myself.bport
            if myself.tport:
                header[m.TPORT] = myself.tport
            self._header = header
        return header
