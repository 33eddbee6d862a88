"""disque.worker.settler without a server: a client that records what it is asked
(and answers WORKING as told) stands in for DisqueClient."""

from __future__ import annotations

import logging
import time

from redis.exceptions import ResponseError

from disque.client import DisqueError, NodeAddress
from disque.worker.settler import Settler
from disque.worker.stats import WorkerStats

A = NodeAddress("127.0.0.1", 7001)
B = NodeAddress("127.0.0.1", 7002)


class RecordingClient:
    """What the settler uses of DisqueClient, recording each command with its node."""

    def __init__(self, working: dict | None = None, failures: int = 0) -> None:
        self.working = working or {}
        self.failures = failures  # ACKJOBs that fail (as when no node answers) first
        self.calls: list[tuple] = []
        self.node: NodeAddress | None = None
        self.seeds = [A]
        self.closed = False

    def use_node(self, node: NodeAddress) -> NodeAddress:
        self.node = node
        return node

    def ack_jobs(self, ids) -> int:
        if self.failures:
            self.failures -= 1
            raise DisqueError("command failed on every node tried")
        self.calls.append(("ACKJOB", self.node, tuple(ids)))
        return len(ids)

    def nack(self, ids, delay: int = 0, reason: bytes | None = None) -> int:
        self.calls.append(("NACK", self.node, tuple(ids), delay) + ((reason,) if reason else ()))
        return len(ids)

    def working_many(self, ids) -> dict:
        self.calls.append(("WORKING", self.node, tuple(ids)))
        return {i: self.working[i] for i in ids}

    def close(self) -> None:
        self.closed = True


def settler_for(client: RecordingClient, working_after: float = 60.0,
                stats: WorkerStats | None = None) -> Settler:
    crashes: list[bool] = []
    settler = Settler(client, working_after, stats or WorkerStats(), lambda: crashes.append(True))
    settler.crashes = crashes
    return settler


def wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met within %.0f s" % timeout
        time.sleep(0.01)


def test_outcomes_go_in_bulk_to_the_node_that_delivered_each_job():
    client = RecordingClient()
    stats = WorkerStats()
    settler = settler_for(client, stats=stats)
    # Queued before the thread starts: one pass of the thread takes them all.
    settler.held(A, ["a1", "a2", "a3", "a4"])
    settler.held(B, ["b1", "b2"])
    for job_id in ("a1", "b1", "a2"):
        settler.ack(job_id)
    settler.nack("a3", 5)
    settler.nack("a4", 0)
    settler.nack("b2", 5)
    settler.start()
    assert settler.close(5)
    assert sorted(client.calls, key=repr) == sorted([
        ("ACKJOB", A, ("a1", "a2")), ("NACK", A, ("a3",), 5), ("NACK", A, ("a4",), 0),
        ("ACKJOB", B, ("b1",)), ("NACK", B, ("b2",), 5)], key=repr)
    assert (stats.acked, stats.nacked) == (3, 3)
    assert client.closed and not settler.crashes


def test_nacks_are_grouped_by_delay_and_reason():
    client = RecordingClient()
    settler = settler_for(client)
    settler.held(A, ["a1", "a2", "a3", "a4"])
    settler.nack("a1", 5, b"ValueError: x")
    settler.nack("a2", 5, b"ValueError: x")
    settler.nack("a3", 5, b"KeyError: 'k'")
    settler.nack("a4", 5)
    settler.start()
    assert settler.close(5)
    assert sorted(client.calls, key=repr) == sorted([
        ("NACK", A, ("a1", "a2"), 5, b"ValueError: x"), ("NACK", A, ("a3",), 5, b"KeyError: 'k'"),
        ("NACK", A, ("a4",), 5)], key=repr)


def test_working_renews_until_the_server_refuses(caplog):
    caplog.set_level(logging.DEBUG, logger="disque.worker")
    client = RecordingClient(working={
        "kept": 3, "late": ResponseError("TOOLATE Half of job TTL already elapsed"),
        "gone": ResponseError("NOJOB Job not known in the context of this node.")})
    settler = settler_for(client, working_after=0.0)
    settler.held(B, ["kept", "late", "gone"])
    settler.start()
    # "kept" is due again a third of its 3 s retry later; the other two never again.
    wait_for(lambda: len(settler.leases) == 1)
    assert client.calls == [("WORKING", B, ("kept", "late", "gone"))]
    assert "kept" in settler.leases
    settler.ack("kept")
    assert settler.close(5)
    assert client.calls[1:] == [("ACKJOB", B, ("kept",))]
    events = {r.msg.name: r.msg.fields["id"] for r in caplog.records if r.levelno >= logging.WARNING}
    assert events == {"job.lease_limit": "late", "job.lease_lost": "gone"}


def test_failed_sends_are_retried_with_backoff(caplog):
    client = RecordingClient(failures=2)
    stats = WorkerStats()
    settler = settler_for(client, stats=stats)
    settler.held(A, ["j"])
    settler.ack("j")
    settler.start()
    assert settler.close(5)
    assert client.calls == [("ACKJOB", A, ("j",))] and stats.acked == 1
    errors = [r for r in caplog.records if r.msg.name == "worker.settle_error"]
    assert len(errors) == 2 and [e.msg.fields["retry_in"] for e in errors] == [0.1, 0.2]


def test_close_gives_up_after_its_timeout_and_says_so(caplog):
    client = RecordingClient(failures=10**6)
    settler = settler_for(client)
    settler.held(A, ["j"])
    settler.ack("j")
    settler.start()
    assert not settler.close(0.3)
    assert [r.msg.fields for r in caplog.records if r.msg.name == "worker.unsettled"] == [
        {"acks": 1, "nacks": 0, "note": "left to their retry timers"}]
