"""ADDJOBS (docs/commands.md "Bulk add"): many jobs of one queue with the
options they share, each under ADDJOB's rules: the reply array, per-job
DEDUPIDs, refusals job by job, synchronous replication waiting for every
job, and access control as ADDJOB's."""

from __future__ import annotations

import hiredis
import pytest

from disque.cluster import messages as m
from disque.commands.addjob import MAX_BULK_JOBS
from disque.jobs.job import job_headers
from tests.unit.helpers import PEER_ID, Cmd, add_peer, advance, deliver, make_node

SYNTAX = "ERR syntax error"
NOREPL_TIMEOUT = "NOREPL Timeout reached before replicating to the requested number of nodes"
NO_JOBS = ("ERR ADDJOBS needs BODIES body [body ...] or DEDUPIDS token body [token body ...] "
           "after its options")
OTHER_PEER = b"0ddba11" + b"2" * 33


@pytest.fixture
def cmd():
    return Cmd(make_node())


def _ids(reply) -> list[bytes]:
    assert all(isinstance(r, bytes) and r.startswith(b"D-") for r in reply), reply
    return reply


def test_bodies_become_jobs_in_order(cmd):
    ids = _ids(cmd("ADDJOBS", "q", 0, "BODIES", "a", "b\r\nc", ""))
    assert len(set(ids)) == 3
    assert [cmd.node.state.jobs.by_id[i].body for i in ids] == [b"a", b"b\r\nc", b""]
    taken = cmd.ok("GETJOB", "COUNT", 10, "FROM", "q")
    assert [entry[1] for entry in taken] == ids


def test_the_reply_is_an_array_of_addjob_replies(cmd):
    raw = cmd.raw("ADDJOBS", "q", 0, "BODIES", "a", "b")
    assert raw.startswith(b"*2\r\n+D-") and raw.count(b"\r\n") == 3


def test_every_job_gets_the_shared_options(cmd):
    ids = _ids(cmd("ADDJOBS", "q", 0, "RETRY", 9, "TTL", 100, "PRIORITY", 8, "HEADER", "k", "v",
                   "MAXDELIVER", 2, "BODIES", "a", "b"))
    for job_id in ids:
        job = cmd.node.state.jobs.by_id[job_id]
        assert (job.retry, job.priority, job.ext.maxdeliver) == (9, 8, 2)
        assert job_headers(job) == (b"k", b"v")
    assert cmd.node.state.jobs.by_id[ids[0]].ext is not cmd.node.state.jobs.by_id[ids[1]].ext


def test_dedupids_give_each_job_its_token(cmd):
    ids = _ids(cmd("ADDJOBS", "q", 0, "DEDUPIDS", "t1", "a", "t2", "b", "t1", "c"))
    assert ids[0] == ids[2] != ids[1]
    assert [cmd.node.state.jobs.by_id[i].ext for i in ids[:2]] == [b"t1", b"t2"]  # tokens alone
    assert cmd("ADDJOBS", "q", 0, "dedupids", "t2", "x", "t3", "y")[0] == ids[1]
    assert cmd.addjob("q", "z", "DEDUPID", "t1") == ids[0]
    assert len(cmd.node.state.jobs.by_id) == 3


def test_dedupids_with_other_extensions(cmd):
    ids = _ids(cmd("ADDJOBS", "q", 0, "HEADER", "k", "v", "DEDUPIDS", "t1", "a", "t2", "b"))
    assert [cmd.node.state.jobs.by_id[i].ext.dedupid for i in ids] == [b"t1", b"t2"]
    assert cmd.addjob("q", "z", "DEDUPID", "t2") == ids[1]


@pytest.mark.parametrize("words, error", [
    (["RETRY", 5], NO_JOBS),
    (["RETRY", 5, "BODIES"], NO_JOBS),
    (["RETRY", "BODIES", "a"], NO_JOBS),
    (["DEDUPIDS", "t"], SYNTAX),
    (["DEDUPIDS", "t", "a", "u"], SYNTAX),
    (["DEDUPIDS", "", "a"], "ERR DEDUPID must be 1 to 256 bytes"),
    (["DEDUPIDS", "t", "a", "x" * 257, "b"], "ERR DEDUPID must be 1 to 256 bytes"),
    (["DEDUPID", "t", "BODIES", "a"],
     "ERR ADDJOBS gives each job its own DEDUPID: use DEDUPIDS token body [token body ...]"),
    (["RETRY", "-1", "BODIES", "a"], "ERR RETRY time must be a non negative number"),
    (["HEADER", "a", "BODIES", "x"], NO_JOBS),  # BODIES is the header's value
    (["NOSUCH", 1, "BODIES", "a"], SYNTAX),
    (["HEADER", "a", "1", "HEADER", "a", "2", "BODIES", "x"], "ERR HEADER name given twice"),
])
def test_errors_in_the_options_add_nothing(cmd, words, error):
    assert cmd.error("ADDJOBS", "q", 0, *words) == error
    assert not cmd.node.state.jobs.by_id


@pytest.mark.parametrize("timeout, error", [
    ("x", "ERR timeout is not an integer or out of range"), ("-5", "ERR timeout is negative")])
def test_a_bad_timeout_adds_nothing(cmd, timeout, error):
    assert cmd.error("ADDJOBS", "q", timeout, "BODIES", "a") == error
    assert not cmd.node.state.jobs.by_id


@pytest.mark.parametrize("timeout, words, error", [
    ("x", ["RETRY", "-1"], "ERR RETRY time must be a non negative number"),
    ("-5", ["DEDUPID", "t"],
     "ERR ADDJOBS gives each job its own DEDUPID: use DEDUPIDS token body [token body ...]"),
])
def test_the_options_are_checked_before_the_timeout(cmd, timeout, words, error):
    assert cmd.error("ADDJOBS", "q", timeout, *words, "BODIES", "a") == error


def test_too_many_jobs(cmd):
    bodies = ["b"] * (MAX_BULK_JOBS + 1)
    assert cmd.error("ADDJOBS", "q", 0, "BODIES", *bodies) == (
        "ERR ADDJOBS adds at most 10000 jobs per call")
    assert len(cmd.ok("ADDJOBS", "q", 0, "BODIES", *bodies[1:])) == MAX_BULK_JOBS


def test_arity(cmd):
    arity = "ERR wrong number of arguments for 'addjobs' command"
    assert cmd.error("ADDJOBS", "q", 0, "BODIES") == arity
    assert cmd.error("ADDJOBS", "q", 0, "RETRY", 5, "BODIES") == NO_JOBS


def test_option_words_are_found_as_addjob_reads_them(cmd):
    """A body or a value may be spelt BODIES: the options' grammar decides."""
    ids = _ids(cmd("ADDJOBS", "q", 0, "HEADER", "BODIES", "DEDUPIDS", "DEADLETTER", "BODIES",
                   "ASYNC", "REPLICATE", 1, "BODIES", "BODIES", "DEDUPIDS"))
    jobs = [cmd.node.state.jobs.by_id[i] for i in ids]
    assert [j.body for j in jobs] == [b"BODIES", b"DEDUPIDS"]
    assert jobs[0].ext.deadletter == b"BODIES" and job_headers(jobs[0]) == (b"BODIES",
                                                                          b"DEDUPIDS")


def test_maxlen_refuses_the_jobs_past_it(cmd):
    reply = cmd("ADDJOBS", "q", 0, "MAXLEN", 2, "BODIES", "a", "b", "c", "d")
    assert [isinstance(r, hiredis.ReplyError) for r in reply] == [False, False, True, True]
    assert str(reply[2]) == "MAXLEN Queue is already longer than the specified MAXLEN count"
    assert cmd.ok("QLEN", "q") == 2


def test_a_paused_queue_refuses_each_job(cmd):
    cmd.ok("PAUSE", "q", "in")
    reply = cmd("ADDJOBS", "q", 0, "BODIES", "a", "b")
    assert [str(r) for r in reply] == ["PAUSED Queue paused in input, try later"] * 2


def test_refused_jobs_with_a_known_token_answer_their_job(cmd):
    known = cmd.addjob("q", "a", "DEDUPID", "t")
    cmd.ok("PAUSE", "q", "in")
    reply = cmd("ADDJOBS", "q", 0, "DEDUPIDS", "t", "a", "u", "b")
    assert reply[0] == known and str(reply[1]).startswith("PAUSED")


def test_memory_past_the_eviction_threshold_refuses_the_rest(cmd):
    memory = cmd.node.state.memory
    cmd.addjob("q", "x" * 100)
    before = memory.used
    cmd.addjob("q", "x" * 100)
    per_job = memory.used - before
    memory.evict_threshold = float(memory.used + per_job)  # room for one more job
    reply = cmd("ADDJOBS", "q", 0, "BODIES", *["x" * 100] * 3)
    assert isinstance(reply[0], bytes) and isinstance(reply[1], bytes)  # the last fitting
    assert str(reply[2]) == "OOM command not allowed when used memory > 'maxmemory'."
    assert cmd.ok("QLEN", "q") == 4


# ------------------------------------------------------ synchronous replication

def _cluster(peers=(PEER_ID,)):
    node = make_node()
    for peer in peers:
        add_peer(node, peer)
    return node, Cmd(node)


def test_sync_replication_answers_once_every_job_has_its_copies():
    node, cmd = _cluster()
    assert cmd.raw("ADDJOBS", "q", 5000, "REPLICATE", 2, "BODIES", "a", "b", "c") is None
    waiting = list(node.state.blocked.producers)
    assert len(waiting) == 3 and len(node.state.outbox.transport.of_type(m.REPLJOB)) == 3
    for job_id in waiting[:2]:
        deliver(node, PEER_ID, m.job_message(m.GOTJOB, job_id))
    assert cmd.client.sent == [] and cmd.client.blocked is not None
    assert cmd.ok("QLEN", "q") == 2  # each queued as its copies confirm
    deliver(node, PEER_ID, m.job_message(m.GOTJOB, waiting[2]))
    assert cmd.sent() == [waiting] and cmd.client.blocked is None
    assert not node.state.blocked.producers and cmd.ok("QLEN", "q") == 3


def test_a_timeout_answers_the_jobs_left_with_norepl_and_deletes_them():
    node, cmd = _cluster()
    assert cmd.raw("ADDJOBS", "q", 1000, "REPLICATE", 2, "BODIES", "a", "b") is None
    first, second = node.state.blocked.producers
    deliver(node, PEER_ID, m.job_message(m.GOTJOB, first))
    advance(node, 1001)
    ((done, failed),) = cmd.sent()
    assert done == first and str(failed) == NOREPL_TIMEOUT
    assert second not in node.state.jobs.by_id and first in node.state.jobs.by_id
    deletions = [msg[m.ID] for _, msg in node.state.outbox.transport.of_type(m.DELJOB)]
    assert deletions == [second]  # the partial copy is asked to go
    assert node.state.replication.wait_failures == 1


def test_a_producer_gone_takes_its_waiting_jobs():
    node, cmd = _cluster()
    assert cmd.raw("ADDJOBS", "q", 0, "REPLICATE", 2, "DEDUPIDS", "t1", "a", "t2", "b") is None
    node.client_gone(cmd.client)
    assert not node.state.jobs.by_id and not node.state.blocked.producers
    assert Cmd(node).raw("ADDJOBS", "q", 0, "REPLICATE", 2, "DEDUPIDS", "t1", "a") is None


def test_a_mixed_batch_answers_the_jobs_it_did_not_wait_for_in_place():
    node, cmd = _cluster()
    known = cmd.addjob("q", "x", "REPLICATE", 1, "DEDUPID", "t1")
    assert cmd.raw("ADDJOBS", "q", 0, "REPLICATE", 2, "DEDUPIDS", "t1", "a", "t2", "b") is None
    (waiting,) = node.state.blocked.producers
    deliver(node, PEER_ID, m.job_message(m.GOTJOB, waiting))
    assert cmd.sent() == [[known, waiting]]


def test_the_retry_cron_adds_a_target_for_every_waiting_job():
    node, cmd = _cluster()
    add_peer(node, OTHER_PEER, link=False)  # reachable, but no link to send a copy on yet
    assert cmd.raw("ADDJOBS", "q", 0, "REPLICATE", 3, "BODIES", "a", "b") is None
    waiting = sorted(node.state.blocked.producers)
    bus = node.state.outbox.transport
    assert sorted(dest for dest, _ in bus.of_type(m.REPLJOB)) == [PEER_ID, PEER_ID]
    bus.clear()
    node.state.membership.nodes[OTHER_PEER].link = True
    advance(node, 100, cron=True)
    copies = bus.of_type(m.REPLJOB)
    assert sorted(msg[m.JOB][0] for dest, msg in copies if dest == OTHER_PEER) == waiting


def test_leaving_answers_the_waiting_jobs_with_leaving():
    node, cmd = _cluster()
    assert cmd.raw("ADDJOBS", "q", 0, "REPLICATE", 2, "BODIES", "a") is None
    assert Cmd(node).ok("CLUSTER", "LEAVING", "yes")
    advance(node, 100, cron=True)
    ((reply,),) = cmd.sent()
    assert str(reply).startswith("LEAVING")
    assert not node.state.jobs.by_id


def test_async_does_not_wait():
    node, cmd = _cluster()
    ids = _ids(cmd("ADDJOBS", "q", 0, "REPLICATE", 2, "ASYNC", "BODIES", "a", "b"))
    assert not node.state.blocked.producers and cmd.ok("QLEN", "q") == 2
    assert {msg[m.JOB][0] for _, msg in node.state.outbox.transport.of_type(m.REPLJOB)} == set(ids)


# ---------------------------------------------------------------- access

def _producer_node():
    node = make_node()
    assert Cmd(node).raw("ACL", "SETUSER", "producer", "on", ">pw", "~orders:*",
                         "+@produce") == b"+OK\r\n"
    cmd = Cmd(node, type(Cmd(node).client)(2, "127.0.0.1:40000"))
    assert cmd.raw("AUTH", "producer", "pw") == b"+OK\r\n"
    return node, cmd


def test_access_is_addjobs_own_and_its_queues():
    node, cmd = _producer_node()
    assert _ids(cmd("ADDJOBS", "orders:a", 0, "BODIES", "x"))
    assert cmd.error("ADDJOBS", "mail", 0, "BODIES", "x") == (
        "NOPERM User producer has no permissions to access the queue 'mail'")
    assert cmd.error("ADDJOBS", "orders:a", 0, "DEADLETTER", "elsewhere", "BODIES", "x") == (
        "NOPERM User producer has no permissions to access the queue 'elsewhere'")
    # A value spelt BODIES does not end the options early for the check.
    assert cmd.error("ADDJOBS", "orders:a", 0, "DEADLETTER", "BODIES", "DEADLETTER",
                     "elsewhere", "BODIES", "x").startswith("NOPERM")
    # Bodies are not options: a body named DEADLETTER names no queue.
    assert _ids(cmd("ADDJOBS", "orders:a", 0, "BODIES", "DEADLETTER", "elsewhere"))
    Cmd(node).ok("ACL", "SETUSER", "producer", "-addjobs")
    assert cmd.error("ADDJOBS", "orders:a", 0, "BODIES", "x") == (
        "NOPERM User producer has no permissions to run the 'addjobs' command")


def test_a_users_quota_refuses_the_jobs_past_it():
    node = make_node()
    assert Cmd(node).raw("ACL", "SETUSER", "producer", "on", ">pw", "~*", "+@produce",
                         "quota-jobs=2") == b"+OK\r\n"
    cmd = Cmd(node, type(Cmd(node).client)(2, "127.0.0.1:40000"))
    assert cmd.raw("AUTH", "producer", "pw") == b"+OK\r\n"
    reply = cmd("ADDJOBS", "q", 0, "BODIES", "a", "b", "c")
    assert [isinstance(r, bytes) for r in reply] == [True, True, False]
    assert str(reply[2]).startswith("QUOTA User producer has 2 jobs pending")
    assert Cmd(node).ok("QLEN", "q") == 2
