"""Work per job of the three-node REPLICATE 3 cycle, measured in one process.

``python -m bench.clustercost`` joins three real ``Node`` cores with the
real bus code (``ClusterBus`` and ``BusConnection``: msgpack frames, the
flush at the end of a loop turn or after ``EARLY_FLUSH`` messages) over
in-memory connections, and drives them in loop turns: in each turn every
node reads what reached it, runs its clients' commands, its timers and its
cron, then flushes its bus output, which the peers read in the next turn.
Nothing waits for a clock or a socket, so a run is deterministic. Under
valgrind (``--callgrind``: instrumentation only while the measured jobs
run) the instructions per job repeat to within 0.01 % on a loaded machine,
where the wall-clock benchmarks of ``bench.run`` drift by 30 %:

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=cg.out \\
        .venv/bin/python -m bench.clustercost --callgrind --jobs 1000
    callgrind_annotate cg.out | grep TOTALS    # divide by --jobs

The workload is the federation section's: ``--per-turn`` ADDJOB ...
REPLICATE 3 on node A per turn, each on a connection of its own as the
producer pool sends them, and four consumers looping on GETJOB TIMEOUT 100
COUNT 16 then ACKJOB of what they got, on node B (or on node A with
``--local``: the local cycle). Client sockets and request parsing are not
in the figures, bus framing and msgpack are.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import time
from collections import deque
from typing import Callable

from disque.context.clients import ClientState
from disque.net.bus import BusConnection, ClusterBus
from disque.cluster.membership import ClusterNode
from disque.config import Config
from disque.node import Node
from disque.tools.resp_client import ReplyParser

START_MS = 1_700_000_000_000
NODES = 3
BASE_PORT = 7711
ADDRESS = "127.0.0.1"
CRON_MS = 100
GETJOB = [b"GETJOB", b"TIMEOUT", b"100", b"COUNT", b"16", b"FROM", b"q"]


class TurnLoop:
    """The part of an event loop the bus uses: callbacks run at the end of the turn."""

    def __init__(self) -> None:
        self.soon: list[tuple[Callable, tuple]] = []

    def call_soon(self, callback: Callable, *args: object) -> None:
        """Run ``callback`` at the end of this turn."""
        self.soon.append((callback, args))

    def call_later(self, delay: float, callback: Callable, *args: object) -> "NoTimer":
        """A timer that never fires: the bus arms one for each link's handshake,
        and here links handshake in their first turns or the run's stall check fails."""
        return NoTimer()

    def end_turn(self) -> None:
        """Run what the turn scheduled (the bus flush)."""
        while self.soon:
            due, self.soon = self.soon, []
            for callback, args in due:
                callback(*args)


class NoTimer:
    """The handle of a timer that never fires."""

    def cancel(self) -> None:
        """Nothing is scheduled."""


class Pipe:
    """One direction of an in-memory connection: written bytes reach the
    peer's connection in its next turn."""

    def __init__(self, cluster: "Cluster", to_node: int) -> None:
        self.cluster = cluster
        self.to_node = to_node
        self.reader: BusConnection | None = None  # the receiving end

    def write(self, data: bytes) -> None:
        self.cluster.inbox[self.to_node].append((self.reader, bytes(data)))
        self.cluster.frames += 1

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: object = None) -> object:
        return (ADDRESS, 0) if name in ("peername", "sockname") else default

    def abort(self) -> None:
        """Links stay up for the whole run."""


class Client(ClientState):
    """A client whose replies go to a callback in the order they are sent."""

    __slots__ = ("on_reply",)

    def __init__(self, client_id: int, on_reply: Callable[["Client", bytes], None]) -> None:
        super().__init__(client_id, "%s:%d" % (ADDRESS, 20000 + client_id), START_MS)
        self.on_reply = on_reply

    def send(self, data: bytes) -> None:
        self.on_reply(self, bytes(data))


class Cluster:
    """Three nodes, fully linked, driven one loop turn at a time."""

    def __init__(self, seed: int) -> None:
        self.now = START_MS
        rng = random.Random(seed)
        self.nodes: list[Node] = []
        for i in range(NODES):
            config = Config()
            config.port = BASE_PORT + i
            node_id = b"%040x" % rng.getrandbits(160)
            self.nodes.append(Node(config, node_id, clock=lambda: self.now,
                                   rng=random.Random(rng.getrandbits(64))))
        self.loops = [TurnLoop() for _ in self.nodes]
        self.inbox: list[deque[tuple[BusConnection | None, bytes]]] = [
            deque() for _ in self.nodes]
        self.commands: list[deque[tuple[Client, list[bytes]]]] = [deque() for _ in self.nodes]
        self.frames = 0
        self.cpu = [0.0] * NODES
        self.buses = buses = [ClusterBus(node, self.loops[i]) for i, node in enumerate(self.nodes)]
        for node, bus in zip(self.nodes, buses):
            node.state.outbox.use(bus)
        for i, node in enumerate(self.nodes):
            for j, peer in enumerate(self.nodes):
                if i != j:
                    node.state.membership.add(ClusterNode(peer.state.id, ADDRESS, BASE_PORT + j, 0,
                                                    self.now))
        for i, node in enumerate(self.nodes):
            for j, peer in enumerate(self.nodes):
                if i != j:
                    self._link(buses[i], i, buses[j], j, peer.state.id)
        self.next_cron = [self.now + 37 * i for i in range(NODES)]

    def _link(self, bus: ClusterBus, i: int, peer_bus: ClusterBus, j: int,
              peer_id: bytes) -> None:
        """Node i's outbound link to node j, and j's end of it."""
        outbound, inbound = BusConnection(bus, peer_id), BusConnection(peer_bus, None)
        to_peer, to_me = Pipe(self, j), Pipe(self, i)
        to_peer.reader, to_me.reader = inbound, outbound
        outbound.connection_made(to_peer)  # type: ignore[arg-type]
        inbound.connection_made(to_me)  # type: ignore[arg-type]
        bus.outbound[peer_id] = outbound
        assert outbound.link is not None
        self.nodes[i].link_up(peer_id, outbound.link)
        self.nodes[i].state.membership.update_reachable()

    def turn(self) -> None:
        """One loop turn of every node, then one millisecond passes."""
        for i, node in enumerate(self.nodes):
            started = time.process_time()
            node.state.runtime.now = self.now
            inbox = self.inbox[i]
            while inbox:
                conn, data = inbox.popleft()
                assert conn is not None
                conn.data_received(data)
            commands = self.commands[i]
            while commands:
                client, argv = commands.popleft()
                reply = node.call(client, argv)
                if reply is not None:
                    client.send(reply)
            node.state.after_input()
            if node.next_timer() <= self.now:
                node.run_timers()
            if self.now >= self.next_cron[i]:
                node.cron()
                self.next_cron[i] += CRON_MS
            self.loops[i].end_turn()
            self.cpu[i] += time.process_time() - started
        self.now += 1


class Cycle:
    """Producers on node A, consumers on ``consumer_node``, counted per job."""

    def __init__(self, cluster: Cluster, consumer_node: int, consumers: int) -> None:
        self.cluster = cluster
        self.consumer_node = consumer_node
        self.replies = ReplyParser()
        self.idle: list[Client] = []
        self.clients = 0
        self.produced = self.acked = 0
        for _ in range(consumers):
            cluster.commands[consumer_node].append((self._client(self._consumer_reply), GETJOB))

    def _client(self, on_reply: Callable[[Client, bytes], None]) -> Client:
        self.clients += 1
        return Client(self.clients, on_reply)

    def _producer_reply(self, client: Client, data: bytes) -> None:
        self.produced += 1
        self.idle.append(client)

    def _consumer_reply(self, client: Client, data: bytes) -> None:
        value = self.replies.parse(data)
        commands = self.cluster.commands[self.consumer_node]
        if isinstance(value, int):
            self.acked += value
        elif value:
            commands.append((client, [b"ACKJOB", *[job[1] for job in value]]))
            commands.append((client, GETJOB))
        else:
            commands.append((client, GETJOB))

    def run(self, jobs: int, per_turn: int) -> None:
        """Produce ``jobs`` jobs and turn until all are acknowledged."""
        target = self.acked + jobs
        sent = 0
        stalled = 0
        while self.acked < target:
            for _ in range(min(per_turn, jobs - sent)):
                client = self.idle.pop() if self.idle else self._client(self._producer_reply)
                self.cluster.commands[0].append(
                    (client, [b"ADDJOB", b"q", b"x" * 64, b"0", b"REPLICATE", b"3"]))
                sent += 1
            before = self.acked
            self.cluster.turn()
            stalled = stalled + 1 if self.acked == before and sent == jobs else 0
            if stalled > 10_000:
                raise RuntimeError("jobs stopped moving: %d of %d acknowledged"
                                   % (self.acked - target + jobs, jobs))


def _callgrind(switch: str) -> None:
    subprocess.run(["callgrind_control", "-i", switch, str(os.getpid())],
                   stdout=subprocess.DEVNULL, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs measured")
    parser.add_argument("--per-turn", type=int, default=4, help="ADDJOBs per loop turn")
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--local", action="store_true", help="consume on node A")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--callgrind", action="store_true",
                        help="switch valgrind's instrumentation on for the measured jobs only")
    args = parser.parse_args()
    cluster = Cluster(args.seed)
    cycle = Cycle(cluster, 0 if args.local else 1, args.consumers)
    cycle.run(2000, args.per_turn)  # warm-up: queues, timers and caches in place
    cluster.cpu = [0.0] * NODES
    frames = cluster.frames
    messages = [node.state.membership.messages_sent for node in cluster.nodes]
    travelled = sum(bus.wire.messages for bus in cluster.buses)
    if args.callgrind:
        _callgrind("on")
    cycle.run(args.jobs, args.per_turn)
    if args.callgrind:
        _callgrind("off")
    messages = [node.state.membership.messages_sent - m for node, m in zip(cluster.nodes, messages)]
    per_job = args.jobs
    print("%s cycle, %d ADDJOB REPLICATE 3 per turn: %d jobs" % (
        "local" if args.local else "federation", args.per_turn, args.jobs))
    print("CPU us/job: A %.1f  B %.1f  C %.1f  (process time, not deterministic)" % tuple(
        c / per_job * 1e6 for c in cluster.cpu))
    travelled = sum(bus.wire.messages for bus in cluster.buses) - travelled
    print("bus messages/job %.2f (the core's %.2f: a batch carries several), frames/job %.2f"
          % (travelled / per_job, sum(messages) / per_job, (cluster.frames - frames) / per_job))


if __name__ == "__main__":
    main()
