"""The node table: who is in the cluster and how reachable they are.

spec: cluster-bus.md §2 and §4. This module holds state and renders it;
the bus protocol that changes it lives in the other cluster modules.
"""

from __future__ import annotations

from typing import Final

MYSELF: Final = 1
PFAIL: Final = 2
FAIL: Final = 4
HANDSHAKE: Final = 8
NOADDR: Final = 16
LEAVING: Final = 32
MEET: Final = 64  # internal: send MEET instead of PING on first connect

_FLAG_NAMES: Final = ((MYSELF, "myself"), (PFAIL, "fail?"), (FAIL, "fail"), (HANDSHAKE, "handshake"),
                      (NOADDR, "noaddr"), (LEAVING, "leaving"))
FLAGS_BY_NAME: Final = {name: flag for flag, name in _FLAG_NAMES}
UNREACHABLE: Final = HANDSHAKE | LEAVING | PFAIL | FAIL
BUS_PORT_OFFSET: Final = 10000  # the bus listens on the client port + 10000 unless told otherwise

PRIORITY_OK: Final = b"1"
PRIORITY_NO_LINK: Final = b"5"
PRIORITY_PFAIL: Final = b"10"
PRIORITY_FAIL_OR_LEAVING: Final = b"100"


def render_flags(flags: int) -> str:
    """Comma-separated flag names, ``noflags`` when none."""
    names = [name for flag, name in _FLAG_NAMES if flags & flag]
    return ",".join(names) if names else "noflags"


class ClusterNode:
    """What this node knows about one node of the cluster (itself included)."""

    __slots__ = ("id", "ip", "port", "flags", "ping_sent", "pong_received", "data_received",
                 "link", "connecting", "link_time", "fail_reports", "ctime", "bport", "tport")

    def __init__(self, node_id: bytes, ip: str, port: int, flags: int, now_ms: int = 0) -> None:
        self.id = node_id
        self.ip = ip
        self.port = port
        self.flags = flags
        self.ping_sent = 0
        self.pong_received = 0
        # When the last frame of any kind came from this node, on either link: a
        # sign of life as good as a PONG for failure detection (gossip.py).
        self.data_received = 0
        self.link = False  # an outbound bus link is established
        self.connecting = False  # the transport is opening that link
        self.link_time = 0
        self.fail_reports: dict[bytes, int] = {}
        self.ctime = now_ms
        self.bport = 0  # bus port when it is not port + 10000
        self.tport = 0  # TLS client port (tls-port), 0 when it has none or is not known yet

    @property
    def bus_port(self) -> int:
        """Where this node's bus listens."""
        return self.bport or self.port + BUS_PORT_OFFSET

    @property
    def is_reachable(self) -> bool:
        """Usable as a replication target (the link is checked by senders)."""
        return not self.flags & (UNREACHABLE | MYSELF)

    def priority(self) -> bytes:
        """HELLO priority: lower is better (spec: commands.md HELLO)."""
        flags = self.flags
        if flags & (FAIL | LEAVING):
            return PRIORITY_FAIL_OR_LEAVING
        if flags & PFAIL:
            return PRIORITY_PFAIL
        if not self.link and not flags & MYSELF:
            return PRIORITY_NO_LINK
        return PRIORITY_OK

    def render(self, with_bus_port: bool = False) -> str:
        """One CLUSTER NODES line (nodes.conf adds ``@busport`` when not the default)."""
        own = self.flags & MYSELF
        link = "connected" if own or self.link else "disconnected"
        addr = "%s:%d" % (self.ip, self.port)
        if with_bus_port and self.bport:
            addr += "@%d" % self.bport
        return "%s %s %s %d %d %s" % (
            self.id.decode(), addr, render_flags(self.flags),
            0 if own else self.ping_sent, 0 if own else self.pong_received, link)


class Membership:
    """The node table, with the derived reachable set."""

    def __init__(self, myself_id: bytes, port: int) -> None:
        self.myself = ClusterNode(myself_id, "", port, MYSELF)
        self.nodes: dict[bytes, ClusterNode] = {myself_id: self.myself}
        self.reachable: list[bytes] = []
        self.size = 1  # nodes not in handshake, self and failed nodes included
        self.messages_sent = 0
        self.messages_received = 0

    @property
    def leaving(self) -> bool:
        """This node is leaving the cluster (CLUSTER LEAVING yes)."""
        return bool(self.myself.flags & LEAVING)

    def add(self, node: ClusterNode) -> None:
        """Add a node to the table."""
        self.nodes[node.id] = node
        self.recount()

    def remove(self, node_id: bytes) -> ClusterNode:
        """Remove a node from the table."""
        node = self.nodes.pop(node_id)
        self.recount()
        self.update_reachable()  # senders index ``nodes`` with what it lists
        return node

    def rename(self, old_id: bytes, new_id: bytes) -> None:
        """A node's ID changed (handshake completed, CLUSTER RESET HARD)."""
        node = self.nodes.pop(old_id)
        node.id = new_id
        self.nodes[new_id] = node
        self.update_reachable()

    def recount(self) -> None:
        """Refresh ``size`` after nodes were added, removed or left handshake."""
        self.size = sum(1 for n in self.nodes.values() if not n.flags & HANDSHAKE)

    def others(self) -> list[ClusterNode]:
        """Every node but self, handshakes included."""
        return [n for n in self.nodes.values() if not n.flags & MYSELF]

    def update_reachable(self) -> None:
        """Recompute the replication candidates (spec: cluster-bus.md §4)."""
        self.reachable = [n.id for n in self.nodes.values() if n.is_reachable]

    def render_nodes(self) -> bytes:
        """CLUSTER NODES: one ``\\n``-terminated line per node."""
        return "".join(n.render() + "\n" for n in self.nodes.values()).encode()

    def render_info(self) -> bytes:
        """CLUSTER INFO fields."""
        lines = (
            ("cluster_state", "ok"),
            ("cluster_known_nodes", len(self.nodes)),
            ("cluster_reachable_nodes", len(self.reachable)),
            ("cluster_size", self.size),
            ("cluster_stats_messages_sent", self.messages_sent),
            ("cluster_stats_messages_received", self.messages_received),
        )
        return "".join("%s:%s\r\n" % kv for kv in lines).encode()
