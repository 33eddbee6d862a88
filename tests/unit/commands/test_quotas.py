"""Users' quotas (docs/rate-limits.md "Quotas per user"): the ACL rules,
and ADDJOB refused with -QUOTA while the user's pending jobs (added here,
not yet acked or deleted here) are at its quota."""

from __future__ import annotations

import pytest

from disque.cluster import messages as m
from disque.jobs.codec import to_bus
from disque.config.users import RuleError, User, user_with_rules
from tests.unit.commands.test_acl import client
from tests.unit.test_config import load_text
from tests.unit.helpers import PEER_ID, Cmd, add_peer, advance, deliver, make_node

PRODUCER = ("on", ">pw", "~*", "+@produce", "+@consume", "+@manage", "+@read")


def producer(node, *quotas: str, name: str = "p", n: int = 5) -> Cmd:
    admin = Cmd(node)
    assert admin.raw("ACL", "SETUSER", name, *PRODUCER, *quotas) == b"+OK\r\n"
    cmd = Cmd(node, client(n))
    assert cmd.raw("AUTH", name, "pw") == b"+OK\r\n"
    return cmd


def jobs_quota_error(name: str, pending: int, quota: int) -> str:
    return "QUOTA User %s has %d jobs pending on this node, its quota-jobs is %d" % (
        name, pending, quota)


# ----------------------------------------------------------------- rules

def test_quota_rules_round_trip_through_describe():
    user = user_with_rules(User(b"u"), [b"on", b"quota-jobs=100", b"QUOTA-BYTES=10mb"])
    assert (user.quota_jobs, user.quota_bytes) == (100, 10 * 1024 * 1024)
    line = user.describe()
    assert line.endswith(" quota-jobs=100 quota-bytes=10mb")
    again = user_with_rules(User(b"u"), [word.encode() for word in line.split()[1:]])
    assert (again.quota_jobs, again.quota_bytes) == (100, 10 * 1024 * 1024)
    cleared = user_with_rules(user, [b"quota-jobs=0", b"quota-bytes=0"])
    assert not cleared.has_quota() and "quota" not in cleared.describe()
    assert not user_with_rules(user, [b"reset"]).has_quota()


@pytest.mark.parametrize("rule, reason", [
    (b"quota-jobs=-1", "A quota must be a number from 0 (none) to 4611686018427387904"),
    (b"quota-jobs=1kb", "A quota must be a number from 0 (none) to 4611686018427387904"),
    (b"quota-jobs=", "A quota must be a number from 0 (none) to 4611686018427387904"),
    (b"quota-bytes=1.5mb", "A quota must be a number from 0 (none) to 4611686018427387904, "
                           "with an optional unit (kb, mb, gb)"),
    (b"quota-jobs", "A quota is one word: quota-jobs=<n>"),
    (b"quota-bytes", "A quota is one word: quota-bytes=<n>"),
])
def test_bad_quota_rules(rule, reason):
    with pytest.raises(RuleError) as info:
        user_with_rules(User(b"u"), [rule])
    assert str(info.value) == "Error in ACL SETUSER modifier '%s': %s" % (rule.decode(), reason)


def test_quotas_are_counted_only_while_some_user_has_one():
    node = make_node()
    admin = Cmd(node)
    assert not node.state.quotas.active
    admin.raw("ACL", "SETUSER", "p", *PRODUCER)
    assert not node.state.quotas.active
    admin.raw("ACL", "SETUSER", "p", "quota-bytes=1mb")
    assert node.state.quotas.active
    admin.raw("ACL", "SETUSER", "p", "quota-bytes=0")
    assert not node.state.quotas.active
    admin.raw("ACL", "SETUSER", "default", "quota-jobs=5")
    assert node.state.quotas.active
    admin.raw("ACL", "SETUSER", "q", "quota-jobs=5")
    admin.raw("ACL", "SETUSER", "default", "quota-jobs=0")
    assert node.state.quotas.active
    assert admin.ok("ACL", "DELUSER", "q") == 1
    assert not node.state.quotas.active
    from_config = make_node(config=load_text("user w on nopass quota-jobs=3\n"))
    assert from_config.state.quotas.active


def test_the_pipelined_run_path_counts_the_default_users_quota_too():
    node = make_node()
    Cmd(node).raw("ACL", "SETUSER", "default", "quota-jobs=2")
    assert not node.state.guarded  # the default user's rules alone do not guard the node
    cmd = Cmd(node)
    run = node.run_commands[b"ADDJOB"]
    out: list[bytes] = []
    node.call_run(cmd.client, run, [[b"ADDJOB", b"q", b"x", b"0"]] * 3, 0, out)
    assert [reply[:3] for reply in out] == [b"+D-", b"+D-", b"-QU"]


# --------------------------------------------------------------- ADDJOB

def test_addjob_beyond_quota_jobs_is_refused_until_a_job_is_acked():
    node = make_node()
    p = producer(node, "quota-jobs=3")
    ids = [p.addjob("q", "b%d" % i) for i in range(3)]
    assert p.error("ADDJOB", "q", "x", 0) == jobs_quota_error("p", 3, 3)
    assert p.ok("QLEN", "q") == 3
    (_, delivered, _), = p.ok("GETJOB", "FROM", "q")
    assert p.error("ADDJOB", "q", "x", 0) == jobs_quota_error("p", 3, 3)  # active counts
    assert p.ok("ACKJOB", delivered) == 1
    p.addjob("q", "after the ack")
    assert p.ok("DELJOB", ids[1]) == 1
    p.addjob("q", "after a deljob")
    assert p.ok("QPURGE", "q") == 3
    for i in range(3):
        p.addjob("q", "after the purge %d" % i)
    assert b"\r\naddjob_quota_refused:2\r\n" in Cmd(node).ok("INFO", "limits")


def test_quota_bytes_counts_the_bodies():
    node = make_node()
    p = producer(node, "quota-bytes=10")
    p.addjob("q", "123456")
    p.addjob("q", "1234")
    assert p.error("ADDJOB", "q", "1", 0) == (
        "QUOTA User p has 10 bytes pending on this node, 1 more would pass its quota-bytes of 10")
    (_, job_id, _), = p.ok("GETJOB", "FROM", "q")
    p.ok("FASTACK", job_id)
    p.addjob("q", "123456")


def test_each_user_has_its_own_account_and_others_are_not_counted():
    node = make_node()
    a = producer(node, "quota-jobs=1", name="a", n=5)
    b = producer(node, "quota-jobs=2", name="b", n=6)
    admin = Cmd(node)
    a.addjob("q", "a1")
    assert a.error("ADDJOB", "q", "a2", 0) == jobs_quota_error("a", 1, 1)
    b.addjob("q", "b1")
    b.addjob("q", "b2")
    for i in range(10):
        admin.addjob("q", "default %d" % i)  # the default user has no quota


def test_a_quota_on_the_default_user_applies_to_connections_that_never_authenticated():
    node = make_node()
    admin = Cmd(node)
    assert admin.raw("ACL", "SETUSER", "default", "quota-jobs=2") == b"+OK\r\n"
    anyone = Cmd(node, client(9))
    anyone.addjob("q", "1")
    admin.addjob("q", "2")
    assert anyone.error("ADDJOB", "q", "3", 0) == jobs_quota_error("default", 2, 2)


def test_expiry_releases_and_a_dedupid_retry_is_answered_with_its_job():
    node = make_node()
    p = producer(node, "quota-jobs=1")
    first = p.addjob("q", "x", "TTL", "10", "DEDUPID", "order-1")
    assert p.raw("ADDJOB", "q", "x", 0, "DEDUPID", "order-1") == b"+" + first + b"\r\n"
    assert p.error("ADDJOB", "q", "y", 0).startswith("QUOTA ")
    advance(node, 11_000, step=500)
    assert p.show(first) is None
    p.addjob("q", "y")


def test_a_job_waiting_for_its_replicas_counts_and_a_failed_addjob_releases_it():
    node = make_node()
    add_peer(node)
    p = producer(node, "quota-jobs=1")
    assert p.raw("ADDJOB", "q", "x", 100, "REPLICATE", "2") is None  # waits for the peer
    other = Cmd(node, client(8))
    assert other.raw("AUTH", "p", "pw") == b"+OK\r\n"
    assert other.error("ADDJOB", "q", "y", 0, "REPLICATE", "1").startswith("QUOTA ")
    advance(node, 200, step=10)  # NOREPL: the job is deleted
    assert p.client.sent and p.client.sent[0].startswith(b"-NOREPL")
    other.addjob("q", "y", "REPLICATE", "1")


def test_an_ack_heard_from_another_node_releases():
    node = make_node()
    add_peer(node)
    p = producer(node, "quota-jobs=1")
    job_id = p.addjob("q", "x", "REPLICATE", "2", "ASYNC")
    assert p.error("ADDJOB", "q", "y", 0, "REPLICATE", "1").startswith("QUOTA ")
    deliver(node, PEER_ID, {m.TYPE: m.SETACK, m.ID: job_id, m.MAY_HAVE: 2,
                            m.HOLDERS: [node.state.id, PEER_ID]})
    assert p.show(job_id)["state"] == b"acked"
    p.addjob("q", "y", "REPLICATE", "1")


def test_copies_received_from_other_nodes_are_not_counted():
    origin = make_node(node_id=PEER_ID)
    origin_cmd = Cmd(origin)
    job_id = origin_cmd.addjob("q", "from elsewhere", "REPLICATE", "1")
    job = origin.state.jobs[job_id]
    node = make_node()
    add_peer(node)
    p = producer(node, "quota-jobs=1")
    deliver(node, PEER_ID, {m.TYPE: m.REPLJOB, m.JOB: to_bus(job, origin.state.now), m.MFLAGS: 0})
    assert node.state.jobs.get(job_id) is not None
    p.addjob("q", "mine", "REPLICATE", "1")
