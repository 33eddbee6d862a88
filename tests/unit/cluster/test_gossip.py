"""Gossip on its own: handshakes, failure detection, FORGET."""

from __future__ import annotations

from dataclasses import dataclass

from disque.cluster import messages as m
from disque.cluster.gossip import FORGET_BLACKLIST_MS, Gossip
from disque.cluster.membership import FAIL, HANDSHAKE, PFAIL
from disque.cluster.transport import Link
from tests.unit.cluster.wiring import OWN_ID, PEER_A, PEER_B, Parts

TIMEOUT = 3000


@dataclass
class Settings:
    cluster_node_timeout: int = TIMEOUT


class Store:
    def __init__(self) -> None:
        self.saves = 0

    def save_cluster_config(self) -> str | None:
        self.saves += 1
        return None


def gossip(parts: Parts) -> tuple[Gossip, Store]:
    store = Store()
    return Gossip(parts.runtime, parts.membership, parts.outbox, Settings(), store), store


def pong_from(sender: bytes, gossip_entries: list | None = None) -> dict:
    return {m.VERSION: m.PROTOCOL_VERSION, m.TYPE: m.PONG, m.SENDER: sender, m.PORT: 7712,
            m.FLAGS: 0, m.GOSSIP: gossip_entries or []}


def test_meet_connects_greets_and_completes_the_handshake_on_the_pong():
    parts = Parts()
    part, store = gossip(parts)
    part.cluster_meet("127.0.0.1", 7712)
    temp_id, = [n for n in parts.membership.nodes if n != OWN_ID]
    assert parts.membership.nodes[temp_id].flags & HANDSHAKE
    part.cluster_cron()
    assert parts.transport.connects == [(temp_id, "127.0.0.1", 17712)]
    link = Link(temp_id, "127.0.0.1", "127.0.0.1")
    part.link_up(temp_id, link)
    (dest, meet), = parts.transport.sent
    assert dest == temp_id and meet[m.TYPE] == m.MEET
    part.on_ping(PEER_A, pong_from(PEER_A), link)
    node = parts.membership.nodes[PEER_A]
    assert temp_id not in parts.membership.nodes and not node.flags & HANDSHAKE
    part.cluster_cron()
    assert store.saves == 1 and PEER_A in parts.membership.reachable


def test_an_unanswered_ping_makes_a_node_pfail_then_fail_with_a_majority():
    parts = Parts()
    peer_a = parts.add_peer(PEER_A)
    parts.add_peer(PEER_B)
    part, _ = gossip(parts)
    peer_a.ping_sent = parts.runtime.now
    parts.advance(TIMEOUT + 1)
    part.cluster_cron()
    assert peer_a.flags & PFAIL and PEER_A not in parts.membership.reachable
    entry = {m.G_ID: PEER_A, m.G_PING: 0, m.G_PONG: 0, m.G_IP: "127.0.0.1", m.G_PORT: 7712,
             m.G_FLAGS: PFAIL, m.G_BPORT: 0}
    part.on_ping(PEER_B, pong_from(PEER_B, [entry]), Link(PEER_B, "127.0.0.1", "127.0.0.1"))
    assert peer_a.flags & FAIL and not peer_a.flags & PFAIL
    assert parts.transport.of_type(m.FAIL) == [(PEER_B, {m.TYPE: m.FAIL, m.NODE: PEER_A})]


def test_a_pong_on_its_own_link_clears_the_failure():
    parts = Parts()
    peer = parts.add_peer(PEER_A)
    part, _ = gossip(parts)
    peer.flags |= FAIL
    peer.ping_sent = parts.runtime.now - 10
    part.on_ping(PEER_A, pong_from(PEER_A), Link(PEER_A, "127.0.0.1", "127.0.0.1"))
    assert not peer.flags & (PFAIL | FAIL) and peer.ping_sent == 0


def test_a_forgotten_node_is_not_re_added_by_gossip_for_a_minute():
    parts = Parts()
    parts.add_peer(PEER_A)
    parts.add_peer(PEER_B)
    part, store = gossip(parts)
    part.cluster_forget(PEER_B)
    assert PEER_B not in parts.membership.nodes and store.saves == 1
    entry = {m.G_ID: PEER_B, m.G_PING: 0, m.G_PONG: 0, m.G_IP: "127.0.0.1", m.G_PORT: 7713,
             m.G_FLAGS: 0, m.G_BPORT: 0}
    link = Link(PEER_A, "127.0.0.1", "127.0.0.1")
    part.on_ping(PEER_A, pong_from(PEER_A, [entry]), link)
    assert len(parts.membership.nodes) == 2
    parts.advance(FORGET_BLACKLIST_MS)
    part.cluster_cron()
    part.on_ping(PEER_A, pong_from(PEER_A, [entry]), link)
    assert len(parts.membership.nodes) == 3  # a handshake with the gossiped address
