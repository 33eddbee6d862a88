"""ACKJOB, FASTACK, DELJOB, NACK, ENQUEUE, DEQUEUE, WORKING and SHOW
(spec: commands.md §1, jobs-and-ids.md §3, §9, cluster-bus.md §6.6)."""

from __future__ import annotations

import pytest

from disque.context.clients import ClientState
from disque.cluster import messages as m
from disque.cluster.membership import LEAVING
from tests.unit.helpers import (
    NODE_ID,
    PEER_ID,
    START_MS,
    Cmd,
    add_peer,
    advance,
    deliver,
    info_field,
    make_node,
)

BADID = b"-BADID Invalid Job ID format.\r\n"
NOJOB = b"-NOJOB Job not known in the context of this node.\r\n"
TOOLATE = (b"-TOOLATE Half of job TTL already elapsed, you are no longer allowed to postpone "
           b"the next delivery.\r\n")
UNKNOWN_ODD = b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAB-0001"
UNKNOWN_EVEN = b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAC-0002"
MULTI_ID_COMMANDS = ["ACKJOB", "FASTACK", "DELJOB", "NACK", "ENQUEUE", "DEQUEUE"]


@pytest.fixture
def cluster():
    """A node that knows one linked peer (messages land in node.outbox.transport)."""
    node = make_node()
    add_peer(node)
    return node


def replicated_job(node, *options) -> bytes:
    """A job held here and (per nodes-delivered) on the peer."""
    return Cmd(node).addjob("q", "body", "REPLICATE", "2", "ASYNC", *options)


# ------------------------------------------------------------ shared rules

@pytest.mark.parametrize("name", MULTI_ID_COMMANDS)
def test_no_ids_is_legal(cmd, name):
    assert cmd.raw(name) == b":0\r\n"


@pytest.mark.parametrize("name", MULTI_ID_COMMANDS)
@pytest.mark.parametrize("bad", [b"badid", b"D-357e5793-zTdDA906+stSktxhIaAXV2i3-05a", b"",
                                 b"X-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001"])
def test_all_ids_validated_before_any_action(node, cmd, name, bad):
    job_id = cmd.addjob("q", "x")
    cmd.ok("GETJOB", "FROM", "q")  # active, so every command could act on it
    assert cmd.raw(name, job_id, bad) == BADID
    assert cmd.raw(name, bad, job_id) == BADID
    assert cmd.show(job_id)["state"] == b"active"


@pytest.mark.parametrize("name", ["WORKING", "SHOW"])
def test_single_id_commands(cmd, name):
    assert cmd.raw(name, "badid") == BADID
    arity = b"-ERR wrong number of arguments for '%s' command\r\n" % name.lower().encode()
    assert cmd.raw(name) == arity


def test_ids_are_case_sensitive(cmd):
    job_id = cmd.addjob("q", "x")
    other = job_id[:11] + job_id[11:35].swapcase() + job_id[35:]
    assert cmd.show(other) is None
    assert cmd.ok("DELJOB", other) == 0


# ---------------------------------------------------------------- ACKJOB

def test_ackjob_single_node_deletes_at_once(node, cmd):
    job_id = cmd.addjob("q", "x")
    assert cmd.raw("ACKJOB", job_id) == b":1\r\n"
    assert cmd.raw("SHOW", job_id) == b"$-1\r\n"
    assert cmd.ok("QLEN", "q") == 0
    assert cmd.raw("ACKJOB", job_id) == b":0\r\n"
    assert cmd.raw("ACKJOB", UNKNOWN_ODD) == b":0\r\n"  # lone node: no dummy ACK
    assert info_field(node, "registered_jobs") == "0"


def test_ackjob_counts_known_jobs(cmd):
    ids = [cmd.addjob("q", str(i)) for i in range(3)]
    assert cmd.ok("ACKJOB", ids[0], UNKNOWN_ODD, ids[1], ids[1]) == 2
    assert cmd.ok("ACKJOB", *ids) == 1


def test_ackjob_replicated_job_stays_acked_for_gc(cluster):
    cmd = Cmd(cluster)
    job_id = replicated_job(cluster)
    cluster.state.outbox.transport.clear()
    assert cmd.ok("ACKJOB", job_id) == 1
    job = cmd.show(job_id)
    assert job["state"] == b"acked"
    assert job["nodes-confirmed"] == [NODE_ID]
    assert cmd.ok("QLEN", "q") == 0
    setacks = cluster.state.outbox.transport.of_type(m.SETACK)
    assert [(d, msg[m.ID], msg[m.MAY_HAVE]) for d, msg in setacks] == [(PEER_ID, job_id, 2)]
    # Already acked: not counted, but a GC attempt is forced at once.
    assert cmd.ok("ACKJOB", job_id) == 0
    assert len(cluster.state.outbox.transport.of_type(m.SETACK)) == 2


def test_gotack_from_the_last_holder_completes_gc(cluster):
    cmd = Cmd(cluster)
    job_id = replicated_job(cluster)
    cmd.ok("ACKJOB", job_id)
    deliver(cluster, PEER_ID, {m.TYPE: m.GOTACK, m.ID: job_id, m.KNOWN: 1})
    assert cmd.show(job_id) is None
    assert [d for d, _ in cluster.state.outbox.transport.of_type(m.DELJOB)] == [PEER_ID]


def test_dummy_ack_for_unknown_at_least_once_id(cluster):
    cmd = Cmd(cluster)
    assert cmd.raw("ACKJOB", UNKNOWN_ODD) == b":0\r\n"
    dummy = cmd.show(UNKNOWN_ODD)
    assert dummy == {
        "id": UNKNOWN_ODD, "queue": None, "state": b"acked", "repl": 0, "ttl": 60, "ctime": 0,
        "delay": 0, "retry": 0, "nacks": 0, "additional-deliveries": 0, "nodes-delivered": [],
        "nodes-confirmed": [NODE_ID], "next-requeue-within": None,
        "next-awake-within": dummy["next-awake-within"], "body": None,
    }
    assert dummy["next-awake-within"] is not None
    setacks = cluster.state.outbox.transport.of_type(m.SETACK)
    assert [(d, msg[m.ID], msg[m.MAY_HAVE]) for d, msg in setacks] == [(PEER_ID, UNKNOWN_ODD, 0)]
    assert info_field(cluster, "registered_jobs") == "1"
    assert cmd.ok("JSCAN", "BUSYLOOP")[1] == []  # dummies are never listed


def test_dummy_ack_ttl_comes_from_the_id(cluster):
    cmd = Cmd(cluster)
    job_id = b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAB-05a1"
    cmd.ok("ACKJOB", job_id)
    assert cmd.show(job_id)["ttl"] == 0x5A1 * 60


def test_no_dummy_ack_for_at_most_once_ids(cluster):
    cmd = Cmd(cluster)
    assert cmd.ok("ACKJOB", UNKNOWN_EVEN) == 0
    assert cmd.show(UNKNOWN_EVEN) is None
    assert cluster.state.outbox.transport.of_type(m.SETACK) == []


def test_no_dummy_ack_while_leaving(cluster):
    cluster.state.membership.myself.flags |= LEAVING
    cmd = Cmd(cluster)
    assert cmd.ok("ACKJOB", UNKNOWN_ODD) == 0
    assert cmd.show(UNKNOWN_ODD) is None
    assert cluster.state.outbox.transport.of_type(m.SETACK) == []


def test_dummy_ack_dropped_when_a_holder_knows_the_job(cluster):
    cmd = Cmd(cluster)
    cmd.ok("ACKJOB", UNKNOWN_ODD)
    deliver(cluster, PEER_ID, {m.TYPE: m.GOTACK, m.ID: UNKNOWN_ODD, m.KNOWN: 1})
    assert cmd.show(UNKNOWN_ODD) is None


def test_dummy_ack_dropped_when_nobody_knows_the_job(cluster):
    cmd = Cmd(cluster)
    cmd.ok("ACKJOB", UNKNOWN_ODD)
    deliver(cluster, PEER_ID, {m.TYPE: m.GOTACK, m.ID: UNKNOWN_ODD, m.KNOWN: 0})
    assert cmd.show(UNKNOWN_ODD) is None


def test_ackjob_of_a_job_waiting_for_replication_answers_the_producer(cluster):
    producer = Cmd(cluster, ClientState(7))
    assert producer.raw("ADDJOB", "q", "b", "0") is None
    job_id = next(iter(cluster.state.jobs))
    assert Cmd(cluster).ok("ACKJOB", job_id) == 1
    assert producer.client.sent == [b"+" + job_id + b"\r\n"]
    assert Cmd(cluster).show(job_id)["state"] == b"acked"


# --------------------------------------------------------------- FASTACK

def test_fastack(cluster):
    cmd = Cmd(cluster)
    job_id = replicated_job(cluster)
    local = cmd.addjob("q", "x", "RETRY", "0", "REPLICATE", "1")
    cluster.state.outbox.transport.clear()
    assert cmd.raw("FASTACK", job_id, local, UNKNOWN_ODD) == b":2\r\n"
    assert cmd.show(job_id) is None and cmd.show(local) is None
    deljobs = [(d, msg[m.ID]) for d, msg in cluster.state.outbox.transport.of_type(m.DELJOB)]
    # Known: to its holders; unknown: to every node with a link.
    assert deljobs == [(PEER_ID, job_id), (PEER_ID, UNKNOWN_ODD)]
    assert cmd.ok("QLEN", "q") == 0


def test_fastack_counts_acked_jobs_too(cluster):
    cmd = Cmd(cluster)
    job_id = replicated_job(cluster)
    cmd.ok("ACKJOB", job_id)
    assert cmd.ok("FASTACK", job_id) == 1
    assert not cluster.state.jobs


def test_fastack_single_node(cmd):
    a = cmd.addjob("q", "a")
    b = cmd.addjob("q", "b", "RETRY", "0")
    assert cmd.ok("FASTACK", b, UNKNOWN_ODD) == 1
    assert cmd.ok("FASTACK", a, a) == 1


# ---------------------------------------------------------------- DELJOB

def test_deljob_is_local_only(cluster):
    cmd = Cmd(cluster)
    job_id = replicated_job(cluster)
    cluster.state.outbox.transport.clear()
    assert cmd.ok("DELJOB", job_id, job_id, UNKNOWN_ODD) == 1
    assert cmd.ok("DELJOB", job_id) == 0
    assert cluster.state.outbox.transport == []
    assert cmd.ok("QLEN", "q") == 0


def test_deljob_of_a_waiting_job_fails_its_producer(cluster):
    producer = Cmd(cluster, ClientState(7))
    assert producer.raw("ADDJOB", "q", "b", "0") is None
    job_id = next(iter(cluster.state.jobs))
    assert Cmd(cluster).ok("DELJOB", job_id) == 1
    assert producer.client.sent == [
        b"-NOREPL job removed (expired?) before the requested replication level was achieved\r\n"]


# ------------------------------------------------------------ NACK/ENQUEUE

def test_nack_requeues_an_active_job_and_counts(node, cmd):
    job_id = cmd.addjob("q", "body")
    cmd.ok("GETJOB", "FROM", "q")
    assert cmd.raw("NACK", job_id) == b":1\r\n"
    job = cmd.show(job_id)
    assert job["state"] == b"queued" and job["nacks"] == 1
    assert job["additional-deliveries"] == 0
    assert cmd.raw("NACK", job_id) == b":0\r\n"  # queued, not active
    assert cmd.raw("NACK", UNKNOWN_ODD) == b":0\r\n"


def test_nack_broadcasts_queued_with_incr_nacks(cluster):
    cmd = Cmd(cluster)
    job_id = replicated_job(cluster)
    cmd.ok("GETJOB", "FROM", "q")
    cluster.state.outbox.transport.clear()
    cmd.ok("NACK", job_id)
    queued = cluster.state.outbox.transport.of_type(m.QUEUED)
    assert [(d, msg[m.ID], msg[m.MFLAGS]) for d, msg in queued] == [
        (PEER_ID, job_id, m.MFLAG_INCR_NACKS)]


def test_nack_requeues_at_the_front(cmd):
    first = cmd.addjob("q", "1")
    second = cmd.addjob("q", "2")
    cmd.ok("GETJOB", "FROM", "q")
    cmd.ok("NACK", first)
    assert cmd.ok("QPEEK", "q", 2) == [[b"q", first, b"1"], [b"q", second, b"2"]]


def test_enqueue_counts_additional_deliveries(cluster):
    cmd = Cmd(cluster)
    job_id = replicated_job(cluster)
    cmd.ok("GETJOB", "FROM", "q")
    cluster.state.outbox.transport.clear()
    assert cmd.ok("ENQUEUE", job_id) == 1
    job = cmd.show(job_id)
    assert (job["nacks"], job["additional-deliveries"]) == (0, 1)
    queued = cluster.state.outbox.transport.of_type(m.QUEUED)
    assert [(d, msg[m.MFLAGS]) for d, msg in queued] == [(PEER_ID, m.MFLAG_INCR_DELIV)]
    assert cmd.ok("ENQUEUE", job_id) == 0  # already queued


def test_first_queueing_of_a_delayed_job_is_silent(cluster):
    cmd = Cmd(cluster)
    job_id = replicated_job(cluster, "DELAY", "100")
    cluster.state.outbox.transport.clear()
    assert cmd.ok("ENQUEUE", job_id) == 1
    job = cmd.show(job_id)
    assert (job["nacks"], job["additional-deliveries"]) == (0, 0)
    assert cluster.state.outbox.transport.of_type(m.QUEUED) == []
    cmd.ok("GETJOB", "FROM", "q")
    assert cmd.ok("ENQUEUE", job_id) == 1
    assert cmd.show(job_id)["additional-deliveries"] == 1


def test_enqueue_sets_a_new_requeue_time(node, cmd):
    job_id = cmd.addjob("q", "x", "RETRY", "10")
    cmd.ok("GETJOB", "FROM", "q")
    node.state.clock.advance(4000)
    cmd.ok("ENQUEUE", job_id)
    job = cmd.show(job_id)
    assert 10_000 - 250 <= job["next-requeue-within"] <= 10_000 + 249


def test_retry_zero_job_cannot_be_requeued_once_delivered(cmd):
    job_id = cmd.addjob("q", "body2", "RETRY", "0")
    cmd.ok("GETJOB", "FROM", "q")
    assert cmd.raw("ENQUEUE", job_id) == b":0\r\n"
    assert cmd.raw("NACK", job_id) == b":0\r\n"
    assert cmd.show(job_id)["state"] == b"active"


def test_retry_zero_delayed_job_can_be_enqueued_once(cmd):
    job_id = cmd.addjob("q", "x", "RETRY", "0", "DELAY", "100")
    assert cmd.ok("ENQUEUE", job_id) == 1
    assert cmd.show(job_id)["next-requeue-within"] is None
    cmd.ok("DEQUEUE", job_id)
    assert cmd.ok("ENQUEUE", job_id) == 0  # qtime is now 0: never again


def test_enqueue_and_nack_ignore_input_pause(cmd):
    a = cmd.addjob("q", "a")
    b = cmd.addjob("q", "b")
    cmd.ok("GETJOB", "COUNT", "2", "FROM", "q")
    cmd.ok("PAUSE", "q", "in")
    assert cmd.ok("ENQUEUE", a) == 1
    assert cmd.ok("NACK", b) == 1
    assert cmd.ok("QLEN", "q") == 2


def test_acked_jobs_are_not_requeued(cluster):
    cmd = Cmd(cluster)
    job_id = replicated_job(cluster)
    cmd.ok("ACKJOB", job_id)
    assert cmd.ok("ENQUEUE", job_id) == 0
    assert cmd.ok("NACK", job_id) == 0
    assert cmd.ok("DEQUEUE", job_id) == 0


def test_enqueue_wakes_a_blocked_consumer(node, cmd):
    job_id = cmd.addjob("q", "x")
    cmd.ok("GETJOB", "FROM", "q")
    consumer = Cmd(node, ClientState(3))
    assert consumer.raw("GETJOB", "FROM", "q") is None
    cmd.ok("ENQUEUE", job_id)
    assert consumer.sent() == [[[b"q", job_id, b"x"]]]


# --------------------------------------------------------------- DEQUEUE

def test_dequeue(cmd):
    job_id = cmd.addjob("q", "x")
    other = cmd.addjob("q", "y")
    assert cmd.raw("DEQUEUE", job_id, UNKNOWN_ODD, job_id) == b":1\r\n"
    assert cmd.show(job_id)["state"] == b"active"
    assert cmd.ok("QLEN", "q") == 1
    stat = cmd.ok("QSTAT", "q")
    assert dict(zip(stat[::2], stat[1::2]))[b"jobs-out"] == 0
    assert cmd.ok("DEQUEUE", job_id, other) == 1
    assert cmd.raw("GETJOB", "NOHANG", "FROM", "q") == b"*-1\r\n"


# --------------------------------------------------------------- WORKING

def test_working_returns_retry_and_dequeues(node, cmd):
    job_id = cmd.addjob("q", "x")
    assert cmd.raw("WORKING", job_id) == b":300\r\n"
    job = cmd.show(job_id)
    assert job["state"] == b"active"
    assert 300_000 - 250 <= job["next-requeue-within"] <= 300_000 + 249
    assert job["next-awake-within"] == job["next-requeue-within"] - 500
    assert cmd.raw("WORKING", UNKNOWN_ODD) == NOJOB


def test_working_postpones_the_requeue(node, cmd):
    job_id = cmd.addjob("q", "x", "RETRY", "10", "TTL", "100")
    cmd.ok("GETJOB", "FROM", "q")
    node.state.clock.advance(8000)
    assert cmd.ok("WORKING", job_id) == 10
    assert 10_000 - 250 <= cmd.show(job_id)["next-requeue-within"] <= 10_000 + 249


def test_working_half_ttl_rule(node, cmd):
    job_id = cmd.addjob("q", "x", "TTL", "100")
    node.state.clock.advance(50_000)  # exactly half: still allowed
    assert cmd.ok("WORKING", job_id) == 10
    node.state.clock.advance(1)
    assert cmd.raw("WORKING", job_id) == TOOLATE


def test_working_on_retry_zero_job(cmd):
    job_id = cmd.addjob("q", "x", "RETRY", "0")
    assert cmd.raw("WORKING", job_id) == b":0\r\n"
    job = cmd.show(job_id)
    assert job["state"] == b"active" and job["next-requeue-within"] is None
    assert cmd.ok("ENQUEUE", job_id) == 0  # dequeued for good


def test_working_on_acked_job_returns_retry(cluster):
    cmd = Cmd(cluster)
    job_id = replicated_job(cluster, "RETRY", "42")
    cmd.ok("ACKJOB", job_id)
    assert cmd.ok("WORKING", job_id) == 42
    assert cmd.show(job_id)["state"] == b"acked"


def test_working_tells_the_holders(cluster):
    cmd = Cmd(cluster)
    job_id = replicated_job(cluster)
    cluster.state.outbox.transport.clear()
    cmd.ok("WORKING", job_id)
    assert [(d, msg[m.ID]) for d, msg in cluster.state.outbox.transport.of_type(m.WORKING)] == [
        (PEER_ID, job_id)]


# ------------------------------------------------------------------ SHOW

def test_show_exact_bytes(node, cmd):
    job_id = cmd.addjob("q", "body")
    job = node.state.jobs[job_id]
    requeue = job.qtime - START_MS
    raw = cmd.raw("SHOW", job_id)
    assert raw == (
        b"*30\r\n$2\r\nid\r\n$40\r\n" + job_id + b"\r\n$5\r\nqueue\r\n$1\r\nq\r\n"
        b"$5\r\nstate\r\n$6\r\nqueued\r\n$4\r\nrepl\r\n:1\r\n$3\r\nttl\r\n:86400\r\n"
        b"$5\r\nctime\r\n:" + str(START_MS * 1_000_000).encode() + b"\r\n"
        b"$5\r\ndelay\r\n:0\r\n$5\r\nretry\r\n:300\r\n$5\r\nnacks\r\n:0\r\n"
        b"$21\r\nadditional-deliveries\r\n:0\r\n"
        b"$15\r\nnodes-delivered\r\n*1\r\n$40\r\n" + NODE_ID + b"\r\n"
        b"$15\r\nnodes-confirmed\r\n*0\r\n"
        b"$19\r\nnext-requeue-within\r\n:" + str(requeue).encode() + b"\r\n"
        b"$17\r\nnext-awake-within\r\n:" + str(requeue - 500).encode() + b"\r\n"
        b"$4\r\nbody\r\n$4\r\nbody\r\n")


def test_show_unknown_is_null_bulk(cmd):
    assert cmd.raw("SHOW", UNKNOWN_ODD) == b"$-1\r\n"


def test_show_ttl_counts_down_and_floors_at_zero(node, cmd):
    job_id = cmd.addjob("q", "x", "TTL", "10", "RETRY", "0")
    node.state.clock.advance(4000)
    assert cmd.show(job_id)["ttl"] == 6
    node.state.clock.advance(6500)  # expired but its timer has not run yet
    assert cmd.show(job_id)["ttl"] == 0
    advance(node, 500)
    assert cmd.show(job_id) is None


# ------------------------------------------- counters (jobs-and-ids.md §9)

def _remote_job(node, retry=5, delay=0):
    """A job created on the peer, serialised as its REPLJOB would carry it."""
    from disque.jobs.codec import to_bus
    peer_node = make_node(node_id=PEER_ID, now=node.state.clock())
    job_id = Cmd(peer_node).addjob("q", "remote", "RETRY", retry, "DELAY", delay, "TTL", 3600)
    job = peer_node.state.jobs[job_id]
    job.delivered = (PEER_ID, NODE_ID)
    return job_id, to_bus(job, node.state.clock())


def test_queued_messages_increment_counters(cluster):
    cmd = Cmd(cluster)
    job_id = replicated_job(cluster)
    deliver(cluster, PEER_ID, m.job_message(m.QUEUED, job_id, m.MFLAG_INCR_NACKS))
    deliver(cluster, PEER_ID, m.job_message(m.QUEUED, job_id, m.MFLAG_INCR_DELIV))
    deliver(cluster, PEER_ID, m.job_message(m.QUEUED, job_id, m.MFLAG_INCR_DELIV))
    deliver(cluster, PEER_ID, m.job_message(m.QUEUED, job_id))
    job = cmd.show(job_id)
    assert (job["nacks"], job["additional-deliveries"]) == (1, 2)


def test_replica_first_queueing_counts_as_additional_delivery(cluster):
    cmd = Cmd(cluster)
    job_id, payload = _remote_job(cluster, retry=5)
    deliver(cluster, PEER_ID, {m.TYPE: m.REPLJOB, m.JOB: payload, m.MFLAGS: 0})
    assert [msg[m.ID] for _, msg in cluster.state.outbox.transport.of_type(m.GOTJOB)] == [job_id]
    job = cmd.show(job_id)
    assert job["state"] == b"active"
    # Received copies wait delay + retry (± jitter), announcing WILLQUEUE first.
    assert 5000 - 250 <= job["next-requeue-within"] <= 5000 + 249
    assert job["next-awake-within"] == job["next-requeue-within"] - 500
    cluster.state.outbox.transport.clear()
    advance(cluster, job["next-requeue-within"])
    job = cmd.show(job_id)
    assert job["state"] == b"queued"
    assert (job["nacks"], job["additional-deliveries"]) == (0, 1)
    assert [(d, msg[m.MFLAGS]) for d, msg in cluster.state.outbox.transport.of_type(m.QUEUED)] == [
        (PEER_ID, m.MFLAG_INCR_DELIV)]


def test_first_queueing_after_enqueue_message_does_not_count(cluster):
    cmd = Cmd(cluster)
    job_id, payload = _remote_job(cluster, retry=5)
    deliver(cluster, PEER_ID, {m.TYPE: m.REPLJOB, m.JOB: payload, m.MFLAGS: m.MFLAG_NOREPLY})
    assert cluster.state.outbox.transport.of_type(m.GOTJOB) == []
    deliver(cluster, PEER_ID, {m.TYPE: m.ENQUEUE, m.ID: job_id, m.DELAY: 0})
    job = cmd.show(job_id)
    assert job["state"] == b"queued"
    assert (job["nacks"], job["additional-deliveries"]) == (0, 0)
    assert cluster.state.outbox.transport.of_type(m.QUEUED) == []


def test_jobs_imported_by_yourjobs_do_not_count(cluster):
    cmd = Cmd(cluster)
    job_id, payload = _remote_job(cluster, retry=5)
    deliver(cluster, PEER_ID, {m.TYPE: m.YOURJOBS, m.JOBS: [payload]})
    job = cmd.show(job_id)
    assert job["state"] == b"queued"
    assert (job["nacks"], job["additional-deliveries"]) == (0, 0)


def test_externally_replicated_retry_zero_job_is_queued(cluster):
    # index.md decision 1: the ENQUEUE message must be able to queue it.
    cmd = Cmd(cluster)
    job_id, payload = _remote_job(cluster, retry=0)
    deliver(cluster, PEER_ID, {m.TYPE: m.REPLJOB, m.JOB: payload, m.MFLAGS: 0})
    assert cmd.show(job_id)["next-requeue-within"] is None
    deliver(cluster, PEER_ID, {m.TYPE: m.ENQUEUE, m.ID: job_id, m.DELAY: 0})
    assert cmd.show(job_id)["state"] == b"queued"
    assert cmd.ok("GETJOB", "NOHANG", "FROM", "q")[0][1] == job_id
    assert cmd.ok("ENQUEUE", job_id) == 0  # and only once
