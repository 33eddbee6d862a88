"""Clients blocked in GETJOB (waiting for jobs) or ADDJOB (waiting for replicas).

spec: commands.md GETJOB/ADDJOB blocking behaviour. Waiters of a queue
are served in arrival order, one job each. Deadlines sit in one heap;
entries of clients unblocked meanwhile are skipped. This part only keeps
the books: what a timeout or a departure does to a job is decided by
the parts that own jobs.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from typing import Final

from disque.context.clients import Block, ClientState, ReplyBatch
from disque.queues.queue import Queue
from disque.queues.queueset import QueueSet
from disque.context.runtime import Runtime

# Why a node asks other nodes for jobs of a queue (spec: cluster-bus.md §6.7).
REACHED_ZERO: Final = 1
CLIENTS_WAITING: Final = 2


class BlockedClients:
    """Blocked clients, their deadlines, and the producers waiting for replicas."""

    __slots__ = ("clients", "deadlines", "seq", "producers", "queues", "runtime")

    def __init__(self, runtime: Runtime, queues: QueueSet) -> None:
        self.clients: dict[ClientState, None] = {}
        self.deadlines: list[tuple[int, int, Block, ClientState]] = []
        self.seq = 0
        self.producers: dict[bytes, ClientState] = {}  # job ID -> its waiting ADDJOB(S)
        self.queues = queues
        self.runtime = runtime

    def __len__(self) -> int:
        return len(self.clients)

    def __iter__(self) -> Iterator[ClientState]:
        return iter(list(self.clients))

    def block_for_jobs(self, client: ClientState, queue_names: list[bytes], deadline: int,
                       count: int, withcounters: bool, withheaders: bool = False) -> None:
        """Park a GETJOB client on every listed queue."""
        block = Block(Block.GETJOB, deadline)
        block.count = count
        block.withcounters = withcounters
        block.withheaders = withheaders
        for name in dict.fromkeys(queue_names):
            queue = self.queues.get_or_create(name)
            if queue.blocked is None:
                queue.blocked = {}
            queue.blocked[client] = None
            block.queues.append(queue)
        self._park(client, block)

    def block_for_replication(self, client: ClientState, job_id: bytes, deadline: int) -> None:
        """Park a synchronous ADDJOB producer until enough replicas confirm."""
        block = Block(Block.ADDJOB, deadline)
        block.job_id = job_id
        block.last_repl = self.runtime.now
        self.producers[job_id] = client
        self._park(client, block)

    def block_for_batch(self, client: ClientState, batch: ReplyBatch, deadline: int) -> None:
        """Park an ADDJOBS producer until each of its jobs in ``batch.waiting``
        has its replicas or has failed."""
        block = Block(Block.ADDJOB, deadline)
        block.batch = batch
        block.last_repl = self.runtime.now
        producers = self.producers
        for job_id in batch.waiting:
            producers[job_id] = client
        self._park(client, block)

    def _park(self, client: ClientState, block: Block) -> None:
        client.blocked = block
        self.clients[client] = None
        if block.deadline:
            self.seq += 1
            heapq.heappush(self.deadlines, (block.deadline, self.seq, block, client))

    def unblock(self, client: ClientState, reply: bytes | None) -> None:
        """Release ``client``: send ``reply`` and let it run its next commands."""
        block = client.blocked
        if block is None:
            return
        client.blocked = None
        del self.clients[client]
        if block.kind == Block.GETJOB:
            for queue in block.queues:
                waiting = queue.blocked
                if waiting is not None:
                    waiting.pop(client, None)
                    if not waiting:
                        queue.blocked = None
                        self.queues.waiter_left(queue)
        elif block.job_id is not None:
            self.producers.pop(block.job_id, None)
        elif block.batch is not None:
            batch = block.batch
            for job_id in batch.waiting:
                self.producers.pop(job_id, None)
            if reply is not None:
                reply = batch.reply(reply)  # the jobs still waiting get the reason
        client.unblocked(reply)

    def release_producer(self, job_id: bytes, reply: bytes) -> None:
        """Answer the ADDJOB waiting for ``job_id``'s replicas, if one waits;
        an ADDJOBS is answered once each of its jobs has its reply."""
        client = self.producers.get(job_id)
        if client is None:
            return
        block = client.blocked
        batch = block.batch if block is not None else None
        if batch is None:
            self.unblock(client, reply)
            return
        del self.producers[job_id]
        batch.replies[batch.waiting.pop(job_id)] = reply
        if not batch.waiting:
            self.unblock(client, batch.reply(reply))

    def first_waiter(self, queue: Queue) -> ClientState:
        """The consumer blocked longest on ``queue`` (which has some)."""
        assert queue.blocked
        return next(iter(queue.blocked))

    def expired(self) -> list[tuple[ClientState, Block]]:
        """Take out the blocks whose deadline passed, still blocked, in deadline order."""
        heap = self.deadlines
        now = self.runtime.now
        due = []
        while heap and heap[0][0] <= now:
            _, _, block, client = heapq.heappop(heap)
            if client.blocked is block:
                due.append((client, block))
        return due

    def next_deadline(self) -> int | None:
        """The earliest pending deadline (possibly of a client unblocked since)."""
        return self.deadlines[0][0] if self.deadlines else None

    def clear(self) -> None:
        """Forget every deadline and waiter (DEBUG FLUSHALL, after their replies)."""
        self.clients.clear()
        self.deadlines.clear()
        self.seq = 0
        self.producers.clear()
