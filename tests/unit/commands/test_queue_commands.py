"""QLEN, QPEEK, QSTAT, QSCAN, JSCAN and PAUSE (spec: commands.md §2,
reference-transcripts.md §1.2-§1.4)."""

from __future__ import annotations

import pytest

from disque.context.clients import ClientState
from disque.cluster import messages as m
from tests.unit.helpers import PEER_ID, Cmd, add_peer, deliver, make_node

SYNTAX = b"-ERR syntax error\r\n"
NOT_INT = b"-ERR value is not an integer or out of range\r\n"
BAD_CURSOR = b"-ERR invalid cursor or option name\r\n"


def as_dict(flat: list) -> dict:
    return dict(zip(flat[::2], flat[1::2]))


def scan_all(cmd, name: str, *options, count: int = 2) -> tuple[list, int]:
    """Iterate a scan to the end; return (elements, number of calls)."""
    cursor = b"0"
    out = []
    calls = 0
    while True:
        cursor, items = cmd.ok(name, cursor, "COUNT", count, *options)
        calls += 1
        out.extend(items)
        if cursor == b"0":
            return out, calls
        assert calls < 10_000


# ------------------------------------------------------------------ QLEN

def test_qlen(cmd):
    assert cmd.raw("QLEN", "q") == b":0\r\n"
    cmd.addjob("q", "a")
    cmd.addjob("q", "b")
    assert cmd.raw("QLEN", "q") == b":2\r\n"
    assert cmd.raw("QLEN", "Q") == b":0\r\n"  # names are case-sensitive
    assert cmd.raw("QLEN") == b"-ERR wrong number of arguments for 'qlen' command\r\n"


# ----------------------------------------------------------------- QPEEK

def test_qpeek_both_directions(cmd):
    ids = [cmd.addjob("q", "b%d" % i) for i in range(4)]
    assert cmd.raw("QPEEK", "q", 2) == (
        b"*2\r\n*3\r\n$1\r\nq\r\n$40\r\n" + ids[0] + b"\r\n$2\r\nb0\r\n"
        b"*3\r\n$1\r\nq\r\n$40\r\n" + ids[1] + b"\r\n$2\r\nb1\r\n")
    assert [e[1] for e in cmd.ok("QPEEK", "q", -1)] == [ids[3]]
    assert [e[1] for e in cmd.ok("QPEEK", "q", -3)] == [ids[3], ids[2], ids[1]]
    assert [e[1] for e in cmd.ok("QPEEK", "q", 100)] == ids
    assert [e[1] for e in cmd.ok("QPEEK", "q", -100)] == ids[::-1]
    assert cmd.raw("QPEEK", "q", 0) == b"*0\r\n"
    assert cmd.raw("QPEEK", "q", "") == b"*0\r\n"  # the empty string is 0
    assert cmd.ok("QLEN", "q") == 4  # nothing modified
    assert cmd.show(ids[0])["state"] == b"queued"


def test_qpeek_unknown_queue_and_errors(cmd):
    assert cmd.raw("QPEEK", "nosuchq", 5) == b"*0\r\n"
    assert cmd.raw("QPEEK", "q", "abc") == NOT_INT
    assert cmd.raw("QPEEK", "q", "1.5") == NOT_INT
    assert cmd.raw("QPEEK", "q", "-9223372036854775808") == b"*0\r\n"
    assert cmd.raw("QPEEK", "q") == b"-ERR wrong number of arguments for 'qpeek' command\r\n"


# ----------------------------------------------------------------- QSTAT

def test_qstat_exact_bytes(cmd):
    for body in ("a", "b", "c"):
        cmd.addjob("q", body)
    assert cmd.raw("QSTAT", "q") == (
        b"*20\r\n$4\r\nname\r\n$1\r\nq\r\n$3\r\nlen\r\n:3\r\n$3\r\nage\r\n:0\r\n"
        b"$4\r\nidle\r\n:0\r\n$7\r\nblocked\r\n:0\r\n$11\r\nimport-from\r\n*0\r\n"
        b"$11\r\nimport-rate\r\n:0\r\n$7\r\njobs-in\r\n:3\r\n$8\r\njobs-out\r\n:0\r\n"
        b"$5\r\npause\r\n$4\r\nnone\r\n")


def test_qstat_unknown_queue(cmd):
    assert cmd.raw("QSTAT", "nosuchq") == b"*-1\r\n"
    assert cmd.raw("QSTAT") == b"-ERR wrong number of arguments for 'qstat' command\r\n"


def test_qstat_counters_age_idle_blocked_pause(node, cmd):
    cmd.addjob("q", "a")
    node.state.clock.advance(7000)
    cmd.ok("GETJOB", "FROM", "q")
    node.state.clock.advance(3000)
    assert Cmd(node, ClientState(5)).raw("GETJOB", "FROM", "q") is None
    cmd.ok("PAUSE", "q", "in")
    stat = as_dict(cmd.ok("QSTAT", "q"))
    assert stat == {b"name": b"q", b"len": 0, b"age": 10, b"idle": 3, b"blocked": 1,
                    b"import-from": [], b"import-rate": 0, b"jobs-in": 1, b"jobs-out": 1,
                    b"pause": b"in"}


# ----------------------------------------------------------------- QSCAN

def test_qscan_lists_queues(cmd):
    for name in ("q", "otherq"):
        cmd.addjob(name, "x")
    cursor, names = cmd.ok("QSCAN")
    assert cursor == b"0" and sorted(names) == [b"otherq", b"q"]
    raw = cmd.raw("QSCAN", "0", "COUNT", "10", "BUSYLOOP", "MINLEN", "1")
    assert raw.startswith(b"*2\r\n$1\r\n0\r\n")  # the cursor is a bulk string


@pytest.mark.parametrize("args, reply", [
    (["abc"], BAD_CURSOR), (["0", "1"], SYNTAX), (["1.5"], BAD_CURSOR), (["0", "abc"], SYNTAX),
    (["COUNT", "x"], NOT_INT), (["MINLEN", "x"], NOT_INT), (["MAXLEN", ""], None),
    (["IMPORTRATE", "1.0"], NOT_INT), (["BOGUS"], BAD_CURSOR),
    (["COUNT"], BAD_CURSOR),  # a keyword lacking its value is a cursor candidate
    (["0", "MINLEN"], SYNTAX),
])
def test_qscan_errors(cmd, args, reply):
    raw = cmd.raw("QSCAN", *args)
    if reply is None:
        assert raw.startswith(b"*2\r\n")
    else:
        assert raw == reply


def test_qscan_cursor_parsing(cmd):
    cmd.addjob("q", "x")
    assert cmd.ok("QSCAN", "")[0] == b"0"  # the empty string is cursor 0
    assert cmd.ok("QSCAN", "COUNT", "5", "0")[1] == [b"q"]  # the cursor may come anywhere
    assert cmd.ok("QSCAN", "-1")[0] == b"0"  # wraps to 2^64-1: past everything
    assert cmd.raw("QSCAN", "18446744073709551616") == BAD_CURSOR


def test_qscan_filters(node, cmd):
    for i, name in enumerate(("empty", "one", "three")):
        for _ in range(i * i - (i > 1)):
            cmd.addjob(name, "x")
    cmd.ok("GETJOB", "NOHANG", "FROM", "empty")
    busy = ["BUSYLOOP"]
    assert sorted(cmd.ok("QSCAN", "MINLEN", 1, *busy)[1]) == [b"one", b"three"]
    assert sorted(cmd.ok("QSCAN", "MAXLEN", 1, *busy)[1]) == [b"empty", b"one"]
    assert cmd.ok("QSCAN", "MINLEN", 2, "MAXLEN", 3, *busy)[1] == [b"three"]
    assert cmd.ok("QSCAN", "MINLEN", 5, "MINLEN", 1, "MAXLEN", 1, *busy)[1] == [b"one"]
    assert cmd.ok("QSCAN", "IMPORTRATE", 1, *busy)[1] == []
    assert sorted(cmd.ok("QSCAN", "IMPORTRATE", 0, *busy)[1]) == [b"empty", b"one", b"three"]


def test_qscan_importrate_filter_sees_federated_queues(node, cmd):
    add_peer(node)
    cmd.addjob("local", "x", "REPLICATE", "1")
    remote = make_node(node_id=PEER_ID)
    job_id = Cmd(remote).addjob("fed", "x")
    from disque.jobs.codec import to_bus
    payload = to_bus(remote.state.jobs[job_id], remote.state.clock())
    deliver(node, PEER_ID, {m.TYPE: m.YOURJOBS, m.JOBS: [payload]})
    assert cmd.ok("QSCAN", "IMPORTRATE", 1, "BUSYLOOP")[1] == [b"fed"]
    assert as_dict(cmd.ok("QSTAT", "fed"))[b"import-from"] == [PEER_ID]


def test_qscan_count_and_full_iteration(cmd):
    names = [b"q%03d" % i for i in range(150)]
    for name in names:
        cmd.ok("GETJOB", "NOHANG", "FROM", name)
    cursor, first = cmd.ok("QSCAN")
    assert cursor != b"0" and len(first) >= 100  # default COUNT 100
    found, calls = scan_all(cmd, "QSCAN", count=7)
    assert sorted(set(found)) == names and calls > 10
    cursor, everything = cmd.ok("QSCAN", "COUNT", 1, "BUSYLOOP")
    assert cursor == b"0" and sorted(everything) == names


def test_qscan_guarantee_with_concurrent_changes(node, cmd):
    stable = [b"s%03d" % i for i in range(60)]
    for name in stable:
        cmd.addjob(name, "x")
    cursor = b"0"
    found = []
    churn = 0
    while True:
        cursor, items = cmd.ok("QSCAN", cursor, "COUNT", 5)
        found.extend(items)
        if cursor == b"0":
            break
        # Between calls: empty queues appear, and older empty ones are collected.
        churn += 1
        cmd.ok("GETJOB", "NOHANG", "FROM", b"new%03da" % churn, b"new%03db" % churn)
        node.state.clock.advance(301_000)
        node.cron()
        assert churn < 1000
    assert set(stable) <= set(found)
    assert churn > 3


# ----------------------------------------------------------------- JSCAN

def test_jscan_ids_are_status_replies(node, cmd):
    ids = [cmd.addjob("q", "x") for _ in range(3)]
    raw = cmd.raw("JSCAN", "BUSYLOOP")
    assert raw.startswith(b"*2\r\n$1\r\n0\r\n*3\r\n")
    for job_id in ids:
        assert b"+" + job_id + b"\r\n" in raw
    assert sorted(cmd.ok("JSCAN", "BUSYLOOP")[1]) == sorted(ids)


def test_jscan_reply_all(node, cmd):
    job_id = cmd.addjob("q", "x")
    cursor, jobs = cmd.ok("JSCAN", "0", "STATE", "queued", "REPLY", "all", "BUSYLOOP")
    assert cursor == b"0" and len(jobs) == 1 and len(jobs[0]) == 30
    assert jobs[0][:2] == [b"id", job_id]
    assert cmd.raw("JSCAN", "REPLY", "ALL", "BUSYLOOP") == (
        b"*2\r\n$1\r\n0\r\n*1\r\n" + cmd.raw("SHOW", job_id))


def test_jscan_filters(node, cmd):
    queued = cmd.addjob("q", "x")
    active = cmd.addjob("other", "x")
    cmd.ok("GETJOB", "FROM", "other")
    delayed = cmd.addjob("q", "x", "DELAY", "100")
    busy = ["BUSYLOOP"]
    assert sorted(cmd.ok("JSCAN", "QUEUE", "q", *busy)[1]) == sorted([queued, delayed])
    assert sorted(cmd.ok("JSCAN", "STATE", "active", *busy)[1]) == sorted([active, delayed])
    assert sorted(cmd.ok("JSCAN", "STATE", "ACTIVE", "STATE", "queued", *busy)[1]) == sorted(
        [queued, active, delayed])
    assert cmd.ok("JSCAN", "QUEUE", "q", "STATE", "active", *busy)[1] == [delayed]
    assert cmd.ok("JSCAN", "STATE", "acked", *busy)[1] == []
    assert cmd.ok("JSCAN", "STATE", "wait-repl", *busy)[1] == []
    assert cmd.ok("JSCAN", "QUEUE", "nosuch", *busy)[1] == []


@pytest.mark.parametrize("args, reply", [
    (["STATE", "bogus"], b"-ERR Invalid job state name\r\n"),
    (["REPLY", "bogus"], b"-ERR Invalid REPLY type, try ID or ALL\r\n"),
    (["abc"], BAD_CURSOR), (["0", "0"], SYNTAX), (["COUNT", "x"], NOT_INT),
    (["STATE", "queued", "STATE", "nope"], b"-ERR Invalid job state name\r\n"),
])
def test_jscan_errors(cmd, args, reply):
    assert cmd.raw("JSCAN", *args) == reply


def test_jscan_full_iteration_with_small_count(cmd):
    ids = [cmd.addjob("q", "x") for _ in range(40)]
    found, calls = scan_all(cmd, "JSCAN", count=3)
    assert sorted(set(found)) == sorted(ids) and calls > 5


# ----------------------------------------------------------------- PAUSE

@pytest.mark.parametrize("options, state", [
    (["in"], b"in"), (["out"], b"out"), (["all"], b"all"), (["none"], b"none"),
    (["in", "out"], b"all"), (["IN", "Out"], b"all"), (["all", "none"], b"none"),
    (["none", "in"], b"in"), (["in", "none", "out"], b"out"), (["state"], b"none"),
    (["in", "state"], b"in"),
])
def test_pause_builds_a_new_flag_set(cmd, options, state):
    assert cmd.raw("PAUSE", "q", *options) == b"+" + state + b"\r\n"


def test_pause_replaces_the_previous_flags(cmd):
    assert cmd.raw("PAUSE", "q", "in") == b"+in\r\n"
    assert cmd.raw("PAUSE", "q", "out") == b"+out\r\n"  # in is cleared, not kept
    assert cmd.raw("PAUSE", "q", "state") == b"+out\r\n"
    assert cmd.raw("PAUSE", "q", "all") == b"+all\r\n"
    assert cmd.raw("PAUSE", "q", "none") == b"+none\r\n"


def test_pause_errors_change_nothing(cmd):
    cmd.ok("PAUSE", "q", "in")
    assert cmd.raw("PAUSE", "q", "out", "bogus") == SYNTAX
    assert cmd.ok("PAUSE", "q", "state") == b"in"
    assert cmd.raw("PAUSE", "q") == b"-ERR wrong number of arguments for 'pause' command\r\n"


def test_pause_queue_creation(node, cmd):
    assert cmd.raw("PAUSE", "newq", "state") == b"+none\r\n"
    assert cmd.raw("PAUSE", "newq", "none") == b"+none\r\n"
    assert b"newq" not in node.state.queues
    assert cmd.raw("QSTAT", "newq") == b"*-1\r\n"
    cmd.ok("PAUSE", "newq", "out")
    assert as_dict(cmd.ok("QSTAT", "newq"))[b"pause"] == b"out"


def test_paused_queues_are_never_collected(node, cmd):
    cmd.ok("PAUSE", "q", "in")
    node.state.clock.advance(1_000_000)
    node.cron()
    assert b"q" in node.state.queues
    cmd.ok("PAUSE", "q", "none")
    node.cron()
    assert b"q" not in node.state.queues


def test_pause_bcast(node, cmd):
    add_peer(node)
    assert cmd.raw("PAUSE", "q", "in", "bcast") == b"+in\r\n"
    pauses = node.state.outbox.transport.of_type(m.PAUSE)
    assert [(d, msg[m.QUEUE], msg[m.PAUSE_STATE]) for d, msg in pauses] == [(PEER_ID, b"q", b"in")]
    node.state.outbox.transport.clear()
    assert cmd.raw("PAUSE", "q", "bcast") == b"+in\r\n"  # broadcasts the current state
    assert [msg[m.PAUSE_STATE] for _, msg in node.state.outbox.transport.of_type(m.PAUSE)] == [b"in"]
