"""GETJOB (spec: commands.md §1 GETJOB, jobs-and-ids.md §7 pop, reference-transcripts.md)."""

from __future__ import annotations

import pytest

from disque.context.clients import ClientState
from disque.cluster.membership import LEAVING
from tests.unit.helpers import Cmd, advance

SYNTAX = b"-ERR syntax error\r\n"
COUNT_ERR = b"-ERR COUNT must be a number greater than zero\r\n"
TIMEOUT_NOT_INT = b"-ERR timeout is not an integer or out of range\r\n"
TIMEOUT_NEG = b"-ERR timeout is negative\r\n"
LEAVING_ERR = b"-LEAVING This node is leaving the cluster, please connect to a different one\r\n"
NIL_ARRAY = b"*-1\r\n"


def entry(queue: bytes, job_id: bytes, body: bytes) -> bytes:
    return b"*3\r\n$%d\r\n%b\r\n$40\r\n%b\r\n$%d\r\n%b\r\n" % (len(queue), queue, job_id,
                                                             len(body), body)


# ------------------------------------------------------------------ syntax

def test_arity(cmd):
    assert cmd.raw("GETJOB") == b"-ERR wrong number of arguments for 'getjob' command\r\n"


@pytest.mark.parametrize("args, reply", [
    (["q"], SYNTAX), (["FROM"], SYNTAX), (["NOHANG"], SYNTAX), (["BOGUS", "FROM", "q"], SYNTAX),
    (["TIMEOUT"], SYNTAX), (["COUNT"], SYNTAX), (["NOHANG", "COUNT"], SYNTAX),
    (["COUNT", "0", "FROM", "q"], COUNT_ERR), (["COUNT", "x", "FROM", "q"], COUNT_ERR),
    (["COUNT", "-1", "FROM", "q"], COUNT_ERR), (["COUNT", "", "FROM", "q"], COUNT_ERR),
    (["TIMEOUT", "-1", "FROM", "q"], TIMEOUT_NEG),
    (["TIMEOUT", "abc", "FROM", "q"], TIMEOUT_NOT_INT),
    (["TIMEOUT", "FROM", "q"], TIMEOUT_NOT_INT),  # TIMEOUT eats FROM
    (["TIMEOUT", "1.5", "FROM", "q"], TIMEOUT_NOT_INT),
    (["COUNT", "0", "TIMEOUT", "-1", "FROM", "q"], COUNT_ERR),  # left to right
    (["TIMEOUT", "-1", "COUNT", "0", "FROM", "q"], TIMEOUT_NEG),
    (["COUNT", "1", "BOGUS"], SYNTAX),
])
def test_errors(cmd, args, reply):
    assert cmd.raw("GETJOB", *args) == reply


def test_everything_after_from_is_a_queue_name(cmd):
    job_id = cmd.addjob("COUNT", "x")
    reply = cmd.raw("GETJOB", "NOHANG", "FROM", "COUNT", "0")
    assert reply == b"*1\r\n" + entry(b"COUNT", job_id, b"x")


def test_options_are_case_insensitive(cmd):
    cmd.addjob("q", "x")
    reply = cmd.ok("getjob", "nohang", "withcounters", "count", "5", "timeout", "10", "from", "q")
    assert len(reply) == 1 and len(reply[0]) == 7


# ------------------------------------------------------------ non-blocking

def test_pops_oldest_first_and_marks_active(cmd):
    first = cmd.addjob("q", "body")
    second = cmd.addjob("q", "body2")
    assert cmd.raw("GETJOB", "FROM", "q") == b"*1\r\n" + entry(b"q", first, b"body")
    job = cmd.show(first)
    assert job["state"] == b"active"
    assert cmd.ok("QLEN", "q") == 1
    assert cmd.raw("GETJOB", "COUNT", "5", "FROM", "q") == b"*1\r\n" + entry(b"q", second, b"body2")


def test_count_gathers_up_to_count(cmd):
    ids = [cmd.addjob("q", str(i)) for i in range(5)]
    reply = cmd.ok("GETJOB", "COUNT", "3", "FROM", "q")
    assert [e[1] for e in reply] == ids[:3]
    reply = cmd.ok("GETJOB", "COUNT", "10", "FROM", "q")
    assert [e[1] for e in reply] == ids[3:]


def test_round_robin_over_queues(cmd):
    a = [cmd.addjob("a", "a%d" % i) for i in range(3)]
    b = [cmd.addjob("b", "b%d" % i) for i in range(3)]
    reply = cmd.ok("GETJOB", "COUNT", "3", "FROM", "a", "b")
    assert [e[1] for e in reply] == [a[0], b[0], a[1]]
    reply = cmd.ok("GETJOB", "COUNT", "10", "FROM", "a", "b")
    assert [e[1] for e in reply] == [a[2], b[1], b[2]]  # each call starts with the first queue


def test_round_robin_skips_empty_and_missing_queues(cmd):
    a = [cmd.addjob("a", "x") for _ in range(3)]
    reply = cmd.ok("GETJOB", "COUNT", "3", "FROM", "missing", "a", "empty")
    assert [e[1] for e in reply] == a
    assert cmd.ok("QSTAT", "missing") is not None  # GETJOB creates the queue objects


def test_duplicate_queue_names(cmd):
    ids = [cmd.addjob("q", str(i)) for i in range(3)]
    reply = cmd.ok("GETJOB", "COUNT", "2", "FROM", "q", "q")
    assert [e[1] for e in reply] == ids[:2]


def test_withcounters(node, cmd):
    job_id = cmd.addjob("q", "body")
    cmd.ok("GETJOB", "FROM", "q")
    assert cmd.ok("NACK", job_id) == 1
    raw = cmd.raw("GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert raw == (b"*1\r\n*7\r\n$1\r\nq\r\n$40\r\n" + job_id + b"\r\n$4\r\nbody\r\n"
                   b"$5\r\nnacks\r\n:1\r\n$21\r\nadditional-deliveries\r\n:0\r\n")


def test_nohang_on_empty_queues(cmd):
    assert cmd.raw("GETJOB", "NOHANG", "FROM", "q", "otherq") == NIL_ARRAY
    assert sorted(cmd.ok("QSCAN", "BUSYLOOP")[1]) == [b"otherq", b"q"]  # created even so


def test_paused_out_queue_looks_empty(cmd):
    cmd.addjob("q", "x")
    cmd.ok("PAUSE", "q", "out")
    assert cmd.raw("GETJOB", "NOHANG", "FROM", "q") == NIL_ARRAY
    assert cmd.raw("GETJOB", "TIMEOUT", "300", "FROM", "q") is None


def test_pop_counts_and_atime(node, cmd):
    cmd.addjob("q", "x")
    node.state.clock.advance(5000)
    cmd.ok("GETJOB", "FROM", "q")
    stat = cmd.ok("QSTAT", "q")
    stat = dict(zip(stat[::2], stat[1::2]))
    assert (stat[b"jobs-in"], stat[b"jobs-out"], stat[b"idle"], stat[b"age"]) == (1, 1, 0, 5)


def test_pop_keeps_the_retry_clock(node, cmd):
    job_id = cmd.addjob("q", "x", "RETRY", "10")
    before = cmd.show(job_id)["next-requeue-within"]
    node.state.clock.advance(3000)
    cmd.ok("GETJOB", "FROM", "q")
    assert cmd.show(job_id)["next-requeue-within"] == before - 3000


# ---------------------------------------------------------------- blocking

def test_blocks_then_served_by_addjob(node, cmd):
    assert cmd.raw("GETJOB", "FROM", "q") is None
    assert cmd.client.blocked is not None
    producer = Cmd(node, ClientState(2))
    job_id = producer.addjob("q", "hello")
    assert cmd.client.sent == [b"*1\r\n" + entry(b"q", job_id, b"hello")]
    assert cmd.client.blocked is None
    assert cmd.show(job_id)["state"] == b"active"
    assert producer.ok("QLEN", "q") == 0


def test_blocked_clients_served_fifo_one_job_each(node):
    consumers = [Cmd(node, ClientState(i + 10)) for i in range(3)]
    for c in consumers:
        assert c.raw("GETJOB", "COUNT", "10", "WITHCOUNTERS", "FROM", "q") is None
    producer = Cmd(node, ClientState(2))
    ids = [producer.addjob("q", "j%d" % i) for i in range(2)]
    assert [len(c.sent()) for c in consumers] == [1, 1, 0]
    assert consumers[0].sent()[0][0][1] == ids[0]
    assert consumers[1].sent()[0][0][1] == ids[1]
    assert len(consumers[0].sent()[0]) == 1 and len(consumers[0].sent()[0][0]) == 7
    assert consumers[2].client.blocked is not None
    assert int(_info(node, "blocked_clients")) == 1


def test_blocked_on_several_queues(node):
    consumer = Cmd(node, ClientState(5))
    assert consumer.raw("GETJOB", "FROM", "a", "b") is None
    producer = Cmd(node, ClientState(2))
    job_id = producer.addjob("b", "x")
    assert consumer.sent() == [[[b"b", job_id, b"x"]]]
    assert not node.state.blocked.clients
    assert producer.ok("QSTAT", "a")[9] == 0  # no longer blocked on a


def test_timeout_via_the_clock(node, cmd):
    assert cmd.raw("GETJOB", "TIMEOUT", "200", "FROM", "q") is None
    advance(node, 199)
    assert cmd.client.sent == []
    advance(node, 1)
    assert cmd.client.sent == [NIL_ARRAY]
    assert not node.state.blocked.clients and cmd.client.blocked is None


def test_no_timeout_blocks_forever(node, cmd):
    assert cmd.raw("GETJOB", "FROM", "q") is None
    advance(node, 3_600_000, step=600_000, cron=True)
    assert cmd.client.sent == [] and cmd.client.blocked is not None


def test_clearing_the_output_pause_wakes_consumers(node, cmd):
    producer = Cmd(node, ClientState(2))
    job_id = producer.addjob("q", "x")
    producer.ok("PAUSE", "q", "out")
    assert cmd.raw("GETJOB", "FROM", "q") is None
    assert producer.ok("PAUSE", "q", "none") == b"none"
    assert cmd.sent() == [[[b"q", job_id, b"x"]]]


def test_paused_out_queue_does_not_serve_blocked_clients(node, cmd):
    producer = Cmd(node, ClientState(2))
    producer.ok("PAUSE", "q", "out")
    assert cmd.raw("GETJOB", "FROM", "q") is None
    producer.addjob("q", "x")
    assert cmd.client.sent == []
    assert producer.ok("QLEN", "q") == 1


def test_flushall_answers_blocked_consumers(node, cmd):
    assert cmd.raw("GETJOB", "FROM", "q") is None
    assert Cmd(node, ClientState(2)).raw("DEBUG", "FLUSHALL") == b"+OK\r\n"
    assert cmd.client.sent == [NIL_ARRAY]
    assert not node.state.queues


def test_leaving_node(node, cmd):
    job_id = cmd.addjob("q", "x")
    node.state.membership.myself.flags |= LEAVING
    assert cmd.ok("GETJOB", "FROM", "q")[0][1] == job_id  # still hands out queued jobs
    assert cmd.raw("GETJOB", "NOHANG", "FROM", "q") == NIL_ARRAY
    assert cmd.raw("GETJOB", "TIMEOUT", "100", "FROM", "emptyq") == LEAVING_ERR


def test_blocked_consumer_unblocked_when_node_starts_leaving(node, cmd):
    assert cmd.raw("GETJOB", "FROM", "q") is None
    node.state.membership.myself.flags |= LEAVING
    node.cron()
    assert cmd.client.sent == [LEAVING_ERR]


def test_idle_queue_of_a_timed_out_consumer_is_collected_later(node, cmd):
    assert cmd.raw("GETJOB", "TIMEOUT", "10", "FROM", "q") is None
    advance(node, 10)
    assert "q".encode() in node.state.queues  # not idle long enough yet
    advance(node, 300_000, step=100, cron=False)
    node.cron()
    assert b"q" not in node.state.queues


def _info(node, field):
    text = Cmd(node, ClientState(99)).ok("INFO").decode()
    for line in text.split("\r\n"):
        if line.startswith(field + ":"):
            return line.split(":", 1)[1]
    raise KeyError(field)


def test_queue_checked_for_collection_when_its_last_waiter_leaves(node, cmd):
    assert cmd.raw("GETJOB", "NOHANG", "FROM", "q") == NIL_ARRAY
    node.state.clock.advance(400_000)  # idle for long, but no cron ran
    assert cmd.raw("GETJOB", "TIMEOUT", "10", "FROM", "q") is None
    assert b"q" in node.state.queues
    advance(node, 10)
    assert cmd.client.sent == [NIL_ARRAY]
    assert b"q" not in node.state.queues
