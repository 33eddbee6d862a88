"""Commands done in steps (disque/commands/streams.py): a client whose
connection runs the steps gets the bytes another client gets at once; a
step does a bounded part; what happens between steps (other clients'
commands) leaves the reply consistent."""

from __future__ import annotations

import random

import hiredis

from disque.commands.streams import INLINE_IDS, INLINE_JOBS, LARGE_BODY, STEP_JOBS
from disque.context.clients import ClientState
from disque.jobs.journal import REASON_DELETED
from disque.node import Node
from tests.unit.cluster.wiring import RecordingJournal
from tests.unit.helpers import Cmd, decode, make_node, to_bytes

MANY = INLINE_JOBS * 4 + 7  # enough for several steps, not a multiple of a step


class Steps:
    """A client that answers in steps, as a connection runs them."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.client = ClientState(9, "127.0.0.1:50009")
        self.client.streams_replies = True
        self.steps = 0

    def start(self, *args) -> bytes:
        """Run the command: the bytes it answers at once (its stream may follow)."""
        reply = self.node.call(self.client, [to_bytes(a) for a in args])
        assert reply is not None
        return reply

    def step(self) -> bytes:
        """One step's bytes."""
        out: list[bytes] = []
        self.node.stream_step(self.client, out)
        self.steps += 1
        return b"".join(out)

    def raw(self, *args, between=None) -> bytes:
        """The whole reply, ``between()`` run between any two steps."""
        reply = [self.start(*args)]
        while self.client.stream is not None:
            reply.append(self.step())
            if between is not None and self.client.stream is not None:
                between()
        return b"".join(reply)

    def __call__(self, *args, between=None):
        return decode(self.raw(*args, between=between))


def twins(fill) -> tuple[Cmd, Steps]:
    """Two nodes that went through the same commands (the same job IDs):
    a client of one answered at once, a client of the other in steps."""
    at_once, in_steps = make_node(), make_node()
    fill(Cmd(at_once))
    fill(Cmd(in_steps))
    return Cmd(at_once), Steps(in_steps)


def fill_queue(cmd: Cmd, queue: str = "q", count: int = MANY, body: str = "body-%d") -> list[bytes]:
    return [cmd.addjob(queue, body % i) for i in range(count)]


def test_qpeek_in_steps_answers_the_bytes_of_qpeek_at_once():
    at_once, steps = twins(lambda cmd: [fill_queue(cmd), cmd.addjob("q", "urgent", "PRIORITY", 9)])
    for args in (("QPEEK", "q", MANY), ("QPEEK", "q", -MANY), ("QPEEK", "q", 10 * MANY),
                 ("QPEEK", "q", INLINE_JOBS + 1, "WITHPRIORITY"), ("QPEEK", "q", -MANY + 5)):
        before = steps.steps
        assert steps.raw(*args) == at_once.raw(*args), args
        assert steps.steps - before >= 2, args  # gathered, then sent
    # A small QPEEK answers at once, as it always did.
    assert steps.start("QPEEK", "q", 3) == at_once.raw("QPEEK", "q", 3)
    assert steps.client.stream is None


def test_qpeek_in_steps_goes_on_from_where_it_was_while_the_queue_changes():
    node = make_node()
    cmd = Cmd(node)
    ids = fill_queue(cmd, count=INLINE_JOBS + 3 * STEP_JOBS)
    steps = Steps(node)
    rng = random.Random(7)
    print("seed 7")
    gone: set[bytes] = set()
    added: list[bytes] = []
    seen: list[bytes] = []

    def meanwhile():
        # Jobs leave (acked, some already gathered, some not yet) and come.
        for job_id in rng.sample([i for i in ids if i not in gone], 40):
            assert cmd.ok("ACKJOB", job_id) == 1
            gone.add(job_id)
        added.append(cmd.addjob("q", "late"))

    head = steps.start("QPEEK", "q", len(ids) + 1000)
    assert head == b""
    while steps.client.stream is not None:
        seen.append(steps.step())
        if steps.client.stream is not None:
            meanwhile()
    entries = decode(b"".join(seen))
    shown = [entry[1] for entry in entries]
    assert len(shown) == len(set(shown))  # the array's count is its entries', none twice
    order = {job_id: n for n, job_id in enumerate(ids + added)}
    assert shown == sorted(shown, key=order.__getitem__)  # the queue's order
    # A job acked before the walk reached it is not shown; one acked after is.
    assert set(ids[:INLINE_JOBS]) <= set(shown)
    assert any(job_id in gone for job_id in shown)
    assert any(job_id in gone and job_id not in shown for job_id in ids)
    assert set(added) & set(shown)
    assert all(entry[2] in (b"late", b"body-%d" % order[entry[1]]) for entry in entries)


def test_getjob_count_in_steps_pops_round_robin_as_getjob_at_once():
    def fill(cmd: Cmd) -> None:
        fill_queue(cmd, "a", MANY)
        fill_queue(cmd, "b", 300)
        fill_queue(cmd, "c", 5)
    at_once, steps = twins(fill)
    for args in (("GETJOB", "NOHANG", "COUNT", 700, "WITHCOUNTERS", "FROM", "a", "b", "c", "a"),
                 ("GETJOB", "COUNT", 10 * MANY, "WITHHEADERS", "FROM", "a", "b", "nosuch")):
        before = steps.steps
        assert steps.raw(*args) == at_once.raw(*args), args
        assert steps.steps - before > 2, args
        assert steps.node.state.counters.delivered == at_once.node.state.counters.delivered
    assert steps.raw("QLEN", "a") == at_once.raw("QLEN", "a") == b":0\r\n"


def test_large_bodies_reach_the_reply_uncopied_and_unchanged():
    big = "x" * LARGE_BODY

    def fill(cmd: Cmd) -> None:
        cmd.addjob("q", "small")
        cmd.addjob("q", big, "PRIORITY", 7)
        cmd.addjob("h", big, "HEADER", "trace", "t1")
    at_once, steps = twins(fill)
    job_id = at_once.ok("QPEEK", "q", 1)[0][1]
    for args in (("SHOW", job_id), ("QPEEK", "q", 2, "WITHPRIORITY"), ("QPEEK", "q", -2),
                 ("JSCAN", "REPLY", "all"), ("GETJOB", "COUNT", 2, "WITHCOUNTERS", "FROM", "q"),
                 ("GETJOB", "WITHHEADERS", "FROM", "h")):
        bodies = {id(job.body) for job in steps.node.state.jobs.values()
                  if len(job.body) >= LARGE_BODY}
        reply = [steps.start(*args)]
        assert steps.client.stream is not None, args
        out: list[bytes] = []
        while steps.client.stream is not None:
            steps.node.stream_step(steps.client, out)
        assert any(id(part) in bodies for part in out), args  # the job's body itself
        assert b"".join(reply + out) == at_once.raw(*args), args


def test_qpurge_in_steps_journals_every_job_it_counts():
    node = make_node()
    journal = RecordingJournal()
    node.state.set_journal(journal)
    cmd = Cmd(node)
    ids = fill_queue(cmd, count=MANY)
    journal.events.clear()
    steps = Steps(node)
    late: list[bytes] = []
    lengths: list[int] = []

    def meanwhile():
        lengths.append(cmd.ok("QLEN", "q"))
        late.append(cmd.addjob("q", "late"))
    purged = steps("QPURGE", "q", between=meanwhile)
    assert steps.steps > 2 and lengths == sorted(lengths, reverse=True)
    # At most what the queue held when it began; each one journaled.
    assert purged == MANY
    removed = [event for event in journal.events if event[0] == "removed"]
    assert sorted(removed) == sorted(("removed", job_id, REASON_DELETED) for job_id in ids)
    assert cmd.ok("QLEN", "q") == len(late)
    assert [cmd.show(job_id) for job_id in ids] == [None] * MANY


def test_commands_on_many_ids_work_in_steps_with_the_same_counts():
    count = INLINE_IDS + 500

    def fill(cmd: Cmd) -> None:
        fill_queue(cmd, "q", count)
    for name in ("ACKJOB", "FASTACK", "DELJOB", "DEQUEUE"):
        at_once, steps = twins(fill)
        ids = [entry[1] for entry in at_once.ok("QPEEK", "q", count)]
        ids.append(ids[0][:12] + (b"A" if ids[0][12:13] != b"A" else b"B") + ids[0][13:])  # unknown
        before = steps.steps
        assert steps.raw(name, *ids) == at_once.raw(name, *ids) == b":%d\r\n" % count, name
        assert steps.steps - before > 2, name
        assert steps.raw("QLEN", "q") == at_once.raw("QLEN", "q") == b":0\r\n"
        assert (steps.node.state.counters.acked == at_once.node.state.counters.acked)
    # NACK and ENQUEUE of active jobs.
    at_once, steps = twins(fill)
    for cmd in (at_once, steps):
        cmd("GETJOB", "COUNT", count, "FROM", "q")
    ids = [job.id for job in at_once.node.state.jobs.values()]
    for name in ("NACK", "ENQUEUE"):
        assert steps.raw(name, *ids) == at_once.raw(name, *ids), name
    assert steps.raw("QLEN", "q") == b":%d\r\n" % count


def test_one_malformed_id_among_many_refuses_them_all():
    node = make_node()
    cmd = Cmd(node)
    ids = fill_queue(cmd, count=INLINE_IDS + 1)
    steps = Steps(node)
    for name in ("ACKJOB", "FASTACK", "DELJOB", "NACK"):
        reply = steps(name, *ids, "D-not-an-id")
        assert isinstance(reply, hiredis.ReplyError) and str(reply).startswith("BADID"), name
    assert cmd.ok("QLEN", "q") == len(ids)


def test_a_client_that_does_not_stream_gets_the_whole_reply_at_once():
    node = make_node()
    cmd = Cmd(node)
    ids = fill_queue(cmd, count=MANY)
    assert len(cmd.ok("QPEEK", "q", MANY)) == MANY
    assert cmd.client.stream is None
    assert cmd.ok("ACKJOB", *ids) == MANY


def test_a_client_gone_drops_what_it_had_still_to_do():
    node = make_node()
    fill_queue(Cmd(node), count=MANY)
    steps = Steps(node)
    steps.start("QPURGE", "q")
    steps.step()
    node.client_gone(steps.client)
    assert steps.client.stream is None
    assert MANY - 2 * STEP_JOBS <= Cmd(node).ok("QLEN", "q") < MANY
