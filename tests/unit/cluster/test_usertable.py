"""ACL users across the cluster (cluster/usertable.py, docs/security.md
"Users across the cluster"): versioned records, last writer wins,
tombstones, the bus only when it is authenticated, passwords as hashes."""

from __future__ import annotations

import hashlib

import pytest

from disque.cluster import messages as m
from disque.cluster.usertable import BUCKETS, TABLE_NAME, record_from_wire
from disque.config import Config
from disque.config.aclfile import parse_acl_file
from disque.context.tablelog import USER_TABLE
from disque.node import Node
from disque.state.host import Host
from tests.unit.commands.test_acl import client, logged_in
from tests.unit.helpers import (NODE_ID, PEER_ID, PEER_LINK, START_MS, Cmd, add_peer, advance,
                                deliver, make_node)

SECRET = "a-cluster-secret-of-the-unit-tests"
OTHER_ID = b"fffe0000" + b"2" * 32  # above PEER_ID
PW_HASH = hashlib.sha256(b"pw").hexdigest().encode()


def secured(**settings) -> Node:
    """A node with a cluster secret and one linked peer."""
    node = make_node(cluster_secret=SECRET, **settings)
    add_peer(node)
    node.state.table_log.enabled = True
    return node


def record(name=b"w", version=START_MS, origin=PEER_ID, deleted=0,
           rules=(b"on", b"#" + PW_HASH, b"~*", b"+@all")) -> list:
    return [name, version, origin, deleted, [] if deleted else list(rules)]


def user_msg(rec) -> dict:
    return {m.TYPE: m.ACLUSER, m.ACL_RECORD: rec}


def sent_records(node: Node) -> list[list]:
    return [msg[m.ACL_RECORD] for _, msg in node.state.outbox.transport.of_type(m.ACLUSER)]


def auth(node: Node, name: str, password: str) -> bytes:
    return Cmd(node, client()).raw("AUTH", name, password)


OK = b"+OK\r\n"
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"


# ------------------------------------------------------------- records

@pytest.mark.parametrize("bad", [
    "not a list", [b"w", START_MS, PEER_ID, 0],  # too short
    [b"w w", START_MS, PEER_ID, 0, []],  # a name with a space
    [b"w", -1, PEER_ID, 0, []], [b"w", START_MS, b"short", 0, []],
    [b"w", START_MS, PEER_ID, 2, []], [b"w", START_MS, PEER_ID, 0, "on"],
    [b"w", START_MS, PEER_ID, 0, [b"on", 5]],
    [b"w", START_MS, PEER_ID, 0, [b"on", b">pw"]],  # a password in clear
    [b"w", START_MS, PEER_ID, 0, [b"<pw"]],
    [b"w", START_MS, PEER_ID, 1, [b"on"]],  # a tombstone has no rules
    [b"default", START_MS, PEER_ID, 1, []],  # nor can the default user be deleted
])
def test_malformed_records_are_refused(bad):
    assert record_from_wire(bad) is None
    node = secured()
    deliver(node, PEER_ID, user_msg(bad))
    assert list(node.state.config.users) == [b"default"]


def test_setuser_is_one_record_with_hashes_told_to_every_node_and_persisted():
    node = secured()
    add_peer(node, OTHER_ID)
    assert Cmd(node).raw("ACL", "SETUSER", "w", "on", ">pw", "~q*", "+@consume") == OK
    records = sent_records(node)
    assert len(records) == 2 and records[0] == records[1]  # one message to each peer
    name, version, origin, deleted, rules = records[0]
    assert (name, version, origin, deleted) == (b"w", START_MS, NODE_ID, 0)
    assert b"#" + PW_HASH in rules and not any(b"pw" == r[1:] for r in rules)
    assert node.state.table_log.take() == [(USER_TABLE, b"w", records[0])]
    assert repr(records).find("'>") < 0


def test_a_record_from_a_peer_makes_the_user_here():
    node = secured()
    deliver(node, PEER_ID, user_msg(record()))
    assert auth(node, "w", "pw") == OK
    assert node.state.guarded  # a named user: every command is checked now
    assert node.state.table_log.take() == [(USER_TABLE, b"w", record())]
    assert sent_records(node) == []  # a record heard is not told again


def test_last_writer_wins_ties_to_the_higher_node_id():
    node = secured()
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 10)))
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 5, rules=[b"off"])))
    assert node.state.config.users[b"w"].enabled  # older: ignored
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 10, origin=OTHER_ID,
                                           rules=[b"off"])))
    assert not node.state.config.users[b"w"].enabled  # same time, higher node ID
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 10)))
    assert not node.state.config.users[b"w"].enabled


def test_a_change_here_is_newer_than_the_record_it_replaces_even_with_a_clock_behind():
    node = secured()
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 60_000)))
    Cmd(node).ok("ACL", "SETUSER", "w", "off")
    [rec] = sent_records(node)
    assert rec[1] == START_MS + 60_001 and rec[2] == NODE_ID
    assert not node.state.config.users[b"w"].enabled


def test_deletion_and_concurrent_update_the_later_wins():
    node = secured()
    deliver(node, PEER_ID, user_msg(record(version=START_MS)))
    # A deletion made here, and an update made on a peer cut off meanwhile.
    assert Cmd(node).ok("ACL", "DELUSER", "w") == 1
    deliver(node, PEER_ID, user_msg(record(version=START_MS - 1, rules=[b"on", b"nopass"])))
    assert b"w" not in node.state.config.users  # the update is older than the deletion
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 5, rules=[b"on", b"nopass"])))
    assert auth(node, "w", "anything") == OK  # a later update brings it back
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 9, deleted=1)))
    assert b"w" not in node.state.config.users
    assert node.state.user_table.records[b"w"].deleted  # the tombstone stays


def test_a_tombstone_is_kept_however_old_and_keeps_older_copies_out():
    node = secured()
    deliver(node, PEER_ID, user_msg(record(version=START_MS, deleted=1)))
    advance(node, 400 * 86_400_000, cron=True)
    deliver(node, PEER_ID, user_msg(record(version=START_MS - 1, origin=OTHER_ID)))
    assert b"w" not in node.state.config.users


def test_a_password_changed_or_user_turned_off_by_a_peer_ends_logins():
    node = secured()
    deliver(node, PEER_ID, user_msg(record()))
    user = node.state.config.users[b"w"]
    session = logged_in(node, "w", "pw")
    before = user.credentials
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 1,
                                           rules=[b"on", b"#" + PW_HASH, b"~q", b"+@all"])))
    assert user.credentials == before  # the queues changed, not what the login proved
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 2, rules=[b"on", b"nopass"])))
    assert user.credentials == before + 1
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 3, rules=[b"off", b"nopass"])))
    assert user.credentials == before + 2
    assert session.raw("PING") == (
        b"-NOAUTH this connection's user was deleted or turned off\r\n")


def test_a_deletion_from_a_peer_closes_logins_and_deletes_the_user_schedules_once():
    node = secured()
    deliver(node, PEER_ID, user_msg(record(rules=[b"on", b"nopass", b"~*", b"+@all"])))
    session = logged_in(node, "w", "any")
    session.ok("SCHEDULE", "SET", "mine", "EVERY", 1, "q", "b")
    Cmd(node).ok("SCHEDULE", "SET", "theirs", "EVERY", 1, "q", "b")
    node.state.outbox.transport.clear()
    tombstone = record(version=START_MS + 1, deleted=1)
    deliver(node, PEER_ID, user_msg(tombstone))
    assert session.raw("PING") == (
        b"-NOAUTH this connection's user was deleted or turned off\r\n")
    assert [s.name for s in node.state.schedules.listing()] == [b"theirs"]
    [(_, msg)] = node.state.outbox.transport.of_type(m.SCHEDULE)
    assert msg[m.SCHED][0] == b"mine" and msg[m.SCHED][3] == 1
    deliver(node, PEER_ID, user_msg(tombstone))  # heard again (a digest's answer)
    assert len(node.state.outbox.transport.of_type(m.SCHEDULE)) == 1


def test_quotas_from_a_peer_are_counted_while_some_user_has_one():
    node = secured()
    deliver(node, PEER_ID, user_msg(record(rules=[b"on", b"nopass"])))
    assert not node.state.quotas.active
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 1,
                                           rules=[b"on", b"nopass", b"quota-jobs=2"])))
    assert node.state.quotas.active
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 2, rules=[b"on", b"nopass"])))
    assert not node.state.quotas.active
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 3,
                                           rules=[b"on", b"nopass", b"quota-jobs=2"])))
    deliver(node, PEER_ID, user_msg(record(version=START_MS + 4, deleted=1)))
    assert not node.state.quotas.active


def test_a_rule_this_node_cannot_apply_leaves_the_user_off_here():
    node = secured()
    deliver(node, PEER_ID, user_msg(record(rules=[b"on", b"nopass", b"+some-future-command"])))
    assert auth(node, "w", "x") == WRONGPASS
    assert node.state.user_table.records[b"w"].rules[-1] == b"+some-future-command"  # relayed


# ------------------------------------------------------ without a secret

def test_without_a_secret_users_stay_here_and_records_are_refused(caplog):
    node = make_node()
    add_peer(node)
    node.state.table_log.enabled = True
    Cmd(node).ok("ACL", "SETUSER", "w", "on", ">pw")
    assert sent_records(node) == []
    assert node.state.table_log.take()[0][:2] == (USER_TABLE, b"w")  # kept across restarts
    assert "changed on this node only" in caplog.text and "cluster-secret" in caplog.text
    deliver(node, PEER_ID, user_msg(record(name=b"x")))
    assert b"x" not in node.state.config.users
    info = Cmd(node).ok("INFO", "security").decode()
    assert "acl_users_scope:node\r\n" in info and "acl_user_records_refused:1\r\n" in info
    assert "refused: this node has no cluster secret" in caplog.text
    # Its digest is neither sent nor answered.
    transport = node.state.outbox.transport
    node.link_up(PEER_ID, PEER_LINK)
    advance(node, 6000, step=100, cron=True)
    deliver(node, PEER_ID, {m.TYPE: m.TABLESYNC, m.TABLE: TABLE_NAME,
                            m.DIGEST: b"\0" * 8 * BUCKETS, m.ASK: 1})
    assert transport.of_type(m.TABLESYNC) == [] and transport.replies == []


def test_a_lone_node_without_a_secret_says_nothing(caplog):
    node = make_node()
    Cmd(node).ok("ACL", "SETUSER", "w", "on")
    assert "changed on this node only" not in caplog.text


# ------------------------------------------------------------- digests

def test_no_users_table_costs_no_message():
    node = make_node(cluster_secret=SECRET)
    add_peer(node)
    transport = node.state.outbox.transport
    node.link_up(PEER_ID, PEER_LINK)
    advance(node, 60_000, step=100, cron=True)
    assert transport.of_type(m.TABLESYNC) == [] and transport.of_type(m.ACLUSER) == []


def test_a_digest_is_answered_with_the_records_that_differ():
    node = secured()
    for k in range(5):
        Cmd(node).ok("ACL", "SETUSER", "u%d" % k, "on", ">pw%d" % k)
    transport = node.state.outbox.transport
    transport.replies.clear()
    deliver(node, PEER_ID, {m.TYPE: m.TABLESYNC, m.TABLE: TABLE_NAME,
                            m.DIGEST: b"\0" * 8 * BUCKETS, m.ASK: 1})
    kinds = [msg[m.TYPE] for msg in transport.replies]
    assert kinds[0] == m.TABLESYNC and kinds[-1] == m.TABLEDONE
    names = sorted(msg[m.ACL_RECORD][0] for msg in transport.replies
                   if msg[m.TYPE] == m.ACLUSER)
    assert names == [b"u%d" % k for k in range(5)]
    # A peer whose table agrees gets TABLEDONE alone; the next round asks it.
    transport.replies.clear()
    deliver(node, PEER_ID, {m.TYPE: m.TABLESYNC, m.TABLE: TABLE_NAME,
                            m.DIGEST: node.state.user_table.digest.packed(), m.ASK: 0})
    assert [msg[m.TYPE] for msg in transport.replies] == [m.TABLEDONE]
    transport.clear()
    advance(node, 5000, step=100, cron=True)
    assert [msg[m.TABLE] for _, msg in transport.of_type(m.TABLESYNC)] == [TABLE_NAME]


def test_the_records_restore_the_users_and_win_over_the_config_file_lines():
    node = secured()
    Cmd(node).ok("ACL", "SETUSER", "w", "on", ">pw", "~*", "+@all")
    Cmd(node).ok("ACL", "SETUSER", "gone", "on", ">x")
    Cmd(node).ok("ACL", "DELUSER", "gone")
    Cmd(node).ok("ACL", "SETUSER", "default", "on", "nopass", "~*", "-@all", "+ping")
    records = node.state.table_log.take()
    saved = {(table, key): value for table, key, value in records}
    config = Config.load(b"user w on >old ~* +@all\nuser gone on >x\n")
    restarted = make_node(config=config)
    for (table, key), value in saved.items():
        assert restarted.state.restore_table_record(table, key, value)
    assert auth(restarted, "w", "pw") == OK and auth(restarted, "w", "old") == WRONGPASS
    assert b"gone" not in restarted.state.config.users
    assert restarted.state.config.users[b"default"].describe() == (
        "default on nopass ~* -@all +ping")
    assert restarted.state.guarded


# ------------------------------------------------------- ACL SAVE, LOAD

class FileHost(Host):
    """A host whose aclfile is a bytes value."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.saves = 0

    def read_acl_file(self) -> bytes:
        return self.data

    def save_acl_file(self) -> str | None:
        self.saves += 1
        return None


def file_node(data: bytes) -> tuple[Node, FileHost]:
    host = FileHost(data)
    config = Config()
    config.aclfile = "users.acl"
    config.cluster_secret = SECRET
    node = Node(config, NODE_ID, clock=lambda: START_MS, rng=__import__("random").Random(1),
                host=host, bus=make_node().state.outbox.transport)
    add_peer(node)
    return node, host


def test_save_and_load_need_an_aclfile():
    cmd = Cmd(make_node())
    for sub in ("SAVE", "LOAD"):
        assert cmd.error("ACL", sub).startswith(
            "ERR This Disque instance is not configured to use an ACL file.")


def test_load_makes_the_file_users_the_users_and_tells_each_change():
    node, host = file_node(b"user w on #" + PW_HASH + b" ~* +@all\nuser r on nopass\n")
    Cmd(node).ok("ACL", "SETUSER", "w", "on", ">pw", "~*", "+@all")
    cmd = logged_in(node, "w", "pw")
    cmd.ok("ACL", "SETUSER", "old", "on", ">x")
    cmd.ok("ACL", "SETUSER", "r", "on", "nopass")
    cmd.ok("ACL", "SETUSER", "default", "off")
    node.state.outbox.transport.clear()
    assert cmd.ok("ACL", "LOAD") == b"OK"
    users = node.state.config.users
    assert sorted(users) == [b"default", b"r", b"w"]
    assert users[b"default"].describe() == "default on nopass ~* +@all"  # reset, as Redis
    told = {(rec[0], rec[3]) for rec in sent_records(node)}
    assert told == {(b"old", 1), (b"default", 0)}  # w and r were the same already
    assert cmd.ok("ACL", "SAVE") == b"OK" and host.saves == 1


def test_a_load_with_a_bad_line_changes_nothing_and_names_the_lines_not_the_rules():
    node, host = file_node(b"user w on >secret-pw\nuser w on\nuser x on +nosuch\nsomething\n")
    cmd = Cmd(node)
    error = cmd.error("ACL", "LOAD")
    assert error == ("ERR Duplicate user 'w' found on line 2. users.acl:3: Unknown command or "
                     "category name in ACL. users.acl:4 should start with user keyword.")
    assert list(node.state.config.users) == [b"default"]
    assert "secret-pw" not in error


def test_an_aclfile_round_trips_and_holds_hashes_only():
    node = make_node()
    cmd = Cmd(node)
    cmd.ok("ACL", "SETUSER", "w", "on", ">pw", "~orders:*", "+@consume", "quota-jobs=5")
    cmd.ok("ACL", "SETUSER", "spaced", "on", "~a b", "+@read")
    from disque.config.aclfile import render_acl_file
    text = render_acl_file(node.state.config.users)
    assert text.splitlines()[0] == b"user default on nopass ~* +@all"
    assert b"pw " not in text and PW_HASH in text
    again = parse_acl_file(text, "f")
    assert [u.describe() for u in again.values()] == [
        u.describe() for u in node.state.config.users.values()]
