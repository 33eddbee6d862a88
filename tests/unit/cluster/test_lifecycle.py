"""JobLifecycle on its own: transitions, what they announce, what they journal."""

from __future__ import annotations

from disque.protocol import errors
from disque.context.clients import ClientState
from disque.cluster import messages as m
from disque.jobs.job import ACKED, ACTIVE, BCAST_WILLQUEUE, QUEUED, WAIT_REPL
from disque.jobs.journal import REASON_ACKED, REASON_EXPIRED
from disque.context.memory import BASE_MEMORY, JOB_COST, QUEUE_COST
from disque.protocol.resp import status
from tests.unit.cluster.wiring import OWN_ID, PEER_A, Parts, make_job


def test_a_new_job_is_held_queued_and_its_requeue_armed():
    parts = Parts()
    job = make_job(parts, retry=10)
    parts.add_new(job)
    queue = parts.queues[b"q"]
    assert job.state == QUEUED and len(queue.jobs) == 1 and parts.registry.get(job.id) is job
    assert job.flags & BCAST_WILLQUEUE and 9750 <= job.qtime - parts.runtime.now < 10250
    assert job.awakeme == job.qtime - 500  # WILLQUEUE goes out half a second before
    assert parts.memory.used == BASE_MEMORY + QUEUE_COST + 1 + JOB_COST + 4
    assert parts.transport.sent == []  # the first queueing is silent


def test_a_requeue_is_announced_to_the_other_holders_and_counted():
    parts = Parts()
    parts.add_peer(PEER_A)
    job = make_job(parts, delivered=(OWN_ID, PEER_A))
    parts.add_new(job)
    popped = parts.lifecycle.pop_job(parts.queues[b"q"])
    assert popped is job and job.state == ACTIVE
    assert parts.lifecycle.enqueue_job(job, nack=True)
    assert job.nacks == 1
    assert parts.transport.sent == [(PEER_A, m.job_message(m.QUEUED, job.id,
                                                          m.MFLAG_INCR_NACKS))]


def test_ack_and_expiry_reach_the_journal_with_their_reason():
    parts = Parts()
    acked, expiring = make_job(parts, tag=1), make_job(parts, tag=2, ttl=5)
    for job in (acked, expiring):
        parts.add_new(job)
    assert parts.lifecycle.ack_job(acked) and acked.state == ACKED
    assert not parts.lifecycle.ack_job(acked)
    parts.advance(6000)
    parts.lifecycle.process_job_timers()
    assert parts.journal.events == [("removed", acked.id, REASON_ACKED),
                                    ("removed", expiring.id, REASON_EXPIRED)]
    assert parts.registry.get(expiring.id) is None


def test_deleting_a_job_in_wait_repl_answers_its_producer_and_calls_back_copies():
    parts = Parts()
    parts.add_peer(PEER_A)
    job = make_job(parts, repl=2, delivered=(OWN_ID, PEER_A))
    job.state = WAIT_REPL
    parts.lifecycle.register_job(job)
    producer = ClientState(1)
    parts.blocked.block_for_replication(producer, job.id, 0)
    parts.lifecycle.delete_job(job)
    assert producer.sent == [errors.NOREPL_REMOVED]
    assert parts.transport.sent == [(PEER_A, m.job_message(m.DELJOB, job.id))]
    assert parts.journal.events == []  # never stored, so nothing to remove


def test_an_ack_while_replicas_are_awaited_gives_the_producer_its_id():
    parts = Parts()
    job = make_job(parts, repl=2)
    job.state = WAIT_REPL
    parts.lifecycle.register_job(job)
    producer = ClientState(1)
    parts.blocked.block_for_replication(producer, job.id, 0)
    parts.lifecycle.ack_job(job)
    assert producer.sent == [status(job.id)]


def test_gc_of_a_lone_acked_job_deletes_it_and_asks_holders_otherwise():
    parts = Parts()
    lone = make_job(parts, tag=1)
    parts.add_new(lone)
    parts.lifecycle.ack_job(lone, schedule=False)
    parts.lifecycle.gc_attempt(lone)
    assert parts.registry.get(lone.id) is None
    parts.add_peer(PEER_A)
    shared = make_job(parts, tag=2, delivered=(OWN_ID, PEER_A))
    parts.add_new(shared)
    parts.lifecycle.ack_job(shared, schedule=False)
    parts.lifecycle.gc_attempt(shared)
    setacks = parts.transport.of_type(m.SETACK)
    assert [dest for dest, _ in setacks] == [PEER_A]
    assert setacks[0][1][m.MAY_HAVE] == 2 and parts.registry.get(shared.id) is shared


def test_a_queued_job_reports_to_the_queue_arrivals():
    parts = Parts()
    parts.interest.wants[b"q"] = {PEER_A: (parts.runtime.now + 1000, 5)}
    job = make_job(parts)
    parts.add_new(job)
    assert list(parts.interest.ready) == [parts.queues[b"q"]]
