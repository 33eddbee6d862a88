"""QPURGE (docs/commands.md "Extensions"): the jobs queued here in a queue
go, with their copies on other nodes (DELJOB to their holders); jobs
being worked on stay; the deletions are journaled; ACL as DELJOB."""

from __future__ import annotations

from disque.cluster import messages as m
from disque.jobs.journal import REASON_DELETED
from tests.unit.cluster.wiring import RecordingJournal
from tests.unit.commands.test_acl import client
from tests.unit.helpers import PEER_ID, Cmd, add_peer, expected_memory, make_node


def test_qpurge_deletes_the_queued_jobs_and_leaves_active_ones(cmd, node):
    queued = [cmd.addjob("q", "b%d" % i) for i in range(5)]
    other = cmd.addjob("other", "x")
    (_, active, _), = cmd.ok("GETJOB", "FROM", "q")
    assert active == queued[0]
    assert cmd.raw("QPURGE", "q") == b":4\r\n"
    assert cmd.ok("QLEN", "q") == 0
    assert [cmd.show(job_id) for job_id in queued[1:]] == [None] * 4
    assert cmd.show(active)["state"] == b"active"
    assert cmd.ok("QLEN", "other") == 1 and cmd.show(other) is not None
    assert node.state.used_memory == expected_memory(node)
    # The active job comes back after its retry like any other, and is purgeable then.
    assert cmd.ok("ENQUEUE", active) == 1
    assert cmd.ok("QPURGE", "q") == 1
    assert cmd.ok("QPURGE", "q") == 0
    assert not [job for job in node.state.jobs.values() if job.queue == b"q"]


def test_qpurge_of_an_unknown_queue_and_its_table_entry(cmd):
    assert cmd.raw("QPURGE", "nosuch") == b":0\r\n"
    assert cmd.ok("QLEN", "nosuch") == 0
    assert cmd.error("QPURGE") == "ERR wrong number of arguments for 'qpurge' command"
    assert cmd.error("QPURGE", "a", "b") == "ERR wrong number of arguments for 'qpurge' command"
    entry = cmd.ok("COMMAND", "INFO", "qpurge")[0]
    assert entry[:3] == [b"qpurge", 2, [b"write"]]


def test_qpurge_asks_the_other_holders_to_delete_their_copies():
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    replicated = [cmd.addjob("q", "r%d" % i, "REPLICATE", "2", "ASYNC") for i in range(3)]
    local = cmd.addjob("q", "l", "REPLICATE", "1")
    node.state.outbox.transport.clear()
    assert cmd.ok("QPURGE", "q") == 4
    deljobs = [(dest, msg[m.ID]) for dest, msg in node.state.outbox.transport.of_type(m.DELJOB)]
    assert sorted(deljobs) == sorted((PEER_ID, job_id) for job_id in replicated)
    assert local not in [job_id for _, job_id in deljobs]


def test_qpurge_journals_each_deletion():
    node = make_node()
    journal = RecordingJournal()
    node.state.set_journal(journal)
    cmd = Cmd(node)
    ids = [cmd.addjob("q", "b%d" % i) for i in range(3)]
    journal.events.clear()
    assert cmd.ok("QPURGE", "q") == 3
    assert sorted(journal.events) == sorted(("removed", job_id, REASON_DELETED) for job_id in ids)


def test_qpurge_keeps_the_queue_order_for_what_is_added_next(cmd):
    for i in range(3):
        cmd.addjob("q", "old%d" % i, "PRIORITY", i * 3)
    assert cmd.ok("QPURGE", "q") == 3
    fresh = [cmd.addjob("q", "new%d" % i) for i in range(2)]
    assert [entry[1] for entry in cmd.ok("QPEEK", "q", 10)] == fresh


def test_qpurge_is_in_manage_and_checks_the_queue_pattern():
    node = make_node()
    admin = Cmd(node)
    admin.raw("ACL", "SETUSER", "ops", "on", ">pw", "~orders:*", "+@manage")
    admin.raw("ACL", "SETUSER", "worker", "on", ">pw", "~orders:*", "+@consume", "+@produce")
    admin.addjob("orders:eu", "a")
    admin.addjob("mail", "b")
    ops = Cmd(node, client(3))
    assert ops.raw("AUTH", "ops", "pw") == b"+OK\r\n"
    assert ops.error("QPURGE", "mail") == (
        "NOPERM User ops has no permissions to access the queue 'mail'")
    assert ops.ok("QPURGE", "orders:eu") == 1
    worker = Cmd(node, client(4))
    assert worker.raw("AUTH", "worker", "pw") == b"+OK\r\n"
    assert worker.error("QPURGE", "orders:eu") == (
        "NOPERM User worker has no permissions to run the 'qpurge' command")
    assert admin.ok("QLEN", "mail") == 1
    assert b"qpurge" in admin.ok("ACL", "CAT", "manage")
