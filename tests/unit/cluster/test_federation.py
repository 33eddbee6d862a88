"""Federation and Consumers on their own: NEEDJOBS, YOURJOBS, open requests."""

from __future__ import annotations

from disque.context.clients import ClientState
from disque.cluster import messages as m
from disque.cluster.consumers import Consumers
from disque.cluster.federation import INTEREST_TTL_MS, Federation
from disque.cluster.membership import LEAVING
from disque.jobs.codec import to_bus
from disque.jobs.job import QUEUED
from disque.jobs.journal import REASON_MOVED
from tests.unit.cluster.wiring import LINK, OWN_ID, PEER_A, PEER_B, Parts, make_job


def federation(parts: Parts) -> Federation:
    return Federation(parts.runtime, parts.registry, parts.queues, parts.lifecycle,
                      parts.blocked, parts.membership, parts.outbox, parts.interest)


def queue_jobs(parts: Parts, count: int, retry: int = 300) -> list:
    jobs = [make_job(parts, tag=i, retry=retry) for i in range(count)]
    for job in jobs:
        parts.add_new(job)
    return jobs


def test_needjobs_gets_half_of_a_short_queue_and_the_requester_becomes_a_holder():
    parts = Parts()
    parts.add_peer(PEER_A)
    fed = federation(parts)
    jobs = queue_jobs(parts, 4)
    fed.on_needjobs(PEER_A, {m.TYPE: m.NEEDJOBS, m.QUEUE: b"q", m.COUNT: 5}, LINK)
    (dest, msg), = parts.transport.of_type(m.YOURJOBS)
    assert dest == PEER_A and [p[0] for p in msg[m.JOBS]] == [j.id for j in jobs[:2]]
    assert all(PEER_A in j.delivered for j in jobs[:2]) and len(parts.queues[b"q"].jobs) == 2
    assert (fed.jobs_exported, fed.jobs_imported) == (2, 0)  # the metrics' counters


def test_at_most_once_jobs_leave_the_node_they_are_given_away_from():
    parts = Parts()
    parts.add_peer(PEER_A)
    fed = federation(parts)
    job, = queue_jobs(parts, 1, retry=0)
    fed.on_needjobs(PEER_A, {m.TYPE: m.NEEDJOBS, m.QUEUE: b"q", m.COUNT: 1}, LINK)
    assert parts.registry.get(job.id) is None
    assert parts.journal.events == [("removed", job.id, REASON_MOVED)]


def test_a_request_to_an_empty_queue_is_served_when_a_job_arrives():
    parts = Parts()
    parts.add_peer(PEER_A)
    fed = federation(parts)
    fed.on_needjobs(PEER_A, {m.TYPE: m.NEEDJOBS, m.QUEUE: b"q", m.COUNT: 3}, LINK)
    assert parts.transport.sent == [] and PEER_A in parts.interest.wants[b"q"]
    job, = queue_jobs(parts, 1)
    fed.push_to_interested()
    (dest, msg), = parts.transport.of_type(m.YOURJOBS)
    assert dest == PEER_A and msg[m.JOBS][0][0] == job.id
    parts.advance(INTEREST_TTL_MS + 1)
    fed.expire_interest()
    assert parts.interest.wants == {}


def test_yourjobs_queues_the_jobs_and_remembers_the_sender():
    parts = Parts()
    parts.add_peer(PEER_A)
    fed = federation(parts)
    origin = Parts()
    job = make_job(origin, delivered=(PEER_A, OWN_ID))
    fed.on_yourjobs(PEER_A, {m.TYPE: m.YOURJOBS, m.JOBS: [to_bus(job, parts.runtime.now)]},
                    LINK)
    copy = parts.registry.get(job.id)
    assert copy is not None and copy.state == QUEUED
    assert list(parts.queues[b"q"].responders or {}) == [PEER_A]
    assert (fed.jobs_imported, fed.jobs_exported) == (1, 0)  # the metrics' counters


def test_consumers_get_jobs_round_robin_and_blocked_ones_are_served_on_arrival():
    parts = Parts()
    consumers = Consumers(parts.queues, parts.lifecycle, parts.blocked, federation(parts))
    first = make_job(parts, queue=b"a", tag=1)
    second = make_job(parts, queue=b"a", tag=2)
    third = make_job(parts, queue=b"b", tag=3)
    for job in (first, second, third):
        parts.add_new(job)
    found: list = []
    assert consumers.collect_more([b"a", b"b"], 3, found, 0) == 1
    assert found == [first, third, second]
    waiting = ClientState(1)
    parts.blocked.block_for_jobs(waiting, [b"a"], 0, 1, False)
    late = make_job(parts, queue=b"a", tag=4)
    parts.add_new(late)
    consumers.serve_ready()
    assert waiting.blocked is None and late.id in waiting.sent[0]


def two_requesters(count: int) -> tuple[Parts, Federation]:
    """A node whose queue q has an open request for ``count`` jobs from A and from B."""
    parts = Parts()
    parts.add_peer(PEER_A)
    parts.add_peer(PEER_B)
    fed = federation(parts)
    for peer in (PEER_A, PEER_B):
        fed.on_needjobs(peer, {m.TYPE: m.NEEDJOBS, m.QUEUE: b"q", m.COUNT: count}, LINK)
    return parts, fed


def test_a_push_hands_out_everything_requested_split_evenly():
    """A NEEDJOBS answer keeps half of a short queue (§6.7); a push does not:
    jobs queued for open requests all leave at once, in even shares."""
    parts, fed = two_requesters(10)
    jobs = queue_jobs(parts, 5)
    fed.push_to_interested()
    pushed = {dest: [p[0] for p in msg[m.JOBS]] for dest, msg in
              parts.transport.of_type(m.YOURJOBS)}
    assert pushed == {PEER_A: [j.id for j in jobs[:3]], PEER_B: [j.id for j in jobs[3:]]}
    assert len(parts.queues[b"q"].jobs) == 0
    # What each request still covers stays open.
    expire = parts.runtime.now + INTEREST_TTL_MS
    assert parts.interest.wants[b"q"] == {PEER_A: (expire, 7), PEER_B: (expire, 8)}


def test_a_push_gives_no_more_than_requested():
    parts = Parts()
    parts.add_peer(PEER_A)
    fed = federation(parts)
    fed.on_needjobs(PEER_A, {m.TYPE: m.NEEDJOBS, m.QUEUE: b"q", m.COUNT: 5}, LINK)
    queue_jobs(parts, 8)
    fed.push_to_interested()
    (dest, msg), = parts.transport.of_type(m.YOURJOBS)
    assert dest == PEER_A and len(msg[m.JOBS]) == 5
    assert len(parts.queues[b"q"].jobs) == 3 and parts.interest.wants == {}


def test_no_push_to_a_node_that_started_leaving_after_it_asked():
    """A leaving node never imports (spec §7): its open request is dropped,
    and the jobs go to the other requester or stay here."""
    parts, fed = two_requesters(10)
    parts.membership.nodes[PEER_A].flags |= LEAVING
    jobs = queue_jobs(parts, 4)
    fed.push_to_interested()
    (dest, msg), = parts.transport.of_type(m.YOURJOBS)
    assert dest == PEER_B and [p[0] for p in msg[m.JOBS]] == [j.id for j in jobs]
    assert PEER_A not in parts.interest.wants.get(b"q", {})
