"""Periodic jobs on one node (docs/schedules.md): SCHEDULE's syntax and
replies, a lone node firing its ticks, the merge rules of SCHEDULE and
SCHEDFIRED messages, the table's digests and their answers, the tables
log's records (and nodes.conf lines of older versions), who may fire, the
owner's quota, and the ACL checks. The cluster-wide promises are tested in
tests/sim/test_schedules.py."""

from __future__ import annotations

import base64
import random

import pytest

from disque.cluster import messages as m
from disque.cluster import nodesconf
from disque.cluster.schedulerecord import MAX_DEFINITION, NEVER, Schedule, parse_line
from disque.cluster.schedules import BUCKETS, HANDOVER_MS, TABLE_NAME
from disque.cluster.tablesync import BYTES_PER_PASS
from disque.context.tablelog import SCHEDULE_TABLE, TICK_TABLE
from disque.config import Config
from disque.jobs.job import dedup_token
from disque.node import Node
from disque.process import cronspec
from disque.state.host import Host
from tests.unit.commands.test_acl import logged_in
from tests.unit.helpers import (NODE_ID, PEER_ID, PEER_LINK, START_MS, Cmd, FakeClock,
                                MessageLog, add_peer, advance, deliver, make_node)

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
                     "next": START_MS + 40_000, "last": None, "firedby": None,
                     "owner": b"default"}
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
    (("SET", "s", "EVERY", 1, "q" * (MAX_DEFINITION + 1), "b"), "ERR the schedule's queue, options"),
    (("SET", "s", "EVERY", 1, "q", "b", "TTL", "1" * MAX_DEFINITION),
     "ERR the schedule's queue, options"),
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
                "day-of-week (or a macro such as @daily)"),
    ("* * * * * *", "ERR CRON expression needs five fields: minute hour day-of-month month "
                    "day-of-week (or a macro such as @daily)"),
    ("R R * * *", "ERR CRON expression 'R R * * *': R and H fields are not allowed (every "
                  "node must compute the same times)"),
    ("0 r(1-5)/2 * * *", "ERR CRON expression '0 r(1-5)/2 * * *': R and H fields are not "
                         "allowed (every node must compute the same times)"),
    ("H * * * *", "ERR CRON expression 'H * * * *': R and H fields are not allowed (every "
                  "node must compute the same times)"),
    ("@reboot", "ERR unknown CRON macro '@reboot' (@yearly, @annually, @monthly, @weekly, "
                "@daily, @midnight, @hourly)"),
    ("TZ=Mars/Olympus 0 * * * *", "ERR unknown time zone 'Mars/Olympus' (an IANA name, such "
                                  "as Europe/Paris)"),
    ("TZ=../etc 0 * * * *", "ERR unknown time zone '../etc' (an IANA name, such as "
                            "Europe/Paris)"),
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
    assert cronspec.cron_next(b"R * * * *", 0) == -1  # from a peer, and never fired
    assert cronspec.cron_next(b"* * * * *", 1 << 62) == -1  # past datetime's range
    assert cronspec.cron_problem(b"\xff * * * *") == "CRON expression is not ASCII"
    # A random field would give each node (and each call) its own times.
    assert cronspec.cron_problem(b"R R * * *") is not None


JAN_1_2026 = 1767225600000  # a Thursday, 00:00 UTC


@pytest.mark.parametrize("macro, fields", [
    ("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"),
    ("@weekly", "0 0 * * 0"), ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"), ("@DAILY", "0 0 * * *"),
])
def test_macros_are_their_five_fields(macro, fields):
    assert cronspec.cron_problem(macro.encode()) is None
    for start in (JAN_1_2026, JAN_1_2026 + 7 * 3_600_000 + 1):
        assert cronspec.cron_next(macro.encode(), start) == cronspec.cron_next(
            fields.encode(), start)


def test_a_time_zone_moves_the_ticks_and_follows_daylight_saving():
    # 02:30 in Paris: 01:30 UTC in winter, 00:30 UTC in summer.
    paris = b"TZ=Europe/Paris 30 2 * * *"
    assert cronspec.cron_problem(paris) is None
    assert cronspec.cron_next(paris, JAN_1_2026) == JAN_1_2026 + 90 * 60_000
    july_1 = 1782864000000  # 2026-07-01 00:00 UTC
    assert cronspec.cron_next(paris, july_1) == july_1 + 30 * 60_000
    # 2026-03-29: 02:30 does not exist in Paris; the tick is at 03:00 (01:00 UTC).
    march_28_noon = 1774699200000
    assert cronspec.cron_next(paris, march_28_noon) == 1774746000000
    # 2026-10-25: 02:30 happens twice in Paris; a fixed hour ticks once (the first).
    october_24_noon = 1792843200000
    first = cronspec.cron_next(paris, october_24_noon)
    assert first == 1792888200000  # 00:30 UTC, summer time
    assert cronspec.cron_next(paris, first) == first + 86_400_000 + 3_600_000
    # An expression run every hour ticks in both passes of the repeated hour.
    hourly = b"TZ=Europe/Paris 30 * * * *"
    ticks = [cronspec.cron_next(hourly, first - 1)]
    for _ in range(3):
        ticks.append(cronspec.cron_next(hourly, ticks[-1]))
    assert [t - first for t in ticks] == [0, 3_600_000, 7_200_000, 10_800_000]
    # The macros take a zone too.
    assert cronspec.cron_next(b"TZ=Asia/Kolkata @daily", JAN_1_2026) == (
        JAN_1_2026 + 18 * 3_600_000 + 30 * 60_000)


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
           last_tick=0, last_by=b"", owner=b"default") -> list:
    return [name, version, origin, deleted, every, b"", b"q", body, [], last_tick, last_by,
            owner]


def schedule_msg(rec) -> dict:
    return {m.TYPE: m.SCHEDULE, m.SCHED: rec}


def fired_msg(*entries) -> dict:
    return {m.TYPE: m.SCHEDFIRED, m.SCHED_TICKS: [list(e) for e in entries]}


def done_msg() -> dict:
    return {m.TYPE: m.TABLEDONE, m.TABLE: TABLE_NAME}


def digest_msg(digest: bytes, ask: int = 1) -> dict:
    return {m.TYPE: m.TABLESYNC, m.TABLE: TABLE_NAME, m.DIGEST: digest, m.ASK: ask}


def first_ranked(node: Node, peers: list[bytes]) -> bytes:
    """A schedule name this node ranks first for among itself and ``peers``."""
    return next(n for n in (b"beat%d" % k for k in range(50))
                if node.state.schedules.rank(Schedule(n, 1, b"", b"q", b"", [], 0, NODE_ID),
                                             [NODE_ID, *peers]) == 0)


def test_a_node_fires_only_with_a_majority_synced():
    node = make_node()
    add_peer(node)
    add_peer(node, OTHER_ID, link=False)  # three nodes: a majority is two
    name = first_ranked(node, [PEER_ID])
    Cmd(node).ok("SCHEDULE", "SET", name, "EVERY", 1, "q", "b")
    advance(node, 3000, step=100, cron=True)
    assert queued_tokens(node) == []  # a linked peer, but not synced
    deliver(node, PEER_ID, done_msg())
    advance(node, HANDOVER_MS - 100, step=100, cron=True)
    assert queued_tokens(node) == []  # a view just formed does not fire first
    advance(node, 200, step=100, cron=True)
    assert len(queued_tokens(node)) == 4  # then it catches up


def advance_answered(node: Node, ms: int) -> None:
    """Cron passes every 100 ms for ``ms``, the peers answering every PING
    (no link is dropped, no peer suspected)."""
    for _ in range(ms // 100):
        advance(node, 100, cron=True)
        for peer in node.state.membership.others():
            peer.ping_sent = 0
            peer.pong_received = node.state.now


def test_a_linked_peer_not_synced_makes_the_first_wait_a_node_timeout():
    node = make_node(cluster_node_timeout=3000)
    add_peer(node)
    add_peer(node, OTHER_ID)  # linked too, but never synced
    name = first_ranked(node, [PEER_ID])
    Cmd(node).ok("SCHEDULE", "SET", name, "EVERY", 1, "q", "b")
    deliver(node, PEER_ID, done_msg())
    advance_answered(node, 3900)
    assert queued_tokens(node) == []  # another view (OTHER_ID's) may rank another first
    advance_answered(node, 200)
    assert len(queued_tokens(node)) == 1  # the second's turn: the tick of 3 s ago


def test_ticks_missed_before_a_view_formed_wait_for_the_first_only():
    """A node ranked second does not catch up on ticks missed before its view
    formed until a node timeout after it formed (the first does it then)."""
    node = make_node(cluster_node_timeout=3000)
    add_peer(node)
    add_peer(node, OTHER_ID, link=False)
    name = next(n for n in (b"beat%d" % k for k in range(50))
                if node.state.schedules.rank(Schedule(n, 1, b"", b"q", b"", [], 0, NODE_ID),
                                             [NODE_ID, PEER_ID]) == 1)
    Cmd(node).ok("SCHEDULE", "SET", name, "EVERY", 1, "q", "b")
    advance_answered(node, 20_000)  # no majority meanwhile
    deliver(node, PEER_ID, done_msg())
    advance_answered(node, 2900)
    assert queued_tokens(node) == []  # 20 ticks missed, none fired before its turn
    deliver(node, PEER_ID, fired_msg([name, START_MS + 21_000, PEER_ID]))
    advance_answered(node, 300)
    assert queued_tokens(node) == []  # the first caught up
    advance_answered(node, 1900)
    assert queued_tokens(node) == [b"schedule:%s:%d" % (name, START_MS + 22_000)]  # its turn


def test_a_digest_is_answered_with_the_buckets_that_differ_then_done():
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    for k in range(40):
        cmd.ok("SCHEDULE", "SET", "s%d" % k, "EVERY", 1, "q", "b")
    schedules = node.state.schedules
    transport = node.state.outbox.transport
    # A peer with an empty table asks: every record, one per message, then
    # TABLEDONE; and our digest, since no answer of the peer's is on its way.
    deliver(node, PEER_ID, digest_msg(b"\0" * 8 * 2 * BUCKETS))
    kinds = [msg[m.TYPE] for msg in transport.replies]
    assert kinds[0] == m.TABLESYNC and kinds[-1] == m.TABLEDONE
    assert sorted(msg[m.SCHED][0] for msg in transport.replies if msg[m.TYPE] == m.SCHEDULE) == (
        sorted(b"s%d" % k for k in range(40)))
    # A peer that agrees gets TABLEDONE alone.
    transport.replies.clear()
    deliver(node, PEER_ID, digest_msg(schedules.digest.packed(), ask=0))
    assert [msg[m.TYPE] for msg in transport.replies] == [m.TABLEDONE]
    # One record missing: its bucket alone.
    other = make_node(node_id=OTHER_ID)
    for k in range(39):
        Cmd(other).ok("SCHEDULE", "SET", "s%d" % k, "EVERY", 1, "q", "b")
    for k in range(39):
        other.state.schedules.table[b"s%d" % k].version = schedules.table[b"s%d" % k].version
        other.state.schedules.table[b"s%d" % k].origin = NODE_ID
    theirs = other.state.schedules
    theirs.digest.sums[:] = [0] * len(theirs.digest.sums)
    for k in range(39):
        s = theirs.table[b"s%d" % k]
        s.definition_print = 0
        theirs._definition_changed(s)
    transport.replies.clear()
    deliver(node, PEER_ID, digest_msg(theirs.digest.packed(), ask=0))
    sent = [msg for msg in transport.replies if msg[m.TYPE] == m.SCHEDULE]
    bucket = schedules.table[b"s39"].bucket
    assert {msg[m.SCHED][0] for msg in sent} == set(schedules.buckets[bucket])
    assert b"s39" in {msg[m.SCHED][0] for msg in sent}
    # A digest of another shape is not one of this table.
    transport.replies.clear()
    deliver(node, PEER_ID, digest_msg(b"\0" * 8))
    assert transport.replies == []


def test_a_large_answer_leaves_a_bounded_part_per_cron_pass():
    node = make_node()
    add_peer(node)
    body = b"x" * (BYTES_PER_PASS // 4)
    for k in range(10):
        Cmd(node).ok("SCHEDULE", "SET", "s%d" % k, "EVERY", 3600, "q", body)
    transport = node.state.outbox.transport
    deliver(node, PEER_ID, digest_msg(b"\0" * 8 * 2 * BUCKETS, ask=0))
    passes = []
    while not transport.replies or transport.replies[-1][m.TYPE] != m.TABLEDONE:
        before = len(transport.replies)
        advance(node, 100, cron=True)
        passes.append(len(transport.replies) - before)
        assert len(passes) < 10
    records = [msg for msg in transport.replies if msg[m.TYPE] == m.SCHEDULE]
    assert len(records) == 10 and all(len(msg[m.SCHED][7]) == len(body) for msg in records)
    assert max(passes) <= 4 + 1  # four bodies (a budget), and TABLEDONE


def test_a_peer_that_answered_is_synced_until_its_link_goes_down():
    node = make_node()
    add_peer(node)
    deliver(node, PEER_ID, done_msg())
    assert PEER_ID in node.state.schedules.synced
    node.link_down(PEER_ID)
    assert PEER_ID not in node.state.schedules.synced


def test_digests_go_to_new_links_and_to_peers_not_synced_every_round():
    node = make_node()
    add_peer(node)
    transport = node.state.outbox.transport
    node.link_up(PEER_ID, PEER_LINK)
    assert transport.of_type(m.TABLESYNC) == []  # nothing to tell: no message at all
    Cmd(node).ok("SCHEDULE", "SET", "beat", "EVERY", 1, "q", "b")
    transport.clear()
    advance(node, 100, cron=True)  # the first record starts the rounds
    [(dest, msg)] = transport.of_type(m.TABLESYNC)
    assert dest == PEER_ID and msg[m.ASK] == 1
    assert msg[m.DIGEST] == node.state.schedules.digest.packed()
    transport.clear()
    node.link_up(PEER_ID, PEER_LINK)
    assert len(transport.of_type(m.TABLESYNC)) == 1


def test_last_writer_wins_and_the_last_tick_only_grows():
    node = make_node()
    add_peer(node)
    deliver(node, PEER_ID, schedule_msg(record(version=START_MS, body=b"v1",
                                               last_tick=START_MS + 5000, last_by=PEER_ID)))
    s = node.state.schedules.get(b"beat")
    assert s.body == b"v1" and s.next_tick == START_MS + 6000
    deliver(node, PEER_ID, schedule_msg(record(version=START_MS - 1, body=b"old")))
    assert s.body == b"v1" and s.last_tick == START_MS + 5000
    deliver(node, PEER_ID, schedule_msg(record(version=START_MS + 1, body=b"v2")))
    assert s.body == b"v2" and s.last_tick == START_MS + 5000
    deliver(node, PEER_ID, fired_msg([b"beat", START_MS + 3000, PEER_ID]))
    assert s.last_tick == START_MS + 5000
    deliver(node, PEER_ID, fired_msg([b"beat", START_MS + 7000, b""]))
    assert s.last_tick == START_MS + 7000 and s.next_tick == START_MS + 8000
    assert s.last_by == PEER_ID  # no node named: the sender
    deliver(node, PEER_ID, fired_msg([b"beat", START_MS + 8000, OTHER_ID]))
    assert s.last_by == OTHER_ID
    # A DEL with a newer version leaves a tombstone; an older SET does not revive it.
    deliver(node, PEER_ID, schedule_msg(record(version=START_MS + 2, deleted=1)))
    assert node.state.schedules.get(b"beat") is None and s.next_tick == NEVER
    deliver(node, PEER_ID, schedule_msg(record(version=START_MS + 1)))
    assert node.state.schedules.get(b"beat") is None
    # A SET made here after it is newer, even with this clock behind.
    node.state.clock.now = START_MS - 60_000
    Cmd(node).ok("SCHEDULE", "SET", "beat", "EVERY", 1, "q", "again")
    assert node.state.schedules.get(b"beat").version == START_MS + 3


def test_tombstones_are_forgotten_after_a_day_and_late_copies_stay_out():
    node = make_node()
    cmd = Cmd(node)
    cmd.ok("SCHEDULE", "SET", "beat", "EVERY", 60, "q", "b")
    cmd.ok("SCHEDULE", "DEL", "beat")
    schedules = node.state.schedules
    tombstone = schedules.table[b"beat"]
    advance(node, 86_400_000, cron=True)
    assert b"beat" in schedules.table
    advance(node, 1000, cron=True)
    assert schedules.table == {} and not any(schedules.digest.sums)
    add_peer(node)
    deliver(node, PEER_ID, schedule_msg(tombstone.to_wire()))  # a node that forgets later
    assert schedules.table == {}
    # One read from the tables file after a long stop leaves the file at the next pass.
    assert schedules.restore_record(SCHEDULE_TABLE, b"beat", tombstone.to_wire())
    node.state.table_log.enabled = True
    advance(node, 100, cron=True)
    assert schedules.table == {}
    assert node.state.table_log.take() == [(SCHEDULE_TABLE, b"beat", None),
                                           (TICK_TABLE, b"beat", None)]


@pytest.mark.parametrize("bad", [
    [b"beat"],
    record(name=b""),
    record(name=b"x" * 201),
    record(origin=b"short"),
    record(origin=b"\xff" * 40),  # node IDs are shown and logged as text
    record(last_tick=1, last_by=b"z" * 40),
    record(every=0),  # neither EVERY nor CRON
    record(every=-1),
    record(last_tick=-5),
    record(last_tick=1 << 63),
    record(version=1 << 62),
    record(body=5),
    record(owner=b""),
    record()[:11],
    [b"beat", START_MS, PEER_ID, 0, 1, b"", b"q", b"b", [5], 0, b"", b"default"],
    "not a list",
])
def test_malformed_records_are_ignored(bad):
    node = make_node()
    add_peer(node)
    deliver(node, PEER_ID, schedule_msg(bad))
    deliver(node, PEER_ID, schedule_msg(record(name=b"good")))
    assert [s.name for s in node.state.schedules.listing()] == [b"good"]


def test_malformed_messages_are_ignored():
    node = make_node()
    add_peer(node)
    deliver(node, PEER_ID, {m.TYPE: m.SCHEDULE, m.SCHED: b"x"})
    deliver(node, PEER_ID, schedule_msg(record(name=b"beat")))
    deliver(node, PEER_ID, {m.TYPE: m.SCHEDFIRED, m.SCHED_TICKS: b"x"})
    deliver(node, PEER_ID, fired_msg([b"beat", b"1", PEER_ID], [b"beat", 1 << 62, PEER_ID],
                                     [b"beat", START_MS + 5000, b"short"], [b"beat"], "x"))
    deliver(node, PEER_ID, fired_msg([b"nosuch", START_MS, PEER_ID]))
    deliver(node, PEER_ID, {m.TYPE: m.TABLESYNC, m.TABLE: TABLE_NAME, m.DIGEST: 5, m.ASK: 1})
    deliver(node, PEER_ID, {m.TYPE: m.TABLESYNC, m.TABLE: b"nosuch", m.DIGEST: b"", m.ASK: 1})
    deliver(node, PEER_ID, {m.TYPE: m.TABLEDONE, m.TABLE: b"nosuch"})
    assert list(node.state.schedules.table) == [b"beat"]
    assert node.state.schedules.table[b"beat"].last_tick == 0
    assert node.state.outbox.transport.replies == []


def test_set_and_del_are_told_to_every_node_one_record_each():
    node = make_node()
    add_peer(node)
    node.state.outbox.transport.clear()
    Cmd(node).ok("SCHEDULE", "SET", "beat", "EVERY", 1, "q", "b")
    Cmd(node).ok("SCHEDULE", "DEL", "beat")
    sent = node.state.outbox.transport.of_type(m.SCHEDULE)
    assert [(dest, msg[m.SCHED][0], msg[m.SCHED][3]) for dest, msg in sent] == [
        (PEER_ID, b"beat", 0), (PEER_ID, b"beat", 1)]


def test_ticks_fired_together_are_told_in_one_message():
    node = make_node()
    add_peer(node)
    deliver(node, PEER_ID, done_msg())
    cmd = Cmd(node)
    for k in range(3):
        cmd.ok("SCHEDULE", "SET", "s%d" % k, "EVERY", 1, "q", "b")
    node.state.outbox.transport.clear()
    advance(node, 2000, step=100, cron=True)  # settled, and a view of two: ranks 0 and 1
    messages = node.state.outbox.transport.of_type(m.SCHEDFIRED)
    assert messages and all(len({e[0] for e in msg[m.SCHED_TICKS]}) == len(msg[m.SCHED_TICKS])
                            for _, msg in messages)


# ------------------------------------------------------------ the tables log

def test_each_change_is_one_record_and_the_records_restore_the_table():
    node = make_node()
    log = node.state.table_log
    log.enabled = True
    cmd = Cmd(node)
    cmd.ok("SCHEDULE", "SET", "b\x00 in", "EVERY", 1, "q q", "\r\nbody", "DEADLETTER", "d,e")
    cmd.ok("SCHEDULE", "SET", "gone", "EVERY", 1, "q", "b")
    cmd.ok("SCHEDULE", "DEL", "gone")
    assert [(table, key) for table, key, _ in log.take()] == [
        (SCHEDULE_TABLE, b"b\x00 in"), (SCHEDULE_TABLE, b"gone"), (SCHEDULE_TABLE, b"gone")]
    advance(node, 1500, step=100, cron=True)
    records = log.take()
    assert [(table, key) for table, key, _ in records] == [(TICK_TABLE, b"b\x00 in")]
    assert records[0][2] == [START_MS + 1000, NODE_ID]
    restored = make_node()
    for table, key, value in [(SCHEDULE_TABLE, s.name, s.to_wire())
                              for s in node.state.schedules.table.values()] + records:
        assert restored.state.restore_table_record(table, key, value)
    [s] = restored.state.schedules.listing()
    assert (s.name, s.queue, s.body, s.options) == (b"b\x00 in", b"q q", b"\r\nbody",
                                                    [b"DEADLETTER", b"d,e"])
    assert s.last_tick == START_MS + 1000 and s.last_by == NODE_ID
    assert restored.state.schedules.table[b"gone"].deleted
    assert restored.state.schedules.digest.packed() == node.state.schedules.digest.packed()
    assert restored.state.table_log.take() == []  # restoring writes nothing
    assert not restored.state.restore_table_record(SCHEDULE_TABLE, b"other", s.to_wire())
    assert not restored.state.restore_table_record(TICK_TABLE, b"x", [START_MS, b"short"])


def test_a_nodes_conf_line_of_an_older_version_is_read():
    line = "schedule %s 5 %s 0 0 %s cQ== - - 7 %s" % (
        base64.b64encode(b"n").decode(), PEER_ID.decode(),
        base64.b64encode(b"*/5 * * * *").decode(), NODE_ID.decode())
    s = parse_line(line.split())
    assert (s.name, s.cron, s.queue, s.version, s.last_tick, s.last_by, s.owner) == (
        b"n", b"*/5 * * * *", b"q", 5, 7, NODE_ID, b"default")
    node = make_node()
    text = "%s 127.0.0.1:7711@17711 myself 0 0 connected\n%s\n" % (NODE_ID.decode(), line)
    assert len(nodesconf.parse(text, START_MS)) == 1  # the node lines still parse
    node.state.schedules.restore(nodesconf.parse_schedules(text))
    assert node.state.schedules.get(b"n").queue == b"q"


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


# ----------------------------------------------------- owners, quotas, limits

def test_a_tick_counts_against_its_owner_quota_and_is_skipped_over_it():
    node = make_node()
    admin = Cmd(node)
    admin.raw("ACL", "SETUSER", "p", "on", "nopass", "~*", "+@all", "quota-jobs=2")
    producer = logged_in(node, "p", "any")
    producer.ok("SCHEDULE", "SET", "beat", "EVERY", 1, "q", "b")
    assert listing(admin)[0]["owner"] == b"p"
    advance(node, 4500, step=100, cron=True)
    assert len(queued_tokens(node)) == 2  # the quota: two jobs pending
    schedules = node.state.schedules
    assert (schedules.fired, schedules.refused, schedules.over_quota) == (2, 2, 2)
    # Skipped, not retried: the last tick is recorded (and told), the job not made.
    assert schedules.get(b"beat").last_tick == START_MS + 4000
    assert node.state.quotas.account(b"p").jobs == 2
    assert "schedule_ticks_over_quota:2" in admin.ok("INFO", "schedules").decode()
    admin.raw("ADDJOB", "q", "x", 0)  # the default user has no quota
    assert node.state.quotas.account(b"default").jobs == 0


def test_deluser_deletes_the_user_schedules_on_every_node():
    node = make_node()
    add_peer(node)
    admin = Cmd(node)
    admin.raw("ACL", "SETUSER", "p", "on", "nopass", "~*", "+@all")
    producer = logged_in(node, "p", "any")
    producer.ok("SCHEDULE", "SET", "mine", "EVERY", 1, "q", "b")
    admin.ok("SCHEDULE", "SET", "theirs", "EVERY", 1, "q", "b")
    node.state.outbox.transport.clear()
    assert admin.ok("ACL", "DELUSER", "p") == 1
    assert [e["name"] for e in listing(admin)] == [b"theirs"]
    [(dest, msg)] = node.state.outbox.transport.of_type(m.SCHEDULE)
    assert msg[m.SCHED][0] == b"mine" and msg[m.SCHED][3] == 1  # a tombstone, told


def test_a_schedule_whose_owner_is_not_a_user_here_is_not_fired_here():
    node = make_node()
    assert node.state.schedules.restore_record(SCHEDULE_TABLE, b"beat",
                                               record(owner=b"elsewhere"))
    advance(node, 3000, step=100, cron=True)
    assert queued_tokens(node) == []
    assert node.state.schedules.refused >= 1 and node.state.schedules.over_quota == 0
    assert node.state.schedules.get(b"beat").last_tick == 0  # left to a node that knows it
    Cmd(node).raw("ACL", "SETUSER", "elsewhere", "on", "nopass", "~*", "+@all")
    advance(node, 1500, step=100, cron=True)
    assert queued_tokens(node) != []


def test_a_body_over_schedule_max_body_is_refused():
    node = make_node(schedule_max_body=1024)
    cmd = Cmd(node)
    assert cmd.ok("SCHEDULE", "SET", "s", "EVERY", 1, "q", "x" * 1024) == b"OK"
    assert cmd.error("SCHEDULE", "SET", "s", "EVERY", 1, "q", "x" * 1025) == (
        "ERR the schedule's body is 1025 bytes, more than schedule-max-body (1024)")
    assert cmd.ok("CONFIG", "SET", "schedule-max-body", "2kb") == b"OK"
    assert cmd.ok("SCHEDULE", "SET", "s", "EVERY", 1, "q", "x" * 1025) == b"OK"


# -------------------------------------------------------------------- ACL

def admin_and_user(*rules: str) -> tuple[Cmd, Cmd]:
    """A node's default user, and a user ``p`` with ``rules`` logged in."""
    node = make_node()
    admin = Cmd(node)
    admin.raw("ACL", "SETUSER", "p", "on", "nopass", *rules)
    return admin, logged_in(node, "p", "any")


def test_acl_set_and_del_need_the_queue_list_shows_only_permitted():
    admin, producer = admin_and_user("~orders:*", "+@produce", "+@read")
    admin.ok("SCHEDULE", "SET", "theirs", "EVERY", 1, "payments", "b")
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
    reader = logged_in(admin.node, "r", "any")
    assert len(listing(reader)) == 2
    assert reader.raw("SCHEDULE", "SET", "y", "EVERY", 1, "q", "b") == (
        b"-NOPERM User r has no permissions to run the 'schedule|set' command\r\n")


def test_set_of_an_existing_name_needs_del_rights_on_the_schedule_it_replaces():
    # May SET on orders:* but not DEL: it cannot replace another's schedule
    # (nor its own), whatever queue the new one names.
    admin, producer = admin_and_user("~orders:*", "~payments", "+schedule|set")
    admin.ok("SCHEDULE", "SET", "nightly", "EVERY", 60, "payments", "b")
    assert producer.raw("SCHEDULE", "SET", "nightly", "EVERY", 60, "orders:a", "b") == (
        b"-NOPERM User p has no permissions to replace the schedule 'nightly': SET of an "
        b"existing name needs the 'schedule|del' command too\r\n")
    assert producer.ok("SCHEDULE", "SET", "fresh", "EVERY", 60, "orders:a", "b") == b"OK"
    assert producer.raw("SCHEDULE", "SET", "fresh", "EVERY", 60, "orders:a", "c").startswith(
        b"-NOPERM User p has no permissions to replace the schedule 'fresh'")
    # With DEL's command, the replaced schedule's queue is checked as DEL checks it.
    admin.raw("ACL", "SETUSER", "q", "on", "nopass", "~orders:*", "+@produce")
    other = logged_in(admin.node, "q", "any")
    assert other.raw("SCHEDULE", "SET", "nightly", "EVERY", 60, "orders:a", "b") == (
        b"-NOPERM User q has no permissions to access the queue 'payments'\r\n")
    assert [e["queue"] for e in listing(admin) if e["name"] == b"nightly"] == [b"payments"]
    assert other.ok("SCHEDULE", "SET", "fresh", "EVERY", 60, "orders:b", "b") == b"OK"
