"""The real bus framing and client connection code over the simulated network.

With ``Sim(..., wire=True)`` every node runs the production adapters
unmodified: ``disque.net.bus.ClusterBus`` / ``BusConnection`` frame
and parse the bus messages and ``disque.net.connection.ClientConnection``
parses requests and writes replies, while this module stands in for the
operating system below them:

* ``WireLoop`` is the asyncio event loop of one simulated process, on the
  simulator's virtual clock: ``call_soon``, ``call_later``, ``call_at``,
  real ``asyncio.Future`` and ``Task`` objects (so ``asyncio.wait_for``
  in the bus's connect path runs as it is), ``create_connection`` and
  ``create_server``. A crash kills the loop: nothing it scheduled runs.
* ``WireTransport`` is one end of a loopback TCP connection: ``write``,
  ``close``, ``abort``, ``pause_reading`` / ``resume_reading``,
  ``get_extra_info``, write-buffer limits with ``pause_writing`` /
  ``resume_writing`` on the protocol (the buffer is what the peer has not
  read yet).
* ``WireNetwork`` carries the bytes: a write may be cut into segments
  (``split``) that reach the peer in separate ``data_received`` calls,
  and writes that are due together are read together, as from a socket.
  On bus links the latency, partitions, drops and connect failures of
  ``NetParams`` apply to bytes. A stream never loses or reorders bytes
  while it is up (TCP does not): a drop loses the write and resets the
  connection, a partition resets the connections that cross it, a
  blackhole partition holds the bytes (retransmitted every ``RTO_MS``)
  until it heals, and connect attempts into it are never answered, so the
  bus's own connect timeout fires. ``dup``, ``reorder`` and
  ``Network.filters`` are message-level faults: they do not apply here.

Clients of a wire simulation are ``WireClient`` objects: they send RESP
bytes and cut the reply stream into single replies for ``Sim.complete``.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import weakref

from disque.net.bus import ClusterBus
from disque.serving.interfaces import LimitCounters
from disque.net.connection import ClientConnection
from disque.serving.batch import OutputBatch
from disque.net.replymemory import ReplyMemory
from disque.tools.resp_client import encode_command

from tests.sim.harness.clients import MalformedReply, SimFailure
from tests.sim.harness.network import EventLoop, Network, NetParams

RTO_MS = 200.0  # a blackholed stream's bytes are retried this often
DEFAULT_HIGH_WATER = 64 * 1024  # asyncio's default write-buffer high-water mark
SPLIT_CHANCE = 0.3  # probability that one write reaches the peer in several reads


# ------------------------------------------------------------------ the loop


class WireHandle:
    """A callback scheduled on a ``WireLoop`` (asyncio Handle / TimerHandle)."""

    __slots__ = ("loop", "callback", "args", "context", "_when", "_cancelled")

    def __init__(self, loop: "WireLoop", callback, args: tuple, context, when: float) -> None:
        self.loop = loop
        self.callback = callback
        self.args = args
        self.context = context
        self._when = when
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def cancelled(self) -> bool:
        return self._cancelled

    def when(self) -> float:
        return self._when

    def _run(self) -> None:
        if not self._cancelled:
            self.loop.run(self.callback, *self.args, context=self.context)


class WireServerHandle:
    """What ``create_server`` returns: closing it stops accepting."""

    def __init__(self, net: "WireNetwork", address: tuple[str, int]) -> None:
        self.net = net
        self.address = address

    def close(self) -> None:
        self.net.listeners.pop(self.address, None)


class WireLoop:
    """The asyncio event loop of one simulated process on virtual time.

    Times are seconds, like asyncio's; the simulator's clock is in ms.
    Every callback runs with this loop as the running loop (what
    ``asyncio.get_running_loop`` returns), as asyncio runs them.
    """

    def __init__(self, net: "WireNetwork", owner, ip: str) -> None:
        self.net = net
        self.clock: EventLoop = net.loop
        self.owner = owner  # the SimNode, None for the harness's clients
        self.ip = ip
        self.alive = True
        self.errors: list[dict] = []  # what asyncio would have logged as an error
        self.tasks: weakref.WeakSet[asyncio.Task] = weakref.WeakSet()

    def run(self, fn, *args, context=None) -> None:
        """Run ``fn(*args)`` as a callback of this loop (nothing once it is dead)."""
        if not self.alive:
            return
        previous = asyncio.events._get_running_loop()
        asyncio.events._set_running_loop(self)
        try:
            if context is not None:
                context.run(fn, *args)
            else:
                fn(*args)
        finally:
            asyncio.events._set_running_loop(previous)

    def kill(self) -> None:
        """The process died: nothing scheduled on this loop runs any more."""
        self.alive = False
        for task in list(self.tasks):
            coro = task.get_coro()
            if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                coro.close()  # it never ran: no "never awaited" warning for a dead process

    # -------------------------------------------------- asyncio loop API

    def time(self) -> float:
        return self.clock.now / 1000

    def call_soon(self, callback, *args, context=None) -> WireHandle:
        return self._schedule(self.clock.now, callback, args, context)

    def call_later(self, delay: float, callback, *args, context=None) -> WireHandle:
        return self._schedule(self.clock.now + delay * 1000, callback, args, context)

    def call_at(self, when: float, callback, *args, context=None) -> WireHandle:
        return self._schedule(when * 1000, callback, args, context)

    def _schedule(self, when_ms: float, callback, args: tuple, context) -> WireHandle:
        handle = WireHandle(self, callback, args, context, when_ms / 1000)
        self.clock.at(when_ms, handle._run)
        return handle

    def create_future(self) -> asyncio.Future:
        return asyncio.Future(loop=self)

    def create_task(self, coro, *, name=None, context=None) -> asyncio.Task:
        task = asyncio.Task(coro, loop=self, name=name, context=context)
        self.tasks.add(task)
        return task

    def get_debug(self) -> bool:
        return False

    def is_running(self) -> bool:
        return self.alive

    def is_closed(self) -> bool:
        return not self.alive

    def call_exception_handler(self, context: dict) -> None:
        if self.alive:  # a dead process's destroyed tasks are no error
            self.errors.append(context)

    async def create_connection(self, protocol_factory, host: str | bytes, port: int, **kwargs):
        if isinstance(host, bytes):  # as uvloop, which the bus gives ASCII hosts as bytes
            host = host.decode("ascii")
        waiter = self.create_future()
        self.net.dial(self, protocol_factory, host, port, waiter)
        return await waiter

    async def create_server(self, protocol_factory, host, port: int, **kwargs):
        return self.net.listen(self, protocol_factory, port)


# ---------------------------------------------------------- the connection


class Segment:
    """Bytes on their way: due at ``due``; ``first`` when a write starts here."""

    __slots__ = ("due", "data", "first")

    def __init__(self, due: float, data: bytes, first: bool) -> None:
        self.due = due
        self.data = data
        self.first = first


class Stream:
    """One direction of a connection: the bytes one end wrote, in order."""

    __slots__ = ("conn", "src", "dst", "queue", "last_due", "fin", "retrying")

    def __init__(self, conn: "WireConnection", src: "WireTransport",
                 dst: "WireTransport") -> None:
        self.conn = conn
        self.src = src
        self.dst = dst
        self.queue: collections.deque[Segment] = collections.deque()
        self.last_due = 0.0
        self.fin = False  # the writer closed: the reader gets EOF after the bytes
        self.retrying = False  # a blackhole retry is scheduled


class WireTransport(asyncio.Transport):
    """One end of a simulated TCP connection."""

    def __init__(self, net: "WireNetwork", conn: "WireConnection", loop: WireLoop,
                 sockname: tuple[str, int], peername: tuple[str, int]) -> None:
        super().__init__()
        self.net = net
        self.conn = conn
        self.loop = loop
        self.protocol: asyncio.Protocol | None = None
        self.sockname = sockname
        self.peername = peername
        self.out: Stream | None = None  # set once both ends exist
        self.closing = False
        self.lost = False  # connection_lost was (or is being) delivered
        self.reading = True
        self.writing_paused = False
        self.buffered = 0  # written, not yet read by the peer
        self.high = DEFAULT_HIGH_WATER
        self.low = DEFAULT_HIGH_WATER // 4

    def write(self, data) -> None:
        if self.closing or self.lost:
            self.net.stats["writes_after_close"] += 1
            return
        if data:
            self.net.send(self, bytes(data))

    def writelines(self, chunks) -> None:
        self.write(b"".join(chunks))

    def close(self) -> None:
        if not self.closing and not self.lost:
            self.closing = True
            self.reading = False
            self.net.close_end(self)

    def abort(self) -> None:
        if not self.lost:
            self.closing = True
            self.net.reset(self.conn, ConnectionResetError("connection reset"), aborted=self)

    def is_closing(self) -> bool:
        return self.closing or self.lost

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        if not self.reading and not self.closing:
            self.reading = True
            self.net.pump_soon(self.conn.stream_to(self))

    def is_reading(self) -> bool:
        return self.reading

    def get_extra_info(self, name: str, default=None):
        if name == "peername":
            return self.peername
        if name == "sockname":
            return self.sockname
        return default  # no "socket": the adapters skip the TCP options

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = DEFAULT_HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        self.high = high
        self.low = low

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.low, self.high

    def get_protocol(self):
        return self.protocol

    def set_protocol(self, protocol) -> None:
        self.protocol = protocol


class WireConnection:
    """A TCP connection: two transports and a stream each way.

    ``faulty`` connections (bus links) suffer the network's faults; client
    connections only get latency 0 and split reads. ``a_node`` / ``b_node``
    are the SimNodes at each end (None for the harness's clients).
    """

    def __init__(self, net: "WireNetwork", serial: int, a_loop: WireLoop,
                 a_addr: tuple[str, int], b_loop: WireLoop, b_addr: tuple[str, int],
                 faulty: bool) -> None:
        self.serial = serial
        self.faulty = faulty
        self.open = True
        self.a = WireTransport(net, self, a_loop, a_addr, b_addr)
        self.b = WireTransport(net, self, b_loop, b_addr, a_addr)
        self.a.out = Stream(self, self.a, self.b)
        self.b.out = Stream(self, self.b, self.a)
        self.a_node = a_loop.owner
        self.b_node = b_loop.owner

    def stream_to(self, end: WireTransport) -> Stream:
        return self.b.out if end is self.a else self.a.out

    def __repr__(self) -> str:
        return "<Wire#%d %s:%d->%s:%d %s>" % (self.serial, *self.a.sockname, *self.b.sockname,
                                            "open" if self.open else "closed")


# ------------------------------------------------------------- the network


class WireNetwork(Network):
    """Bytes between simulated processes (see the module docstring)."""

    def __init__(self, sim, params: NetParams) -> None:
        super().__init__(sim, params)
        self.split = SPLIT_CHANCE  # probability that a write is cut into segments
        self.listeners: dict[tuple[str, int], tuple[WireLoop, object]] = {}
        self.wires: dict[int, WireConnection] = {}  # open connections by serial
        self.harness = WireLoop(self, None, "10.9.0.1")  # the clients' side: never dies
        self.loops: list[WireLoop] = [self.harness]
        for key in ("segments", "resets", "unanswered", "writes_after_close", "bytes"):
            self.stats[key] = 0

    # ------------------------------------------------------- processes

    def boot(self, sn, node, config) -> "WireServer":
        """Start ``sn``'s adapters: its loop, the bus listener, the client server."""
        loop = WireLoop(self, sn, sn.ip)
        self.loops.append(loop)
        bus = ClusterBus(node, loop, after_bus=lambda: self.sim.poke(sn))
        node.state.outbox.use(bus)
        sn.bus = bus
        loop.create_task(bus.listen(None, sn.bus_port, config.tcp_backlog))
        return WireServer(self.sim, sn, node, loop)

    def node_gone(self, sn) -> None:
        """``sn`` crashed: its loop dies, peers see its connections reset."""
        super().node_gone(sn)
        server = sn.server
        if server is None:
            return
        loop = server.loop
        loop.kill()
        for address in [a for a, (owner, _) in self.listeners.items() if owner is loop]:
            del self.listeners[address]
        for conn in list(self.wires.values()):
            if conn.a.loop is loop or conn.b.loop is loop:
                self.reset(conn, ConnectionResetError("peer crashed"))

    def partition(self, groups: list[list[int]], blackhole: bool = False) -> None:
        super().partition(groups, blackhole)
        if not blackhole:
            for conn in list(self.wires.values()):
                if conn.faulty and not self.can_talk(conn.a_node, conn.b_node):
                    self.reset(conn, ConnectionResetError("partitioned"))

    def _held(self, conn: WireConnection) -> bool:
        return conn.faulty and self.blackhole and not self.can_talk(conn.a_node, conn.b_node)

    def loop_errors(self) -> list[dict]:
        """Errors asyncio would have logged on any live loop (unretrieved task
        exceptions and the like): a wire test expects none."""
        return [error for loop in self.loops for error in loop.errors]

    # ----------------------------------------------------- connections

    def listen(self, loop: WireLoop, factory, port: int) -> WireServerHandle:
        address = (loop.ip, port)
        if address in self.listeners:
            raise OSError(98, "Address already in use")
        self.listeners[address] = (loop, factory)
        return WireServerHandle(self, address)

    def _new_wire(self, a_loop: WireLoop, a_addr, b_loop: WireLoop, b_addr,
                  faulty: bool) -> WireConnection:
        self.serial += 1
        conn = WireConnection(self, self.serial, a_loop, a_addr, b_loop, b_addr, faulty)
        self.wires[conn.serial] = conn
        return conn

    def dial(self, loop: WireLoop, factory, host: str, port: int,
             waiter: asyncio.Future) -> None:
        """A connect from ``loop``'s process: SYN after a latency, then the
        accept on the listener's side and the connected protocol a latency
        later; refused (RST) or never answered (blackhole) otherwise."""
        self.stats["connects"] += 1
        self.loop.after(self.latency(), self._syn, loop, factory, host, port, waiter)

    def _syn(self, loop: WireLoop, factory, host: str, port: int,
             waiter: asyncio.Future) -> None:
        if not loop.alive or waiter.done():
            return
        src = loop.owner
        listener = self.listeners.get((host, port))
        dst = listener[0].owner if listener is not None else self.sim.by_address(host, port)
        if dst is not None and not self.can_talk(src, dst) and self.blackhole:
            self.stats["unanswered"] += 1
            self._trace("connect %s -> %s:%d unanswered (blackhole)", src.name, host, port)
            return  # the SYN is lost: the caller's timeout decides
        if (listener is None or not listener[0].alive or not self.can_talk(src, dst)
                or (self.params.connect_fail and self.rng.random() < self.params.connect_fail)):
            self.stats["connect_failures"] += 1
            self._trace("connect %s -> %s:%d refused", src.name, host, port)
            self.loop.after(self.latency(), loop.run, _refuse, waiter, host, port)
            return
        dst_loop, dst_factory = listener
        conn = self._new_wire(loop, (loop.ip, 40000 + self.serial % 20000), dst_loop,
                              (host, port), faulty=True)
        self._trace("connect %r", conn)
        dst_loop.run(_accept, conn.b, dst_factory)
        self.loop.after(self.latency(), loop.run, self._connected, conn, factory, waiter)

    def _connected(self, conn: WireConnection, factory, waiter: asyncio.Future) -> None:
        if waiter.done():  # the caller gave up meanwhile (timeout, link dropped)
            self.reset(conn, ConnectionResetError("connect abandoned"))
            return
        if not conn.open:
            waiter.set_exception(ConnectionResetError("connection reset while connecting"))
            return
        protocol = factory()
        conn.a.protocol = protocol
        protocol.connection_made(conn.a)
        waiter.set_result((conn.a, protocol))

    def connect_client(self, sn, client: "WireClient") -> None:
        """A client of the harness connects to ``sn``'s client port (no latency)."""
        server = sn.server
        addr = ("10.9.0.1", 10000 + client.id % 50000)
        conn = self._new_wire(self.harness, addr, server.loop, (sn.ip, sn.port), faulty=False)
        client.conn = conn
        conn.a.protocol = client
        client.connection_made(conn.a)
        server.loop.run(_accept, conn.b, server.new_connection)

    # --------------------------------------------------------- bytes

    def send(self, end: WireTransport, data: bytes) -> None:
        """``end`` wrote ``data``: it reaches the peer in order, maybe in pieces."""
        conn = end.conn
        stats = self.stats
        stats["sent"] += 1
        stats["bytes"] += len(data)
        if not conn.open:
            stats["dropped"] += 1
            return
        rng = self.rng
        if conn.faulty and self.params.drop and rng.random() < self.params.drop:
            stats["dropped"] += 1
            self._trace("drop %d bytes on %r: reset", len(data), conn)
            self.reset(conn, ConnectionResetError("connection reset"))
            return
        pieces = [data]
        if len(data) > 1 and self.split and rng.random() < self.split:
            cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 3))))
            pieces = [data[i:j] for i, j in zip([0] + cuts, cuts + [len(data)])]
            stats["segments"] += len(pieces) - 1
        stream = end.out
        now = self.loop.now
        first = True
        for piece in pieces:
            due = now + (self.latency() if conn.faulty else 0.0)
            if due < stream.last_due:
                due = stream.last_due
            stream.last_due = due
            stream.queue.append(Segment(due, piece, first))
            first = False
            self.loop.at(due, self._pump, stream)
        end.buffered += len(data)
        if not end.writing_paused and end.buffered > end.high:
            end.writing_paused = True
            end.protocol.pause_writing()

    def pump_soon(self, stream: Stream) -> None:
        self.loop.after(0, self._pump, stream)

    def _pump(self, stream: Stream) -> None:
        """Hand the peer what is due: a segment cut from a write alone, whole
        writes due together in one read."""
        conn = stream.conn
        reader = stream.dst
        if not conn.open or reader.lost:
            return
        if self._held(conn):
            if not stream.retrying:
                stream.retrying = True
                self.loop.after(RTO_MS, self._retry, stream)
            return
        if not reader.reading:
            return  # resume_reading pumps again
        queue = stream.queue
        now = self.loop.now
        if queue and queue[0].due <= now:
            chunks = [queue.popleft().data]
            while queue and queue[0].due <= now and queue[0].first:
                chunks.append(queue.popleft().data)
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            self._read(stream, data)
            if queue and queue[0].due <= now:
                self.pump_soon(stream)
        if stream.fin and not queue and conn.open and not reader.lost:
            self._lost(reader, None)
            if stream.src.lost:
                self._forget(conn)

    def _retry(self, stream: Stream) -> None:
        stream.retrying = False
        self._pump(stream)

    def _read(self, stream: Stream, data: bytes) -> None:
        writer = stream.src
        reader = stream.dst
        writer.buffered -= len(data)
        if writer.writing_paused and writer.buffered <= writer.low and not writer.lost:
            writer.writing_paused = False
            writer.loop.run(writer.protocol.resume_writing)
        self.stats["delivered"] += 1
        if stream.conn.faulty:
            name = reader.loop.owner.name.encode()
            self.sim.history.update(b"%s@%r:" % (name, self.loop.now) + data)
        reader.loop.run(reader.protocol.data_received, data)

    def close_end(self, end: WireTransport) -> None:
        """``end`` closed: its bytes still reach the peer, then EOF."""
        conn = end.conn
        self._trace("close %r from %s", conn, end.sockname[0])
        end.out.fin = True
        self.pump_soon(end.out)
        self._lost(end, None)
        if end.out.dst.lost:
            self._forget(conn)

    def reset(self, conn: WireConnection, exc: Exception,
              aborted: WireTransport | None = None) -> None:
        """Break ``conn``: bytes in flight are lost; each live end learns it
        (the one that aborted at once, the other a latency later)."""
        if not conn.open:
            return
        self.stats["resets"] += 1
        self._trace("reset %r (%s)", conn, exc)
        self._forget(conn)
        for end in (conn.a, conn.b):
            end.out.queue.clear()
            if not end.lost:
                if end is aborted:
                    self._lost(end, None)
                else:
                    end.lost = True
                    self.loop.after(self.latency() if conn.faulty else 0.0,
                                    self._deliver_lost, end, exc)

    def _forget(self, conn: WireConnection) -> None:
        conn.open = False
        self.wires.pop(conn.serial, None)

    def _lost(self, end: WireTransport, exc: Exception | None) -> None:
        end.lost = True
        end.loop.call_soon(self._deliver_lost, end, exc)

    @staticmethod
    def _deliver_lost(end: WireTransport, exc: Exception | None) -> None:
        protocol = end.protocol
        if protocol is not None:
            end.loop.run(protocol.connection_lost, exc)


def _accept(transport: WireTransport, factory) -> None:
    protocol = factory()
    transport.protocol = protocol
    protocol.connection_made(transport)


def _refuse(waiter: asyncio.Future, host: str, port: int) -> None:
    if not waiter.done():
        waiter.set_exception(ConnectionRefusedError(111, "Connection refused to %s:%d"
                                                    % (host, port)))


# ---------------------------------------------------- the process around


class WireServer:
    """What ``ClientConnection`` asks of ``disque.server.Server``, for one
    simulated node (no AOF: the simulated nodes have none)."""

    def __init__(self, sim, sn, node, loop: WireLoop) -> None:
        self.sim = sim
        self.sn = sn
        self.node = node
        self.config = node.state.config
        self.loop = loop
        self.clients: dict[int, ClientConnection] = {}
        self.client_id = 0
        self.connections_received = 0
        self.rejected_connections = 0
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.output_limited = any(self.config.client_output_buffer_limit)
        self.clients_paused = False  # no CLIENT PAUSE in the simulation
        self.output_batch = OutputBatch(loop, self.flush_aof)
        self.limits = LimitCounters()
        self.reply_memory = ReplyMemory(loop, self.config, self.limits)

    def new_connection(self) -> ClientConnection:
        return ClientConnection(self)

    def next_client_id(self) -> int:
        self.client_id += 1
        return self.client_id

    def arm_timer(self) -> None:
        self.sim.poke(self.sn)

    def flush_aof(self) -> None:
        """No AOF in the simulation."""

    def flush_aof_then(self, done) -> None:
        """No AOF in the simulation: nothing to wait for."""
        done()

    def tune_tcp_socket(self, sock) -> None:
        raise AssertionError("a simulated transport has no socket")


# ----------------------------------------------------------------- clients


def reply_end(buf: bytes | bytearray, pos: int = 0) -> int:
    """Where the RESP value starting at ``pos`` ends (-1: not all there yet)."""
    eol = buf.find(b"\r\n", pos)
    if eol < 0:
        return -1
    kind = buf[pos]
    if kind in b"+-:":
        return eol + 2
    try:
        n = int(buf[pos + 1:eol])
    except ValueError:
        raise MalformedReply("bad length line %r" % bytes(buf[pos:eol + 2])) from None
    if kind == ord("$"):
        if n < 0:
            return eol + 2
        end = eol + 2 + n + 2
        if end > len(buf):
            return -1
        if buf[end - 2:end] != b"\r\n":
            raise MalformedReply("bulk string without CRLF %r" % bytes(buf[pos:end]))
        return end
    if kind == ord("*"):
        p = eol + 2
        for _ in range(max(n, 0)):
            p = reply_end(buf, p) if p < len(buf) else -1
            if p < 0:
                return -1
        return p
    raise MalformedReply("unknown reply type %r" % bytes(buf[pos:eol + 2]))


class WireClient(asyncio.Protocol):
    """A client connection of the harness to one node incarnation, over a
    loopback transport: one command at a time, like ``SimClient``."""

    def __init__(self, sim, simnode, client_id: int) -> None:
        self.sim = sim
        self.simnode = simnode
        self.id = client_id
        self.incarnation = simnode.incarnation
        self.request = None
        self.conn: WireConnection | None = None
        self.transport: WireTransport | None = None
        self.buffer = bytearray()
        self.closed = False

    def connection_made(self, transport: WireTransport) -> None:
        self.transport = transport

    def send_command(self, argv: list[bytes]) -> None:
        self.transport.write(encode_command(*argv))

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while buffer:
            end = reply_end(buffer)
            if end < 0:
                return
            raw = bytes(buffer[:end])
            del buffer[:end]
            request = self.request
            if request is None:
                raise SimFailure("node %s sent %r to an idle client" % (self.simnode.name,
                                                                       raw[:80]))
            self.sim.complete(request, raw)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        request = self.request
        if request is not None and not request.done:
            request.lost = True
            self.request = None
            self.simnode.waiting.pop(self, None)
            self.sim._finish(request)

    def __hash__(self) -> int:
        return self.id

    def __eq__(self, other) -> bool:
        return self is other
