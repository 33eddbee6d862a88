"""AckPropagation and RequeueCoordination on their own."""

from __future__ import annotations

from disque.cluster import messages as m
from disque.cluster.acks import AckPropagation
from disque.cluster.replication import Replication
from disque.cluster.requeue import RequeueCoordination, node_order_key
from disque.jobs.job import ACKED, ACTIVE, QUEUED
from disque.queues.queue import PAUSE_IN
from tests.unit.cluster.wiring import LINK, OWN_ID, PEER_A, PEER_B, Parts, make_job


def acks(parts: Parts) -> AckPropagation:
    repl = Replication(parts.runtime, parts.registry, parts.queues, parts.lifecycle,
                       parts.blocked, parts.membership, parts.outbox, parts.memory)
    return AckPropagation(parts.runtime, parts.registry, parts.lifecycle, repl,
                          parts.membership, parts.outbox)


def requeue(parts: Parts) -> RequeueCoordination:
    return RequeueCoordination(parts.runtime, parts.registry, parts.queues, parts.lifecycle,
                               parts.outbox)


def shared_job(parts: Parts):
    parts.add_peer(PEER_A)
    job = make_job(parts, delivered=(OWN_ID, PEER_A))
    parts.add_new(job)
    return job


def test_setack_acks_here_and_confirms():
    parts = Parts()
    job = shared_job(parts)
    acks(parts).on_setack(PEER_A, {m.TYPE: m.SETACK, m.ID: job.id, m.MAY_HAVE: 2,
                                   m.HOLDERS: [OWN_ID, PEER_A]}, LINK)
    assert job.state == ACKED
    assert parts.transport.sent == [(PEER_A, {m.TYPE: m.GOTACK, m.ID: job.id, m.KNOWN: 1})]


def test_a_node_that_knows_a_holder_the_sender_does_not_takes_over_the_gc():
    parts = Parts()
    job = shared_job(parts)
    parts.add_peer(PEER_B)
    job.add_delivered(PEER_B)
    acks(parts).on_setack(PEER_A, {m.TYPE: m.SETACK, m.ID: job.id, m.MAY_HAVE: 2,
                                   m.HOLDERS: [OWN_ID, PEER_A]}, LINK)
    assert {dest for dest, _ in parts.transport.of_type(m.SETACK)} == {PEER_A, PEER_B}


def test_the_last_gotack_deletes_the_job_everywhere():
    parts = Parts()
    job = shared_job(parts)
    parts.lifecycle.ack_job(job, schedule=False)
    parts.lifecycle.gc_attempt(job)
    acks(parts).on_gotack(PEER_A, {m.TYPE: m.GOTACK, m.ID: job.id, m.KNOWN: 1}, LINK)
    assert parts.registry.get(job.id) is None
    assert parts.transport.of_type(m.DELJOB) == [(PEER_A, m.job_message(m.DELJOB, job.id))]


def test_of_two_nodes_that_queued_a_job_the_order_key_decides_who_keeps_it():
    parts = Parts()
    job = shared_job(parts)
    sender_wins = node_order_key(PEER_A, job.id) > node_order_key(OWN_ID, job.id)
    requeue(parts).on_queued(PEER_A, m.job_message(m.QUEUED, job.id, m.MFLAG_INCR_DELIV),
                             LINK)
    assert job.state == (ACTIVE if sender_wins else QUEUED)
    assert job.adeliv == 1


def test_working_always_takes_the_job_out_of_the_queue_and_postpones_it():
    parts = Parts()
    job = shared_job(parts)
    before = job.qtime
    parts.advance(1000)
    requeue(parts).on_working(PEER_A, m.job_message(m.WORKING, job.id), LINK)
    assert job.state == ACTIVE and job.qtime > before


def test_pause_sets_exactly_the_broadcast_state():
    parts = Parts()
    requeue(parts).on_pause(PEER_A, {m.TYPE: m.PAUSE, m.QUEUE: b"q", m.PAUSE_STATE: b"in"},
                            LINK)
    assert parts.queues[b"q"].paused == PAUSE_IN
