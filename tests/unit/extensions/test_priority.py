"""Priorities (docs/priorities.md): ADDJOB ... PRIORITY <0-9> orders the queue
by priority, then age. GETJOB, requeues, pipelined runs, QPEEK [WITHPRIORITY]
and QSTAT's ``priorities``; a client that never gives PRIORITY sees Disque
1.0's replies byte for byte."""

from __future__ import annotations

import pytest

from disque.context.clients import ClientState
from disque.commands import queues as queue_commands
from tests.unit.helpers import Cmd, advance, make_node

ARITY = b"-ERR wrong number of arguments for 'qpeek' command\r\n"


@pytest.fixture
def cmd():
    return Cmd(make_node())


def fill(cmd, spec: list[int | None]) -> list[bytes]:
    """One job per entry, in order, with that PRIORITY (None: no option)."""
    ids = []
    for n, priority in enumerate(spec):
        options = () if priority is None else ("PRIORITY", priority)
        ids.append(cmd.addjob("q", "j%d" % n, *options))
        advance(cmd.node, 1)  # distinct milliseconds, though ctime ties are broken anyway
    return ids


def getjob_all(cmd, queue="q") -> list[bytes]:
    reply = cmd.ok("GETJOB", "NOHANG", "COUNT", 1000, "FROM", queue)
    return [entry[1] for entry in reply or ()]


# ------------------------------------------------------------------ GETJOB

def test_getjob_serves_higher_priority_first_then_oldest(cmd):
    ids = fill(cmd, [None, 5, 0, 9, None, 9, 0, 7])
    expected = [ids[3], ids[5], ids[7], ids[0], ids[1], ids[4], ids[2], ids[6]]
    assert getjob_all(cmd) == expected


def test_getjob_one_at_a_time(cmd):
    ids = fill(cmd, [5, 5, 9, 1, 9])
    got = []
    for _ in ids:
        reply = cmd.ok("GETJOB", "NOHANG", "FROM", "q")
        got.append(reply[0][1])
    assert got == [ids[2], ids[4], ids[0], ids[1], ids[3]]
    assert cmd.ok("GETJOB", "NOHANG", "FROM", "q") is None


def test_a_blocked_consumer_gets_the_highest_priority_of_a_pipelined_run():
    node = make_node()
    consumer = Cmd(node, ClientState(2, "127.0.0.1:50001"))
    assert consumer.raw("GETJOB", "COUNT", 1, "FROM", "q") is None  # blocks
    producer = ClientState(1, "127.0.0.1:50000")
    commands = [[b"ADDJOB", b"q", b"a", b"0", b"PRIORITY", b"2"],
                [b"ADDJOB", b"q", b"b", b"0", b"PRIORITY", b"2"]]
    out: list[bytes] = []
    node.call_run(producer, node.run_commands[b"ADDJOB"], commands, 0, out)
    # The first job of the run went to the waiting consumer at once.
    assert [entry[2] for entry in consumer.sent()[0]] == [b"a"]


def test_pipelined_runs_keep_the_order():
    node = make_node()
    client = ClientState(1, "127.0.0.1:50000")
    commands = []
    for n, priority in enumerate([5, 9, None, 0, 9, 5]):
        argv = [b"ADDJOB", b"q", b"j%d" % n, b"0"]
        if priority is not None:
            argv += [b"PRIORITY", b"%d" % priority]
        commands.append(argv)
    out: list[bytes] = []
    assert node.call_run(client, node.run_commands[b"ADDJOB"], commands, 0, out) == 6
    ids = [reply[1:-2] for reply in out]
    assert getjob_all(Cmd(node, client)) == [ids[1], ids[4], ids[0], ids[2], ids[5], ids[3]]


def test_requeued_jobs_go_back_to_their_priority_band(cmd):
    ids = fill(cmd, [9, 5, 5, 0])
    assert getjob_all(cmd) == ids
    # NACK in an order unlike the serving order: each goes back by priority, then age.
    assert cmd.ok("NACK", ids[3], ids[2], ids[0], ids[1]) == 4
    assert [e[1] for e in cmd.ok("QPEEK", "q", 10)] == ids
    assert getjob_all(cmd) == ids
    # ENQUEUE and DEQUEUE: the same rule.
    assert cmd.ok("ENQUEUE", ids[1], ids[3]) == 2
    assert cmd.ok("ENQUEUE", ids[0]) == 1
    assert [e[1] for e in cmd.ok("QPEEK", "q", 10)] == [ids[0], ids[1], ids[3]]
    assert cmd.ok("DEQUEUE", ids[1]) == 1
    assert [e[1] for e in cmd.ok("QPEEK", "q", 10)] == [ids[0], ids[3]]
    assert cmd.ok("ENQUEUE", ids[2], ids[1]) == 2
    assert getjob_all(cmd) == ids


def test_retry_timeout_requeues_keep_the_priority(cmd):
    ids = [cmd.addjob("q", "old", "RETRY", 1), cmd.addjob("q", "new", "RETRY", 1, "PRIORITY", 8)]
    assert getjob_all(cmd) == [ids[1], ids[0]]
    advance(cmd.node, 3000, step=100)
    assert [e[1] for e in cmd.ok("QPEEK", "q", 2)] == [ids[1], ids[0]]


# ------------------------------------------------------------------- QPEEK

def entry(job_id: bytes, body: bytes, priority: int | None = None) -> bytes:
    out = b"*%d\r\n$1\r\nq\r\n$40\r\n%b\r\n$%d\r\n%b\r\n" % (
        3 if priority is None else 5, job_id, len(body), body)
    if priority is not None:
        out += b"$8\r\npriority\r\n:%d\r\n" % priority
    return out


def test_qpeek_follows_the_serving_order_with_1_0_entries(cmd):
    ids = fill(cmd, [5, 9, 0, None])
    assert cmd.raw("QPEEK", "q", 2) == b"*2\r\n" + entry(ids[1], b"j1") + entry(ids[0], b"j0")
    assert cmd.raw("QPEEK", "q", -2) == b"*2\r\n" + entry(ids[2], b"j2") + entry(ids[3], b"j3")


def _qpeek(cmd, *args) -> bytes:
    """The QPEEK handler itself (what Node.call runs once its arity allows)."""
    argv = [b"QPEEK"] + [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return queue_commands.qpeek(cmd.node.state, cmd.client, argv)


def test_qpeek_withpriority_entries(cmd):
    ids = fill(cmd, [5, 9, 0, None])
    assert _qpeek(cmd, "q", 3, "WITHPRIORITY") == (
        b"*3\r\n" + entry(ids[1], b"j1", 9) + entry(ids[0], b"j0", 5) + entry(ids[3], b"j3", 5))
    assert _qpeek(cmd, "q", -1, "withpriority") == b"*1\r\n" + entry(ids[2], b"j2", 0)
    assert _qpeek(cmd, "q", 0, "WITHPRIORITY") == b"*0\r\n"
    assert _qpeek(cmd, "nosuchq", 5, "WITHPRIORITY") == b"*0\r\n"
    assert _qpeek(cmd, "q", "x", "WITHPRIORITY") == \
        b"-ERR value is not an integer or out of range\r\n"
    # Any other fourth word gets Disque 1.0's answer to a fourth word.
    assert _qpeek(cmd, "q", 1, "WITHCOUNTERS") == ARITY
    assert _qpeek(cmd, "q", 1, "WITHPRIORITY", "x") == ARITY
    assert _qpeek(cmd, "q", 1) == b"*1\r\n" + entry(ids[1], b"j1")


def test_command_shows_qpeek_with_its_1_0_arity(cmd):
    info = cmd.ok("COMMAND", "INFO", "qpeek")
    assert info[0][:2] == [b"qpeek", 3]


def test_qpeek_withpriority_through_the_command_table(cmd):
    ids = fill(cmd, [5, 9])
    assert cmd.raw("QPEEK", "q", 5, "WITHPRIORITY") == (
        b"*2\r\n" + entry(ids[1], b"j1", 9) + entry(ids[0], b"j0", 5))
    assert cmd.raw("QPEEK", "q", 5, "NOSUCH") == ARITY
    assert cmd.raw("QPEEK", "q", 5, "WITHPRIORITY", "x") == ARITY


# ------------------------------------------------------------------- QSTAT

def qstat(cmd) -> dict:
    flat = cmd.ok("QSTAT", "q")
    return dict(zip(flat[0::2], flat[1::2]))


def test_qstat_without_priorities_is_1_0s_reply(cmd):
    fill(cmd, [None, 5, None])
    assert len(cmd.ok("QSTAT", "q")) == 20
    assert b"priorities" not in qstat(cmd)
    getjob_all(cmd)
    assert len(cmd.ok("QSTAT", "q")) == 20  # empty


@pytest.mark.parametrize("spec, counts", [
    ([9, 9, None, 0], [9, 2, 5, 1, 0, 1]),
    ([9], [9, 1]),
    ([1, 1, 1], [1, 3]),
    ([None, 3], [5, 1, 3, 1]),
    ([6, None, None, 4, 4, 9, 2, 8], [9, 1, 8, 1, 6, 1, 5, 2, 4, 2, 2, 1]),
])
def test_qstat_counts_jobs_per_priority(cmd, spec, counts):
    fill(cmd, spec)
    flat = cmd.ok("QSTAT", "q")
    assert len(flat) == 22 and flat[20] == b"priorities"
    assert flat[21] == counts
    assert flat[:20:2] == [b"name", b"len", b"age", b"idle", b"blocked", b"import-from",
                           b"import-rate", b"jobs-in", b"jobs-out", b"pause"]


def test_qstat_drops_the_field_once_the_priorities_are_served(cmd):
    fill(cmd, [9, None, 0])
    assert qstat(cmd)[b"priorities"] == [9, 1, 5, 1, 0, 1]
    cmd.ok("GETJOB", "NOHANG", "FROM", "q")
    assert qstat(cmd)[b"priorities"] == [5, 1, 0, 1]
    ids = getjob_all(cmd)
    assert b"priorities" not in qstat(cmd)
    cmd.ok("NACK", ids[1])  # the priority 0 job is back
    assert qstat(cmd)[b"priorities"] == [0, 1]
    assert cmd.raw("QSTAT", "q").endswith(b"$10\r\npriorities\r\n*2\r\n:0\r\n:1\r\n")
