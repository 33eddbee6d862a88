"""A dead letter's generation where the requeue messages are not the
carrier: YOURJOBS bringing a newer generation to a node holding an older
copy, and WORKING saying the generation (docs/dead-letters.md)."""

from __future__ import annotations

from disque.cluster import messages as m
from disque.jobs.codec import to_bus
from disque.jobs.job import QUEUED
from tests.unit.extensions.test_deadletter import Pair, fail


def test_yourjobs_with_a_newer_generation_queues_the_job_where_it_moved():
    pair = Pair()
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 1)
    fail(pair.ca, job_id, ("q",))  # a moved it to q:dead (generation 1)
    pair.drop("a")  # b never hears of the move
    moved = pair.a.state.jobs[job_id]
    payload = to_bus(moved, pair.a.state.now)
    pair.b.state.federation.on_yourjobs(pair.a.state.id, {m.TYPE: m.YOURJOBS, m.JOBS: [payload]}, None)
    copy = pair.b.state.jobs[job_id]
    assert (copy.state, copy.queue, copy.ext.moves, copy.ext.origin) == (
        QUEUED, b"q:dead", 1, b"q")
    assert pair.cb.ok("QLEN", "q") == 0 and pair.cb.ok("QLEN", "q:dead") == 1


def test_yourjobs_with_an_older_generation_changes_nothing():
    pair = Pair()
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 1)
    stale = to_bus(pair.a.state.jobs[job_id], pair.a.state.now)  # generation 0, queue q
    assert pair.cb.ok("ENQUEUE", job_id) == 1
    fail(pair.cb, job_id, ("q",))  # b moved its copy to q:dead (generation 1)
    pair.drop("b")
    copy = pair.b.state.jobs[job_id]
    assert copy.queue == b"q:dead" and copy.ext.moves == 1
    pair.b.state.federation.on_yourjobs(pair.a.state.id, {m.TYPE: m.YOURJOBS, m.JOBS: [stale]}, None)
    assert copy.queue == b"q:dead" and copy.ext.moves == 1
    assert pair.cb.ok("QLEN", "q") == 0


def test_working_carries_the_generation():
    pair = Pair()
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 1)
    fail(pair.ca, job_id, ("q",))
    pair.drop("a")
    pair.ca.ok("GETJOB", "FROM", "q:dead")
    assert isinstance(pair.ca.ok("WORKING", job_id), int)
    (msg,) = pair.sent("a", m.WORKING)
    assert msg["moves"] == 1 and msg["queue"] == b"q:dead"
    pair.pump("a")
    assert pair.b.state.jobs[job_id].queue == b"q:dead"


def test_working_of_a_plain_job_is_disque_1_0s():
    pair = Pair()
    job_id = pair.shared_job("RETRY", 5)
    pair.ca.ok("GETJOB", "FROM", "q")
    pair.ca.ok("WORKING", job_id)
    assert pair.sent("a", m.WORKING) == [{"type": "WORKING", "id": job_id}]
