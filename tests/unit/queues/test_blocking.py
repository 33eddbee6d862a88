"""BlockedClients on its own: parking, releasing, deadlines."""

from __future__ import annotations

import random

from disque.context.clients import Block, ClientState
from disque.context.memory import MemoryAccount
from disque.queues.blocking import BlockedClients
from disque.queues.queueset import QueueSet
from disque.context.runtime import Runtime

NOW = 1_700_000_000_000


def make_blocked() -> tuple[BlockedClients, QueueSet, Runtime]:
    runtime = Runtime(b"n" * 40, random.Random(1), NOW)
    queues = QueueSet(runtime, MemoryAccount(0))
    return BlockedClients(runtime, queues), queues, runtime


def test_a_consumer_waits_on_each_queue_once_and_is_released_with_its_reply():
    blocked, queues, runtime = make_blocked()
    client = ClientState(1)
    blocked.block_for_jobs(client, [b"a", b"b", b"a"], 0, 1, False)
    assert queues[b"a"].blocked == {client: None} and queues[b"b"].blocked == {client: None}
    assert blocked.first_waiter(queues[b"a"]) is client and len(blocked) == 1
    blocked.unblock(client, b"+reply\r\n")
    assert client.sent == [b"+reply\r\n"] and client.blocked is None and len(blocked) == 0
    assert b"a" in queues  # just used: kept
    other = ClientState(2)
    blocked.block_for_jobs(other, [b"a"], 0, 1, False)
    runtime.now += 300_000
    blocked.unblock(other, None)
    assert b"a" not in queues  # the last waiter of an idle, empty queue left


def test_deadlines_come_out_in_order_and_skip_released_clients():
    blocked, _, runtime = make_blocked()
    late, early, released = ClientState(1), ClientState(2), ClientState(3)
    blocked.block_for_jobs(late, [b"q"], NOW + 300, 1, False)
    blocked.block_for_jobs(early, [b"q"], NOW + 100, 1, False)
    blocked.block_for_jobs(released, [b"q"], NOW + 50, 1, False)
    blocked.unblock(released, None)
    assert blocked.next_deadline() == NOW + 50
    runtime.now = NOW + 300
    assert [client for client, _ in blocked.expired()] == [early, late]
    assert blocked.expired() == []


def test_a_waiting_producer_is_found_by_its_job_id():
    blocked, _, _ = make_blocked()
    producer = ClientState(1)
    blocked.block_for_replication(producer, b"J" * 40, NOW + 1000)
    assert producer.blocked is not None and producer.blocked.kind == Block.ADDJOB
    blocked.release_producer(b"X" * 40, b"+other\r\n")
    assert producer.sent == []
    blocked.release_producer(b"J" * 40, b"+ok\r\n")
    assert producer.sent == [b"+ok\r\n"] and not blocked.producers
