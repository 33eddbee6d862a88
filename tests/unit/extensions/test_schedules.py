"""Periodic jobs on one node (docs/schedules.md): SCHEDULE's syntax and
replies, a lone node firing its ticks, the merge rules of SCHEDULE and
SCHEDFIRED messages, nodes.conf lines, who may fire, and the ACL checks.
The cluster-wide promises are tested in tests/sim/test_schedules.py."""

from __future__ import annotations

import random

import pytest

from disque.cluster import messages as m
from disque.cluster import nodesconf
from disque.cluster.schedules import HANDOVER_MS, NEVER, Schedule, parse_line, render_line
from disque.config import Config
from disque.jobs.job import dedup_token
from disque.node import Node
from disque.process import cronspec
from disque.state.host import Host
from tests.unit.commands.test_acl import logged_in
from tests.unit.helpers import (NODE_ID, PEER_ID, START_MS, Cmd, FakeClock, MessageLog,
                                add_peer, advance, deliver, make_node)

OTHER_ID = b"c0ffee00" + b"2" * 32


class CalendarHost(Host):
    """The server's calendar (process/cronspec), without the server."""

    def cron_problem(self, expr: bytes) -> str | None:
        return cronspec.cron_problem(expr)

    def cron_next(self, expr: bytes, after_ms: int) -> int:
        return cronspec.cron_next(expr, after_ms)


def calendar_node() -> Node:
    config = Config()
    return Node(config, NODE_ID, clock=FakeClock(), rng=random.Random(1), host=CalendarHost(),
                bus=MessageLog())


def listing(cmd: Cmd) -> list[dict]:
    return [{entry[k].decode(): entry[k + 1] for k in range(0, len(entry), 2)}
            for entry in cmd.ok("SCHEDULE", "LIST")]


def queued_tokens(node: Node, queue: bytes = b"q") -> list[bytes]:
    q = node.state.queues.get(queue)
    return [] if q is None else [dedup_token(job) for job in q.jobs.iter_from_head()]


# --------------------------------------------------------------- commands

def test_set_list_del():
    cmd = Cmd(make_node())
    assert cmd.ok("SCHEDULE", "SET", "beat", "EVERY", 60, "q", "hello", "TTL", 30) == b"OK"
    [entry] = listing(cmd)
    # Ticks fall on the multiples of 60 s since the epoch: START_MS is 20 s past one.
    assert entry == {"name": b"beat", "spec": b"EVERY 60", "queue": b"q", "options": b"TTL 30",
                     "next": START_MS + 40_000, "last": None, "firedby": None}
    assert cmd.ok("SCHEDULE", "DEL", "beat") == 1
    assert cmd.ok("SCHEDULE", "DEL", "beat") == 0
    assert cmd.ok("SCHEDULE", "LIST") == []


@pytest.mark.parametrize("args, error", [
    (("SET", "s", "EVERY", 0, "q", "b"), "ERR EVERY must be a number of seconds"),
    (("SET", "s", "EVERY", "x", "q", "b"), "ERR EVERY must be a number of seconds"),
    (("SET", "s", "HOURLY", 1, "q", "b"), "ERR syntax error"),
    (("SET", "s", "EVERY", 1, "", "b"), "ERR the queue name is empty"),
    (("SET", "s" * 201, "EVERY", 1, "q", "b"), "ERR schedule name must be 1 to 200 bytes"),
    (("SET", "s", "EVERY", 1, "q", "b", "DEDUPID", "t"), "ERR DEDUPID is set by the schedule"),
    (("SET", "s", "EVERY", 1, "q", "b", "TTL", 0), "ERR TTL"),
    (("SET", "s", "EVERY", 1, "q", "b", "TTL"), "ERR syntax error"),
    (("SET", "s", "CRON", "* * * * *", "q", "b"), "ERR CRON schedules need"),
    (("SET", "s", "EVERY", 1, "q"), "ERR Unknown SCHEDULE subcommand"),
    (("DEL",), "ERR Unknown SCHEDULE subcommand"),
    (("LIST", "x"), "ERR Unknown SCHEDULE subcommand"),
    (("NOSUCH",), "ERR Unknown SCHEDULE subcommand"),
])
def test_bad_input_is_refused(args, error):
    cmd = Cmd(make_node())
    assert cmd.error("SCHEDULE", *args).startswith(error)
    assert cmd.ok("SCHEDULE", "LIST") == []


@pytest.mark.parametrize("expr, error", [
    ("* * * *", "ERR CRON expression needs five fields: minute hour day-of-month month "
                "day-of-week"),
    ("* * * * * *", "ERR CRON expression needs five fields: minute hour day-of-month month "
                    "day-of-week"),
    ("61 * * * *", "ERR invalid CRON expression '61 * * * *'"),
    ("0 0 30 2 *", "ERR CRON expression '0 0 30 2 *' names no date"),
])
def test_bad_cron_expressions_are_refused(expr, error):
    cmd = Cmd(calendar_node())
    assert cmd.error("SCHEDULE", "SET", "s", "CRON", expr, "q", "b") == error


# ----------------------------------------------------------------- firing

def test_a_lone_node_fires_every_tick_once():
    node = make_node()
    cmd = Cmd(node)
    cmd.ok("SCHEDULE", "SET", "beat", "EVERY", 1, "q", "hello", "PRIORITY", 2)
    advance(node, 5500, step=100, cron=True)
    ticks = [START_MS + k * 1000 for k in range(1, 6)]
    assert queued_tokens(node) == [b"schedule:beat:%d" % t for t in ticks]
    job = next(node.state.queues.get(b"q").jobs.iter_from_head())
    assert job.body == b"hello" and job.priority == 2
    [entry] = listing(cmd)
    assert entry["last"] == ticks[-1] and entry["firedby"] == NODE_ID
    assert entry["next"] == ticks[-1] + 1000
    assert node.state.schedules.fired == 5


def test_cron_ticks_follow_the_calendar_in_utc():
    node = calendar_node()
    cmd = Cmd(node)
    cmd.ok("SCHEDULE", "SET", "five", "CRON", "*/5  * * * *", "q", "b")
    [entry] = listing(cmd)
    assert entry["spec"] == b"CRON */5 * * * *"
    # START_MS is 2023-11-14 22:13:20 UTC: the next multiple of five minutes is 22:15.
    assert entry["next"] == START_MS + 100_000
    advance(node, 12 * 60_000, step=100, cron=True)
    assert queued_tokens(node) == [b"schedule:five:%d" % (START_MS + 100_000 + k * 300_000)
                                   for k in range(3)]


def test_cronspec_is_five_fields_in_utc():
    assert cronspec.cron_next(b"0 9 * * 1-5", 1767225600000) == 1767258000000  # Fri 9:00 UTC
    assert cronspec.cron_next(b"*/5 * * * *", 1767226200000) == 1767226500000  # strictly after
    assert cronspec.cron_next(b"nonsense", 0) == -1
    assert cronspec.cron_next(b"* * * * *", 1 << 62) == -1  # past datetime's range
    assert cronspec.cron_problem(b"@daily") is not None
    assert cronspec.cron_problem(b"\xff * * * *") == "CRON expression is not ASCII"


def test_a_refused_tick_is_retried_then_fired():
    node = make_node()
    cmd = Cmd(node)
    cmd.ok("SCHEDULE", "SET", "beat", "EVERY", 1, "q", "b")
    cmd.ok("ADDJOB", "q", "x", 0)
    cmd.ok("PAUSE", "q", "in")
    advance(node, 1500, step=100, cron=True)
    assert node.state.schedules.refused == 1 and node.state.schedules.fired == 0
    cmd.ok("PAUSE", "q", "none")
    advance(node, 1000, step=100, cron=True)
    assert queued_tokens(node)[1:] == [b"schedule:beat:%d" % (START_MS + 1000),
                                       b"schedule:beat:%d" % (START_MS + 2000)]


def test_ticks_too_old_are_skipped():
    node = make_node()
    cmd = Cmd(node)
    cmd.ok("SCHEDULE", "SET", "beat", "EVERY", 10, "q", "b")
    node.state.clock.advance(3_600_000)  # the node was stopped for an hour
    advance(node, 100, cron=True)
    advance(node, 2000, step=100, cron=True)
    tokens = queued_tokens(node)
    assert len(tokens) == 6  # the last minute's ticks (catchup_ms), no more
    assert node.state.schedules.skipped == 1


def test_no_firing_while_loading():
    node = make_node()
    Cmd(node).ok("SCHEDULE", "SET", "beat", "EVERY", 1, "q", "b")
    node.state.loading = True
    advance(node, 2000, step=100, cron=True)
    assert queued_tokens(node) == []


def test_a_leaving_node_does_not_fire():
    node = make_node()
    cmd = Cmd(node)
    cmd.ok("SCHEDULE", "SET", "beat", "EVERY", 1, "q", "b")
    node.state.gossip.set_leaving(True)
    advance(node, 3000, step=100, cron=True)
    assert queued_tokens(node) == []


# ------------------------------------------------------ who fires, merges

def record(name=b"beat", version=START_MS, origin=PEER_ID, deleted=0, every=1, body=b"b",
           last_tick=0, last_by=b"") -> list:
    return [name, version, origin, deleted, every, b"", b"q", body, [], last_tick, last_by]


def table(*records, sync=m.SYNC_ALL) -> dict:
    return {m.TYPE: m.SCHEDULE, m.SCHEDULES: list(records), m.SCHED_SYNC: sync}


def test_a_node_fires_only_with_a_majority_that_sent_its_table():
    node = make_node()
    add_peer(node)
    add_peer(node, OTHER_ID)  # three nodes: a majority is two
    # A name this node ranks first for against PEER_ID.
    name = next(n for n in (b"beat%d" % k for k in range(20))
                if node.state.schedules.rank(Schedule(n, 1, b"", b"q", b"", [], 0, NODE_ID),
                                       [NODE_ID, PEER_ID]) == 0)
    Cmd(node).ok("SCHEDULE", "SET", name, "EVERY", 1, "q", "b")
    advance(node, 3000, step=100, cron=True)
    assert queued_tokens(node) == []  # linked peers, but no table from them
    deliver(node, PEER_ID, table())
    advance(node, HANDOVER_MS - 100, step=100, cron=True)
    assert queued_tokens(node) == []  # a view just formed does not fire first
    advance(node, 200, step=100, cron=True)
    assert len(queued_tokens(node)) == 4  # then it catches up


def test_a_table_asked_for_is_answered_and_a_peer_gone_is_not_counted():
    node = make_node()
    add_peer(node)
    node.state.outbox.transport.clear()
    deliver(node, PEER_ID, table(record(), sync=m.SYNC_ASK))
    assert PEER_ID in node.state.schedules.synced
    node.link_down(PEER_ID)
    assert PEER_ID not in node.state.schedules.synced


def test_last_writer_wins_and_the_last_tick_only_grows():
    node = make_node()
    add_peer(node)
    deliver(node, PEER_ID, table(record(version=START_MS, body=b"v1", last_tick=START_MS + 5000,
                                        last_by=PEER_ID), sync=m.SYNC_PART))
    s = node.state.schedules.get(b"beat")
    assert s.body == b"v1" and s.next_tick == START_MS + 6000
    deliver(node, PEER_ID, table(record(version=START_MS - 1, body=b"old"), sync=m.SYNC_PART))
    assert s.body == b"v1" and s.last_tick == START_MS + 5000
    deliver(node, PEER_ID, table(record(version=START_MS + 1, body=b"v2"), sync=m.SYNC_PART))
    assert s.body == b"v2" and s.last_tick == START_MS + 5000
    deliver(node, PEER_ID, {m.TYPE: m.SCHEDFIRED, m.SCHED_NAME: b"beat",
                            m.SCHED_TICK: START_MS + 3000})
    assert s.last_tick == START_MS + 5000
    deliver(node, PEER_ID, {m.TYPE: m.SCHEDFIRED, m.SCHED_NAME: b"beat",
                            m.SCHED_TICK: START_MS + 7000})
    assert s.last_tick == START_MS + 7000 and s.next_tick == START_MS + 8000
    # A DEL with a newer version leaves a tombstone; an older SET does not revive it.
    deliver(node, PEER_ID, table(record(version=START_MS + 2, deleted=1), sync=m.SYNC_PART))
    assert node.state.schedules.get(b"beat") is None and s.next_tick == NEVER
    deliver(node, PEER_ID, table(record(version=START_MS + 1), sync=m.SYNC_PART))
    assert node.state.schedules.get(b"beat") is None
    # A SET made here after it is newer, even with this clock behind.
    node.state.clock.now = START_MS - 60_000
    Cmd(node).ok("SCHEDULE", "SET", "beat", "EVERY", 1, "q", "again")
    assert node.state.schedules.get(b"beat").version == START_MS + 3


@pytest.mark.parametrize("bad", [
    [b"beat"],
    record(name=b""),
    record(name=b"x" * 201),
    record(origin=b"short"),
    record(origin=b"\xff" * 40),  # nodes.conf writes node IDs as text
    record(last_tick=1, last_by=b"z" * 40),
    record(every=0),  # neither EVERY nor CRON
    record(every=-1),
    record(last_tick=-5),
    record(last_tick=1 << 63),
    record(version=1 << 62),
    record(body=5),
    [b"beat", START_MS, PEER_ID, 0, 1, b"", b"q", b"b", [5], 0, b""],
    "not a list",
])
def test_malformed_records_are_ignored(bad):
    node = make_node()
    add_peer(node)
    deliver(node, PEER_ID, table(bad, record(name=b"good"), sync=m.SYNC_PART))
    assert [s.name for s in node.state.schedules.listing()] == [b"good"]


def test_malformed_messages_are_ignored():
    node = make_node()
    add_peer(node)
    deliver(node, PEER_ID, {m.TYPE: m.SCHEDULE, m.SCHEDULES: b"x", m.SCHED_SYNC: 1})
    deliver(node, PEER_ID, {m.TYPE: m.SCHEDFIRED, m.SCHED_NAME: b"beat", m.SCHED_TICK: b"1"})
    deliver(node, PEER_ID, {m.TYPE: m.SCHEDFIRED, m.SCHED_NAME: b"nosuch", m.SCHED_TICK: 1})
    assert node.state.schedules.table == {}


def test_set_and_del_are_told_to_every_node():
    node = make_node()
    add_peer(node)
    node.state.outbox.transport.clear()
    Cmd(node).ok("SCHEDULE", "SET", "beat", "EVERY", 1, "q", "b")
    Cmd(node).ok("SCHEDULE", "DEL", "beat")
    sent = node.state.outbox.transport.of_type(m.SCHEDULE)
    assert [(dest, msg[m.SCHED_SYNC], msg[m.SCHEDULES][0][3]) for dest, msg in sent] == [
        (PEER_ID, m.SYNC_PART, 0), (PEER_ID, m.SYNC_PART, 1)]


# ------------------------------------------------------------- nodes.conf

def test_nodes_conf_keeps_schedules():
    node = make_node()
    cmd = Cmd(node)
    cmd.ok("SCHEDULE", "SET", "b\x00 in", "EVERY", 1, "q q", "\r\nbody", "DEADLETTER", "d,e")
    cmd.ok("SCHEDULE", "SET", "gone", "EVERY", 1, "q", "b")
    cmd.ok("SCHEDULE", "DEL", "gone")
    advance(node, 1500, step=100, cron=True)
    text = nodesconf.render(node.state.membership, node.state.schedules)
    assert len(nodesconf.parse(text, START_MS)) == 1  # the node lines still parse
    restored = make_node()
    restored.state.schedules.restore(nodesconf.parse_schedules(text))
    [s] = restored.state.schedules.listing()
    assert (s.name, s.queue, s.body, s.options) == (b"b\x00 in", b"q q", b"\r\nbody",
                                                    [b"DEADLETTER", b"d,e"])
    assert s.last_tick == START_MS + 1000 and s.last_by == NODE_ID
    assert restored.state.schedules.table[b"gone"].deleted


@pytest.mark.parametrize("line", [
    "schedule - 1 %s 0 1 - cQ== - - 0 -" % NODE_ID.decode(),  # no name
    "schedule YQ== x %s 0 1 - cQ== - - 0 -" % NODE_ID.decode(),
    "schedule YQ== 1 %s 0 1 - cQ== !! - 0 -" % NODE_ID.decode(),
    "schedule YQ== 1 %s 0 1 - cQ== - -" % NODE_ID.decode(),
])
def test_a_corrupted_schedule_line_stops_the_start(line):
    assert parse_line(line.split()) is None
    with pytest.raises(nodesconf.NodesConfError):
        nodesconf.parse_schedules(line + "\n")


def test_a_line_round_trips():
    s = Schedule(b"n", 0, b"*/5 * * * *", b"q", b"", [], 5, PEER_ID, last_tick=7,
                 last_by=NODE_ID)
    back = parse_line(render_line(s).split())
    assert back is not None and back.to_wire() == s.to_wire()


# -------------------------------------------------------------------- ACL

def test_acl_set_and_del_need_the_queue_list_shows_only_permitted():
    node = make_node()
    admin = Cmd(node)
    admin.ok("SCHEDULE", "SET", "theirs", "EVERY", 1, "payments", "b")
    admin.raw("ACL", "SETUSER", "p", "on", "nopass", "~orders:*", "+@produce", "+@read")
    producer = logged_in(node, "p", "any")
    assert producer.ok("SCHEDULE", "SET", "mine", "EVERY", 1, "orders:a", "b") == b"OK"
    assert producer.raw("SCHEDULE", "SET", "x", "EVERY", 1, "payments", "b") == (
        b"-NOPERM User p has no permissions to access the queue 'payments'\r\n")
    assert producer.raw("SCHEDULE", "SET", "x", "EVERY", 1, "orders:a", "b", "DEADLETTER",
                        "dead") == (
        b"-NOPERM User p has no permissions to access the queue 'dead'\r\n")
    assert producer.raw("SCHEDULE", "DEL", "theirs") == (
        b"-NOPERM User p has no permissions to access the queue 'payments'\r\n")
    assert [e["name"] for e in listing(producer)] == [b"mine"]
    admin.raw("ACL", "SETUSER", "r", "on", "nopass", "~*", "+@read")
    reader = logged_in(node, "r", "any")
    assert len(listing(reader)) == 2
    assert reader.raw("SCHEDULE", "SET", "y", "EVERY", 1, "q", "b") == (
        b"-NOPERM User r has no permissions to run the 'schedule|set' command\r\n")
