"""Which node a client goes to: its seeds, HELLO's view of the cluster, and
the nodes that failed lately (spec: commands.md §3 HELLO)."""

from __future__ import annotations

import time

from disque.client.addresses import NodeAddress
from disque.client.replies import text

# How long a node that failed is skipped when choosing where to go next.
FAILED_NODE_QUARANTINE = 5.0


def hello_nodes(reply: list, via: NodeAddress) -> list[NodeAddress]:
    """HELLO's reply, asked of ``via``: every node it knows, best (lowest priority) first."""
    my_id = text(reply[1])
    nodes: list[NodeAddress] = []
    for entry in reply[2:]:
        node_id, ip, port, priority = (text(x) for x in entry)
        if node_id == my_id:
            # Self may have no address yet (no peer contacted it), and the address
            # we dialled is the one known to work from here.
            ip, port = via.host, str(via.port)
        nodes.append(NodeAddress(ip, int(port), node_id, int(priority)))
    # Stable sort: among equal priorities, the node we are on stays first.
    nodes.sort(key=lambda n: (n.priority, n != via))
    return nodes


class NodeChoice:
    """The nodes a client may talk to, and which of them failed lately."""

    def __init__(self, seeds: list[NodeAddress]) -> None:
        self.seeds = seeds
        self.known: list[NodeAddress] = []       # from the last HELLO, best first
        self._failed: dict[NodeAddress, float] = {}

    def failed(self, node: NodeAddress) -> None:
        """``node`` did not answer: skip it for ``FAILED_NODE_QUARANTINE`` seconds."""
        self._failed[node] = time.monotonic()

    def quarantined(self, node: NodeAddress) -> bool:
        """Whether ``node`` failed less than ``FAILED_NODE_QUARANTINE`` seconds ago."""
        return time.monotonic() - self._failed.get(node, -1e9) <= FAILED_NODE_QUARANTINE

    def candidates(self) -> list[NodeAddress]:
        """Nodes to try, best first: HELLO's view, then the seeds; recent failures last."""
        seen: set[NodeAddress] = set()
        ordered: list[NodeAddress] = []
        for node in [*self.known, *self.seeds]:
            if node not in seen:
                seen.add(node)
                ordered.append(node)
        fresh = [n for n in ordered if not self.quarantined(n)]
        stale = [n for n in ordered if n not in fresh]
        return fresh + stale

    def count(self) -> int:
        """How many different nodes the client knows of."""
        return len(set(self.known) | set(self.seeds))
