"""ADDJOB ... DEDUPID (docs/dedup.md): the index, the window, CONFIG SET
dedup-window, -PENDING while the first job waits for its replicas, a retry
after NOREPL creating the job, copies and loaded jobs answering, and the AOF
load's fast loop taking format-2 payloads."""

from __future__ import annotations


import pytest

from disque.jobs.records import append_loadjobs, deljob_record
from disque.aof.loader import AofLoadError
from disque.cluster import messages as m
from disque.jobs.codec import to_bus
from disque.jobs.dedup import DedupIndex
from disque.jobs.journal import REASON_ACKED
from tests.support.aof import first_record, load_into
from tests.unit.helpers import (NODE_ID, PEER_ID, START_MS, Cmd, add_peer, advance, deliver,
                                make_node)

WINDOW_MS = 300_000  # dedup-window's default, 300 s
PENDING = "PENDING Job %s with this DEDUPID is waiting for its replicas, retry later"
NOREPL_TIMEOUT = "NOREPL Timeout reached before replicating to the requested number of nodes"


@pytest.fixture
def cmd():
    return Cmd(make_node())


# ------------------------------------------------------------------ the index

def test_index_finds_a_token_until_the_cron_drops_it_past_the_window():
    index = DedupIndex()
    index.remember(b"q", b"t", b"D-1", 1000)
    assert index.find(b"q", b"t", 5000) == b"D-1"
    assert index.find(b"other", b"t", 5000) is None  # per queue
    assert index.find(b"q", b"u", 5000) is None
    assert index.find(b"q", b"t", 0) is None  # a window of 0: nothing matches
    index.expire(5999, 5000)  # 4,999 ms old: kept
    assert index.find(b"q", b"t", 5000) == b"D-1"
    index.expire(6000, 5000)  # 5,000 ms old: the window is over
    assert index.find(b"q", b"t", 5000) is None and len(index) == 0


def test_index_keeps_the_first_of_two_jobs_with_one_token():
    """Two nodes that took one token apart (a partition): a node that learns
    of both keeps answering with the first it learned of."""
    index = DedupIndex()
    index.remember(b"q", b"t", b"D-new", 2000)
    index.remember(b"q", b"t", b"D-old", 1000)
    assert index.find(b"q", b"t", 10_000) == b"D-new"
    assert index.claim(b"q", b"t", b"D-3", 3000, 10_000) == b"D-new"
    index.remember(b"q", b"t", b"D-new", 2000)  # the same job again: nothing changes
    assert len(index) == 1
    index.expire(12_000, 10_000)  # D-new came at 2000: its time is up
    assert len(index) == 0 and index.find(b"q", b"t", 10_000) is None


def test_index_forgets_only_the_job_it_names():
    index = DedupIndex()
    index.remember(b"q", b"t", b"D-1", 1000)
    index.forget(b"q", b"t", b"D-2")
    assert index.find(b"q", b"t", 5000) == b"D-1"
    index.forget(b"q", b"t", b"D-1")
    assert index.find(b"q", b"t", 5000) is None and len(index) == 0
    index.forget(b"q", b"t", b"D-1")  # twice: nothing to do
    assert len(index) == 0


def test_index_expiry_drops_in_arrival_order():
    index = DedupIndex()
    index.remember(b"q", b"a", b"D-1", 1000)
    index.remember(b"q", b"b", b"D-2", 2000)
    index.remember(b"q", b"c", b"D-3", 2000)
    index.forget(b"q", b"a", b"D-1")
    # A retry after a failed first job takes the token in its place: it
    # keeps the first attempt's time.
    assert index.claim(b"q", b"a", b"D-4", 4000, 5000) is None
    assert index.find(b"q", b"a", 5000) == b"D-4" and len(index) == 3
    index.expire(6500, 5000)  # drops what came at 1500 or before: a
    assert [index.find(b"q", t, 5000) for t in (b"a", b"b", b"c")] == [None, b"D-2", b"D-3"]
    index.expire(7000, 5000)
    assert len(index) == 0 and index.find(b"q", b"b", 5000) is None
    index.remember(b"q", b"d", b"D-5", 9000)
    index.clear()
    assert len(index) == 0 and index.find(b"q", b"d", 5000) is None


def test_index_groups_arrivals_and_compacts():
    index = DedupIndex()
    for n in range(5000):  # five per millisecond
        index.claim(b"q", b"t%d" % n, b"D-%d" % n, n // 5, 10_000)
    for now in range(10_000, 11_000, 7):
        index.expire(now, 10_000)
        left = 5000 - 5 * min(1000, now - 10_000 + 1)
        assert len(index) == left
        assert index.find(b"q", b"t4999", 10_000) == b"D-4999"
    assert index.find(b"q", b"t0", 10_000) is None


def test_claim_is_find_then_remember_in_one_lookup():
    index = DedupIndex()
    assert index.claim(b"q", b"t", b"D-1", 1000, 5000) is None  # new: taken
    assert index.claim(b"q", b"t", b"D-2", 5999, 5000) == b"D-1"  # within the window
    assert index.find(b"q", b"t", 5000) == b"D-1"
    index.expire(6000, 5000)
    assert index.claim(b"q", b"t", b"D-3", 6000, 5000) is None  # past it: D-3 takes over
    assert index.find(b"q", b"t", 5000) == b"D-3" and len(index) == 1
    assert index.claim(b"q", b"u", b"D-4", 7000, 0) is None  # dedup off: nothing indexed
    assert index.find(b"q", b"u", 5000) is None and len(index) == 1
    index.expire(11_000, 5000)
    assert len(index) == 0


# ------------------------------------------------------------ one node

def test_a_token_alone_is_held_without_job_extras(cmd):
    fast = cmd.addjob("q", "body", "DEDUPID", "t1")  # the lone node's one-option path
    parsed = cmd.addjob("q", "body", "RETRY", 10, "DEDUPID", "t2")  # the options parser
    rich = cmd.addjob("q", "body", "MAXDELIVER", 3, "DEDUPID", "t3")
    jobs = cmd.node.state.jobs.by_id
    assert jobs[fast].ext == b"t1" and jobs[parsed].ext == b"t2"
    assert jobs[rich].ext.dedupid == b"t3" and jobs[rich].ext.maxdeliver == 3
    # SHOW gives the pairs a JobExtras of defaults would.
    shown = cmd.show(fast)
    assert (shown["maxdeliver"], shown["deadletter"], shown["origin-queue"],
            shown["dead-reason"], shown["dedupid"]) == (0, b"q:dead", None, None, b"t1")
    # A rule that sets an extension field gives the job its JobExtras, token kept.
    cmd.node.state.lifecycle.apply_state(jobs[fast], (b"q:dead", b"q", b"maxdeliver", 1, 0, 0, 300, None))
    assert jobs[fast].ext.dedupid == b"t1" and jobs[fast].ext.moves == 1
    assert cmd.raw("ADDJOB", "q", "again", 0, "DEDUPID", "t1") == b"+" + fast + b"\r\n"



def test_a_repeated_token_returns_the_first_job_and_creates_nothing(cmd):
    first = cmd.addjob("q", "body", "DEDUPID", "order-17")
    assert cmd.raw("ADDJOB", "q", "other body", 0, "DEDUPID", "order-17") == (
        b"+" + first + b"\r\n")
    assert len(cmd.node.state.jobs.by_id) == 1 and cmd.ok("QLEN", "q") == 1
    assert cmd.show(first)["body"] == b"body"
    # Another queue, or another token, is another job.
    assert cmd.addjob("q2", "body", "DEDUPID", "order-17") != first
    assert cmd.addjob("q", "body", "DEDUPID", "order-18") != first
    assert cmd.addjob("q", "body") != first  # no token: never deduplicated
    assert len(cmd.node.state.jobs.by_id) == 4


def test_the_token_answers_after_the_job_is_acked(cmd):
    first = cmd.addjob("q", "body", "DEDUPID", "t")
    assert cmd.ok("ACKJOB", first) == 1
    advance(cmd.node, 2000, cron=True)  # the acked job is collected (a lone node)
    assert first not in cmd.node.state.jobs.by_id
    assert cmd.addjob("q", "body", "DEDUPID", "t") == first
    second = cmd.addjob("q", "body", "DEDUPID", "u")
    assert cmd.ok("FASTACK", second) == 1
    assert cmd.addjob("q", "body", "DEDUPID", "u") == second
    assert not cmd.node.state.jobs.by_id


def test_the_window_ends_and_cron_forgets(cmd):
    first = cmd.addjob("q", "body", "DEDUPID", "t")
    advance(cmd.node, WINDOW_MS - 1)
    assert cmd.addjob("q", "body", "DEDUPID", "t") == first
    advance(cmd.node, 1, cron=True)
    assert len(cmd.node.state.dedup) == 0  # the cron dropped it
    second = cmd.addjob("q", "body", "DEDUPID", "t")
    assert second != first and len(cmd.node.state.jobs.by_id) == 2


def test_config_set_dedup_window(cmd):
    assert cmd.ok("CONFIG", "GET", "dedup-window") == [b"dedup-window", b"300"]
    assert cmd.ok("CONFIG", "SET", "dedup-window", "10") == b"OK"
    first = cmd.addjob("q", "body", "DEDUPID", "t")
    advance(cmd.node, 9_999, cron=True)
    assert cmd.addjob("q", "body", "DEDUPID", "t") == first
    advance(cmd.node, 1, cron=True)  # the cron tick at the window's end drops it
    assert cmd.addjob("q", "body", "DEDUPID", "t") != first
    # 0 turns it off: every ADDJOB creates its job, and no token is indexed.
    kept = cmd.addjob("q", "body", "DEDUPID", "u")
    assert cmd.ok("CONFIG", "SET", "dedup-window", "0") == b"OK"
    assert cmd.addjob("q", "body", "DEDUPID", "u") != kept
    third = cmd.addjob("q", "body", "DEDUPID", "v")
    assert cmd.addjob("q", "body", "DEDUPID", "v") != third
    assert cmd.show(third)["dedupid"] == b"v"
    # Widening the window again brings back the tokens indexed before.
    assert cmd.ok("CONFIG", "SET", "dedup-window", "300") == b"OK"
    assert cmd.addjob("q", "body", "DEDUPID", "u") == kept
    fourth = cmd.addjob("q", "body", "DEDUPID", "v")
    assert fourth != third and cmd.addjob("q", "body", "DEDUPID", "v") == fourth
    assert cmd.error("CONFIG", "SET", "dedup-window", "-1").startswith("ERR")
    assert cmd.error("CONFIG", "SET", "dedup-window", "x").startswith("ERR")


def test_debug_flushall_forgets_every_token(cmd):
    cmd.addjob("q", "body", "DEDUPID", "t")
    cmd.ok("DEBUG", "FLUSHALL")
    assert len(cmd.node.state.dedup) == 0
    assert cmd.addjob("q", "body", "DEDUPID", "t")


# ------------------------------------------------------- wait-repl and NOREPL

def _two_nodes():
    node = make_node()
    add_peer(node)
    return node, Cmd(node)


def test_pending_while_the_first_job_waits_for_its_replica_then_its_id():
    node, cmd = _two_nodes()
    assert cmd.raw("ADDJOB", "q", "body", 5000, "REPLICATE", 2, "DEDUPID", "t") is None
    (job_id,) = node.state.blocked.producers
    retry = Cmd(node)
    assert retry.error("ADDJOB", "q", "body", 5000, "REPLICATE", 2, "DEDUPID", "t") == (
        PENDING % job_id.decode())
    assert len(node.state.jobs.by_id) == 1
    deliver(node, PEER_ID, m.job_message(m.GOTJOB, job_id))
    assert cmd.sent() == [job_id]
    assert retry.raw("ADDJOB", "q", "body", 5000, "REPLICATE", 2, "DEDUPID", "t") == (
        b"+" + job_id + b"\r\n")
    assert len(node.state.jobs.by_id) == 1


def test_a_retry_after_norepl_creates_the_job():
    node, cmd = _two_nodes()
    assert cmd.raw("ADDJOB", "q", "body", 1000, "REPLICATE", 2, "DEDUPID", "t") is None
    (failed,) = node.state.blocked.producers
    advance(node, 1001)
    assert [str(e) for e in cmd.sent()] == [NOREPL_TIMEOUT]
    assert failed not in node.state.jobs.by_id
    assert node.state.outbox.transport.of_type(m.DELJOB)  # the partial copy is asked to go
    assert cmd.raw("ADDJOB", "q", "body", 1000, "REPLICATE", 2, "DEDUPID", "t") is None
    (created,) = node.state.blocked.producers
    assert created != failed
    deliver(node, PEER_ID, m.job_message(m.GOTJOB, created))
    assert cmd.sent()[-1] == created


def test_a_producer_that_disconnects_frees_its_token():
    node, cmd = _two_nodes()
    assert cmd.raw("ADDJOB", "q", "body", 5000, "REPLICATE", 2, "DEDUPID", "t") is None
    (gone,) = node.state.blocked.producers
    node.client_gone(cmd.client)
    assert gone not in node.state.jobs.by_id
    assert Cmd(node).raw("ADDJOB", "q", "body", 5000, "REPLICATE", 2, "DEDUPID", "t") is None


# ---------------------------------------------------------- copies and loads

def test_a_copy_received_by_repljob_answers_for_its_job():
    origin, origin_cmd = _two_nodes()
    assert origin_cmd.raw("ADDJOB", "q", "body", 5000, "REPLICATE", 2, "DEDUPID", "t") is None
    ((_, repljob),) = origin.state.outbox.transport.of_type(m.REPLJOB)
    job_id = repljob[m.JOB][0]

    replica = make_node(node_id=PEER_ID)
    add_peer(replica, NODE_ID)
    deliver(replica, NODE_ID, repljob)
    assert job_id in replica.state.jobs.by_id
    replica_cmd = Cmd(replica)
    # The copy is active here, created or about to be: its ID, nothing created.
    assert replica_cmd.raw("ADDJOB", "q", "body", 5000, "REPLICATE", 2, "DEDUPID", "t") == (
        b"+" + job_id + b"\r\n")
    assert list(replica.state.jobs.by_id) == [job_id]
    # Another queue's token of the same name is another job.
    assert replica_cmd.raw("ADDJOB", "q2", "body", 5000, "REPLICATE", 1,
                           "DEDUPID", "t").startswith(b"+D-")


def _replica_with_copy():
    """A replica that received the copy of a job with DEDUPID "t" (origin: NODE_ID)."""
    origin = make_node()
    job_id = Cmd(origin).addjob("q", "body", "DEDUPID", "t")
    replica = make_node(node_id=PEER_ID)
    add_peer(replica, NODE_ID)
    deliver(replica, NODE_ID, {m.TYPE: m.REPLJOB,
                               m.JOB: to_bus(origin.state.jobs.by_id[job_id], origin.state.now)})
    assert job_id in replica.state.jobs.by_id
    return replica, job_id


def test_a_deljob_for_a_copy_never_acked_frees_its_token():
    """The origin's ADDJOB failed (NOREPL) and it deletes the partial copies
    (or a FASTACK elsewhere): the token no longer names the job here."""
    replica, job_id = _replica_with_copy()
    deliver(replica, NODE_ID, m.job_message(m.DELJOB, job_id))
    assert not replica.state.jobs.by_id and len(replica.state.dedup) == 0
    created = Cmd(replica).raw("ADDJOB", "q", "b", 0, "REPLICATE", 1, "DEDUPID", "t")
    assert created.startswith(b"+D-") and created[1:-2] != job_id


def test_the_gc_deljob_of_an_acked_copy_keeps_its_token():
    replica, job_id = _replica_with_copy()
    deliver(replica, NODE_ID, {m.TYPE: m.SETACK, m.ID: job_id, m.MAY_HAVE: 2})
    deliver(replica, NODE_ID, m.job_message(m.DELJOB, job_id))
    assert not replica.state.jobs.by_id
    assert Cmd(replica).raw("ADDJOB", "q", "b", 0, "REPLICATE", 1, "DEDUPID", "t") == (
        b"+" + job_id + b"\r\n")


def test_a_copy_names_the_token_by_its_creation_time_not_its_arrival():
    node = make_node(node_id=PEER_ID)
    add_peer(node, NODE_ID)
    origin = make_node(now=START_MS - 200_000)
    job_id = Cmd(origin).addjob("q", "body", "DEDUPID", "t")
    deliver(node, NODE_ID, {m.TYPE: m.REPLJOB, m.JOB: to_bus(origin.state.jobs.by_id[job_id],
                                                               origin.state.now)})
    assert Cmd(node).raw("ADDJOB", "q", "b", 0, "REPLICATE", 1, "DEDUPID", "t") == (
        b"+" + job_id + b"\r\n")
    advance(node, WINDOW_MS - 200_000, cron=True)  # 300 s after the job's creation
    assert len(node.state.dedup) == 0


# ------------------------------------------------------ the AOF's fast loop

def _records(node, job_ids) -> bytes:
    out = bytearray()
    append_loadjobs(out, [node.state.jobs.by_id[j] for j in job_ids], node.state.now)
    return bytes(out)


def test_format_2_payloads_load_beside_plain_ones(tmp_path):
    source = make_node(seed=3)
    cmd = Cmd(source)
    jobs = [cmd.addjob("q", "body %d" % i, "DEDUPID", "tok-%d" % i) for i in range(20)]
    plain = cmd.addjob("q", "plain")
    rich = cmd.addjob("q2", "r\r\n", "PRIORITY", 9, "MAXDELIVER", 4, "DEADLETTER", "dl",
                      "BACKOFF", "1.5", "MAXRETRY", 90, "RETRY", 3, "DEDUPID", "rich")
    acked = cmd.addjob("q", "acked", "DEDUPID", "acked")
    data = (_records(source, jobs[:10]) + _records(source, [plain, rich, acked])
            + deljob_record(source.state.jobs.by_id[acked], source.state.now, REASON_ACKED)
            + _records(source, jobs[10:]))
    (tmp_path / "a.aof").write_bytes(data)

    node = make_node(seed=4)
    loader = load_into(node, tmp_path / "a.aof")
    assert loader.records == 24
    assert sorted(node.state.jobs.by_id) == sorted(jobs + [plain, rich])
    copy = node.state.jobs.by_id[rich]
    assert copy.priority == 9 and copy.body == b"r\r\n"
    assert (copy.ext.maxdeliver, copy.ext.deadletter, copy.ext.backoff, copy.ext.maxretry,
            copy.ext.base_retry, copy.ext.dedupid) == (4, b"dl", 1.5, 90, 3, b"rich")
    assert node.state.jobs.by_id[plain].ext is None
    assert node.state.jobs.by_id[jobs[3]].ext == b"tok-3"  # a token alone: no JobExtras
    again = Cmd(node)
    assert again.addjob("q", "x", "DEDUPID", "tok-3") == jobs[3]
    assert again.addjob("q", "x", "DEDUPID", "acked") == acked  # acked: still answered
    assert len(node.state.jobs.by_id) == 22


@pytest.mark.parametrize("damage", ["bad map", "no map", "map of the wrong type"])
def test_a_damaged_format_2_payload_is_reported_with_its_offset(tmp_path, damage):
    source = make_node(seed=3)
    cmd = Cmd(source)
    good = cmd.addjob("q", "good", "DEDUPID", "a")
    bad = cmd.addjob("q", "bad", "DEDUPID", "b")
    argv, _ = first_record(_records(source, [bad]))
    payload, stamp = argv[1], argv[2]
    nodes_end = payload.rindex(NODE_ID) + len(NODE_ID)
    if damage == "bad map":
        payload = payload[:nodes_end] + b"\xc1" + payload[nodes_end + 1:]  # never msgpack
    elif damage == "no map":
        payload = payload[:nodes_end]
    else:
        payload = payload[:nodes_end] + b"\x93\x01\x02\x03"  # a list, not a map
    damaged = b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
        len(payload), payload, len(stamp), stamp)
    first = _records(source, [good])
    (tmp_path / "a.aof").write_bytes(first + damaged)
    node = make_node(seed=4)
    with pytest.raises(AofLoadError, match=r"at offset %d \(record 2\): corrupted job: "
                                           % len(first)):
        load_into(node, tmp_path / "a.aof")
    assert list(node.state.jobs.by_id) == [good]  # the record before it was applied
