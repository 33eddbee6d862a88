"""The cluster's dashboard across simulated nodes: a watched node gets every
peer's summary while its page polls and no longer once it stops; the
others get none; a crashed peer's summary is dropped; and a node looks
inside another node's queue and job over the network, with the real bus
framing too (msgpack carries the answers as they were sent)."""

from __future__ import annotations

import pytest

from disque.cluster import messages as m
from disque.cluster.peerstats import STALE_MS, WATCH_MS
from tests.sim.harness.network import NetParams
from tests.sim.harness.seeds import seeds
from tests.sim.harness.start import add_ok, ready

POLL_MS = 1000


class Listener:
    def __init__(self) -> None:
        self.answers: dict[tuple[bytes, int], object] = {}

    def answered(self, node_id: bytes, request: int, value: object) -> None:
        self.answers[(node_id, request)] = value


def watch(sim, i: int, until: float) -> None:
    """Poll node ``i``'s dashboard once a second until ``until`` (virtual ms)."""
    node = sim.nodes[i].node
    if node is None or sim.now >= until:
        return
    node.state.read_clock()
    node.state.peerstats.watched()
    sim.after(POLL_MS, watch, sim, i, until)


def stats_received(sim, i: int) -> int:
    return sim.node(i).bus_routes[m.NODESTATS].received


@pytest.mark.parametrize("seed", seeds("test_a_watched_node_hears_every_peer", 4))
def test_a_watched_node_hears_every_peer(seed):
    sim = ready(5, seed)
    sim.net.params = NetParams(latency=(0.1, 20.0), dup=0.05, reorder=0.1)
    for n in range(3):
        add_ok(sim, 3, "only3", "job %d" % n, 5000, "REPLICATE", 1)
    watch(sim, 0, sim.now + 5000)
    peers = {sn.node_id for sn in sim.nodes[1:]}
    summaries = sim.node(0).state.peerstats.summaries
    assert sim.run_until(lambda: set(summaries) == peers, 3000), (seed, summaries)
    assert sim.run_until(lambda: (b"only3", 3) in [
        share[:2] for share in summaries[sim.nodes[3].node_id].queues], 3000), seed
    assert all(stats_received(sim, i) == 0 for i in range(1, 5))
    # The page closed: the peers stop sending once WATCH_MS passed.
    sim.run_for(5000 + WATCH_MS + 2000)
    heard = stats_received(sim, 0)
    sim.run_for(5000)
    assert stats_received(sim, 0) == heard, seed


@pytest.mark.parametrize("seed", seeds("test_a_crashed_peer_is_no_longer_summed", 3))
def test_a_crashed_peer_is_no_longer_summed(seed):
    sim = ready(3, seed)
    watch(sim, 0, sim.now + 30_000)
    peerstats = sim.node(0).state.peerstats
    gone = sim.nodes[2].node_id
    assert sim.run_until(lambda: gone in peerstats.summaries, 3000), seed
    sim.crash(2)
    assert sim.run_until(lambda: gone not in peerstats.summaries, STALE_MS + 3000), seed


@pytest.mark.parametrize("wire", [False, True], ids=["messages", "wire"])
def test_looking_inside_another_node(wire):
    sim = ready(3, 7, wire=wire)
    job_id = add_ok(sim, 2, "mail", b"<b>bounce</b>\x00\xff", 5000, "REPLICATE", 1,
                    "MAXDELIVER", 1, "HEADER", "trace", "t-1")
    sim.call(2, "GETJOB", "FROM", "mail")
    assert sim.call(2, "NACK", job_id) == 1
    asker = sim.node(0).state.inspection
    listener = asker.listener = Listener()
    holder = sim.nodes[2].node_id
    queue_request = asker.ask_queue(holder, b"mail:dead", 10)
    job_request = asker.ask_job(holder, job_id)
    missing_request = asker.ask_job(sim.nodes[1].node_id, job_id)
    assert sim.run_until(lambda: len(listener.answers) == 3, 2000), listener.answers
    length, records = listener.answers[(holder, queue_request)]
    assert length == 1 and len(records) == 1
    record = dict(zip(records[0][0::2], records[0][1::2]))
    assert record[b"id"] == job_id and record[b"body"] == b"<b>bounce</b>\x00\xff"
    assert record[b"dead-reason"] == b"maxdeliver" and record[b"headers"] == [b"trace", b"t-1"]
    assert listener.answers[(holder, job_request)] == records[0]
    assert listener.answers[(sim.nodes[1].node_id, missing_request)] is None
    redrive_request = asker.ask_redrive(holder, b"mail:dead", b"ops")
    assert sim.run_until(lambda: (holder, redrive_request) in listener.answers, 2000)
    assert listener.answers[(holder, redrive_request)] == 1
    assert sim.call(2, "QLEN", "mail") == 1
