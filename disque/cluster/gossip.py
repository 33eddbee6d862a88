"""Membership protocol: handshake, gossip, failure detection, and the
CLUSTER MEET / FORGET / RESET / LEAVING commands' effects.

spec: cluster-bus.md §2-§4, §7. The transport opens the links this part
asks for (through the outbox) and the node hands it every PING, PONG,
MEET and FAIL together with the link it arrived on.
"""

from __future__ import annotations

import random
from typing import Final, Protocol

from disque.cluster import messages as m
from disque.cluster.membership import (FAIL, HANDSHAKE, LEAVING, MEET, MYSELF, NOADDR, PFAIL,
                                       ClusterNode, Membership)
from disque.cluster.outbox import Outbox
from disque.cluster.transport import Link
from disque.context.log import logger
from disque.context.runtime import Runtime

FORGET_BLACKLIST_MS: Final = 60_000
RANDOM_PING_INTERVAL_MS: Final = 1000
RANDOM_PING_SAMPLE: Final = 5
MIN_HANDSHAKE_TIMEOUT_MS: Final = 1000


def random_node_id(rng: random.Random) -> bytes:
    """40 lower-case hex characters."""
    return b"%040x" % rng.getrandbits(160)


class ClusterConfigStore(Protocol):
    """Where the node table is persisted (nodes.conf, by the server)."""

    def save_cluster_config(self) -> str | None:
        """Persist the node table; return an error text on failure."""


class GossipSettings(Protocol):
    """The configuration the membership protocol reads."""

    cluster_node_timeout: int


class Gossip:
    """Cluster membership: handshakes, gossip and failure detection."""

    def __init__(self, runtime: Runtime, membership: Membership, outbox: Outbox,
                 settings: GossipSettings, store: ClusterConfigStore) -> None:
        self.runtime = runtime
        self.membership = membership
        self.outbox = outbox
        self.settings = settings
        self.store = store
        self.forget_blacklist: dict[bytes, int] = {}
        self.config_dirty = False
        self.last_random_ping = 0

    # ------------------------------------------------------------ commands

    def cluster_meet(self, ip: str, port: int) -> None:
        """CLUSTER MEET, and gossip about an unknown node: greet it with MEET."""
        self._start_handshake(ip, port, MEET)

    def _start_handshake(self, ip: str, port: int, extra_flags: int, bport: int = 0) -> None:
        """Add a handshake node for ip:port unless one is already in handshake."""
        for other in self.membership.nodes.values():
            if other.flags & HANDSHAKE and other.ip == ip and other.port == port:
                return
        node = ClusterNode(random_node_id(self.runtime.rng), ip, port, HANDSHAKE | extra_flags, self.runtime.now)
        node.bport = bport
        self.membership.add(node)

    def cluster_forget(self, node_id: bytes) -> None:
        """Remove a node and keep gossip from re-adding it for a minute."""
        self._delete_node(node_id)
        self.forget_blacklist[node_id] = self.runtime.now + FORGET_BLACKLIST_MS
        self.membership.update_reachable()
        self.store.save_cluster_config()

    def forget_others(self) -> None:
        """CLUSTER RESET: forget every other node."""
        own = self.runtime.node_id
        for node_id in [n for n in self.membership.nodes if n != own]:
            self._delete_node(node_id)
        self.membership.update_reachable()

    def set_leaving(self, leaving: bool) -> None:
        """CLUSTER LEAVING yes|no: persisted and advertised in every PING/PONG."""
        myself = self.membership.myself
        if leaving:
            myself.flags |= LEAVING
        else:
            myself.flags &= ~LEAVING
        self.store.save_cluster_config()

    def _delete_node(self, node_id: bytes) -> None:
        self.membership.remove(node_id)
        self.outbox.close(node_id)
        for other in self.membership.nodes.values():
            other.fail_reports.pop(node_id, None)

    # --------------------------------------------------------------- links

    def link_up(self, node_id: bytes, link: Link) -> None:
        """The transport connected the outbound link of ``node_id``: say hello."""
        node = self.membership.nodes.get(node_id)
        if node is None:
            self.outbox.close(node_id)
            return
        node.link = True
        node.connecting = False
        node.link_time = self.runtime.now
        if node.flags & MEET:
            # Kept until the handshake completes: a link that dies under the
            # MEET (a peer refusing it, say) is opened again with a MEET.
            self._send_ping(node, m.MEET)
        else:
            self._send_ping(node, m.PING)

    def link_down(self, node_id: bytes) -> None:
        """The outbound link of ``node_id`` closed or could not be opened."""
        node = self.membership.nodes.get(node_id)
        if node is None:
            return
        node.link = False
        node.connecting = False
        if not node.ping_sent and not node.flags & HANDSHAKE:
            node.ping_sent = self.runtime.now  # keeps failure detection going while unreachable

    # ------------------------------------------------------------- gossip

    def _gossip_entries(self, exclude: bytes | None) -> list[dict]:
        """A few random peers' state for a PING/PONG/MEET (failing ones first)."""
        # A link still connecting counts: C creates the link object before its
        # non-blocking connect completes, which is how a dead node keeps being
        # gossiped as PFAIL and reaches FAIL (spec: cluster-bus.md §3, §4).
        candidates = [n for n in self.membership.nodes.values()
                      if not n.flags & (MYSELF | HANDSHAKE | NOADDR)
                      and (n.link or n.connecting) and n.id != exclude]
        total = len(self.membership.nodes)
        wanted = min(max(3, total // 10), max(total - 2, 0))
        if not candidates or not wanted:
            return []
        failing = [n for n in candidates if n.flags & (PFAIL | FAIL)]
        healthy = [n for n in candidates if not n.flags & (PFAIL | FAIL)]
        self.runtime.rng.shuffle(healthy)
        chosen = (failing + healthy)[:wanted]
        return [{m.G_ID: n.id, m.G_PING: n.ping_sent, m.G_PONG: n.pong_received,
                 m.G_IP: n.ip, m.G_PORT: n.port, m.G_FLAGS: n.flags, m.G_BPORT: n.bport}
                for n in chosen]

    def _send_ping(self, node: ClusterNode, kind: str) -> None:
        if kind != m.PONG and not node.ping_sent:
            node.ping_sent = self.runtime.now
        self.outbox.send_to(node.id, {m.TYPE: kind, m.GOSSIP: self._gossip_entries(node.id)})

    def on_ping(self, sender_id: bytes, msg: dict, link: Link) -> None:
        """PING, PONG or MEET (``msg`` carries the sender's header fields)."""
        kind = msg[m.TYPE]
        port = msg[m.PORT]
        membership = self.membership
        myself = membership.myself
        if sender_id == self.runtime.node_id:
            # We reached ourselves (e.g. CLUSTER MEET with our own address).
            if link.node_id is not None and link.node_id != self.runtime.node_id:
                self._delete_node(link.node_id)
            if kind != m.PONG:
                self.outbox.reply(link, {m.TYPE: m.PONG, m.GOSSIP: []})
            return
        if (kind == m.MEET or not myself.ip) and link.local_ip and myself.ip != link.local_ip:
            myself.ip = link.local_ip
            self.config_dirty = True
        sender = membership.nodes.get(sender_id)
        bport = msg.get(m.BPORT, 0)
        if kind == m.MEET and sender is None:
            self._start_handshake(link.peer_ip, port, 0, bport)
        if kind != m.PONG:
            pong = {m.TYPE: m.PONG, m.GOSSIP: self._gossip_entries(sender_id)}
            self.membership.messages_sent += 1
            self.outbox.reply(link, pong)
        outbound = membership.nodes.get(link.node_id) if link.node_id is not None else None
        if outbound is not None:
            if outbound.flags & HANDSHAKE:
                if sender is not None:
                    self._update_address(sender, link.peer_ip, port, bport)
                    self._delete_node(outbound.id)
                    return
                self._complete_handshake(outbound, sender_id)
                sender = outbound
            elif outbound.id != sender_id:
                logger.warning("Node at %s:%d is not %s any more: marking it noaddr",
                               outbound.ip, outbound.port, outbound.id.decode())
                outbound.flags |= NOADDR
                outbound.ip = ""
                outbound.port = 0
                outbound.link = False
                outbound.connecting = False  # close() also cancels a connect in progress
                self.outbox.close(outbound.id)
                self.config_dirty = True
                return
        if sender is None:
            return  # unknown sender: only a PONG is owed
        if (kind == m.PING and link.node_id != sender_id and not sender.flags & HANDSHAKE):
            self._update_address(sender, link.peer_ip, port, bport)
        elif sender.bport != bport:
            sender.bport = bport
            self.config_dirty = True
        if kind == m.PONG and link.node_id == sender_id:
            sender.pong_received = self.runtime.now
            sender.ping_sent = 0
            if sender.flags & (PFAIL | FAIL):
                if sender.flags & FAIL:
                    logger.info("Clear FAIL state for node %s: is reachable again.",
                                sender_id.decode())
                sender.flags &= ~(PFAIL | FAIL)
                self.config_dirty = True
                self.membership.update_reachable()  # a producer may count it at once
        sender.tport = msg.get(m.TPORT, 0)  # optional header field, as LEAVING below
        leaving = msg.get(m.FLAGS, 0) & LEAVING  # optional header field (messages.header_problem)
        if leaving != sender.flags & LEAVING:
            sender.flags ^= LEAVING
            self.config_dirty = True
        self._process_gossip(sender, msg[m.GOSSIP])

    def _complete_handshake(self, node: ClusterNode, real_id: bytes) -> None:
        old_id = node.id
        self.membership.rename(old_id, real_id)
        node.flags &= ~(HANDSHAKE | MEET)
        self.membership.recount()
        self.outbox.rename(old_id, real_id)
        self.config_dirty = True
        logger.info("Handshake with node %s completed.", real_id.decode())

    def _update_address(self, node: ClusterNode, ip: str, port: int, bport: int) -> None:
        if ip and (node.ip != ip or node.port != port or node.bport != bport):
            node.ip = ip
            node.port = port
            node.bport = bport
            node.flags &= ~NOADDR
            if node.link:
                node.link = False
                self.outbox.close(node.id)
            self.config_dirty = True

    def _process_gossip(self, sender: ClusterNode, entries: list) -> None:
        nodes = self.membership.nodes
        for entry in entries:
            if m.gossip_problem(entry) is not None:
                continue
            node_id = entry[m.G_ID]
            if node_id == self.runtime.node_id:
                continue
            node = nodes.get(node_id)
            flags = entry[m.G_FLAGS]
            if node is not None:
                if flags & (PFAIL | FAIL):
                    node.fail_reports[sender.id] = self.runtime.now
                    self._check_failure(node)
                else:
                    node.fail_reports.pop(sender.id, None)
                if (node.flags & (PFAIL | FAIL) and entry[m.G_IP]
                        and (node.ip != entry[m.G_IP] or node.port != entry[m.G_PORT])):
                    self._start_handshake(entry[m.G_IP], entry[m.G_PORT], MEET,
                                          entry.get(m.G_BPORT, 0))
            elif (not flags & NOADDR and entry[m.G_IP] and 0 < entry[m.G_PORT] <= 55535
                  and self.forget_blacklist.get(node_id, 0) <= self.runtime.now):
                self._start_handshake(entry[m.G_IP], entry[m.G_PORT], MEET,
                                      entry.get(m.G_BPORT, 0))

    # ---------------------------------------------------- failure detection

    def _check_failure(self, node: ClusterNode) -> None:
        """Promote PFAIL to FAIL when a majority agrees (spec §4)."""
        if not node.flags & PFAIL or node.flags & FAIL:
            return
        oldest = self.runtime.now - 2 * self.settings.cluster_node_timeout
        reports = node.fail_reports
        for reporter in [r for r, t in reports.items() if t < oldest]:
            del reports[reporter]
        if len(reports) + 1 >= self.membership.size // 2 + 1:
            node.flags = (node.flags & ~PFAIL) | FAIL
            logger.info("Marking node %s as failing (quorum reached).", node.id.decode())
            self.outbox.broadcast({m.TYPE: m.FAIL, m.NODE: node.id})
            self.config_dirty = True

    def on_fail(self, sender_id: bytes, msg: dict, link: Link) -> None:
        """Another node says ``msg[NODE]`` is failing (spec §4).

        Ignored while the node answered our own PING less than node-timeout
        ago: the sender's view is older than ours. A node that lost the race
        to hear from a restarted peer (its ping still unanswered from before
        the restart) promotes PFAIL to FAIL with failure reports that the
        nodes which have heard from the peer since sent before they did; if
        the peer dies again right after answering us, that FAIL would make
        it unreachable here at once, instead of after our own node-timeout
        without an answer (then PFAIL and the FAIL check of the gossip do it).
        """
        if sender_id not in self.membership.nodes:
            return
        node = self.membership.nodes.get(msg[m.NODE])
        if node is None or node.flags & (MYSELF | FAIL):
            return
        heard = max(node.pong_received, node.data_received)
        if (heard and not node.flags & PFAIL
                and self.runtime.now - heard < self.settings.cluster_node_timeout):
            return
        node.flags = (node.flags & ~PFAIL) | FAIL
        self.config_dirty = True

    def heard_from(self, node: ClusterNode) -> None:
        """A frame came from ``node`` while it is PFAIL or has no link from
        this node: it is up. PFAIL clears (its ping may still be unanswered,
        sent to its previous process), with the reachable set, at once rather
        than at the next cron, so that a producer does not get NOREPL for a
        node that has just spoken. FAIL stays until a PONG on this node's own
        link, which is opened now rather than at the next cron."""
        if node.flags & PFAIL:
            node.flags &= ~PFAIL
            self.config_dirty = True
            self.membership.update_reachable()
        if not node.link and not node.connecting and not node.flags & (MYSELF | NOADDR | HANDSHAKE):
            node.connecting = True
            self.outbox.connect(node.id, node.ip, node.bus_port)

    def cluster_cron(self) -> None:
        """Connect, ping, detect failures, expire handshakes (every ~100 ms)."""
        now = self.runtime.now
        timeout = self.settings.cluster_node_timeout
        membership = self.membership
        handshake_timeout = max(timeout, MIN_HANDSHAKE_TIMEOUT_MS)
        for node in list(membership.nodes.values()):
            if node.flags & (MYSELF | NOADDR):
                continue
            if node.flags & HANDSHAKE and now - node.ctime > handshake_timeout:
                self._delete_node(node.id)
                continue
            if not node.link and not node.connecting:
                node.connecting = True
                self.outbox.connect(node.id, node.ip, node.bus_port)
        if now - self.last_random_ping >= RANDOM_PING_INTERVAL_MS:
            self.last_random_ping = now
            others = [n for n in membership.nodes.values()
                      if not n.flags & (MYSELF | HANDSHAKE | NOADDR)]
            sample = self.runtime.rng.sample(others, min(RANDOM_PING_SAMPLE, len(others)))
            idle = [n for n in sample if n.link and not n.ping_sent]
            if idle:
                self._send_ping(min(idle, key=lambda n: n.pong_received), m.PING)
        for node in list(membership.nodes.values()):
            if node.flags & (MYSELF | NOADDR | HANDSHAKE):
                continue
            ping_sent = node.ping_sent
            # Any frame the node sent, on either link, is a sign of life (as in
            # Redis 7): a node that spoke since it restarted is not failing
            # because of a ping sent to its previous process, which no PONG
            # will ever answer.
            silent = now - node.data_received
            # ping_sent is set only while a PONG is awaited (a PONG on the link
            # zeroes it): never compare it with pong_received, which a clock
            # that jumped back leaves later than ping_sent for good, or the
            # link is never reconnected and the peer stays PFAIL.
            if (node.link and now - node.link_time > timeout and ping_sent
                    and now - ping_sent > timeout // 2 and silent > timeout // 2):
                node.link = False
                self.outbox.close(node.id)
            if node.link and not ping_sent and now - node.pong_received > timeout // 2:
                self._send_ping(node, m.PING)
            if (ping_sent and now - ping_sent > timeout and silent > timeout
                    and not node.flags & (PFAIL | FAIL)):
                node.flags |= PFAIL
                self.config_dirty = True
        membership.update_reachable()
        blacklist = self.forget_blacklist
        if blacklist:
            for node_id in [n for n, until in blacklist.items() if until <= now]:
                del blacklist[node_id]
        if self.config_dirty:
            self.config_dirty = False
            self.store.save_cluster_config()
