"""Replication on its own: REPLJOB out, GOTJOB in, producers answered."""

from __future__ import annotations

import pytest

from disque.protocol import errors
from disque.context.clients import ClientState
from disque.cluster import messages as m
from disque.cluster.replication import Replication
from disque.jobs.codec import to_bus
from disque.jobs.job import QUEUED
from disque.jobs.journal import REASON_HOLDERS_CHANGED
from disque.protocol.resp import status
from tests.unit.cluster.wiring import LINK, OWN_ID, PEER_A, PEER_B, Parts, make_job


@pytest.fixture
def parts() -> Parts:
    parts = Parts()
    parts.add_peer(PEER_A)
    parts.add_peer(PEER_B)
    return parts


def replication(parts: Parts) -> Replication:
    return Replication(parts.runtime, parts.registry, parts.queues, parts.lifecycle,
                       parts.blocked, parts.membership, parts.outbox, parts.memory)


def test_a_synchronous_addjob_waits_for_enough_gotjob(parts):
    repl = replication(parts)
    job = make_job(parts, repl=3)
    producer = ClientState(1)
    repl.wait_for_replicas(producer, job, False, 2, parts.runtime.now + 1000)
    assert sorted(dest for dest, _ in parts.transport.of_type(m.REPLJOB)) == [PEER_A, PEER_B]
    repl.on_gotjob(PEER_A, m.job_message(m.GOTJOB, job.id), LINK)
    assert producer.sent == []
    repl.on_gotjob(PEER_B, m.job_message(m.GOTJOB, job.id), LINK)
    assert producer.sent == [status(job.id)] and job.state == QUEUED
    assert parts.journal.events == [("stored", job.id)]
    assert (repl.waits, repl.wait_failures, repl.wait_latency.count) == (1, 0, 1)


def test_a_producer_that_times_out_gets_norepl_and_the_job_goes(parts):
    repl = replication(parts)
    job = make_job(parts, repl=3)
    producer = ClientState(1)
    repl.wait_for_replicas(producer, job, False, 2, parts.runtime.now + 1000)
    block = producer.blocked
    assert block is not None
    parts.blocked.unblock(producer, errors.NOREPL_TIMEOUT)  # as Node does at the deadline
    repl.producer_gone(block)
    assert producer.sent == [errors.NOREPL_TIMEOUT] and parts.registry.get(job.id) is None
    assert (repl.waits, repl.wait_failures, repl.wait_latency.count) == (1, 1, 0)
    assert {dest for dest, _ in parts.transport.of_type(m.DELJOB)} == {PEER_A, PEER_B}


def test_a_received_copy_is_stored_journaled_and_confirmed(parts):
    repl = replication(parts)
    origin = Parts()
    job = make_job(origin, repl=2, delivered=(PEER_A, OWN_ID))
    repl.on_repljob(PEER_A, {m.TYPE: m.REPLJOB, m.JOB: to_bus(job, origin.runtime.now),
                             m.MFLAGS: 0}, LINK)
    copy = parts.registry.get(job.id)
    assert copy is not None and copy.body == job.body
    assert parts.journal.events == [("stored", job.id)]
    assert parts.transport.sent == [(PEER_A, m.job_message(m.GOTJOB, job.id))]


def test_a_resent_copy_naming_more_holders_is_journaled_again(parts):
    """The AOF keeps a job's first LOADJOB: a re-sent REPLJOB that widens the
    holders list is recorded as a DELJOB and a new LOADJOB, so a restart
    from the AOF knows every holder; one that adds no
    holder records nothing."""
    repl = replication(parts)
    origin = Parts()
    job = make_job(origin, repl=2, delivered=(PEER_A, OWN_ID))
    first = {m.TYPE: m.REPLJOB, m.JOB: to_bus(job, origin.runtime.now), m.MFLAGS: 0}
    repl.on_repljob(PEER_A, first, LINK)
    repl.on_repljob(PEER_A, first, LINK)
    job.merge_delivered((PEER_B,))
    repl.on_repljob(PEER_A, {m.TYPE: m.REPLJOB, m.JOB: to_bus(job, origin.runtime.now),
                             m.MFLAGS: 0}, LINK)
    assert set(parts.registry.get(job.id).delivered) == {PEER_A, OWN_ID, PEER_B}
    assert parts.journal.events == [("stored", job.id),
                                    ("removed", job.id, REASON_HOLDERS_CHANGED),
                                    ("stored", job.id)]


def test_no_copies_are_taken_above_the_memory_warning_level(parts):
    repl = replication(parts)
    parts.memory.set_limit(1_000_000)
    parts.memory.used = 800_000
    job = make_job(Parts(), repl=2, delivered=(PEER_A, OWN_ID))
    repl.on_repljob(PEER_A, {m.TYPE: m.REPLJOB, m.JOB: to_bus(job, parts.runtime.now)}, LINK)
    assert parts.registry.get(job.id) is None and parts.transport.sent == []
