"""NACK ... REASON (docs/commands.md "Why a job failed"): the consumer's
reason is kept with the job, shown by SHOW, carried to the other holders
with the NACK's notice and to new copies in the job's bus form, journaled,
and kept when the job moves to its dead-letter queue."""

from __future__ import annotations

import msgpack
import pytest

from disque.cluster import messages as m
from disque.jobs.codec import BadJobPayload, from_bus, to_bus
from disque.jobs.job import ACTIVE, MAX_NACK_REASON, QUEUED, JobExtras, nack_reason_of
from disque.jobs.journal import REASON_NACK_REASON, REASON_QUEUE_CHANGED
from disque.jobs.records import append_loadjobs
from disque.protocol import errors
from tests.support.aof import decode_payload, file_records, first_record, load_into
from tests.unit.extensions.test_deadletter import RecordingJournal
from tests.unit.extensions.test_deadletter import writer  # noqa: F401  (a fixture used below)
from tests.unit.extensions.test_nack_delay import cmd, pair, taken  # noqa: F401  (fixtures)
from tests.unit.helpers import Cmd, advance, deliver, make_node

REASON_SIZE = "ERR NACK REASON must be 1 to 1024 bytes"
BADID = "BADID Invalid Job ID format."
FAILURE = b"ValueError: bad input\r\n\x00\xff"  # any bytes: CR LF, NUL, not UTF-8


# ------------------------------------------------------------ one node

def test_the_reason_is_kept_and_shown_last_in_show(cmd):
    job_id = taken(cmd)
    assert cmd.raw("NACK", job_id, "REASON", FAILURE) == b":1\r\n"
    shown = cmd.ok("SHOW", job_id)
    assert shown[-2:] == [b"nack-reason", FAILURE]
    assert shown[30:-2] == [b"maxdeliver", 0, b"deadletter", b"q:dead", b"origin-queue", None,
                            b"dead-reason", None]
    assert (shown[5], shown[17]) == (b"queued", 1)  # state, nacks: a NACK's
    assert cmd.ok("JSCAN", 0, "REPLY", "all")[1][0] == shown


def test_show_sends_the_reason_as_a_bulk_string(cmd):
    job_id = taken(cmd)
    cmd.ok("NACK", job_id, "reason", FAILURE)
    assert cmd.raw("SHOW", job_id).endswith(
        b"$11\r\nnack-reason\r\n$%d\r\n%b\r\n" % (len(FAILURE), FAILURE))


def test_without_reason_show_and_the_job_are_as_before(cmd):
    job_id = taken(cmd)
    assert cmd.raw("NACK", job_id) == b":1\r\n"
    assert len(cmd.ok("SHOW", job_id)) == 30 and cmd.node.state.jobs[job_id].ext is None


def test_the_last_reason_wins_and_a_plain_nack_keeps_it(cmd):
    job_id = taken(cmd)
    cmd.ok("NACK", job_id, "REASON", "first")
    cmd.ok("GETJOB", "FROM", "q")
    cmd.ok("NACK", job_id, "REASON", "second")
    assert cmd.show(job_id)["nack-reason"] == b"second"
    cmd.ok("GETJOB", "FROM", "q")
    cmd.ok("NACK", job_id)
    shown = cmd.show(job_id)
    assert (shown["nack-reason"], shown["nacks"]) == (b"second", 3)


def test_several_ids_share_the_reason_and_jobs_not_nacked_get_none(cmd):
    first = taken(cmd)
    second = taken(cmd)
    queued = cmd.addjob("q", "still queued")
    unknown = b"D-00000000-000000000000000000000000-0000"
    assert cmd.ok("NACK", first, second, queued, unknown, "REASON", "db down") == 2
    assert [cmd.show(j).get("nack-reason") for j in (first, second, queued)] == [
        b"db down", b"db down", None]
    assert cmd.node.state.jobs[queued].ext is None


def test_the_bound_is_1024_bytes(cmd):
    job_id = taken(cmd)
    assert cmd.error("NACK", job_id, "REASON", b"x" * (MAX_NACK_REASON + 1)) == REASON_SIZE
    assert cmd.error("NACK", job_id, "REASON", b"") == REASON_SIZE
    shown = cmd.show(job_id)
    assert (shown["state"], shown["nacks"]) == (b"active", 0)  # refused: nothing NACKed
    assert cmd.ok("NACK", job_id, "REASON", b"x" * MAX_NACK_REASON) == 1
    assert cmd.show(job_id)["nack-reason"] == b"x" * MAX_NACK_REASON
    assert errors.NACK_REASON_SIZE == b"-%s\r\n" % REASON_SIZE.encode()
    assert str(MAX_NACK_REASON).encode() in errors.NACK_REASON_SIZE


def test_ids_are_checked_and_reason_without_an_id_is_a_job_id(cmd):
    job_id = taken(cmd)
    assert cmd.error("NACK", job_id, "nosuchid", "REASON", "x") == BADID
    # Disque 1.0 reads every word as an ID: so does NACK with nothing before REASON.
    assert cmd.error("NACK", "REASON", job_id) == BADID
    assert cmd.error("NACK", job_id, "x", "REASON") == BADID  # REASON without its text
    assert cmd.show(job_id)["state"] == b"active"


def test_an_at_most_once_job_delivered_keeps_no_reason(cmd):
    job_id = taken(cmd, "RETRY", 0)
    assert cmd.ok("NACK", job_id, "REASON", "x") == 0
    assert cmd.node.state.jobs[job_id].ext is None


def test_with_a_delay_the_reason_is_kept_at_once_and_the_nack_counted_later(cmd):
    job_id = taken(cmd, "RETRY", 60)
    assert cmd.raw("NACK", job_id, "DELAY", 2, "REASON", "later") == b":1\r\n"
    shown = cmd.show(job_id)
    assert (shown["state"], shown["nacks"], shown["nack-reason"]) == (b"active", 0, b"later")
    advance(cmd.node, 2100, step=100)
    shown = cmd.show(job_id)
    assert (shown["state"], shown["nacks"], shown["nack-reason"]) == (b"queued", 1, b"later")
    cmd.ok("GETJOB", "FROM", "q")
    assert cmd.ok("NACK", job_id, "DELAY", 0, "REASON", "now") == 1
    assert cmd.show(job_id)["nack-reason"] == b"now"
    assert cmd.error("NACK", job_id, "DELAY", -1, "REASON", "x") == (
        "ERR DELAY time must be a non negative number")


def test_a_dedupid_job_keeps_its_token_beside_the_reason(cmd):
    job_id = taken(cmd, "DEDUPID", "order-7")
    cmd.ok("NACK", job_id, "REASON", "x")
    ext = cmd.node.state.jobs[job_id].ext
    assert isinstance(ext, JobExtras) and (ext.dedupid, ext.nack_reason) == (b"order-7", b"x")
    assert not ext.token_only()
    assert cmd.addjob("q", "b", "DEDUPID", "order-7") == job_id  # still guards retries


def test_a_dead_letter_keeps_the_reason_of_its_last_failure(cmd):
    job_id = taken(cmd, "MAXDELIVER", 2)
    cmd.ok("NACK", job_id, "REASON", "first")
    cmd.ok("GETJOB", "FROM", "q")
    cmd.ok("NACK", job_id, "REASON", "TimeoutError: upstream")
    shown = cmd.show(job_id)
    assert (shown["queue"], shown["dead-reason"], shown["nack-reason"]) == (
        b"q:dead", b"maxdeliver", b"TimeoutError: upstream")
    assert cmd.ok("QREDRIVE", "q:dead") == 1
    shown = cmd.show(job_id)
    assert (shown["queue"], shown["dead-reason"], shown["nack-reason"]) == (
        b"q", None, b"TimeoutError: upstream")


# ------------------------------------------------------------ the journal

def journaled(cmd: Cmd, job_id: bytes, *words) -> list[tuple]:
    """What NACK ``job_id`` ``words`` tells the journal."""
    journal = RecordingJournal()
    cmd.node.state.set_journal(journal)
    assert cmd.ok("NACK", job_id, *words) == 1
    return journal.events


def test_a_plain_nack_is_not_journaled(cmd):
    assert journaled(cmd, taken(cmd)) == []


@pytest.mark.parametrize("options, words, change, queue", [
    ((), ("REASON", "x"), REASON_NACK_REASON, b"q"),
    ((), ("DELAY", 5, "REASON", "x"), REASON_NACK_REASON, b"q"),  # at once
    (("MAXDELIVER", 1), ("REASON", "x"), REASON_QUEUE_CHANGED, b"q:dead"),  # the move's alone
])
def test_a_reason_is_journaled_as_deljob_then_loadjob(cmd, options, words, change, queue):
    job_id = taken(cmd, *options)
    assert journaled(cmd, job_id, *words) == [("removed", job_id, b"q", change),
                                              ("stored", job_id, queue)]


def test_a_restarted_node_has_the_reason(writer):
    node, aof = writer
    aof.open_existing()
    cmd = Cmd(node)
    job_id = taken(cmd)
    aof.flush()
    cmd.ok("NACK", job_id, "REASON", FAILURE)
    aof.flush()
    logged = [(r[0], r[-1] if r[0] == b"DELJOB" else None) for r in file_records()]
    assert logged == [(b"LOADJOB", None), (b"DELJOB", REASON_NACK_REASON), (b"LOADJOB", None)]
    restarted = make_node(seed=99)
    load_into(restarted, "disque.aof", enqueue_once=True)
    job = restarted.state.jobs[job_id]
    assert (job.state, job.nacks, nack_reason_of(job)) == (QUEUED, 1, FAILURE)


def test_the_stored_payload_carries_the_reason(cmd):
    job_id = taken(cmd, "PRIORITY", 7)
    cmd.ok("NACK", job_id, "REASON", FAILURE)
    out = bytearray()
    append_loadjobs(out, [cmd.node.state.jobs[job_id]], cmd.node.state.now)
    argv, _ = first_record(bytes(out))
    copy, queued = decode_payload(argv[1])
    assert queued and nack_reason_of(copy) == FAILURE and copy.priority == 7


# ---------------------------------------------------------------- the bus

def _over_the_wire(payload):
    return msgpack.unpackb(msgpack.packb(payload, use_bin_type=True), raw=False)


def test_a_copy_made_later_carries_the_reason(cmd):
    job_id = taken(cmd)
    cmd.ok("NACK", job_id, "REASON", FAILURE)
    job = cmd.node.state.jobs[job_id]
    now = cmd.node.state.now
    copy = from_bus(_over_the_wire(to_bus(job, now)), now, None)
    assert nack_reason_of(copy) == FAILURE


@pytest.mark.parametrize("value", [b"", b"x" * (MAX_NACK_REASON + 1), "text", 7, None])
def test_a_bad_reason_in_a_copy_is_refused(cmd, value):
    job = cmd.node.state.jobs[cmd.addjob("q", "b")]
    fields = to_bus(job, cmd.node.state.now) + [{"maxdeliver": 0, "nack-reason": value}]
    with pytest.raises(BadJobPayload):
        from_bus(fields, cmd.node.state.now, None)


def test_the_nacks_queued_carries_the_reason_to_the_other_copy(pair):
    job_id = pair.shared_job("RETRY", 5)
    journal = RecordingJournal()
    pair.b.state.set_journal(journal)
    pair.ca.ok("GETJOB", "FROM", "q")
    assert pair.ca.ok("NACK", job_id, "REASON", FAILURE) == 1
    assert pair.sent("a") == [{"type": "QUEUED", "id": job_id, "mflags": m.MFLAG_INCR_NACKS,
                               "moves": 0, "nack_reason": FAILURE}]
    pair.pump("a")
    copy = pair.b.state.jobs[job_id]
    assert (copy.state, copy.nacks, nack_reason_of(copy)) == (ACTIVE, 1, FAILURE)
    assert pair.cb.show(job_id)["nack-reason"] == FAILURE
    assert journal.events == [("removed", job_id, b"q", REASON_NACK_REASON),
                              ("stored", job_id, b"q")]


def test_a_delayed_nacks_working_carries_the_reason(pair):
    job_id = pair.shared_job("RETRY", 5)
    pair.ca.ok("GETJOB", "FROM", "q")
    pair.ca.ok("NACK", job_id, "DELAY", 10, "REASON", "later")
    (msg,) = pair.sent("a")
    assert (msg["type"], msg["delay"], msg["nack_reason"]) == ("WORKING", 10, b"later")
    pair.pump("a")
    assert pair.cb.show(job_id)["nack-reason"] == b"later"


def test_the_move_and_the_reason_reach_the_other_copy_together(pair):
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 1)
    pair.ca.ok("GETJOB", "FROM", "q")
    pair.ca.ok("NACK", job_id, "REASON", "fatal")
    (msg,) = pair.sent("a")
    assert (msg["moves"], msg["queue"], msg["nack_reason"]) == (1, b"q:dead", b"fatal")
    pair.pump("a")
    shown = pair.cb.show(job_id)
    assert (shown["queue"], shown["dead-reason"], shown["nack-reason"]) == (
        b"q:dead", b"maxdeliver", b"fatal")


@pytest.mark.parametrize("value", [b"", b"x" * (MAX_NACK_REASON + 1), "text", 7, [b"x"]])
def test_a_bad_reason_on_the_bus_is_ignored(pair, value):
    job_id = pair.shared_job("RETRY", 5)
    pair.ca.ok("GETJOB", "FROM", "q")
    pair.ca.ok("NACK", job_id)
    (msg,) = pair.sent("a")
    msg["nack_reason"] = value
    pair.pump("a")
    copy = pair.b.state.jobs[job_id]
    assert copy.nacks == 1 and copy.ext is None


def test_a_holder_that_missed_the_move_takes_the_reason_with_the_generation(pair):
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 1)
    pair.ca.ok("GETJOB", "FROM", "q")
    pair.ca.ok("NACK", job_id, "REASON", "fatal")
    pair.drop("a")  # b hears neither the NACK nor the move
    assert pair.cb.show(job_id).get("nack-reason") is None
    advance(pair.a, 5300, step=100)  # a's copy, queued and moved, says so again
    (again,) = pair.sent("a", "QUEUED")
    assert "mflags" not in again and again["nack_reason"] == b"fatal"
    pair.pump("a")
    shown = pair.cb.show(job_id)
    assert (shown["queue"], shown["nack-reason"]) == (b"q:dead", b"fatal")


def test_a_message_of_the_same_generation_does_not_change_the_reason(pair):
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 1)
    pair.ca.ok("GETJOB", "FROM", "q")
    pair.ca.ok("NACK", job_id, "REASON", "fatal")
    pair.pump("a")
    job = pair.a.state.jobs[job_id]
    job.ext.nack_reason = b"another copy's"
    stale = pair.a.state.lifecycle.job_message(m.QUEUED, job)
    assert stale["moves"] == 1 and stale["nack_reason"] == b"another copy's"
    deliver(pair.b, pair.a.state.id, stale)
    assert pair.cb.show(job_id)["nack-reason"] == b"fatal"
