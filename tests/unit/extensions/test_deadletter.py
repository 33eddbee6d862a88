"""Dead letters (docs/dead-letters.md): MAXDELIVER's move to the
dead-letter queue, QREDRIVE, the copies' generations over the bus, and the
AOF records of a move."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from disque.aof.writer import AofWriter
from disque.cluster import messages as m
from disque.config import Config
from disque.jobs.job import ACTIVE, QUEUED
from disque.jobs.journal import REASON_QUEUE_CHANGED
from tests.support.aof import file_records, load_into
from tests.unit.helpers import NODE_ID, PEER_ID, Cmd, add_peer, advance, make_node
from tests.unit.helpers import deliver as deliver_one

COUNT_RANGE = "ERR COUNT must be a number greater than zero"
SYNTAX = "ERR syntax error"


@pytest.fixture
def cmd():
    return Cmd(make_node())


def fail(cmd: Cmd, job_id: bytes, queues=("q", "q:dead")) -> None:
    """Deliver the job (it must be the one served) and NACK it."""
    got = cmd.ok("GETJOB", "NOHANG", "FROM", *queues)
    assert got is not None and got[0][1] == job_id, got
    assert cmd.ok("NACK", job_id) == 1


def where(cmd: Cmd, job_id: bytes) -> tuple:
    shown = cmd.show(job_id)
    return shown["queue"], shown["state"], shown["origin-queue"], shown["dead-reason"]


# ------------------------------------------------------------ one node

def test_the_nth_failure_moves_the_job_to_its_dead_letter_queue(cmd):
    job_id = cmd.addjob("q", "poison\r\nbody", "MAXDELIVER", 3)
    fail(cmd, job_id)
    fail(cmd, job_id)
    assert where(cmd, job_id) == (b"q", b"queued", None, None)
    fail(cmd, job_id)  # the third delivery failed: a fourth would be beyond MAXDELIVER
    assert where(cmd, job_id) == (b"q:dead", b"queued", b"q", b"maxdeliver")
    assert cmd.ok("QLEN", "q") == 0 and cmd.ok("QLEN", "q:dead") == 1
    entry = cmd.ok("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "q:dead")[0]
    assert entry == [b"q:dead", job_id, b"poison\r\nbody", b"nacks", 3,
                     b"additional-deliveries", 0]


def test_retry_timeouts_count_as_deliveries(cmd):
    job_id = cmd.addjob("q", "b", "MAXDELIVER", 2, "RETRY", 1)
    assert cmd.ok("GETJOB", "FROM", "q")[0][1] == job_id
    advance(cmd.node, 1300, step=50)  # requeued: the second delivery may happen
    assert where(cmd, job_id)[:2] == (b"q", b"queued")
    assert cmd.ok("GETJOB", "FROM", "q")[0][1] == job_id
    advance(cmd.node, 1300, step=50)
    assert where(cmd, job_id) == (b"q:dead", b"queued", b"q", b"maxdeliver")
    shown = cmd.show(job_id)
    assert (shown["nacks"], shown["additional-deliveries"]) == (0, 2)


def test_nacks_and_timeouts_add_up(cmd):
    job_id = cmd.addjob("q", "b", "MAXDELIVER", 3, "RETRY", 1)
    fail(cmd, job_id)  # delivery 1, NACKed
    cmd.ok("GETJOB", "FROM", "q")  # delivery 2, times out
    advance(cmd.node, 1300, step=50)
    assert where(cmd, job_id)[0] == b"q"
    fail(cmd, job_id)  # delivery 3, NACKed
    assert where(cmd, job_id)[0] == b"q:dead"


def test_maxdeliver_1_dead_letters_at_the_first_failure(cmd):
    job_id = cmd.addjob("q", "b", "MAXDELIVER", 1, "DEADLETTER", "graveyard")
    fail(cmd, job_id, ("q",))
    assert where(cmd, job_id) == (b"graveyard", b"queued", b"q", b"maxdeliver")
    assert cmd.show(job_id)["deadletter"] == b"graveyard"


def test_a_dead_letter_is_never_moved_again(cmd):
    job_id = cmd.addjob("q", "b", "MAXDELIVER", 1, "RETRY", 1)
    fail(cmd, job_id)
    for _ in range(5):
        fail(cmd, job_id)
    cmd.ok("GETJOB", "FROM", "q:dead")
    advance(cmd.node, 3000, step=100)
    assert where(cmd, job_id) == (b"q:dead", b"queued", b"q", b"maxdeliver")
    assert cmd.node.state.jobs[job_id].ext.moves == 1
    assert cmd.ok("QLEN", "q:dead:dead") == 0


def test_unlimited_and_plain_jobs_are_never_dead_letters(cmd):
    plain = cmd.addjob("q", "plain")
    unlimited = cmd.addjob("q", "unlimited", "MAXDELIVER", 0)
    for _ in range(20):
        got = cmd.ok("GETJOB", "COUNT", 2, "FROM", "q")
        assert [entry[1] for entry in got] == [plain, unlimited]
        assert cmd.ok("NACK", plain, unlimited) == 2
    assert cmd.ok("QLEN", "q") == 2 and cmd.node.state.jobs[plain].ext is None
    assert cmd.show(unlimited)["nacks"] == 20


def test_maxdeliver_default_dead_letters_jobs_without_maxdeliver():
    config = Config()
    config.maxdeliver_default = 2
    cmd = Cmd(make_node(config=config))
    job_id = cmd.addjob("q", "b")
    fail(cmd, job_id)
    fail(cmd, job_id)
    assert where(cmd, job_id)[0] == b"q:dead"


def test_enqueue_counts_but_only_a_failure_moves_the_job(cmd):
    """ENQUEUE of a job queued before counts as an additional delivery (as
    in Disque 1.0) but is not a failed delivery: the next NACK or timeout
    moves the job."""
    job_id = cmd.addjob("q", "b", "MAXDELIVER", 2)
    for _ in range(3):
        cmd.ok("GETJOB", "FROM", "q")
        assert cmd.ok("ENQUEUE", job_id) == 1
    assert where(cmd, job_id)[0] == b"q" and cmd.show(job_id)["additional-deliveries"] == 3
    fail(cmd, job_id)
    assert where(cmd, job_id)[0] == b"q:dead"


def test_a_consumer_blocked_on_the_dead_letter_queue_gets_the_job(cmd):
    job_id = cmd.addjob("q", "b", "MAXDELIVER", 1)
    watcher = Cmd(cmd.node, client=type(cmd.client)(2, "127.0.0.1:50001"))
    assert watcher.raw("GETJOB", "FROM", "q:dead") is None  # blocks
    fail(cmd, job_id, ("q",))
    assert watcher.sent() == [[[b"q:dead", job_id, b"b"]]]


# ------------------------------------------------------------ QREDRIVE

def test_qredrive_brings_dead_letters_back_with_counters_reset(cmd):
    job_id = cmd.addjob("q", "b", "MAXDELIVER", 2, "RETRY", 7, "BACKOFF", 2)
    fail(cmd, job_id)
    cmd.ok("GETJOB", "FROM", "q")
    advance(cmd.node, 7500, step=100)  # a timeout: backed off to 14 s, and dead
    shown = cmd.show(job_id)
    assert shown["queue"] == b"q:dead" and shown["retry"] == 14
    assert cmd.ok("QREDRIVE", "q:dead") == 1
    shown = cmd.show(job_id)
    assert (shown["queue"], shown["state"], shown["origin-queue"], shown["dead-reason"]) == (
        b"q", b"queued", None, None)
    assert (shown["nacks"], shown["additional-deliveries"], shown["retry"]) == (0, 0, 7)
    assert cmd.node.state.jobs[job_id].ext.moves == 2
    assert cmd.ok("QLEN", "q:dead") == 0 and cmd.ok("QLEN", "q") == 1
    # It has MAXDELIVER deliveries again before the next move.
    fail(cmd, job_id)
    assert where(cmd, job_id)[0] == b"q"
    fail(cmd, job_id)
    assert where(cmd, job_id)[0] == b"q:dead"
    assert cmd.node.state.jobs[job_id].ext.moves == 3


def test_qredrive_count_skips_live_jobs_and_returns_each_to_its_origin(cmd):
    dead = []
    for queue in ("a", "b", "a"):
        job_id = cmd.addjob(queue, "x", "MAXDELIVER", 1, "DEADLETTER", "graveyard")
        fail(cmd, job_id, (queue,))
        dead.append(job_id)
    live = cmd.addjob("graveyard", "a live job")
    assert cmd.ok("QLEN", "graveyard") == 4
    assert cmd.ok("QREDRIVE", "graveyard", "COUNT", 2) == 2
    assert [cmd.show(j)["queue"] for j in dead] == [b"a", b"b", b"graveyard"]
    assert cmd.ok("QREDRIVE", "graveyard", "count", "10") == 1
    assert [cmd.show(j)["queue"] for j in dead] == [b"a", b"b", b"a"]
    assert cmd.ok("QREDRIVE", "graveyard") == 0
    assert cmd.show(live)["queue"] == b"graveyard" and cmd.ok("QLEN", "graveyard") == 1


def test_qredrive_leaves_dead_letters_being_delivered(cmd):
    job_id = cmd.addjob("q", "b", "MAXDELIVER", 1)
    fail(cmd, job_id)
    cmd.ok("GETJOB", "FROM", "q:dead")  # active: not queued in the dead-letter queue
    assert cmd.ok("QREDRIVE", "q:dead") == 0
    assert where(cmd, job_id) == (b"q:dead", b"active", b"q", b"maxdeliver")


@pytest.mark.parametrize("args, error", [
    (["COUNT", 0], COUNT_RANGE),
    (["COUNT", -1], COUNT_RANGE),
    (["COUNT", "x"], COUNT_RANGE),
    (["COUNT"], SYNTAX),
    (["LIMIT", 1], SYNTAX),
    (["COUNT", 1, "EXTRA"], SYNTAX),
])
def test_qredrive_errors(cmd, args, error):
    job_id = cmd.addjob("q", "b", "MAXDELIVER", 1)
    fail(cmd, job_id)
    assert cmd.error("QREDRIVE", "q:dead", *args) == error
    assert where(cmd, job_id)[0] == b"q:dead"


def test_qredrive_of_an_unknown_queue_and_arity(cmd):
    assert cmd.raw("QREDRIVE", "nosuch") == b":0\r\n"
    assert cmd.error("QREDRIVE") == "ERR wrong number of arguments for 'qredrive' command"
    entry = cmd.ok("COMMAND", "INFO", "qredrive")[0]
    assert entry[:3] == [b"qredrive", -2, [b"write"]]


# ------------------------------------------------------------ the AOF

class RecordingJournal:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def job_stored(self, job) -> None:
        self.events.append(("stored", job.id, job.queue))

    def job_removed(self, job, reason: bytes) -> None:
        self.events.append(("removed", job.id, job.queue, reason))


def test_a_move_and_a_redrive_are_journaled_as_deljob_then_loadjob(cmd):
    journal = RecordingJournal()
    cmd.node.state.set_journal(journal)
    job_id = cmd.addjob("q", "b", "MAXDELIVER", 1)
    fail(cmd, job_id)
    assert journal.events == [("stored", job_id, b"q"),
                              ("removed", job_id, b"q", REASON_QUEUE_CHANGED),
                              ("stored", job_id, b"q:dead")]
    del journal.events[:]
    assert cmd.ok("QREDRIVE", "q:dead") == 1
    assert journal.events == [("removed", job_id, b"q:dead", REASON_QUEUE_CHANGED),
                              ("stored", job_id, b"q")]


@pytest.fixture
async def writer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    node = make_node()
    aof = AofWriter(node.state, node.state.config, asyncio.get_running_loop(), logging.getLogger("test"))
    yield node, aof
    if aof.fd >= 0:
        os.close(aof.fd)
    aof.fsync_pool.shutdown()


def load_file():
    node = make_node(seed=99)
    load_into(node, "disque.aof", enqueue_once=True)
    return node


def test_a_restarted_node_has_the_dead_letter_where_it_was(writer):
    node, aof = writer
    aof.open_existing()
    cmd = Cmd(node)
    job_id = cmd.addjob("q", "b", "MAXDELIVER", 1)
    aof.flush()
    fail(cmd, job_id)
    aof.flush()
    logged = [(r[0], r[-1] if r[0] == b"DELJOB" else None) for r in file_records()]
    assert logged == [(b"LOADJOB", None), (b"DELJOB", REASON_QUEUE_CHANGED), (b"LOADJOB", None)]
    job = load_file().state.jobs[job_id]
    assert (job.queue, job.state, job.ext.origin, job.ext.reason, job.ext.moves) == (
        b"q:dead", QUEUED, b"q", b"maxdeliver", 1)
    assert cmd.ok("QREDRIVE", "q:dead") == 1
    aof.flush()
    job = load_file().state.jobs[job_id]
    assert (job.queue, job.ext.origin, job.ext.moves, job.nacks) == (b"q", None, 2, 0)


# ------------------------------------------------------- two nodes, one bus

class Pair:
    """Two nodes that know each other; messages move when ``pump`` says so."""

    def __init__(self) -> None:
        self.a = make_node(seed=1, node_id=NODE_ID)
        self.b = make_node(seed=2, node_id=PEER_ID)
        add_peer(self.a, PEER_ID)
        add_peer(self.b, NODE_ID)
        self.ca = Cmd(self.a)
        self.cb = Cmd(self.b)

    def node(self, name: str):
        return self.a if name == "a" else self.b

    def sent(self, name: str, kind: str | None = None) -> list[dict]:
        return [msg for _, msg in self.node(name).state.outbox.transport
                if kind is None or msg["type"] == kind]

    def pump(self, src: str, kinds: tuple[str, ...] | None = None) -> list[dict]:
        """Deliver what ``src`` sent to the other node (of ``kinds``), in order."""
        sender, receiver = (self.a, self.b) if src == "a" else (self.b, self.a)
        log = sender.state.outbox.transport
        moved = [msg for _, msg in log if kinds is None or msg["type"] in kinds]
        log[:] = [(dest, msg) for dest, msg in log if not (kinds is None or msg["type"] in kinds)]
        for msg in moved:
            deliver_one(receiver, sender.state.id, msg)
        return moved

    def drop(self, src: str) -> None:
        del self.node(src).state.outbox.transport[:]

    def shared_job(self, *options) -> bytes:
        """A job created on a, copied to b (ASYNC: a queues it)."""
        job_id = self.ca.addjob("q", "body", "REPLICATE", 2, "ASYNC", *options)
        assert [msg["type"] for msg in self.pump("a")] == ["REPLJOB"]
        assert self.b.state.jobs[job_id].state == ACTIVE
        return job_id


@pytest.fixture
def pair():
    return Pair()


def test_plain_jobs_messages_are_disque_1_0s(pair):
    job_id = pair.shared_job("RETRY", 5)
    pair.ca.ok("GETJOB", "FROM", "q")
    assert pair.ca.ok("NACK", job_id) == 1
    assert pair.sent("a") == [{"type": "QUEUED", "id": job_id, "mflags": m.MFLAG_INCR_NACKS}]


def test_the_move_reaches_the_other_copy(pair):
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 1)
    pair.ca.ok("GETJOB", "FROM", "q")
    assert pair.ca.ok("NACK", job_id) == 1
    (msg,) = pair.sent("a")
    assert msg == {"type": "QUEUED", "id": job_id, "mflags": m.MFLAG_INCR_NACKS, "moves": 1,
                   "queue": b"q:dead", "origin": b"q", "reason": b"maxdeliver", "nacks": 1,
                   "adeliv": 0, "retry": 5}
    pair.pump("a")
    copy = pair.b.state.jobs[job_id]
    assert (copy.queue, copy.state, copy.ext.origin, copy.ext.reason, copy.ext.moves) == (
        b"q:dead", ACTIVE, b"q", b"maxdeliver", 1)
    assert copy.nacks == 1  # taken from the move, not incremented on top of it
    assert copy.qtime >= pair.b.state.now + 4500  # postponed: a holds it queued


def test_a_copy_queued_in_the_origin_queue_leaves_it(pair):
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 1)
    assert pair.cb.ok("ENQUEUE", job_id) == 1  # b queued its copy in q meanwhile
    pair.drop("b")
    fail(pair.ca, job_id, ("q",))
    pair.pump("a")
    assert pair.cb.ok("QLEN", "q") == 0 and pair.cb.ok("QLEN", "q:dead") == 0
    assert pair.b.state.jobs[job_id].state == ACTIVE and pair.b.state.jobs[job_id].queue == b"q:dead"


def test_an_older_generations_queued_gets_the_move_back(pair):
    """b missed the move (a partition) and requeued its copy in q: a answers
    with the move, keeps its own copy queued, and b's copy leaves q."""
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 2)
    fail(pair.ca, job_id)
    fail(pair.ca, job_id)
    assert pair.a.state.jobs[job_id].queue == b"q:dead"
    pair.drop("a")  # b hears neither NACK nor the move
    # A copy announces its first queueing: counted, b's second delivery, not beyond 2.
    assert pair.cb.ok("ENQUEUE", job_id) == 1
    assert pair.b.state.jobs[job_id].queue == b"q"
    (stale,) = pair.sent("b", "QUEUED")
    assert stale["moves"] == 0
    pair.pump("b")
    assert pair.a.state.jobs[job_id].state == QUEUED and pair.a.state.jobs[job_id].queue == b"q:dead"
    assert pair.a.state.jobs[job_id].adeliv == 0  # an older generation's counters are not taken
    (answer,) = pair.sent("a")
    assert answer["type"] == "QUEUED" and answer["moves"] == 1 and "mflags" not in answer
    pair.pump("a")
    copy = pair.b.state.jobs[job_id]
    assert (copy.queue, copy.state, copy.ext.moves, copy.nacks) == (b"q:dead", ACTIVE, 1, 2)
    assert pair.cb.ok("QLEN", "q") == 0


def test_b_dead_letters_on_its_own_in_the_same_generation(pair):
    """Both sides decide the move apart: one generation, one queue, and the
    QUEUED tie-break leaves the job queued on one node only."""
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 1)
    fail(pair.ca, job_id, ("q",))
    pair.drop("a")
    advance(pair.b, 5300, step=100)  # b's retry timer: a counted requeue, beyond 1
    assert pair.b.state.jobs[job_id].queue == b"q:dead" and pair.b.state.jobs[job_id].ext.moves == 1
    advance(pair.a, 5300, step=100)  # a's copy, queued and moved, says so again
    assert pair.sent("a", "QUEUED") and pair.sent("b", "QUEUED")
    pair.pump("b", ("QUEUED",))
    pair.pump("a", ("QUEUED",))
    queued = [n for n in (pair.a, pair.b) if n.state.jobs[job_id].state == QUEUED]
    assert len(queued) == 1
    assert all(n.state.jobs[job_id].queue == b"q:dead" for n in (pair.a, pair.b))


def test_an_older_generations_willqueue_gets_the_move_back(pair):
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 1)
    fail(pair.ca, job_id, ("q",))
    pair.drop("a")
    advance(pair.b, 4900, step=50)  # 500 ms before b's requeue: WILLQUEUE
    (willqueue,) = pair.sent("b", "WILLQUEUE")
    assert willqueue["moves"] == 0
    pair.pump("b")
    pair.pump("a")
    assert pair.b.state.jobs[job_id].queue == b"q:dead"
    advance(pair.b, 1000, step=50)  # its requeue was postponed by the answer
    assert pair.b.state.jobs[job_id].state == ACTIVE


def test_a_moved_job_queued_says_so_each_retry_period(pair):
    job_id = pair.shared_job("RETRY", 2, "MAXDELIVER", 1)
    fail(pair.ca, job_id, ("q",))
    pair.drop("a")
    advance(pair.a, 2500, step=100)
    (again,) = pair.sent("a", "QUEUED")
    assert again["moves"] == 1 and again["queue"] == b"q:dead" and "mflags" not in again
    pair.pump("a")
    assert pair.b.state.jobs[job_id].queue == b"q:dead"


def test_a_redrive_reaches_the_other_copy(pair):
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 1)
    fail(pair.ca, job_id, ("q",))
    pair.pump("a")
    assert pair.ca.ok("QREDRIVE", "q:dead") == 1
    (msg,) = pair.sent("a")
    assert (msg["moves"], msg["queue"], msg["nacks"], msg.get("origin")) == (2, b"q", 0, None)
    pair.pump("a")
    copy = pair.b.state.jobs[job_id]
    assert (copy.queue, copy.ext.origin, copy.ext.reason, copy.ext.moves, copy.nacks) == (
        b"q", None, None, 2, 0)


@pytest.mark.parametrize("bad", [
    {"queue": 7}, {"queue": b""}, {"origin": 1}, {"nacks": -1}, {"retry": "5"}, {"moves": 1.0},
    {"queue": None},
])
def test_a_malformed_generation_is_not_applied(pair, bad):
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 1)
    msg = {"type": "QUEUED", "id": job_id, "moves": 1, "queue": b"elsewhere", "nacks": 0,
           "adeliv": 0, "retry": 5}
    msg.update(bad)
    if msg["queue"] is None:
        del msg["queue"]
    deliver_one(pair.b, NODE_ID, msg)
    assert pair.b.state.jobs[job_id].queue == b"q" and pair.b.state.jobs[job_id].ext.moves == 0


def test_an_older_generations_working_is_answered_and_still_postpones(pair):
    """b, which missed the move, NACKs its copy with a delay: a tells b the
    move, and (a WORKING) still leaves the job to b's schedule."""
    job_id = pair.shared_job("RETRY", 5, "MAXDELIVER", 1, "BACKOFF", 2)
    fail(pair.ca, job_id, ("q",))
    pair.drop("a")
    assert pair.cb.ok("NACK", job_id, "DELAY", 10) == 1
    (working,) = pair.sent("b", "WORKING")
    assert (working["moves"], working["delay"], working["retry"]) == (0, 10, 5)
    pair.a.state.jobs[job_id].retry = 7  # (as if it had backed off: a stale WORKING's retry is not taken)
    pair.pump("b")
    original = pair.a.state.jobs[job_id]
    assert (original.state, original.queue, original.retry) == (ACTIVE, b"q:dead", 7)
    assert original.qtime - pair.a.state.now >= 17_000 - 250
    (answer,) = pair.sent("a")
    assert answer["type"] == "QUEUED" and answer["moves"] == 1
    pair.pump("a")
    copy = pair.b.state.jobs[job_id]
    assert (copy.queue, copy.ext.moves, copy.retry) == (b"q:dead", 1, 7)
