"""Failure detection at the node's entry points: any frame is a sign of life.

spec: cluster-bus.md §4 (PFAIL after a ping unanswered for node-timeout,
FAIL by majority or broadcast, FAIL cleared by a PONG on our own link);
docs/cluster.md "Failure detection" for the sign of life: a frame of any
kind from a node, on either link, counts as hearing from it (as in Redis
7), so a ping sent to a peer's previous process, which nothing will ever
answer, does not make the restarted peer PFAIL once it has spoken.
"""

from __future__ import annotations

from disque.cluster import messages as m
from disque.cluster.membership import FAIL, PFAIL
from disque.cluster.transport import Link
from tests.unit.helpers import PEER_ID, add_peer, advance, deliver, make_node

TIMEOUT = 3000
OTHER_ID = b"0ddba11" + b"2" * 33


def ping() -> dict:
    return {m.TYPE: m.PING, m.GOSSIP: []}


def unanswered_ping(node):
    """``node`` pinged the peer's previous process, which died before answering."""
    peer = add_peer(node)
    node.cron()
    peer.ping_sent = node.state.now
    return peer


def test_a_restarted_peer_that_spoke_is_not_pfail_from_the_old_ping():
    node = make_node(cluster_node_timeout=TIMEOUT)
    peer = unanswered_ping(node)
    advance(node, 1000, step=100, cron=True)
    deliver(node, PEER_ID, ping())  # the new process's PING, on the link it opened
    advance(node, TIMEOUT - 500, step=100, cron=True)
    assert node.state.now - peer.ping_sent > TIMEOUT  # the old ping is past node-timeout
    assert not peer.flags & (PFAIL | FAIL) and PEER_ID in node.state.membership.reachable
    # Silent for node-timeout after it spoke: PFAIL after all.
    advance(node, 600, step=100, cron=True)
    assert peer.flags & PFAIL and PEER_ID not in node.state.membership.reachable


def test_without_a_frame_the_old_ping_makes_it_pfail():
    node = make_node(cluster_node_timeout=TIMEOUT)
    peer = unanswered_ping(node)
    advance(node, TIMEOUT + 100, step=100, cron=True)
    assert peer.flags & PFAIL and PEER_ID not in node.state.membership.reachable


def test_any_frame_on_our_own_link_counts_too():
    node = make_node(cluster_node_timeout=TIMEOUT)
    peer = unanswered_ping(node)
    advance(node, 2000, step=100, cron=True)
    header = {m.VERSION: m.PROTOCOL_VERSION, m.SENDER: PEER_ID, m.PORT: 7712, m.FLAGS: 0}
    # A GOTJOB for a job this node does not know: no handler acts on it, the
    # frame alone is the sign of life.
    node.receive_frame(Link(PEER_ID, "127.0.0.1", "127.0.0.1"),
                       [header, {m.TYPE: m.GOTJOB, m.ID: b"D-00000000-" + b"0" * 29}])
    advance(node, 2000, step=100, cron=True)
    assert not peer.flags & PFAIL


def test_a_frame_clears_pfail_at_once_but_not_fail():
    node = make_node(cluster_node_timeout=TIMEOUT)
    peer = unanswered_ping(node)
    advance(node, TIMEOUT + 100, step=100, cron=True)
    assert peer.flags & PFAIL and PEER_ID not in node.state.membership.reachable
    deliver(node, PEER_ID, ping())  # reachable at once, not a cron period later
    assert not peer.flags & PFAIL and PEER_ID in node.state.membership.reachable
    assert peer.ping_sent  # still unanswered: only a PONG on our link answers it
    peer.flags |= FAIL
    deliver(node, PEER_ID, ping())
    advance(node, 100, cron=True)
    assert peer.flags & FAIL and PEER_ID not in node.state.membership.reachable


def test_a_fail_broadcast_is_ignored_while_the_node_was_heard_from_lately():
    node = make_node(cluster_node_timeout=TIMEOUT)
    peer = unanswered_ping(node)
    add_peer(node, OTHER_ID)
    advance(node, 1000, step=100, cron=True)
    deliver(node, PEER_ID, ping())
    advance(node, 1000, step=100, cron=True)
    deliver(node, OTHER_ID, {m.TYPE: m.FAIL, m.NODE: PEER_ID})
    assert not peer.flags & FAIL
    advance(node, TIMEOUT, step=100, cron=True)  # silent since: its own timeout, then FAIL
    deliver(node, OTHER_ID, {m.TYPE: m.FAIL, m.NODE: PEER_ID})
    assert peer.flags & FAIL


def test_a_frame_from_a_node_without_a_link_opens_one_at_once():
    node = make_node(cluster_node_timeout=TIMEOUT)
    peer = unanswered_ping(node)
    advance(node, TIMEOUT + 100, step=100, cron=True)
    peer.flags = (peer.flags & ~PFAIL) | FAIL  # flagged by the majority meanwhile
    peer.link = peer.connecting = False  # its previous process is gone
    deliver(node, PEER_ID, ping())  # the restarted process speaks first
    assert peer.connecting  # not a cron period later
    own_link = Link(PEER_ID, "127.0.0.1", "127.0.0.1")
    node.link_up(PEER_ID, own_link)
    pong = {m.TYPE: m.PONG, m.GOSSIP: []}
    header = {m.VERSION: m.PROTOCOL_VERSION, m.SENDER: PEER_ID, m.PORT: 7712, m.FLAGS: 0}
    node.receive_frame(own_link, [header, pong])
    # The PONG on its own link clears FAIL, and the reachable set with it.
    assert not peer.flags & (PFAIL | FAIL) and PEER_ID in node.state.membership.reachable
