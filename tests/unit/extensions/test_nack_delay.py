"""NACK ... DELAY (docs/dead-letters.md): the requeue waits, is counted as
one NACK when it happens, and the other holders wait for it too."""

from __future__ import annotations

import pytest

from disque.cluster import messages as m
from disque.jobs.job import ACTIVE, QUEUED
from tests.unit.extensions.test_deadletter import Pair
from tests.unit.helpers import NODE_ID, Cmd, advance, make_node
from tests.unit.helpers import deliver as deliver_one

DELAY_RANGE = "ERR DELAY time must be a non negative number"
BADID = "BADID Invalid Job ID format."
JITTER = 250


@pytest.fixture
def cmd():
    return Cmd(make_node())


@pytest.fixture
def pair():
    return Pair()


def taken(cmd: Cmd, *options, queue="q") -> bytes:
    job_id = cmd.addjob(queue, "b", *options)
    assert cmd.ok("GETJOB", "FROM", queue)[0][1] == job_id
    return job_id


def counters(cmd: Cmd, job_id: bytes) -> tuple[int, int]:
    shown = cmd.show(job_id)
    return shown["nacks"], shown["additional-deliveries"]


def test_the_job_is_requeued_after_the_delay_and_counted_once(cmd):
    job_id = taken(cmd, "RETRY", 60)
    assert cmd.raw("NACK", job_id, "DELAY", 2) == b":1\r\n"
    assert cmd.show(job_id)["state"] == b"active" and counters(cmd, job_id) == (0, 0)
    assert 1900 <= cmd.show(job_id)["next-requeue-within"] <= 2000
    advance(cmd.node, 1990, step=10)
    assert cmd.show(job_id)["state"] == b"active" and cmd.ok("QLEN", "q") == 0
    advance(cmd.node, 20, step=10)
    assert cmd.show(job_id)["state"] == b"queued"
    assert counters(cmd, job_id) == (1, 0)
    # Then the retry period as usual, and nothing counted twice.
    assert cmd.ok("GETJOB", "FROM", "q")[0][1] == job_id
    advance(cmd.node, 60_000 + JITTER, step=500)
    assert counters(cmd, job_id) == (1, 1)


def test_a_blocked_consumer_gets_the_job_after_the_delay(cmd):
    job_id = taken(cmd)
    waiter = Cmd(cmd.node, client=type(cmd.client)(2, "127.0.0.1:50001"))
    assert waiter.raw("GETJOB", "FROM", "q") is None
    cmd.ok("NACK", job_id, "DELAY", 1)
    advance(cmd.node, 900, step=100)
    assert waiter.sent() == []
    advance(cmd.node, 200, step=100)
    assert waiter.sent() == [[[b"q", job_id, b"b"]]]


def test_delay_0_is_a_nack(cmd):
    job_id = taken(cmd)
    assert cmd.ok("NACK", job_id, "delay", 0) == 1
    assert cmd.show(job_id)["state"] == b"queued" and counters(cmd, job_id) == (1, 0)


def test_several_ids_and_what_is_not_counted(cmd):
    first = taken(cmd)
    second = taken(cmd)
    queued = cmd.addjob("q", "still queued")
    unknown = b"D-00000000-000000000000000000000000-0000"
    assert cmd.ok("NACK", first, second, queued, unknown, "DELAY", 5) == 2
    assert cmd.show(queued)["state"] == b"queued" and counters(cmd, queued) == (0, 0)
    assert cmd.ok("NACK", "DELAY", 5) == 0


@pytest.mark.parametrize("value", ["-1", "x", "1.5", "99999999999999999999"])
def test_a_bad_delay(cmd, value):
    job_id = taken(cmd)
    assert cmd.error("NACK", job_id, "DELAY", value) == DELAY_RANGE
    assert cmd.show(job_id)["state"] == b"active"


def test_ids_are_all_checked_first(cmd):
    job_id = taken(cmd)
    assert cmd.error("NACK", job_id, "nosuchid", "DELAY", 1) == BADID
    assert cmd.show(job_id)["state"] == b"active"


def test_without_delay_nack_is_disque_1_0s_byte_for_byte():
    """Two identical nodes: NACK id and NACK id DELAY 0 reply and announce alike."""
    replies, messages = [], []
    for words in ([], ["DELAY", "0"]):
        pair = Pair()
        job_id = pair.shared_job("RETRY", 5)
        pair.ca.ok("GETJOB", "FROM", "q")
        replies.append(pair.ca.raw("NACK", job_id, *words))
        messages.append(pair.sent("a"))
    assert replies == [b":1\r\n", b":1\r\n"]
    assert messages[0] == messages[1] == [{"type": "QUEUED", "id": messages[0][0]["id"],
                                           "mflags": m.MFLAG_INCR_NACKS}]


def test_an_at_most_once_job_delivered_is_not_nacked(cmd):
    job_id = taken(cmd, "RETRY", 0)
    assert cmd.ok("NACK", job_id, "DELAY", 1) == 0
    assert cmd.ok("NACK", job_id) == 0


def test_the_delay_never_outlives_the_job(cmd):
    job_id = taken(cmd, "TTL", 10, "RETRY", 2)
    assert cmd.ok("NACK", job_id, "DELAY", 3600) == 1
    assert cmd.show(job_id)["next-requeue-within"] <= 10_000


def test_the_delayed_requeue_applies_maxdeliver(cmd):
    job_id = taken(cmd, "MAXDELIVER", 1)
    cmd.ok("NACK", job_id, "DELAY", 1)
    advance(cmd.node, 1100, step=100)
    shown = cmd.show(job_id)
    assert (shown["queue"], shown["state"], shown["origin-queue"], shown["nacks"]) == (
        b"q:dead", b"queued", b"q", 1)


def test_the_delayed_requeue_ignores_a_paused_queue_like_nack(cmd):
    job_id = taken(cmd)
    cmd.ok("PAUSE", "q", "in")
    cmd.ok("NACK", job_id, "DELAY", 1)
    advance(cmd.node, 1100, step=100)
    assert cmd.show(job_id)["state"] == b"queued"


# ------------------------------------------------------------ the holders

def test_holders_wait_for_the_delay_then_their_retry(pair):
    job_id = pair.shared_job("RETRY", 5)
    pair.ca.ok("GETJOB", "FROM", "q")
    assert pair.ca.ok("NACK", job_id, "DELAY", 30) == 1
    (msg,) = pair.sent("a")
    assert msg == {"type": "WORKING", "id": job_id, "delay": 30}
    pair.pump("a")
    copy = pair.b.state.jobs[job_id]
    assert copy.state == ACTIVE
    assert 35_000 - JITTER <= copy.qtime - pair.b.state.now <= 35_000 + JITTER
    # b stays quiet until then (a's requeue at 30 s would postpone it again).
    advance(pair.b, 34_000, step=500)
    assert copy.state == ACTIVE and not pair.sent("b", "QUEUED")


def test_without_the_working_a_holder_would_requeue_at_its_retry(pair):
    """The contrast: the WORKING is what keeps b from requeueing early."""
    job_id = pair.shared_job("RETRY", 5)
    pair.ca.ok("GETJOB", "FROM", "q")
    pair.ca.ok("NACK", job_id, "DELAY", 30)
    pair.drop("a")
    advance(pair.b, 5500, step=100)
    assert pair.b.state.jobs[job_id].state == QUEUED


def test_the_nack_is_counted_once_everywhere(pair):
    job_id = pair.shared_job("RETRY", 5)
    pair.ca.ok("GETJOB", "FROM", "q")
    pair.ca.ok("NACK", job_id, "DELAY", 2)
    pair.pump("a")
    advance(pair.a, 2100, step=100)
    (queued,) = pair.sent("a", "QUEUED")
    assert queued["mflags"] == m.MFLAG_INCR_NACKS
    pair.pump("a")
    assert pair.a.state.jobs[job_id].nacks == pair.b.state.jobs[job_id].nacks == 1
    assert pair.a.state.jobs[job_id].adeliv == pair.b.state.jobs[job_id].adeliv == 0


def test_a_requeue_elsewhere_supersedes_the_delayed_nack(pair):
    """b queued the job first (it never heard the delay): a's delayed NACK is
    dropped, so the failure is not counted twice nor the job queued twice."""
    job_id = pair.shared_job("RETRY", 5)
    pair.ca.ok("GETJOB", "FROM", "q")
    pair.ca.ok("NACK", job_id, "DELAY", 8)
    pair.drop("a")
    advance(pair.b, 5500, step=100)
    assert pair.b.state.jobs[job_id].state == QUEUED
    advance(pair.a, 4000, step=100)
    pair.pump("b", ("QUEUED",))  # a postpones to 4 + 5 s: past its delayed NACK's 8 s
    advance(pair.a, 4500, step=100)
    assert pair.a.state.jobs[job_id].state == ACTIVE and pair.a.state.jobs[job_id].nacks == 0
    assert not pair.sent("a", "QUEUED")
    advance(pair.a, 1000, step=100)  # a's own retry timeout now: not a NACK
    assert pair.a.state.jobs[job_id].state == QUEUED
    assert (pair.a.state.jobs[job_id].nacks, pair.a.state.jobs[job_id].adeliv) == (0, 2)


def test_a_bad_delay_field_is_ignored(pair):
    job_id = pair.shared_job("RETRY", 5)
    deliver_one(pair.b, NODE_ID, {"type": "WORKING", "id": job_id, "delay": "x"})
    copy = pair.b.state.jobs[job_id]
    assert 5000 - JITTER <= copy.qtime - pair.b.state.now <= 5000 + JITTER
