"""Inspection: looking inside queues and jobs of other nodes for the
dashboard (QUEUEPEEK, JOBPEEK, REDRIVE answered with ANSWER), bounded, and
the answers handed to whoever listens."""

from __future__ import annotations

from disque.cluster import messages as m
from disque.cluster.inspection import BODY_PREVIEW, LIST_PREVIEW, MAX_PEEK, job_record
from tests.unit.helpers import PEER_ID, Cmd, add_peer, deliver, make_node


class Listener:
    def __init__(self) -> None:
        self.answers: list[tuple[bytes, int, object]] = []

    def answered(self, node_id: bytes, request: int, value: object) -> None:
        self.answers.append((node_id, request, value))


def answers(node) -> list[dict]:
    return [msg for _, msg in node.state.outbox.transport.of_type(m.ANSWER)]


def pairs(record: list) -> dict:
    return dict(zip(record[0::2], record[1::2]))


def dead_letter(cmd: Cmd) -> bytes:
    job_id = cmd.addjob("mail", "bounce", "MAXDELIVER", 1, "REPLICATE", 1)
    cmd("GETJOB", "FROM", "mail")
    cmd("NACK", job_id)
    return job_id


def test_a_job_is_described_as_show_describes_it_with_its_body_cut():
    node = make_node()
    cmd = Cmd(node)
    job_id = cmd.addjob("q", "x" * 100, "HEADER", "trace", "abc")
    job = node.state.jobs.by_id[job_id]
    record = pairs(job_record(job, node.state.now, 10))
    show = cmd.show(job_id)
    assert record[b"body"] == b"x" * 10 and record[b"body-size"] == 100
    assert {key.decode() for key in record} - {"body-size"} == set(show)
    assert record[b"headers"] == [b"trace", b"abc"]


def test_a_dead_letter_carries_its_reasons():
    node = make_node()
    job_id = dead_letter(Cmd(node))
    record = pairs(node.state.inspection.job_peek(job_id))
    assert record[b"queue"] == b"mail:dead" and record[b"dead-reason"] == b"maxdeliver"
    assert record[b"origin-queue"] == b"mail"


def test_queuepeek_is_answered_with_the_length_and_the_first_jobs():
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    ids = [cmd.addjob("q", "b" * 1000, "REPLICATE", 1) for _ in range(MAX_PEEK + 5)]
    deliver(node, PEER_ID, {m.TYPE: m.QUEUEPEEK, m.REQ: 7, m.QUEUE: b"q", m.COUNT: 1000})
    (answer,) = answers(node)
    assert answer[m.REQ] == 7
    length, records = answer[m.VALUE]
    assert length == MAX_PEEK + 5 and len(records) == MAX_PEEK
    assert [pairs(r)[b"id"] for r in records] == ids[:MAX_PEEK]
    assert all(len(pairs(r)[b"body"]) == LIST_PREVIEW for r in records)
    deliver(node, PEER_ID, {m.TYPE: m.QUEUEPEEK, m.REQ: 8, m.QUEUE: b"none", m.COUNT: 5})
    deliver(node, PEER_ID, {m.TYPE: m.QUEUEPEEK, m.REQ: 9, m.QUEUE: b"q", m.COUNT: -3})
    assert [a[m.VALUE] for a in answers(node)[1:]] == [[0, []], [MAX_PEEK + 5, []]]


def test_jobpeek_is_answered_with_the_copy_or_none():
    node = make_node()
    add_peer(node)
    job_id = Cmd(node).addjob("q", "y" * (BODY_PREVIEW + 1), "REPLICATE", 1)
    deliver(node, PEER_ID, {m.TYPE: m.JOBPEEK, m.REQ: 1, m.ID: job_id})
    deliver(node, PEER_ID, {m.TYPE: m.JOBPEEK, m.REQ: 2, m.ID: b"D-" + job_id[2:-4] + b"ffff"})
    found, missing = answers(node)
    assert len(pairs(found[m.VALUE])[b"body"]) == BODY_PREVIEW and missing[m.VALUE] is None


def test_redrive_moves_the_dead_letters_queued_here():
    node = make_node()
    add_peer(node)
    job_id = dead_letter(Cmd(node))
    deliver(node, PEER_ID, {m.TYPE: m.REDRIVE, m.REQ: 3, m.QUEUE: b"mail:dead", m.USER: b"ops"})
    assert answers(node)[-1][m.VALUE] == 1
    assert node.state.jobs.by_id[job_id].queue == b"mail"


def test_requests_go_to_a_linked_node_and_answers_to_the_listener():
    node = make_node()
    inspection = node.state.inspection
    assert inspection.ask_job(PEER_ID, b"D-" + b"0" * 38) == 0  # no such node: nothing sent
    add_peer(node)
    listener = inspection.listener = Listener()
    first = inspection.ask_queue(PEER_ID, b"q", 5)
    second = inspection.ask_redrive(PEER_ID, b"q:dead", b"ops")
    assert first and second > first
    sent = [msg for _, msg in node.state.outbox.transport if msg[m.TYPE] in (m.QUEUEPEEK, m.REDRIVE)]
    assert sent == [{m.TYPE: m.QUEUEPEEK, m.QUEUE: b"q", m.COUNT: 5, m.REQ: first},
                    {m.TYPE: m.REDRIVE, m.QUEUE: b"q:dead", m.USER: b"ops", m.REQ: second}]
    deliver(node, PEER_ID, {m.TYPE: m.ANSWER, m.REQ: first, m.VALUE: [0, []]})
    deliver(node, PEER_ID, {m.TYPE: m.ANSWER, m.REQ: "x"})  # malformed: never reaches it
    assert listener.answers == [(PEER_ID, first, [0, []])]


def test_delete_copies_sends_the_deljob_of_a_fastack():
    node = make_node()
    add_peer(node)
    job_id = b"D-" + b"1" * 38
    node.state.inspection.delete_copies(job_id, [PEER_ID])
    assert node.state.outbox.transport.of_type(m.DELJOB) == [
        (PEER_ID, m.job_message(m.DELJOB, job_id))]
