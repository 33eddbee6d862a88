"""PeerStats: a node's summary, sent only to the nodes whose dashboard asks
for it, and the peers' summaries kept, bounded and forgotten."""

from __future__ import annotations

from disque.cluster import messages as m
from disque.cluster.peerstats import (MAX_NAME, QUEUES_PER_MS, SEND_INTERVAL_MS, STALE_MS,
                                      STATS_FIELDS, WANT_INTERVAL_MS, WATCH_MS, share_from_wire,
                                      summary_from_wire)
from disque.queues.queue import PAUSE_ALL, PAUSE_OUT
from tests.unit.helpers import PEER_ID, Cmd, add_peer, deliver, make_node

OTHER_ID = b"0ddba11" + b"2" * 33
WANT = {m.TYPE: m.STATSWANT}


def stats_sent(node, to: bytes | None = None) -> list[dict]:
    return [msg for dest, msg in node.state.outbox.transport.of_type(m.NODESTATS)
            if to is None or dest == to]


def figures(summary) -> dict[str, int]:
    return dict(zip(STATS_FIELDS, summary.stats))


def test_a_summary_holds_the_figures_and_the_longest_queues():
    node = make_node(metrics_max_queues=2)
    cmd = Cmd(node)
    for queue, count in (("a", 1), ("b", 3), ("c", 2), ("c:dead", 1)):
        for _ in range(count):
            cmd.addjob(queue, "body")
    cmd("PAUSE", "b", "out")
    summary = node.state.peerstats.own()
    assert figures(summary) == dict(figures(summary), registered=7, queues=4, added=7,
                                    dead_letter_jobs=1)
    assert figures(summary)["memory"] == node.state.memory.used
    # The two longest; c's dead-letter queue's length rides with it.
    assert summary.queues == [(b"b", 3, 3, 0, 0, PAUSE_OUT, -1), (b"c", 2, 2, 0, 0, 0, 1)]


def test_no_summary_leaves_without_a_watcher():
    node = make_node()
    add_peer(node)
    for _ in range(30):
        node.state.clock.advance(100)
        node.cron()
    assert stats_sent(node) == []


def test_a_watcher_gets_one_at_once_then_one_per_interval_until_it_stops_asking():
    node = make_node()
    add_peer(node)
    deliver(node, PEER_ID, WANT)
    assert len(stats_sent(node, PEER_ID)) == 1
    deliver(node, PEER_ID, WANT)  # asking again while watched sends nothing more at once
    assert len(stats_sent(node, PEER_ID)) == 1
    for _ in range(WATCH_MS // 100 - 5):
        node.state.clock.advance(100)
        node.cron()
    sent = len(stats_sent(node, PEER_ID))
    assert WATCH_MS // SEND_INTERVAL_MS - 2 <= sent <= WATCH_MS // SEND_INTERVAL_MS + 1
    for _ in range(30):
        node.state.clock.advance(100)
        node.cron()
    assert node.state.peerstats.watchers == {}
    before = len(stats_sent(node, PEER_ID))
    node.state.clock.advance(SEND_INTERVAL_MS * 3)
    node.cron()
    assert len(stats_sent(node, PEER_ID)) == before


def test_a_summary_from_the_wire_is_kept_for_its_sender():
    node = make_node()
    peer = make_node(node_id=PEER_ID)
    Cmd(peer).addjob("q", "body")
    add_peer(node)
    deliver(node, PEER_ID, peer.state.peerstats.own().to_wire())
    summary = node.state.peerstats.summaries[PEER_ID]
    assert figures(summary)["registered"] == 1 and summary.received == node.state.now
    assert summary.queues == [(b"q", 1, 1, 0, 0, 0, -1)]


def test_a_watched_node_asks_its_peers_at_most_once_per_interval():
    node = make_node()
    add_peer(node)
    peerstats = node.state.peerstats
    peerstats.watched()
    peerstats.watched()
    assert len(node.state.outbox.transport.of_type(m.STATSWANT)) == 1
    node.state.clock.advance(WANT_INTERVAL_MS)
    node.state.read_clock()
    peerstats.watched()
    assert len(node.state.outbox.transport.of_type(m.STATSWANT)) == 2


def test_summaries_of_silent_or_forgotten_nodes_are_dropped():
    node = make_node()
    add_peer(node)
    add_peer(node, OTHER_ID)
    own = node.state.peerstats.own().to_wire()
    deliver(node, PEER_ID, own)
    deliver(node, OTHER_ID, own)
    node.state.membership.remove(OTHER_ID)
    node.state.peerstats.watched()
    assert set(node.state.peerstats.summaries) == {PEER_ID}
    node.state.clock.advance(STALE_MS + 1)
    node.state.read_clock()
    node.state.peerstats.watched()
    assert node.state.peerstats.summaries == {}


def test_summaries_from_unknown_nodes_are_ignored():
    node = make_node()
    deliver(node, PEER_ID, node.state.peerstats.own().to_wire())
    deliver(node, PEER_ID, WANT)
    assert node.state.peerstats.summaries == {} and node.state.peerstats.watchers == {}


def test_the_longest_queues_are_picked_again_only_after_a_delay_that_grows_with_them():
    node = make_node(metrics_max_queues=1)
    cmd = Cmd(node)
    count = 2 * QUEUES_PER_MS * SEND_INTERVAL_MS  # a pick then waits two intervals
    for i in range(count):
        node.state.queues.create(b"q%d" % i)
    cmd.addjob("q1", "body")
    assert [share[0] for share in node.state.peerstats.own().queues] == [b"q1"]
    for _ in range(3):
        cmd.addjob("q2", "body")
    node.state.clock.advance(SEND_INTERVAL_MS)
    node.state.read_clock()
    # Not picked again yet: q1 is still the one listed, with its length now.
    assert [share[0] for share in node.state.peerstats.own().queues] == [b"q1"]
    node.state.clock.advance(SEND_INTERVAL_MS)
    node.state.read_clock()
    assert [share[0] for share in node.state.peerstats.own().queues] == [b"q2"]


def test_long_queue_names_are_left_out():
    node = make_node()
    Cmd(node).addjob(b"x" * (MAX_NAME + 1), "body")
    assert node.state.peerstats.own().queues == []
    assert figures(node.state.peerstats.own())["queues"] == 1


def test_malformed_summaries_and_queues_are_refused():
    stats = list(range(len(STATS_FIELDS)))
    good = [b"q", 1, 2, 3, 0, PAUSE_ALL, -1]
    assert summary_from_wire({m.STATS: stats, m.QUEUES: [good]}, 5).queues == [tuple(good)]
    # A newer node's extra figures and fields are ignored.
    assert summary_from_wire({m.STATS: stats + [9], m.QUEUES: [good + [7]]}, 5).stats == stats
    assert summary_from_wire({m.STATS: stats[:-1], m.QUEUES: []}, 5) is None
    assert summary_from_wire({m.STATS: stats[:-1] + [-1], m.QUEUES: []}, 5) is None
    assert summary_from_wire({m.STATS: stats[:-1] + [True], m.QUEUES: []}, 5) is None
    for bad in ([b"", 1, 2, 3, 0, 0, -1], [b"q", -1, 2, 3, 0, 0, -1], [b"q", 1, 2, 3, 0, 4, -1],
                [b"q", 1, 2, 3, 0, 0, -2], ["q", 1, 2, 3, 0, 0, -1], [b"q", 1, 2, 3, 0, 0],
                [b"x" * (MAX_NAME + 1), 1, 2, 3, 0, 0, -1], (b"q", 1, 2, 3, 0, 0, -1)):
        assert share_from_wire(bad) is None, bad
    summary = summary_from_wire({m.STATS: stats, m.QUEUES: [good, [b"q"], 7]}, 5)
    assert summary.queues == [tuple(good)]
