"""Job timers and memory with an injected clock (spec: jobs-and-ids.md §4-§9,
cluster-bus.md §6.5-§6.6). Time only moves when a test moves it."""

from __future__ import annotations

import pytest

from disque.cluster import messages as m
from disque.jobs.timers import NEVER
from disque.context.memory import BASE_MEMORY, JOB_COST, QUEUE_COST
from tests.unit.helpers import (
    PEER_ID,
    START_MS,
    Cmd,
    add_peer,
    advance,
    deliver,
    expected_memory,
    make_node,
)


def run_until(node, end: int) -> list[int]:
    """Fire every timer exactly at its due time up to ``end``; return the times
    at which run_timers did something."""
    clock = node.state.clock
    fired = []
    while True:
        due = min(job.awakeme for job in node.state.jobs.values()) if node.state.jobs else NEVER
        if due > end:
            clock.now = max(clock.now, end)
            node.run_timers()
            return fired
        clock.now = max(clock.now, due)
        node.run_timers()
        fired.append(clock.now)


def state(cmd, job_id) -> bytes | None:
    job = cmd.show(job_id)
    return None if job is None else job["state"]


# ------------------------------------------------------------------ delays

def test_delayed_job_is_queued_exactly_at_its_delay(node, cmd):
    job_id = cmd.addjob("q", "x", "DELAY", "5", "RETRY", "10")
    advance(node, 4999)
    assert state(cmd, job_id) == b"active" and cmd.ok("QLEN", "q") == 0
    advance(node, 1)
    assert state(cmd, job_id) == b"queued"
    job = cmd.show(job_id)
    # First queueing: silent, and the requeue clock starts now (retry ± jitter).
    assert (job["nacks"], job["additional-deliveries"]) == (0, 0)
    assert 10_000 - 250 <= job["next-requeue-within"] <= 10_000 + 249
    assert job["next-awake-within"] == job["next-requeue-within"] - 500


def test_delayed_job_wakes_a_blocked_consumer(node, cmd):
    from disque.context.clients import ClientState
    consumer = Cmd(node, ClientState(4))
    job_id = cmd.addjob("q", "x", "DELAY", "2")
    assert consumer.raw("GETJOB", "FROM", "q") is None
    advance(node, 2000, step=100)
    assert consumer.sent() == [[[b"q", job_id, b"x"]]]


def test_delayed_retry_zero_job_is_queued_once(node, cmd):
    job_id = cmd.addjob("q", "x", "DELAY", "3", "RETRY", "0")
    advance(node, 3000)
    job = cmd.show(job_id)
    assert job["state"] == b"queued" and job["next-requeue-within"] is None
    cmd.ok("GETJOB", "FROM", "q")
    advance(node, 600_000, step=60_000)
    assert state(cmd, job_id) == b"active"


# ------------------------------------------------------------------ retries

def test_retry_requeues_a_delivered_job(node, cmd):
    job_id = cmd.addjob("q", "x", "RETRY", "5")
    qtime = node.state.jobs[job_id].qtime
    assert START_MS + 5000 - 250 <= qtime <= START_MS + 5000 + 249
    cmd.ok("GETJOB", "FROM", "q")
    run_until(node, qtime - 1)
    assert state(cmd, job_id) == b"active"
    run_until(node, qtime)
    job = cmd.show(job_id)
    assert job["state"] == b"queued"
    assert (job["nacks"], job["additional-deliveries"]) == (0, 1)
    assert 5000 - 250 <= job["next-requeue-within"] <= 5000 + 249


def test_requeue_jitter_range(node, cmd):
    offsets = set()
    for i in range(400):
        job_id = cmd.addjob("q", str(i), "RETRY", "1")
        offsets.add(node.state.jobs[job_id].qtime - node.state.clock.now - 1000)
    assert min(offsets) >= -250 and max(offsets) <= 249
    assert min(offsets) < -200 and max(offsets) > 200  # both ends are reached
    assert len(offsets) > 200


def test_getjob_does_not_restart_the_retry_clock(node, cmd):
    job_id = cmd.addjob("q", "x", "RETRY", "10")
    qtime = node.state.jobs[job_id].qtime
    node.state.clock.advance(9000)
    cmd.ok("GETJOB", "FROM", "q")
    run_until(node, qtime)
    assert state(cmd, job_id) == b"queued"  # ~1 s after delivery, not 10 s


def test_queued_job_at_qtime_only_gets_its_qtime_pushed(node, cmd):
    add_peer(node)
    job_id = cmd.addjob("q", "x", "RETRY", "4", "REPLICATE", "2", "ASYNC")
    node.state.outbox.transport.clear()
    qtime = node.state.jobs[job_id].qtime
    run_until(node, qtime - 500)
    assert node.state.outbox.transport == []  # queued: no WILLQUEUE announcement
    run_until(node, qtime)
    job = cmd.show(job_id)
    assert job["state"] == b"queued"
    assert (job["nacks"], job["additional-deliveries"]) == (0, 0)
    assert 4000 - 250 <= job["next-requeue-within"] <= 4000 + 249
    assert job["next-awake-within"] == job["next-requeue-within"] - 500
    assert node.state.outbox.transport == []
    assert cmd.ok("QLEN", "q") == 1


def test_active_job_announces_willqueue_then_queued(node, cmd):
    add_peer(node)
    job_id = cmd.addjob("q", "x", "RETRY", "4", "REPLICATE", "2", "ASYNC")
    cmd.ok("GETJOB", "FROM", "q")
    node.state.outbox.transport.clear()
    qtime = node.state.jobs[job_id].qtime
    run_until(node, qtime - 501)
    assert node.state.outbox.transport == []
    run_until(node, qtime - 500)
    assert [(d, msg[m.TYPE], msg[m.ID]) for d, msg in node.state.outbox.transport] == [
        (PEER_ID, m.WILLQUEUE, job_id)]
    run_until(node, qtime)
    queued = node.state.outbox.transport.of_type(m.QUEUED)
    assert [(d, msg[m.MFLAGS]) for d, msg in queued] == [(PEER_ID, m.MFLAG_INCR_DELIV)]
    assert cmd.show(job_id)["additional-deliveries"] == 1


def test_requeue_postponed_while_queue_paused_in(node, cmd):
    job_id = cmd.addjob("q", "x", "RETRY", "5")
    cmd.ok("GETJOB", "FROM", "q")
    cmd.ok("PAUSE", "q", "in")
    qtime = node.state.jobs[job_id].qtime
    run_until(node, qtime)
    job = cmd.show(job_id)
    assert job["state"] == b"active"
    assert 5000 - 250 <= job["next-requeue-within"] <= 5000 + 249
    assert job["additional-deliveries"] == 0
    cmd.ok("PAUSE", "q", "none")
    run_until(node, node.state.jobs[job_id].qtime)
    assert state(cmd, job_id) == b"queued"


def test_paused_in_delays_first_queueing_except_for_retry_zero(node, cmd):
    retry = cmd.addjob("q", "x", "DELAY", "2", "RETRY", "5")
    once = cmd.addjob("q", "y", "DELAY", "2", "RETRY", "0")
    cmd.ok("PAUSE", "q", "in")
    run_until(node, START_MS + 2000)
    assert state(cmd, retry) == b"active"
    assert state(cmd, once) == b"queued"
    assert 5000 - 250 <= cmd.show(retry)["next-requeue-within"] <= 5000 + 249


def test_working_keeps_the_job_out_of_the_queue(node, cmd):
    job_id = cmd.addjob("q", "x", "RETRY", "5")
    cmd.ok("GETJOB", "FROM", "q")
    for _ in range(4):
        node.state.clock.advance(4000)
        node.run_timers()
        assert cmd.ok("WORKING", job_id) == 5
        assert state(cmd, job_id) == b"active"


# ------------------------------------------------------------------ expiry

def test_ttl_expiry_one_second_after_etime(node, cmd):
    job_id = cmd.addjob("q", "x", "TTL", "10", "RETRY", "0")
    etime_ms = (START_MS // 1000 + 10) * 1000
    assert cmd.show(job_id)["next-awake-within"] == etime_ms + 1000 - START_MS
    run_until(node, etime_ms + 999)
    assert state(cmd, job_id) == b"queued"
    run_until(node, etime_ms + 1000)
    assert cmd.show(job_id) is None
    assert cmd.ok("QLEN", "q") == 0
    assert node.state.used_memory == expected_memory(node)


def test_expiry_of_a_retrying_job(node, cmd):
    job_id = cmd.addjob("q", "x", "TTL", "5")  # retry 1: many timers before expiry
    cmd.ok("GETJOB", "FROM", "q")
    run_until(node, START_MS + 5000 - 1)
    assert state(cmd, job_id) is not None
    run_until(node, START_MS + 6000)
    assert cmd.show(job_id) is None


def test_acked_job_expires_too(node, cmd):
    add_peer(node)
    job_id = cmd.addjob("q", "x", "TTL", "20", "REPLICATE", "2", "ASYNC")
    cmd.ok("ACKJOB", job_id)
    run_until(node, START_MS + 21_000)
    assert cmd.show(job_id) is None


# ---------------------------------------------------------------------- GC

def test_gc_backoff_for_acked_jobs(node, cmd):
    add_peer(node)
    job_id = cmd.addjob("q", "x", "REPLICATE", "2", "ASYNC")
    node.state.outbox.transport.clear()
    cmd.ok("ACKJOB", job_id)
    attempts = [START_MS]
    assert len(node.state.outbox.transport.of_type(m.SETACK)) == 1
    end = START_MS + 1_000_000
    while node.state.clock.now < end:
        before = len(node.state.outbox.transport.of_type(m.SETACK))
        run_until(node, node.state.jobs[job_id].awakeme)
        if len(node.state.outbox.transport.of_type(m.SETACK)) > before:
            attempts.append(node.state.clock.now)
    gaps = [b - a for a, b in zip(attempts, attempts[1:])]
    expected = [2000, 4000, 8000, 16000, 32000, 64000, 128000, 180000, 180000, 180000]
    assert len(gaps) >= len(expected)
    for gap, want in zip(gaps, expected):
        assert want - 250 <= gap <= want + 249, (gaps, expected)
    assert all(msg[m.MAY_HAVE] == 2 for _, msg in node.state.outbox.transport.of_type(m.SETACK))
    assert node.state.jobs[job_id].gc_retry == 10


def test_gc_stops_when_every_holder_confirmed(node, cmd):
    add_peer(node)
    job_id = cmd.addjob("q", "x", "REPLICATE", "2", "ASYNC")
    cmd.ok("ACKJOB", job_id)
    deliver(node, PEER_ID, {m.TYPE: m.GOTACK, m.ID: job_id, m.KNOWN: 1})
    assert job_id not in node.state.jobs
    node.state.outbox.transport.clear()
    run_until(node, START_MS + 60_000)
    assert node.state.outbox.transport.of_type(m.SETACK) == []


# ------------------------------------------------------------------ memory

def test_used_memory_follows_the_dataset(node, cmd):
    assert node.state.used_memory == BASE_MEMORY
    job_id = cmd.addjob("q", "x" * 1000)
    assert node.state.used_memory == BASE_MEMORY + QUEUE_COST + 1 + JOB_COST + 1000
    other = cmd.addjob("q", "yy")
    assert node.state.used_memory == BASE_MEMORY + QUEUE_COST + 1 + 2 * JOB_COST + 1002
    cmd.ok("ACKJOB", job_id)
    assert node.state.used_memory == BASE_MEMORY + QUEUE_COST + 1 + JOB_COST + 2
    cmd.ok("DELJOB", other)
    assert node.state.used_memory == BASE_MEMORY + QUEUE_COST + 1
    node.state.clock.advance(300_000)
    node.cron()
    assert node.state.used_memory == BASE_MEMORY
    assert not node.state.queues


def test_used_memory_matches_after_a_mixed_workload(node, cmd):
    add_peer(node)
    ids = [cmd.addjob("q%d" % (i % 3), "b" * i, "REPLICATE", "2", "ASYNC") for i in range(30)]
    cmd.ok("GETJOB", "COUNT", "10", "FROM", "q0", "q1")
    cmd.ok("ACKJOB", *ids[:5])
    cmd.ok("ACKJOB", b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAB-0001")  # a dummy ACK
    cmd.ok("FASTACK", *ids[5:8])
    cmd.ok("NACK", *ids[8:12])
    assert node.state.used_memory == expected_memory(node)
    run_until(node, START_MS + 400_000)
    node.cron()
    assert node.state.used_memory == expected_memory(node)
    cmd.ok("DEBUG", "FLUSHALL")
    assert node.state.used_memory == BASE_MEMORY


def _set_threshold(node, evict_threshold: int) -> None:
    """maxmemory such that the 95 % level is at (about) ``evict_threshold``."""
    node.state.config.maxmemory = (evict_threshold // 95 + 1) * 100
    node.state.update_memory_limits()


def test_eviction_frees_only_safe_jobs(node, cmd):
    add_peer(node)
    body = "z" * 10_000
    acked = [cmd.addjob("a", body, "REPLICATE", "2", "ASYNC") for _ in range(5)]
    cmd.ok("ACKJOB", *acked)
    delivered_once = [cmd.addjob("d", body, "RETRY", "0", "REPLICATE", "1") for _ in range(5)]
    cmd.ok("GETJOB", "COUNT", "5", "FROM", "d")
    queued_once = [cmd.addjob("d", body, "RETRY", "0", "REPLICATE", "1") for _ in range(3)]
    keep = [cmd.addjob("k", body, "REPLICATE", "1") for _ in range(5)]
    cmd.ok("GETJOB", "COUNT", "2", "FROM", "k")  # delivered but retry > 0: still kept
    evictable = 10 * (JOB_COST + 10_000)
    # Above 95 %: any command first evicts until usage is back under the level.
    _set_threshold(node, node.state.used_memory - evictable // 2)
    assert cmd.raw("PING") == b"+PONG\r\n"
    assert node.state.used_memory <= node.state.memory.evict_threshold
    gone = [j for j in acked + delivered_once if j not in node.state.jobs]
    assert 0 < len(gone) < 10
    assert all(j in node.state.jobs for j in keep + queued_once)
    # Far above: everything safe goes, the rest stays, and m commands get -OOM.
    _set_threshold(node, BASE_MEMORY)
    assert cmd.raw("ENQUEUE", keep[0]) == (
        b"-OOM command not allowed when used memory > 'maxmemory'.\r\n")
    assert all(j not in node.state.jobs for j in acked + delivered_once)
    assert all(j in node.state.jobs for j in keep + queued_once)
    assert cmd.raw("QLEN", "k") == b":3\r\n"
    assert node.state.used_memory == expected_memory(node)


def test_eviction_from_the_cron(node, cmd):
    cmd.addjob("d", "z" * 10_000, "RETRY", "0")
    cmd.ok("GETJOB", "FROM", "d")
    _set_threshold(node, BASE_MEMORY + QUEUE_COST + 1)
    node.cron()
    assert not node.state.jobs


def test_noeviction_policy(node, cmd):
    cmd.addjob("d", "z" * 10_000, "RETRY", "0")
    cmd.ok("GETJOB", "FROM", "d")
    node.state.config.maxmemory_policy = "noeviction"
    _set_threshold(node, BASE_MEMORY)
    assert cmd.raw("NACK").startswith(b"-OOM")
    assert len(node.state.jobs) == 1


# --------------------------------------------------------------- queue GC

def test_idle_empty_queue_collected_after_300_seconds(node, cmd):
    cmd.ok("GETJOB", "NOHANG", "FROM", "idle")
    node.state.clock.advance(299_999)
    node.cron()
    assert b"idle" in node.state.queues
    node.state.clock.advance(1)
    node.cron()
    assert b"idle" not in node.state.queues
    assert cmd.raw("QSTAT", "idle") == b"*-1\r\n"


def test_queue_activity_resets_idleness(node, cmd):
    job_id = cmd.addjob("q", "x", "RETRY", "0")
    node.state.clock.advance(200_000)
    cmd.ok("GETJOB", "FROM", "q")  # pop: atime updated
    node.state.clock.advance(200_000)
    node.cron()
    assert b"q" in node.state.queues
    node.state.clock.advance(100_000)
    node.cron()
    assert b"q" not in node.state.queues
    assert job_id in node.state.jobs  # jobs outlive their queue object


def test_queues_with_jobs_or_waiters_are_kept(node, cmd):
    from disque.context.clients import ClientState
    cmd.addjob("full", "x")
    Cmd(node, ClientState(3)).raw("GETJOB", "FROM", "waited")
    node.state.clock.advance(10_000_000)
    node.cron()
    assert b"full" in node.state.queues and b"waited" in node.state.queues


@pytest.mark.parametrize("maxmemory, limit", [(1_000_000, 10), (800_000, 2)])
def test_queue_gc_is_faster_under_memory_pressure(maxmemory, limit):
    node = make_node(maxmemory=maxmemory)
    cmd = Cmd(node)
    cmd.ok("GETJOB", "NOHANG", "FROM", "idle")
    node.state.clock.advance(limit * 1000 - 1)
    node.cron()
    assert b"idle" in node.state.queues
    node.state.clock.advance(1)
    node.cron()
    assert b"idle" not in node.state.queues


def test_tiny_maxmemory_collects_every_idle_queue(node, cmd):
    for i in range(500):
        cmd.ok("GETJOB", "NOHANG", "FROM", "q%d" % i)
    node.state.config.maxmemory = 1
    node.state.update_memory_limits()
    node.state.clock.advance(2000)
    for _ in range(10):
        node.cron()
    assert not node.state.queues


# ---------------------------------------------------------------- ordering

def test_ctime_strictly_increases_even_if_the_clock_goes_back(node, cmd):
    a = cmd.show(cmd.addjob("q", "a"))["ctime"]
    b = cmd.show(cmd.addjob("q", "b"))["ctime"]
    node.state.clock.advance(-10_000)
    c = cmd.show(cmd.addjob("q", "c"))["ctime"]
    node.state.clock.advance(20_000)
    d = cmd.show(cmd.addjob("q", "d"))["ctime"]
    assert a < b < c < d
    assert b == a + 1 and c == b + 1
    assert d == (START_MS + 10_000) * 1_000_000


def test_hundred_jobs_come_out_in_insertion_order(node, cmd):
    ids = []
    for i in range(100):
        if i % 7 == 0:
            node.state.clock.advance(1)  # some share a millisecond, some do not
        ids.append(cmd.addjob("q", str(i), "REPLICATE", "1", "RETRY", "0"))
    got = [cmd.ok("GETJOB", "FROM", "q")[0][1] for _ in range(50)]
    got += [entry[1] for entry in cmd.ok("GETJOB", "COUNT", "100", "FROM", "q")]
    assert got == ids


def test_requeued_job_goes_back_to_the_front(node, cmd):
    first = cmd.addjob("q", "1", "RETRY", "5")
    node.state.clock.advance(1)
    later = [cmd.addjob("q", str(i)) for i in range(3)]
    cmd.ok("GETJOB", "FROM", "q")
    run_until(node, node.state.jobs[first].qtime)
    assert [e[1] for e in cmd.ok("QPEEK", "q", 10)] == [first] + later


def test_undeliverable_retry_zero_job_does_not_keep_its_timer_due(node, cmd):
    # A delivered RETRY 0 job that a peer hands back (YOURJOBS sets a qtime so
    # that it could be queued once) can never be queued again: its timer must
    # not stay due forever (a busy loop in the server).
    add_peer(node)
    job_id = cmd.addjob("q", "x", "RETRY", "0", "REPLICATE", "1")
    cmd.ok("GETJOB", "FROM", "q")
    from disque.jobs.codec import to_bus
    payload = to_bus(node.state.jobs[job_id], node.state.clock())
    deliver(node, PEER_ID, {m.TYPE: m.YOURJOBS, m.JOBS: [payload]})
    assert state(cmd, job_id) == b"active"
    assert cmd.ok("WORKING", job_id) == 0  # reschedules the job from its qtime
    advance(node, 10)
    assert node.state.jobs[job_id].awakeme > node.state.clock.now
    assert cmd.show(job_id)["next-requeue-within"] is None
