"""The simulated world: a virtual clock, an event queue and a faulty network.

Everything that happens in a simulation is an event in one heap ordered
by ``(virtual time, sequence number)``; every random choice comes from
one seeded ``random.Random``. Re-running with the same seed replays the
same history exactly.

The network follows the real bus (disque/net/bus.py): each node opens
its own outbound connection to every peer; the receiver answers a
PING/MEET with a PONG on that same connection. A connection is TCP-like
by default: per direction, messages arrive in the order they were sent
(FIFO) after a random latency. On top of that the network can lose
messages (``drop``), deliver a message twice (``dup``, the copy right
after the original), let a message overtake earlier ones (``reorder``),
split the nodes into groups that cannot talk (partitions), and break
connections when a node crashes.
"""

from __future__ import annotations

import heapq
import math
import random
from typing import Callable

import msgpack

from disque.cluster.transport import BusTransport, Link

START_MS = 1_700_000_000_000  # virtual Unix time (ms) at which every simulation starts
INF = math.inf


class EventLoop:
    """A heap of timed callbacks and the virtual clock they advance."""

    def __init__(self, start_ms: float = START_MS) -> None:
        self.now = float(start_ms)
        self._heap: list = []
        self._seq = 0
        self.events_run = 0

    def at(self, when: float, fn: Callable, *args) -> None:
        """Run ``fn(*args)`` at virtual time ``when`` (never in the past)."""
        if when < self.now:
            when = self.now
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, fn, args))

    def after(self, delay_ms: float, fn: Callable, *args) -> None:
        """Run ``fn(*args)`` ``delay_ms`` from now."""
        self.at(self.now + delay_ms, fn, *args)

    def next_time(self) -> float:
        """When the next event is due (INF when there is none)."""
        return self._heap[0][0] if self._heap else INF

    def step(self) -> None:
        """Run the next event."""
        when, _, fn, args = heapq.heappop(self._heap)
        self.now = when
        self.events_run += 1
        fn(*args)

    def run_until(self, when: float) -> None:
        """Run every event due up to ``when``, then set the clock to ``when``."""
        heap = self._heap
        while heap and heap[0][0] <= when:
            self.step()
        if when > self.now:
            self.now = when


class NetParams:
    """Fault knobs; change them at any time during a run."""

    def __init__(self, *, latency: tuple[float, float] = (0.1, 5.0), drop: float = 0.0,
                 dup: float = 0.0, reorder: float = 0.0, connect_fail: float = 0.0) -> None:
        self.latency = latency  # uniform per message, ms
        self.drop = drop  # probability that a message is lost
        self.dup = dup  # probability that a message is delivered twice
        self.reorder = reorder  # probability that a message ignores FIFO order
        self.connect_fail = connect_fail  # probability that a connect attempt is refused

    def calm(self) -> None:
        """No more faults (latency stays)."""
        self.drop = self.dup = self.reorder = self.connect_fail = 0.0


class ConnectAttempt:
    """An outbound connection being opened (it may be renamed or cancelled meanwhile)."""

    __slots__ = ("node_id", "cancelled")

    def __init__(self, node_id: bytes) -> None:
        self.node_id = node_id
        self.cancelled = False


class End:
    """One side of a connection, used as ``Link.handle`` so replies go back on it."""

    __slots__ = ("conn", "toward_dst")

    def __init__(self, conn: "Conn", toward_dst: bool) -> None:
        self.conn = conn
        self.toward_dst = toward_dst


class Conn:
    """An outbound bus connection from ``src`` to ``dst`` (one incarnation of each)."""

    __slots__ = ("src", "dst", "src_inc", "dst_inc", "node_id", "open", "last", "src_link",
                 "dst_link", "serial")

    def __init__(self, src, dst, node_id: bytes, serial: int) -> None:
        self.src = src
        self.dst = dst
        self.src_inc = src.incarnation
        self.dst_inc = dst.incarnation
        self.node_id = node_id  # src's name for dst (changes when a handshake completes)
        self.open = True
        self.last = [0.0, 0.0]  # last scheduled delivery time: [to dst, to src]
        # Like the real bus, each side keeps one Link object for the connection's
        # lifetime: a rename (handshake completed) updates the one the node is
        # currently looking at.
        self.src_link = Link(node_id, dst.ip, src.ip, End(self, True))
        self.dst_link = Link(None, src.ip, dst.ip, End(self, False))
        self.serial = serial

    def __repr__(self) -> str:
        return "<Conn#%d %s->%s %s>" % (self.serial, self.src.name, self.dst.name,
                                        "open" if self.open else "closed")


class SimBus(BusTransport):
    """The BusTransport of one node incarnation, backed by the simulated network."""

    def __init__(self, net: "Network", owner) -> None:
        self.net = net
        self.owner = owner
        self.incarnation = owner.incarnation
        self.outbound: dict[bytes, Conn] = {}
        self.pending: dict[bytes, ConnectAttempt] = {}

    def connect(self, node_id: bytes, ip: str, port: int) -> None:
        if node_id in self.outbound or node_id in self.pending:
            return
        attempt = ConnectAttempt(node_id)
        self.pending[node_id] = attempt
        self.net.start_connect(self, attempt, ip, port)

    def _with_header(self, msg: dict) -> dict:
        # The real bus sends the header once per frame; here every message
        # travels alone, so it carries the header itself (Node.receive_bus).
        return {**self.owner.node.bus_header(), **msg}

    def send(self, node_id: bytes, msg: dict) -> None:
        conn = self.outbound.get(node_id)
        if conn is not None:
            self.net.transmit(conn, True, self._with_header(msg))
        else:
            self.net.send_unlinked(self.owner, node_id, msg)

    def reply(self, link: Link, msg: dict) -> None:
        end = link.handle
        if isinstance(end, End):
            self.net.transmit(end.conn, end.toward_dst, self._with_header(msg))

    def close(self, node_id: bytes) -> None:
        attempt = self.pending.pop(node_id, None)
        if attempt is not None:
            attempt.cancelled = True
        conn = self.outbound.pop(node_id, None)
        if conn is not None:
            self.net.close_conn(conn, notify_src=False)

    def rename(self, old_id: bytes, new_id: bytes) -> None:
        attempt = self.pending.pop(old_id, None)
        if attempt is not None:
            attempt.node_id = new_id
            self.pending[new_id] = attempt
        conn = self.outbound.pop(old_id, None)
        if conn is not None:
            conn.node_id = new_id
            conn.src_link.node_id = new_id
            self.outbound[new_id] = conn

    def shutdown(self) -> None:
        """The process died: nothing it asked for will happen."""
        for attempt in self.pending.values():
            attempt.cancelled = True
        self.pending.clear()
        self.outbound.clear()


class Network:
    """Connections, partitions and message delivery between simulated nodes.

    ``sim`` provides ``loop``, ``rng``, ``by_address(ip, bus_port)``,
    ``deliver(simnode, link, msg)``, ``link_up``/``link_down`` entry points.
    """

    def __init__(self, sim, params: NetParams) -> None:
        self.sim = sim
        self.loop: EventLoop = sim.loop
        self.rng: random.Random = sim.rng
        self.params = params
        self.conns: set[Conn] = set()
        self.group: dict[int, int] = {}  # node index -> partition group (absent = 0)
        self.blackhole = False  # partitioned connections stay up but lose everything
        self.serial = 0
        self.stats = {"sent": 0, "delivered": 0, "dropped": 0, "duplicated": 0,
                      "reordered": 0, "connects": 0, "connect_failures": 0,
                      "unlinked_sends": 0}
        self.trace: Callable[[str], None] | None = None
        self.filters: list[Callable] = []  # fn(conn, to_dst, msg) -> True to drop

    # -------------------------------------------------------- partitions

    def can_talk(self, a, b) -> bool:
        """Nodes ``a`` and ``b`` (SimNodes) are on the same side of every partition."""
        return self.group.get(a.index, 0) == self.group.get(b.index, 0)

    def partition(self, groups: list[list[int]], blackhole: bool = False) -> None:
        """Split nodes: each list is a group; unlisted nodes are alone."""
        self.group = {}
        for g, members in enumerate(groups, 1):
            for i in members:
                self.group[i] = g
        next_group = len(groups) + 1
        for sn in self.sim.nodes:
            if sn.index not in self.group:
                self.group[sn.index] = next_group
                next_group += 1
        self.blackhole = blackhole
        if not blackhole:
            for conn in sorted(self.conns, key=lambda c: c.serial):
                if not self.can_talk(conn.src, conn.dst):
                    self.close_conn(conn, notify_src=True)

    def heal(self) -> None:
        """Everybody can talk to everybody again."""
        self.group = {}
        self.blackhole = False

    # ------------------------------------------------------- connections

    def latency(self) -> float:
        lo, hi = self.params.latency
        return lo + self.rng.random() * (hi - lo)

    def start_connect(self, bus: SimBus, attempt: ConnectAttempt, ip: str, port: int) -> None:
        self.stats["connects"] += 1
        self.loop.after(self.latency(), self._connect_done, bus, attempt, ip, port)

    def _connect_done(self, bus: SimBus, attempt: ConnectAttempt, ip: str, port: int) -> None:
        src = bus.owner
        if attempt.cancelled or src.bus is not bus:
            return
        dst = self.sim.by_address(ip, port)
        ok = (dst is not None and dst.node is not None and self.can_talk(src, dst)
              and self.rng.random() >= self.params.connect_fail)
        node_id = attempt.node_id
        del bus.pending[node_id]
        if not ok:
            self.stats["connect_failures"] += 1
            self._trace("connect %s -> %s:%s (%s) failed", src.name, ip, port, _short(node_id))
            self.sim.call_link_down(src, node_id)
            return
        self.serial += 1
        conn = Conn(src, dst, node_id, self.serial)
        self.conns.add(conn)
        bus.outbound[node_id] = conn
        self._trace("connect %r", conn)
        self.sim.call_link_up(src, node_id, conn.src_link)

    def close_conn(self, conn: Conn, notify_src: bool) -> None:
        """Break ``conn``; in-flight messages are lost. ``notify_src``: the
        owner learns it (peer reset / crash / partition) rather than closing it itself."""
        if not conn.open:
            return
        conn.open = False
        self.conns.discard(conn)
        self._trace("close %r%s", conn, " (notify)" if notify_src else "")
        if notify_src:
            src = conn.src
            bus = src.bus
            if src.node is not None and bus is not None and bus.outbound.get(conn.node_id) is conn:
                del bus.outbound[conn.node_id]
                self.loop.after(self.latency(), self.sim.call_link_down, src, conn.node_id,
                                src.incarnation)

    def node_gone(self, sn) -> None:
        """``sn`` crashed: its connections die; peers see their links drop."""
        for conn in sorted(self.conns, key=lambda c: c.serial):
            if conn.src is sn:
                self.close_conn(conn, notify_src=False)
            elif conn.dst is sn:
                self.close_conn(conn, notify_src=True)

    # ----------------------------------------------------------- messages

    def send_unlinked(self, src, node_id: bytes, msg: dict) -> None:
        """``src`` sent ``msg`` to ``node_id`` on a connection that broke before
        it noticed (its link-down notice is still on the way): the message is
        lost, like a write on a dead socket. Tests that account for every
        message sent hook this as well as ``transmit``."""
        self.stats["unlinked_sends"] += 1
        self._trace("lost %s from %s to %s (no connection)", msg.get("type"), src.name,
                    _short(node_id))

    def transmit(self, conn: Conn, to_dst: bool, msg: dict) -> None:
        """Send ``msg`` over ``conn`` (packed now, like the real bus)."""
        stats = self.stats
        stats["sent"] += 1
        packed = msgpack.packb(msg, use_bin_type=True)
        if not conn.open:
            stats["dropped"] += 1
            return
        params = self.params
        rng = self.rng
        if self.blackhole and not self.can_talk(conn.src, conn.dst):
            stats["dropped"] += 1
            return
        for drop_filter in self.filters:
            if drop_filter(conn, to_dst, msg):
                stats["dropped"] += 1
                return
        if params.drop and rng.random() < params.drop:
            stats["dropped"] += 1
            self._trace("drop %s on %r", msg.get("type"), conn)
            return
        direction = 0 if to_dst else 1
        when = self.loop.now + self.latency()
        if params.reorder and rng.random() < params.reorder:
            stats["reordered"] += 1
        elif when < conn.last[direction]:
            when = conn.last[direction]
        conn.last[direction] = max(conn.last[direction], when)
        self.loop.at(when, self._deliver, conn, to_dst, packed)
        if params.dup and rng.random() < params.dup:
            stats["duplicated"] += 1
            self.loop.at(when, self._deliver, conn, to_dst, packed)

    def _deliver(self, conn: Conn, to_dst: bool, packed: bytes) -> None:
        receiver = conn.dst if to_dst else conn.src
        if receiver.paused_until > self.loop.now:  # read when it resumes, in order
            self.loop.at(receiver.paused_until, self._deliver, conn, to_dst, packed)
            return
        if not conn.open:
            self.stats["dropped"] += 1
            return
        if self.blackhole and not self.can_talk(conn.src, conn.dst):
            self.stats["dropped"] += 1
            return
        if to_dst:
            receiver, inc = conn.dst, conn.dst_inc
            link = conn.dst_link
        else:
            receiver, inc = conn.src, conn.src_inc
            link = conn.src_link
            link.node_id = conn.node_id
        if receiver.node is None or receiver.incarnation != inc:
            self.stats["dropped"] += 1
            return
        self.stats["delivered"] += 1
        self.sim.history.update(b"%s@%r:" % (receiver.name.encode(), self.loop.now) + packed)
        msg = msgpack.unpackb(packed, raw=False, strict_map_key=False)
        if self.trace is not None:
            self._trace("deliver %s %s -> %s %s", msg.get("type"),
                        conn.dst.name if not to_dst else conn.src.name, receiver.name,
                        _summary(msg))
        self.sim.deliver(receiver, link, msg)

    def _trace(self, fmt: str, *args) -> None:
        if self.trace is not None:
            self.trace(fmt % args)


def _short(node_id) -> str:
    return node_id[:8].decode("latin-1") if isinstance(node_id, bytes) else str(node_id)


def _summary(msg: dict) -> str:
    if "id" in msg and isinstance(msg["id"], bytes):
        return msg["id"][:20].decode("latin-1")
    if "job" in msg and isinstance(msg["job"], list) and msg["job"]:
        first = msg["job"][0]
        return first[:20].decode("latin-1") if isinstance(first, bytes) else ""
    return ""
