"""node.counters: what happened to jobs on a node, counted where it happens
(read by the metrics collectors and the dashboard)."""

from __future__ import annotations

from dataclasses import dataclass

from disque.state.eviction import MemoryPolicy
from disque.context.stats import JobCounters
from tests.unit.cluster.wiring import Parts, make_job
from tests.unit.helpers import Cmd, advance, make_node


@dataclass
class EvictAcks:
    maxmemory_policy: str = "acks"


def counts(node) -> dict[str, int]:
    c = node.state.counters
    return {name: getattr(c, name) for name in
            ("added", "delivered", "acked", "nacked", "requeued", "expired", "evicted",
             "dead_lettered")}


def test_add_get_ack_nack_fastack():
    node = make_node()
    cmd = Cmd(node)
    first = cmd.addjob("q", "a")
    second = cmd.addjob("q", "b")
    cmd.addjob("q", "c", "DELAY", 5)
    assert cmd.ok("GETJOB", "COUNT", 2, "FROM", "q")
    assert cmd.ok("ACKJOB", first, first) == 1  # the same job twice: one ack
    assert cmd.ok("NACK", second) == 1
    assert cmd.ok("FASTACK", second) == 1
    assert counts(node) == {"added": 3, "delivered": 2, "acked": 2, "nacked": 1, "requeued": 0,
                            "expired": 0, "evicted": 0, "dead_lettered": 0}


def test_a_rejected_addjob_is_not_added():
    node = make_node()
    cmd = Cmd(node)
    cmd.ok("PAUSE", "q", "in")
    cmd.error("ADDJOB", "q", "body", 0, "RETRY", 1)
    assert node.state.counters.added == 0


def test_a_repeated_dedupid_is_not_added():
    node = make_node()
    cmd = Cmd(node)
    first = cmd.addjob("q", "a", "DEDUPID", "t")  # the lone node's one-option path
    assert cmd.addjob("q", "a", "DEDUPID", "t") == first
    assert cmd.addjob("q", "a", "RETRY", 9, "DEDUPID", "t") == first  # the options parser's
    assert node.state.counters.added == 1


def test_blocked_consumer_served_later_is_delivered():
    node = make_node()
    consumer = Cmd(node)
    assert consumer.raw("GETJOB", "TIMEOUT", 0, "FROM", "q") is None
    Cmd(node).addjob("q", "x")
    assert len(consumer.sent()) == 1
    assert node.state.counters.delivered == 1


def test_retry_timeout_requeues_and_ttl_expires():
    node = make_node()
    cmd = Cmd(node)
    cmd.addjob("q", "x", "RETRY", 1, "TTL", 10)
    cmd.ok("GETJOB", "FROM", "q")
    advance(node, 2000, step=100)
    assert node.state.counters.requeued == 1
    advance(node, 10_000, step=500)
    assert node.state.counters.expired == 1
    assert not node.state.jobs


def test_dead_lettered_after_maxdeliver():
    node = make_node()
    cmd = Cmd(node)
    job_id = cmd.addjob("q", "poison", "MAXDELIVER", 1)
    cmd.ok("GETJOB", "FROM", "q")
    assert cmd.ok("NACK", job_id) == 1
    assert node.state.counters.dead_lettered == 1
    assert node.state.counters.nacked == 1


def test_evicted_under_memory_pressure():
    parts = Parts(maxmemory=1_000_000)
    jobs = [make_job(parts, tag=i, body=b"x" * 50_000) for i in range(8)]
    for job in jobs:
        parts.add_new(job)
        parts.lifecycle.ack_job(job)
    counters = JobCounters()
    policy = MemoryPolicy(EvictAcks(), parts.memory, parts.registry, parts.lifecycle,
                          parts.queues, counters)
    parts.memory.set_limit(1_000_000)
    assert policy.free_memory()
    assert counters.evicted == sum(1 for job in jobs if parts.registry.get(job.id) is None) > 0
