"""BACKOFF and MAXRETRY (docs/dead-letters.md): each retry-timeout requeue
lengthens the job's retry period, here and on its other holders."""

from __future__ import annotations

import pytest

from disque.cluster.lifecycle import backed_off_retry
from disque.jobs.job import QUEUED, Job, JobExtras
from tests.unit.extensions.test_deadletter import Pair
from tests.unit.helpers import Cmd, advance, make_node

JITTER = 250


@pytest.fixture
def cmd():
    return Cmd(make_node())


def times_out(cmd: Cmd, job_id: bytes) -> int:
    """Deliver the job (just queued) and let its retry period pass, checking
    that the requeue comes one period later; return the new period."""
    retry = cmd.show(job_id)["retry"]
    assert cmd.ok("GETJOB", "FROM", "q")[0][1] == job_id
    job = cmd.node.state.jobs[job_id]
    elapsed = 0
    while job.state != QUEUED and elapsed <= retry * 1000 + JITTER:
        advance(cmd.node, 10)
        elapsed += 10
    assert retry * 1000 - JITTER - 20 <= elapsed <= retry * 1000 + JITTER + 10, elapsed
    return cmd.show(job_id)["retry"]


def test_each_timeout_multiplies_the_period(cmd):
    job_id = cmd.addjob("q", "b", "RETRY", 1, "BACKOFF", 2)
    assert cmd.show(job_id)["retry"] == 1
    assert [times_out(cmd, job_id) for _ in range(4)] == [2, 4, 8, 16]
    shown = cmd.show(job_id)
    assert shown["base-retry"] == 1 and shown["additional-deliveries"] == 4
    # The next requeue is one new period away, and WORKING says so.
    assert 16_000 - JITTER <= shown["next-requeue-within"] <= 16_000 + JITTER
    cmd.ok("GETJOB", "FROM", "q")
    assert cmd.ok("WORKING", job_id) == 16


def test_rounded_up(cmd):
    job_id = cmd.addjob("q", "b", "RETRY", 1, "BACKOFF", "1.5")
    assert [times_out(cmd, job_id) for _ in range(3)] == [2, 3, 5]


def test_capped_at_maxretry(cmd):
    job_id = cmd.addjob("q", "b", "RETRY", 2, "BACKOFF", 3, "MAXRETRY", 10)
    assert [times_out(cmd, job_id) for _ in range(3)] == [6, 10, 10]


def test_capped_at_the_ttl_without_maxretry(cmd):
    job_id = cmd.addjob("q", "b", "RETRY", 3, "TTL", 20, "BACKOFF", 4)
    assert times_out(cmd, job_id) == 12
    assert times_out(cmd, job_id) == 20


def test_nacks_do_not_back_off(cmd):
    job_id = cmd.addjob("q", "b", "RETRY", 2, "BACKOFF", 2)
    for _ in range(3):
        cmd.ok("GETJOB", "FROM", "q")
        cmd.ok("NACK", job_id)
    cmd.ok("GETJOB", "FROM", "q")
    cmd.ok("NACK", job_id, "DELAY", 1)
    advance(cmd.node, 1100, step=100)
    assert cmd.show(job_id)["retry"] == 2 and cmd.show(job_id)["nacks"] == 4


def test_without_backoff_the_period_stays(cmd):
    job_id = cmd.addjob("q", "b", "RETRY", 1, "MAXDELIVER", 10)
    assert [times_out(cmd, job_id) for _ in range(3)] == [1, 1, 1]


def test_qredrive_restores_the_base_period(cmd):
    job_id = cmd.addjob("q", "b", "RETRY", 1, "BACKOFF", 2, "MAXDELIVER", 3)
    assert [times_out(cmd, job_id) for _ in range(2)] == [2, 4]
    cmd.ok("GETJOB", "FROM", "q")
    advance(cmd.node, 4000 + JITTER + 10, step=100)
    shown = cmd.show(job_id)
    assert (shown["queue"], shown["retry"]) == (b"q:dead", 8)
    assert cmd.ok("QREDRIVE", "q:dead") == 1
    assert cmd.show(job_id)["retry"] == 1


@pytest.mark.parametrize("retry, factor, maxretry, ttl, expected", [
    (1, 2.0, 0, 100, 2),
    (10, 1.01, 0, 100, 11),  # rounded up: 10.1
    (60, 2.0, 100, 1000, 100),
    (200, 2.0, 100, 1000, 200),  # never shorter than it was
    (90, 1000.0, 0, 100, 100),
    (7, 1.0, 0, 100, 7),
])
def test_the_rule(retry, factor, maxretry, ttl, expected):
    now_s = 1_700_000_000
    job = Job(b"D-00000000-000000000000000000000000-0000", b"q", b"", 1,
              now_s * 1_000_000_000, now_s + ttl, 0, retry)
    ext = JobExtras(backoff=factor, maxretry=maxretry)
    assert backed_off_retry(job, ext) == expected


def test_the_holders_keep_the_same_period():
    pair = Pair()
    job_id = pair.shared_job("RETRY", 2, "BACKOFF", 3)
    pair.ca.ok("GETJOB", "FROM", "q")
    advance(pair.a, 2000 + JITTER + 10, step=100)
    assert pair.a.state.jobs[job_id].state == QUEUED and pair.a.state.jobs[job_id].retry == 6
    (queued,) = pair.sent("a", "QUEUED")
    assert queued["retry"] == 6 and queued["moves"] == 0
    pair.pump("a")
    copy = pair.b.state.jobs[job_id]
    assert copy.retry == 6
    assert 6000 - JITTER <= copy.qtime - pair.b.state.now <= 6000 + JITTER
