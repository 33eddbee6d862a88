"""A simulated Disque cluster: real ``disque.node.Node`` cores on a fake network.

``Sim(nodes=5, seed=42)`` builds five nodes with addresses 10.0.0.1:7711,
10.0.0.2:7712, ... (bus port = client port + 10000). Each node gets its
cron every 100 ms of virtual time (hz 10, random phase) and its job
timers as soon as they are due (``Node.next_timer``). Nodes can crash
(state lost, like a SIGKILL without AOF) and restart with the same ID, the
peers saved in their simulated nodes.conf and the records of their
simulated tables file (schedules, their ticks, delivery limits).
``Sim(..., aof=True)`` (or a list of node indexes) turns ``appendonly``
on: such a machine keeps its AOF across crashes and loads it when it
restarts (see ``aof``).

``Sim(..., wire=True)`` runs the real bus framing and client connection
code over a loopback transport instead of handing decoded messages and
argv lists to the nodes (see ``wire``).
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import sys
import tempfile
from typing import Callable

from disque.cluster import nodesconf
from disque.cluster.membership import HANDSHAKE
from disque.config import Config
from disque.context.tablelog import TABLES
from disque.state.host import Host
from disque.jobs.timers import NEVER
from disque.node import Node
from disque.process import cronspec

from tests.sim.harness.aof import SimAof
from tests.sim.harness.clients import Request, SimClient, SimFailure, parse_reply, to_bytes
from tests.sim.harness.network import INF, EventLoop, Network, NetParams, SimBus
from tests.sim.harness.ops import states
from tests.sim.harness.wire import WireClient, WireNetwork

BASE_PORT = 7711


class SimHost(Host):
    """Process services of a simulated node: nodes.conf lives in memory."""

    def __init__(self, simnode: "SimNode") -> None:
        self.simnode = simnode
        self.node: Node | None = None
        self.saves = 0

    def save_cluster_config(self) -> str | None:
        if self.node is not None and self.simnode.node is self.node:
            self.simnode.saved_conf = nodesconf.render(self.node.state.membership)
            self.saves += 1
        return None

    def flush_tables(self) -> str | None:
        """The tables log's records, kept as the tables file keeps them (the
        last of each key), across crashes."""
        if self.node is not None and self.simnode.node is self.node:
            tables = self.simnode.saved_tables
            for table, key, value in self.node.state.table_log.take():
                if value is None:
                    tables.pop((table, key), None)
                else:
                    tables[(table, key)] = value
        return None

    def cron_problem(self, expr: bytes) -> str | None:
        return cronspec.cron_problem(expr)

    def cron_next(self, expr: bytes, after_ms: int) -> int:
        return cronspec.cron_next(expr, after_ms)


class SimNode:
    """One server "machine": its address, persisted nodes.conf and current process."""

    def __init__(self, index: int, node_id: bytes) -> None:
        self.index = index
        self.name = "n%d" % index
        self.ip = "10.0.0.%d" % (index + 1)
        self.port = BASE_PORT + index
        self.bus_port = self.port + 10000
        self.node_id = node_id
        self.node: Node | None = None  # None while crashed
        self.bus: SimBus | None = None  # a ClusterBus in a wire simulation
        self.server = None  # a wire simulation's WireServer (the process's adapters)
        self.host: SimHost | None = None
        self.incarnation = 0
        self.saved_conf: str | None = None
        self.saved_tables: dict[tuple[bytes, bytes], list] = {}  # the tables file's live records
        self.timer_at = INF
        self.waiting: dict[SimClient, Request] = {}  # clients with a pending (blocked) request
        self.crashes = 0
        self.wipes = 0  # crashes that lost the machine's jobs (no AOF, or the disk went too)
        self.aof: SimAof | None = None  # appendonly on: the file kept across crashes
        self.clock_offset = 0.0  # this machine's clock minus the true time, ms
        # ``Sim.stall``: the process is frozen (SIGSTOP, a long GC pause) until
        # then; what reaches it waits in its socket buffers meanwhile.
        self.paused_until = 0.0

    @property
    def alive(self) -> bool:
        return self.node is not None

    def __repr__(self) -> str:
        return "<SimNode %s %s%s>" % (self.name, self.node_id[:8].decode(),
                                      "" if self.alive else " DOWN")


class Sim:
    """A deterministic simulation of ``nodes`` Disque nodes.

    ``configure(config, index)`` may adjust each node's Config before it
    boots (and again on every restart). With ``wire`` the nodes talk
    through the real bus and client connection code (``wire.WireNetwork``).
    """

    def __init__(self, nodes: int = 3, seed: int = 0, *, node_timeout: int = 3000,
                 net: NetParams | None = None, configure: Callable | None = None,
                 trace: bool | None = None, wire: bool = False,
                 aof: bool | list[int] = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.loop = EventLoop()
        self.wire = wire
        network = WireNetwork if wire else Network
        self.net = network(self, net if net is not None else NetParams())
        self.node_timeout = node_timeout
        self.configure = configure
        self.client_ids = 0
        self.trace_lines: list[str] = []
        if trace is None:
            trace = bool(os.environ.get("SIM_TRACE"))
        self.tracing = trace
        if trace:
            self.net.trace = self.trace
        self.observers: list[Callable] = []  # fn(request) on every completed request
        # Digest of every delivered message and reply, with its time: two runs
        # of the same seed must produce the same one.
        self.history = hashlib.blake2b(digest_size=16)
        self.nodes: list[SimNode] = []
        for i in range(nodes):
            node_id = b"%040x" % self.rng.getrandbits(160)
            sn = SimNode(i, node_id)
            self.nodes.append(sn)
        aof_nodes = list(range(nodes)) if aof is True else list(aof or ())
        self._aof_dir: tempfile.TemporaryDirectory | None = None
        if aof_nodes:
            if wire:
                raise SimFailure("the AOF is simulated with decoded messages only (wire=False)")
            self._aof_dir = tempfile.TemporaryDirectory(prefix="disque-sim-aof-")
            for i in aof_nodes:
                self.nodes[i].aof = SimAof(os.path.join(self._aof_dir.name, "n%d.aof" % i))
        for sn in self.nodes:
            self._boot(sn)

    # ------------------------------------------------------------------ time

    @property
    def now(self) -> float:
        """Virtual Unix time in ms."""
        return self.loop.now

    def clock(self) -> int:
        """The true virtual time (ms); node ``i`` reads ``clock() + clock_offset``."""
        return int(self.loop.now)

    def set_clock_offset(self, i: int, offset_ms: float) -> None:
        """Skew node ``i``'s clock (changing it at run time is an NTP-style jump)."""
        sn = self.nodes[i]
        sn.clock_offset = offset_ms
        sn.timer_at = INF  # re-plan its timer wake-up in true time
        self.poke(sn)

    def run_for(self, ms: float) -> None:
        """Advance virtual time by ``ms``, running everything due."""
        self.loop.run_until(self.loop.now + ms)

    def run_until(self, pred: Callable[[], bool], max_ms: float, step_ms: float = 10) -> bool:
        """Run until ``pred()`` holds (checked every ``step_ms``); False on timeout."""
        deadline = self.loop.now + max_ms
        while True:
            if pred():
                return True
            if self.loop.now >= deadline:
                return False
            self.loop.run_until(min(deadline, self.loop.now + step_ms))

    def at(self, when: float, fn: Callable, *args) -> None:
        """Schedule a harness action at virtual time ``when``."""
        self.loop.at(when, fn, *args)

    def after(self, ms: float, fn: Callable, *args) -> None:
        """Schedule a harness action ``ms`` from now."""
        self.loop.after(ms, fn, *args)

    def trace(self, line: str) -> None:
        if self.tracing:
            text = "%13.3f %s" % (self.loop.now - 1_700_000_000_000, line)
            self.trace_lines.append(text)
            print(text, file=sys.stderr)

    # ---------------------------------------------------------------- nodes

    def node(self, i: int) -> Node:
        """The running Node core of machine ``i`` (fails if it is down)."""
        node = self.nodes[i].node
        if node is None:
            raise SimFailure("node n%d is down" % i)
        return node

    def alive(self) -> list[SimNode]:
        return [sn for sn in self.nodes if sn.node is not None]

    def by_address(self, ip: str, bus_port: int) -> SimNode | None:
        for sn in self.nodes:
            if sn.ip == ip and sn.bus_port == bus_port:
                return sn
        return None

    def by_id(self, node_id: bytes) -> SimNode | None:
        for sn in self.nodes:
            if sn.node_id == node_id:
                return sn
        return None

    def _config(self, sn: SimNode) -> Config:
        config = Config()
        config.port = sn.port
        config.cluster_node_timeout = self.node_timeout
        # Simulated clients connect from the network's addresses, not loopback,
        # as to nodes opened up on purpose (docs/security.md, protected mode).
        config.protected_mode = False
        if self.configure is not None:
            self.configure(config, sn.index)
        return config

    def _boot(self, sn: SimNode) -> None:
        sn.incarnation += 1
        sn.host = SimHost(sn)
        sn.bus = None if self.wire else SimBus(self.net, sn)
        config = self._config(sn)
        loop = self.loop

        def clock(sn=sn) -> int:
            return int(loop.now + sn.clock_offset)

        node = Node(config, sn.node_id, clock=clock,
                    rng=random.Random(self.rng.getrandbits(64)), host=sn.host, bus=sn.bus)
        if self.wire:
            sn.server = self.net.boot(sn, node, config)
        if sn.saved_conf is not None:
            nodesconf.restore(node.state.membership, nodesconf.parse(sn.saved_conf, clock()),
                              config.port)
        for table in TABLES:
            for (kind, key), value in sn.saved_tables.items():
                if kind == table:
                    assert node.state.restore_table_record(kind, key, value)
        node.state.table_log.enabled = True
        if sn.aof is not None:
            sn.aof.start(node, config)
        sn.host.node = node
        sn.node = node
        sn.timer_at = INF
        if sn.saved_conf is None:
            sn.host.save_cluster_config()  # like the server: nodes.conf written at first start
        period = 1000 / max(1, config.hz)
        self.loop.after(self.rng.random() * period, self._cron, sn, sn.incarnation, period)
        self.trace("boot %s (incarnation %d)" % (sn.name, sn.incarnation))

    def _cron(self, sn: SimNode, incarnation: int, period: float) -> None:
        if sn.node is None or sn.incarnation != incarnation:
            return
        if sn.paused_until > self.loop.now:
            self.loop.at(sn.paused_until, self._cron, sn, incarnation, period)
            return
        sn.node.cron()
        self.poke(sn)
        self.loop.after(period, self._cron, sn, incarnation, period)

    def poke(self, sn: SimNode) -> None:
        """Make sure ``run_timers`` runs when the node's next timer is due."""
        node = sn.node
        if node is None:
            return
        if sn.aof is not None:
            sn.aof.flush()  # as the server does before any output of the event leaves
        if sn.host is not None:
            sn.host.flush_tables()
        due = node.next_timer()
        if due >= NEVER:
            return
        due -= sn.clock_offset  # node time -> true time
        # ``due`` is the start of an 8 ms timer bucket: wake up at its end, when
        # everything in it is due (<= 7 ms late; C runs timers every 1-100 ms).
        when = due + 7
        floor_next = math.floor(self.loop.now) + 1
        if when < floor_next:
            when = floor_next
        if when < sn.timer_at:
            sn.timer_at = when
            self.loop.at(when, self._timers, sn, sn.incarnation, when)

    def _timers(self, sn: SimNode, incarnation: int, when: float) -> None:
        if sn.node is None or sn.incarnation != incarnation or sn.timer_at != when:
            return
        if sn.paused_until > self.loop.now:
            self.loop.at(sn.paused_until, self._timers, sn, incarnation, when)
            return
        sn.timer_at = INF
        sn.node.run_timers()
        self.poke(sn)

    def crash(self, i: int, wipe: bool = False) -> None:
        """Kill machine ``i`` instantly (SIGKILL): queues and clients are lost,
        jobs too unless its AOF is on. ``wipe``: its disk is lost as well."""
        sn = self.nodes[i]
        if sn.node is None:
            return
        self.trace("crash %s%s" % (sn.name, " (disk lost)" if wipe else ""))
        if sn.aof is not None:
            sn.aof.crash(sn.node)
            if wipe:
                sn.aof.wipe()
        if sn.aof is None or wipe:
            sn.wipes += 1
        sn.node = None
        sn.crashes += 1
        sn.paused_until = 0.0
        if sn.bus is not None and not self.wire:  # (a wire node's process just dies)
            sn.bus.shutdown()
        sn.bus = None
        sn.timer_at = INF
        self.net.node_gone(sn)
        waiting = list(sn.waiting.items())
        sn.waiting.clear()
        for client, request in waiting:
            request.lost = True
            self._finish(request)

    def stall(self, i: int, ms: float) -> None:
        """Freeze machine ``i``'s process for ``ms`` (like SIGSTOP, then SIGCONT):
        its cron, timers, bus messages and clients wait, in order, and run
        when it resumes; its connections stay up. Decoded-message mode only."""
        sn = self.nodes[i]
        if sn.node is None or self.wire:
            return
        self.trace("stall %s for %.0f ms" % (sn.name, ms))
        sn.paused_until = max(sn.paused_until, self.loop.now + ms)

    def stalled(self, i: int) -> bool:
        return self.nodes[i].paused_until > self.loop.now

    def restart(self, i: int) -> None:
        """Start machine ``i`` again: same ID and nodes.conf; its jobs are
        those of its AOF (none without one)."""
        sn = self.nodes[i]
        if sn.node is not None:
            return
        self._boot(sn)

    # ------------------------------------------------------- bus callbacks

    def call_link_up(self, sn: SimNode, node_id: bytes, link) -> None:
        if sn.paused_until > self.loop.now:
            self.loop.at(sn.paused_until, self._link_up_resumed, sn, node_id, link,
                         sn.incarnation)
            return
        sn.node.link_up(node_id, link)
        self.poke(sn)

    def _link_up_resumed(self, sn: SimNode, node_id: bytes, link, incarnation: int) -> None:
        if sn.node is not None and sn.incarnation == incarnation:
            self.call_link_up(sn, node_id, link)

    def call_link_down(self, sn: SimNode, node_id: bytes, incarnation: int | None = None) -> None:
        if sn.node is None or (incarnation is not None and incarnation != sn.incarnation):
            return
        if sn.paused_until > self.loop.now:
            self.loop.at(sn.paused_until, self.call_link_down, sn, node_id, sn.incarnation)
            return
        if sn.bus.outbound.get(node_id) is not None:
            return  # already reconnected: this notice is about an older connection
        sn.node.link_down(node_id)
        self.poke(sn)

    def deliver(self, sn: SimNode, link, msg) -> None:
        sn.node.receive_bus(link, msg)
        self.poke(sn)

    # -------------------------------------------------------------- clients

    def client(self, i: int) -> SimClient:
        """A new client connection to node ``i``."""
        sn = self.nodes[i]
        if sn.node is None:
            raise SimFailure("cannot connect to %s: down" % sn.name)
        self.client_ids += 1
        if self.wire:
            client = WireClient(self, sn, self.client_ids)
            self.net.connect_client(sn, client)
            return client
        return SimClient(self, sn, self.client_ids)

    def command(self, i: int, *args, client: SimClient | None = None,
                on_reply: Callable | None = None) -> Request:
        """Send a command to node ``i`` now. The reply may come later
        (blocked command); ``on_reply(request)`` then runs as a new event."""
        sn = self.nodes[i]
        if sn.paused_until > self.loop.now and sn.node is not None:
            # The request waits in the socket until the process resumes; the
            # caller gets its reply through ``on_reply``.
            self.loop.at(sn.paused_until, self._command_resumed, i, args, client, on_reply)
            return Request(i, [to_bytes(a) for a in args], self.loop.now, client)
        argv = [to_bytes(a) for a in args]
        if client is None:
            if sn.node is None:
                request = Request(i, argv, self.loop.now, None)
                request.lost = True
                if on_reply is not None:
                    request.callbacks.append(on_reply)
                self._finish(request)
                return request
            client = self.client(i)
        if client.request is not None:
            raise SimFailure("client %d already has a pending request" % client.id)
        request = Request(i, argv, self.loop.now, client)
        if on_reply is not None:
            request.callbacks.append(on_reply)
        if (sn.node is None or client.incarnation != sn.incarnation
                or (self.wire and client.closed)):
            request.lost = True
            self._finish(request)
            return request
        client.request = request
        if self.tracing:
            self.trace("%s <- client %d: %s" % (sn.name, client.id, b" ".join(
                a[:40] for a in argv).decode("latin-1")))
        if self.wire:
            # The bytes travel through events: run those of this instant until
            # the reply is back, so that only a blocked command is left pending.
            sn.waiting[client] = request
            client.send_command(argv)
            loop = self.loop
            while not request.done and loop.next_time() <= loop.now:
                loop.step()
            request.blocked = not request.done
            return request
        raw = sn.node.call(client, argv)
        if raw is None:
            if client.blocked is None and client.request is request and not request.done:
                raise SimFailure("%s returned no reply to %r but did not block the client"
                                 % (sn.name, argv))
            if not request.done:
                request.blocked = True
                sn.waiting[client] = request
        else:
            self.complete(request, raw)
        self.poke(sn)
        return request

    def complete(self, request: Request, raw: bytes) -> None:
        """A reply arrived for ``request`` (synchronously or from an unblock)."""
        if request.done:
            raise SimFailure("second reply %r for %r" % (raw[:80], request))
        request.raw = raw
        self.history.update(b"%d@%r:" % (request.node, self.loop.now) + raw)
        request.value = parse_reply(raw)
        if self.tracing:
            self.trace("%s -> client %d: %r" % (self.nodes[request.node].name,
                                                 request.client.id, raw[:120]))
        client = request.client
        client.request = None
        self.nodes[request.node].waiting.pop(client, None)
        self._finish(request)

    def _finish(self, request: Request) -> None:
        request.done_at = self.loop.now
        for observer in self.observers:
            observer(request)
        for callback in request.callbacks:
            # Never re-enter a node from inside one of its calls.
            self.loop.after(0, callback, request)

    def close(self) -> None:
        """Remove the simulated AOF files (also done when the Sim is collected)."""
        for sn in self.nodes:
            if sn.aof is not None and sn.node is not None:
                sn.aof.crash(sn.node)
        if self._aof_dir is not None:
            self._aof_dir.cleanup()
            self._aof_dir = None

    def _command_resumed(self, i: int, args: tuple, client: SimClient | None,
                         on_reply: Callable | None) -> None:
        self.command(i, *args, client=client, on_reply=on_reply)

    def call(self, i: int, *args):
        """Run a command on node ``i`` that must reply at once; return the value."""
        request = self.command(i, *args)
        if not request.done:
            raise SimFailure("%r blocked" % (request,))
        if request.lost:
            raise SimFailure("%r: node down" % (request,))
        return request.value

    # -------------------------------------------------------------- cluster

    def meet_chain(self) -> None:
        """CLUSTER MEET 0→1, 1→2, ... (discovery must do the rest)."""
        for a, b in zip(self.nodes, self.nodes[1:]):
            reply = self.call(a.index, "CLUSTER", "MEET", b.ip, b.port)
            if reply != b"OK":
                raise SimFailure("CLUSTER MEET failed: %r" % (reply,))

    def meet_all(self) -> None:
        """CLUSTER MEET from every live node to every other one (operator repair)."""
        for a in self.alive():
            for b in self.nodes:
                if b is not a:
                    self.call(a.index, "CLUSTER", "MEET", b.ip, b.port)

    def is_full_mesh(self, members: list[int] | None = None, exact: bool = True) -> bool:
        """Every listed live node knows every other one, linked, reachable; with
        ``exact`` the tables hold nothing else (no handshakes, no strangers)."""
        members = [i for i in (members if members is not None else range(len(self.nodes)))
                   if self.nodes[i].alive]
        ids = {self.nodes[i].node_id for i in members}
        for i in members:
            node = self.nodes[i].node
            table = node.state.membership.nodes
            if exact and len(table) != len(self.nodes):
                return False
            for node_id in ids:
                entry = table.get(node_id)
                if entry is None or entry.flags & HANDSHAKE:
                    return False
                if node_id != node.state.id and (not entry.link or not entry.is_reachable):
                    return False
            if len(ids.intersection(node.state.membership.reachable)) < len(members) - 1:
                return False
        return True

    def wait_full_mesh(self, max_ms: float = 30000, members: list[int] | None = None) -> None:
        """Run until ``is_full_mesh``; fail with every node's table otherwise."""
        if not self.run_until(lambda: self.is_full_mesh(members), max_ms, step_ms=50):
            raise SimFailure("no full mesh after %d ms:\n%s" % (max_ms, self.describe_nodes()))

    def join(self) -> None:
        """MEET chain plus full mesh: a ready cluster."""
        self.meet_chain()
        self.wait_full_mesh()

    # ---------------------------------------------------------- diagnostics

    def describe_nodes(self) -> str:
        lines = []
        for sn in self.nodes:
            if sn.node is None:
                lines.append("%s DOWN" % sn.name)
                continue
            lines.append("%s %s:" % (sn.name, sn.ip))
            for row in sn.node.membership.render_nodes().decode().splitlines():
                node_id = row.split()[0].encode()
                owner = self.by_id(node_id)
                lines.append("    %s %s" % (owner.name if owner else "??", row))
        return "\n".join(lines)

    def holders(self, job_id: bytes) -> dict[str, str]:
        """``ops.states`` keyed by node name, for failure messages."""
        return {self.nodes[i].name: state for i, state in states(self, job_id).items()}

    def name_of(self, node_id: bytes) -> str:
        sn = self.by_id(node_id)
        return sn.name if sn is not None else node_id[:8].decode("latin-1")
