"""Membership changes: MEET, FORGET, RESET, LEAVING; later handshake, gossip
and failure detection (spec: cluster-bus.md §2-§4). A mixin of Node."""

from __future__ import annotations

from disque.cluster.membership import HANDSHAKE, LEAVING, MEET, ClusterNode

FORGET_BLACKLIST_MS = 60_000


def random_node_id(rng) -> bytes:
    """40 lower-case hex characters."""
    return b"%040x" % rng.getrandbits(160)


class Gossip:
    """Cluster membership (mixed into Node)."""

    def cluster_meet(self, ip: str, port: int) -> None:
        """Start a handshake with ip:port unless one is already running."""
        for other in self.membership.nodes.values():
            if other.flags & HANDSHAKE and other.ip == ip and other.port == port:
                return
        node = ClusterNode(random_node_id(self.rng), ip, port, HANDSHAKE | MEET, self.now)
        self.membership.add(node)

    def cluster_forget(self, node_id: bytes) -> None:
        """Remove a node and keep gossip from re-adding it for a minute."""
        self.membership.remove(node_id)
        self.forget_blacklist[node_id] = self.now + FORGET_BLACKLIST_MS
        self.membership.update_reachable()
        self.host.save_cluster_config()

    def cluster_reset(self, hard: bool) -> None:
        """Forget every other node and flush all data; HARD also takes a new ID."""
        membership = self.membership
        for node_id in [n for n in membership.nodes if n != self.id]:
            membership.remove(node_id)
        if hard:
            self.set_node_id(random_node_id(self.rng))
        membership.update_reachable()
        self.flush_all()
        self.host.save_cluster_config()

    def set_node_id(self, node_id: bytes) -> None:
        """Adopt a new node ID (CLUSTER RESET HARD)."""
        membership = self.membership
        myself = membership.myself
        del membership.nodes[myself.id]
        myself.id = node_id
        membership.nodes[node_id] = myself
        self.id = node_id
        self.self_delivered = (node_id,)
        self.ids.set_node_id(node_id)

    def set_leaving(self, leaving: bool) -> None:
        """CLUSTER LEAVING yes|no: persisted and advertised in every PING/PONG."""
        myself = self.membership.myself
        if leaving:
            myself.flags |= LEAVING
        else:
            myself.flags &= ~LEAVING
        self.host.save_cluster_config()
