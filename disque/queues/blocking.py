"""Clients blocked in GETJOB (waiting for jobs) or ADDJOB (waiting for replicas).

spec: commands.md GETJOB/ADDJOB blocking behaviour. A mixin of Node.
Waiters of a queue are served in arrival order, one job each. Deadlines
sit in one heap; entries of clients unblocked meanwhile are skipped.
"""

from __future__ import annotations

import heapq

from disque import errors
from disque.clients import Block, ClientState
from disque.jobs.replies import job_entry
from disque.queues.queue import PAUSE_OUT
from disque.resp import NIL_ARRAY

REACHED_ZERO = 1
CLIENTS_WAITING = 2


class Blocking:
    """Blocked clients (mixed into Node)."""

    def block_for_jobs(self, client: ClientState, queue_names: list[bytes], deadline: int,
                       count: int, withcounters: bool) -> None:
        """Park a GETJOB client on every listed queue."""
        block = Block(Block.GETJOB, deadline)
        block.count = count
        block.withcounters = withcounters
        for name in dict.fromkeys(queue_names):
            queue = self.get_or_create_queue(name)
            if queue.blocked is None:
                queue.blocked = {}
            queue.blocked[client] = None
            block.queues.append(queue)
        self._park(client, block)

    def block_for_replication(self, client: ClientState, job_id: bytes, deadline: int) -> None:
        """Park a synchronous ADDJOB producer until enough replicas confirm."""
        block = Block(Block.ADDJOB, deadline)
        block.job_id = job_id
        block.last_repl = self.now
        self.repl_waiters[job_id] = client
        self._park(client, block)

    def _park(self, client: ClientState, block: Block) -> None:
        client.blocked = block
        self.blocked_clients[client] = None
        if block.deadline:
            self.block_seq += 1
            heapq.heappush(self.block_deadlines, (block.deadline, self.block_seq, block, client))

    def unblock(self, client: ClientState, reply: bytes | None) -> None:
        """Release ``client``: send ``reply`` and let it run its next commands."""
        block = client.blocked
        if block is None:
            return
        client.blocked = None
        del self.blocked_clients[client]
        if block.kind == Block.GETJOB:
            for queue in block.queues:
                waiting = queue.blocked
                if waiting is not None:
                    waiting.pop(client, None)
                    if not waiting:
                        queue.blocked = None
                        if queue.name in self.queues and self.queue_is_collectable(queue, 300):
                            self.destroy_queue(queue)
        else:
            self.repl_waiters.pop(block.job_id, None)
        if reply is not None:
            client.send(reply)
        client.resume()

    def client_gone(self, client: ClientState) -> None:
        """The connection closed: drop its block (and a waiting ADDJOB's job)."""
        block = client.blocked
        if block is None:
            return
        self.unblock(client, None)
        if block.kind == Block.ADDJOB:
            job = self.jobs.get(block.job_id)
            if job is not None:
                self.delete_job(job)

    def serve_ready_queues(self) -> None:
        """Hand jobs to clients blocked on queues that just received some."""
        ready = self.ready_queues
        while ready:
            queue = next(iter(ready))
            del ready[queue]
            while queue.blocked and queue.jobs and not queue.paused & PAUSE_OUT:
                client = next(iter(queue.blocked))
                job = self.pop_job(queue)
                reply = b"*1\r\n" + job_entry(job, client.blocked.withcounters)
                self.unblock(client, reply)
                if not queue.jobs:
                    self.need_jobs(queue, REACHED_ZERO)

    def expire_blocked_clients(self) -> None:
        """Answer blocked clients whose timeout elapsed."""
        heap = self.block_deadlines
        now = self.now
        while heap and heap[0][0] <= now:
            _, _, block, client = heapq.heappop(heap)
            if client.blocked is not block:
                continue
            if block.kind == Block.GETJOB:
                self.unblock(client, NIL_ARRAY)
            else:
                job = self.jobs.get(block.job_id)
                self.unblock(client, errors.NOREPL_TIMEOUT)
                if job is not None:
                    self.delete_job(job)

    def unblock_all_leaving(self) -> None:
        """A leaving node never keeps clients waiting (spec: cluster-bus.md §7)."""
        for client in list(self.blocked_clients):
            block = client.blocked
            job = self.jobs.get(block.job_id) if block.kind == Block.ADDJOB else None
            self.unblock(client, errors.LEAVING)
            if job is not None:
                self.delete_job(job)

    def unblock_all_flushed(self) -> None:
        """DEBUG FLUSHALL / CLUSTER RESET: GETJOB waiters get a null reply."""
        for client in list(self.blocked_clients):
            if client.blocked.kind == Block.GETJOB:
                self.unblock(client, NIL_ARRAY)
