"""Outbox on its own: best-effort sends and the frame header."""

from __future__ import annotations

from disque.cluster import messages as m
from disque.cluster.membership import LEAVING
from tests.unit.cluster.wiring import OWN_ID, PEER_A, PEER_B, Parts, make_job


def test_messages_go_only_to_linked_nodes_never_to_self():
    parts = Parts()
    parts.add_peer(PEER_A)
    parts.add_peer(PEER_B, link=False)
    msg = {m.TYPE: m.NEEDJOBS, m.QUEUE: b"q", m.COUNT: 1}
    parts.outbox.broadcast(msg)
    parts.outbox.send_to(OWN_ID, msg)
    job = make_job(parts, delivered=(OWN_ID, PEER_A, PEER_B))
    parts.outbox.send_to_holders(job, msg)
    assert parts.transport.sent == [(PEER_A, msg), (PEER_A, msg)]
    assert parts.membership.messages_sent == 2


def test_the_header_is_one_dict_until_a_field_changes():
    parts = Parts()
    header = parts.outbox.header()
    assert header == {m.VERSION: m.PROTOCOL_VERSION, m.SENDER: OWN_ID, m.PORT: 7711,
                      m.FLAGS: parts.membership.myself.flags}
    assert parts.outbox.header() is header
    parts.membership.myself.flags |= LEAVING
    changed = parts.outbox.header()
    assert changed is not header and changed[m.FLAGS] & LEAVING
