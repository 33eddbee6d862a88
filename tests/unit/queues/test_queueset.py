"""QueueSet on its own: memory, pause wake-ups, idle collection."""

from __future__ import annotations

import random

from disque.jobs.job import Job
from disque.context.memory import BASE_MEMORY, QUEUE_COST, MemoryAccount
from disque.queues.queue import PAUSE_ALL, PAUSE_NONE, PAUSE_OUT
from disque.queues.queueset import IDLE_LIMITS_S, QueueSet
from disque.context.runtime import Runtime

NOW = 1_700_000_000_000


def make_set(maxmemory: int = 0) -> tuple[QueueSet, Runtime, MemoryAccount]:
    runtime = Runtime(b"n" * 40, random.Random(1), NOW)
    memory = MemoryAccount(maxmemory)
    return QueueSet(runtime, memory), runtime, memory


def test_queues_are_charged_while_they_exist():
    queues, _, memory = make_set()
    queue = queues.get_or_create(b"jobs")
    assert queues.get_or_create(b"jobs") is queue and len(queues) == 1
    assert memory.used == BASE_MEMORY + QUEUE_COST + 4
    queues.destroy(queue)
    assert memory.used == BASE_MEMORY and b"jobs" not in queues


def test_lifting_the_output_pause_makes_waiting_consumers_ready():
    queues, _, _ = make_set()
    queues.set_pause(b"q", PAUSE_ALL)
    queue = queues[b"q"]
    queue.blocked = {object(): None}
    queue.jobs.insert(Job(b"D".ljust(40, b"0"), b"q", b"x", 1, 1, 10, 0, 1))
    assert not queues.ready
    queues.set_pause(b"q", PAUSE_OUT & ~PAUSE_OUT)
    assert list(queues.ready) == [queue]


def test_pausing_nothing_creates_no_queue():
    queues, _, _ = make_set()
    queues.set_pause(b"ghost", PAUSE_NONE)
    assert b"ghost" not in queues


def test_idle_empty_queues_are_collected_after_the_limit_of_the_memory_level():
    queues, runtime, memory = make_set(maxmemory=10_000_000)
    queues.create(b"idle")
    runtime.now += (IDLE_LIMITS_S[0] - 1) * 1000
    assert queues.collect_idle() == 0
    memory.used = 8_000_000  # above 75 %: the limit drops to IDLE_LIMITS_S[1]
    assert queues.collect_idle() == 1 and b"idle" not in queues


def test_a_queue_keeps_living_while_someone_waits_on_it():
    queues, runtime, _ = make_set()
    queue = queues.create(b"q")
    queue.blocked = {object(): None}
    runtime.now += 10 * IDLE_LIMITS_S[0] * 1000
    assert queues.collect_idle() == 0
    queue.blocked = None
    queues.waiter_left(queue)
    assert b"q" not in queues
