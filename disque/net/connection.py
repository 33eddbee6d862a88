"""One client connection: bytes in, commands to the node, replies out.

The whole path of a request, in this module: ``data_received`` parses
the bytes, ``_execute`` runs the commands (consecutive ones that a
command's run handler takes together, ADDJOBs on a lone node, go to
``Node.call_run`` as one batch, with the same replies), ``_write``
collects the replies, and ``OutputBatch.flush`` writes them. Like
Redis's "write before sleep", replies are not written at once: they are
collected while the loop runs the callbacks of every readable socket,
then one ``OutputBatch.flush`` per loop turn writes the AOF once (spec:
persistence.md, a record is written before the reply that acknowledges
it leaves the process) and gives each client's output to its transport
in one ``write``. With many unpipelined clients that halves the kernel
time per request: the peer gets a burst of replies instead of a wake-up
for each one. Output that must leave before the turn ends (``close``, a
pipeline of big replies) goes through ``_flush_now``, which writes the
AOF first too.

A long pipeline runs in slices of about SLICE_BUDGET_NS: the rest of the
read waits for a later loop turn (``_yield_rest``, reading paused, replies
in order), so one client cannot hold every other one up. A command whose
work or reply goes on in steps (``ClientState.stream``: QPEEK or GETJOB of
many jobs, SHOW of a large body, QPURGE, ACKJOB of many IDs) runs them in
slices the same way (``_run_stream``), making more of its reply only while
the peer reads it; the commands after it wait.

A blocked client (GETJOB, synchronous ADDJOB) stops executing until the
node unblocks it; what it sends meanwhile is kept (reading pauses past
MAX_PENDING_COMMANDS) so that its disconnect is still noticed. Reading
also pauses while the transport's write buffer is above its high-water
mark, and a pipeline of big replies is held back there, so a slow reader
cannot make the node buffer replies without bound; what all clients'
replies hold together is bounded by maxmemory-clients (``net/replymemory``).
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Callable, Protocol, cast

from disque.protocol import errors
from disque.context.clients import ClientState
from disque.commands.access import (PROTECTED_MODE_DENIED, is_loopback, needs_auth,
                                    protected_mode_refuses)
from disque.context.log import logger
from disque.protocol.request import ARG_OVERHEAD, ProtocolError, RequestParser
from disque.protocol.request_hiredis import HiredisRequestParser
from disque.net.replymemory import ReplyMemory
from disque.protocol.resp import error

if TYPE_CHECKING:
    from disque.config import Config
    from disque.state.command import Command
    from disque.state.nodestate import NodeState

WRITE_HIGH_WATER = 256 * 1024
# One read's commands run for at most about this long before the rest waits
# for a later loop turn, so a long pipeline does not hold up other clients
# (the time is read every SLICE_CHECK commands, and after each pipelined run).
SLICE_BUDGET_NS = 5_000_000
SLICE_CHECK = 32
MAX_PENDING_COMMANDS = 1024  # read ahead of a blocked client before reading pauses
QUERY_BUFFER_EXCEEDED = ("ERR client-query-buffer-limit reached: a request may not make the "
                         "node hold more than %d bytes; closing the connection")
QUERY_BUFFER_UNAUTHENTICATED = ("NOAUTH Authentication required before sending more than %d "
                                "bytes of a request; closing the connection")
REQUEST_TIMEOUT_LOG = "Closing client %s: no byte of its unfinished request for %d s"


class LimitCounters:
    """Connections closed by a limit (INFO limits, docs/security.md "Limits")."""

    __slots__ = ("query_buffer", "unauthenticated_buffer", "request_timeout", "output_normal",
                 "output_monitor", "client_memory")

    def __init__(self) -> None:
        self.query_buffer = 0            # client-query-buffer-limit
        self.unauthenticated_buffer = 0  # unauthenticated-query-buffer-limit
        self.request_timeout = 0         # client-request-timeout
        self.output_normal = 0           # client-output-buffer-limit, normal clients
        self.output_monitor = 0          # client-output-buffer-limit / the cap, MONITOR clients
        self.client_memory = 0           # maxmemory-clients (the client holding the most)


class OutputBatch:
    """The replies of one loop turn: the AOF is written once, then every
    client's collected output, one transport write per client. Also the
    clients unblocked in the turn, whose next commands run together
    (``run_resumed``) once the input that unblocked them was handled."""

    __slots__ = ("loop", "before_write", "clients", "resumed")

    def __init__(self, loop: asyncio.AbstractEventLoop, before_write: Callable[[], None]) -> None:
        self.loop = loop
        self.before_write = before_write  # writes pending AOF records
        self.clients: list[ClientConnection] = []
        self.resumed: list[ClientConnection] = []

    def resume(self, client: "ClientConnection") -> None:
        """``client`` was unblocked with commands waiting: run them soon."""
        resumed = self.resumed
        if not resumed:
            self.loop.call_soon(self.run_resumed)
        resumed.append(client)

    def run_resumed(self) -> None:
        """Run the waiting commands of the clients unblocked so far, in the
        order they were unblocked. The server calls it after a read of bus
        frames too, so that a pipeline's next synchronous ADDJOB sends its
        REPLJOBs in the same loop turn as the GOTJOBs that released the
        previous one."""
        while self.resumed:
            resumed, self.resumed = self.resumed, []
            for client in resumed:
                client.resume_pending()

    def add(self, client: "ClientConnection") -> None:
        """``client`` has its first reply of this turn."""
        clients = self.clients
        if not clients:
            self.loop.call_soon(self.flush)
        clients.append(client)

    def flush(self) -> None:
        """Write what every client collected (a client written meanwhile, by
        ``_flush_now`` or gone, has no output left)."""
        clients = self.clients
        if not clients:
            return
        self.clients = []
        self.before_write()  # spec: persistence.md, the AOF is written before the replies
        for client in clients:
            if client.output is not None:
                client.write_output()


class CommandNode(Protocol):
    """What a client connection asks of the node (``disque.node.Node``): its
    commands run through ``call`` and ``call_run``, and it reads the time
    and counts refusals in ``state``."""

    @property
    def state(self) -> NodeState:
        """The node's parts (the time of the input, the access counters)."""

    @property
    def run_commands(self) -> dict[bytes, Command]:
        """The commands whose pipelined runs ``call_run`` takes together."""

    def perf_ns(self) -> int:
        """The time source of the command statistics (ns)."""

    def call(self, client: ClientState, argv: list[bytes]) -> bytes | None:
        """Run one command; None when the client blocked."""

    def call_run(self, client: ClientState, cmd: Command, commands: list[list[bytes]],
                 start: int, out: list[bytes]) -> int:
        """Run a pipelined run from ``start``; the index of the first not run."""

    def stream_step(self, client: ClientState, out: list[bytes]) -> bool:
        """The next step of ``client.stream``; True once its reply is complete."""

    def client_gone(self, client: ClientState) -> None:
        """The connection closed."""


class ConnectionServer(Protocol):
    """What a client connection needs of the server that accepted it:
    ``disque.server.Server``, or the simulator's ``WireServer``."""

    # Counted by the connection (INFO stats).
    connections_received: int
    rejected_connections: int
    net_input_bytes: int
    net_output_bytes: int

    @property
    def node(self) -> CommandNode:
        """The node the commands run on."""

    @property
    def config(self) -> Config:
        """Limits, protected mode, the unix socket's path."""

    @property
    def clients(self) -> dict[int, ClientConnection]:
        """The open connections by client ID (maxclients, CLIENT LIST)."""

    @property
    def output_batch(self) -> OutputBatch:
        """This loop turn's replies, which the connection's join."""

    @property
    def reply_memory(self) -> ReplyMemory:
        """What all clients' replies not yet sent hold (maxmemory-clients)."""

    @property
    def limits(self) -> LimitCounters:
        """Connections closed by a limit."""

    @property
    def clients_paused(self) -> bool:
        """CLIENT PAUSE is in force: connections do not read."""

    @property
    def output_limited(self) -> bool:
        """client-output-buffer-limit sets a limit."""

    def next_client_id(self) -> int:
        """A new connection's ID."""

    def flush_aof_then(self, done: Callable[[], None]) -> None:
        """Write the AOF's pending records; ``done`` (soon or at once) once
        they are on disk as appendfsync asks, the loop serving others meanwhile."""

    def arm_timer(self) -> None:
        """Have the node's timers fire at its next due time."""

    def tune_tcp_socket(self, sock: socket.socket) -> None:
        """Socket options of a TCP client."""


class ClientConnection(asyncio.Protocol, ClientState):
    """asyncio protocol for one client."""

    __slots__ = ("server", "node", "batch", "memory", "transport", "parser", "pending", "fd",
                 "reading", "paused_for_output", "soft_limit_since", "closing", "protocol_error",
                 "output", "held_input", "read_ahead", "noted_memory", "stream_muted")

    def __init__(self, server: ConnectionServer) -> None:
        ClientState.__init__(self, server.next_client_id(), "", server.node.state.now)
        self.server = server
        self.node = server.node
        self.batch: OutputBatch = server.output_batch
        self.memory = server.reply_memory
        self.noted_memory = 0  # this client's figure in ``memory``
        self.stream_muted = False  # the stream's command was under CLIENT REPLY OFF / SKIP
        self.streams_replies = True
        self.transport: asyncio.Transport | None = None
        self.parser: RequestParser = HiredisRequestParser(server.config.proto_max_bulk_len)
        self.pending: list[list[bytes]] | None = None  # commands read while blocked
        self.fd = -1
        self.reading = True
        self.paused_for_output = False
        self.soft_limit_since = 0
        self.closing = False
        self.protocol_error: str | None = None  # answered once the commands before it ran
        self.output: list[bytes] | None = None  # replies waiting for the end of the loop turn
        self.held_input: bytes | None = None  # read during CLIENT PAUSE, run when it ends
        self.read_ahead = 0  # bytes of the commands read while blocked, since it last resumed

    # ------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream server gives its protocols stream transports; the base
        # class's signature names the wider type.
        stream = self.transport = cast(asyncio.Transport, transport)
        server = self.server
        server.connections_received += 1
        peer = stream.get_extra_info("peername")
        sock = stream.get_extra_info("socket")
        if sock is not None:
            self.fd = sock.fileno()
        if isinstance(peer, tuple):
            host = peer[0]
            self.addr = ("[%s]:%d" % (host, peer[1])) if ":" in host else "%s:%d" % peer[:2]
            self.local = is_loopback(host)
        else:
            self.addr = "%s:0" % (server.config.unixsocket or "unix")
            self.local = True
        self.tls = stream.get_extra_info("ssl_object") is not None
        if protected_mode_refuses(server.config, self.local):
            self.node.state.access_stats.protected_mode_denied += 1
            stream.write(PROTECTED_MODE_DENIED)
            stream.close()
            self.closing = True
            return
        if len(server.clients) >= server.config.maxclients:
            server.rejected_connections += 1
            stream.write(errors.MAX_CLIENTS)
            stream.close()
            self.closing = True
            return
        server.clients[self.id] = self
        stream.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            server.tune_tcp_socket(sock)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.output = None
        self.stream = None
        self.memory.forget(self)
        server = self.server
        if server.clients.pop(self.id, None) is None:
            self.transport = None
            return
        self.node.client_gone(self)
        server.arm_timer()
        self.transport = None  # break the protocol <-> transport cycle (the GC may not)

    def pause_writing(self) -> None:
        self.paused_for_output = True
        self._set_reading(False)

    def resume_writing(self) -> None:
        self.paused_for_output = False
        if self.noted_memory:
            self._note_memory()  # drained: the account's figure shrinks
        if self.blocked is None and self.pending is not None:
            self.resume()  # the rest of a pipeline held back by the full output
        elif self.protocol_error is None and (self.pending is None
                                              or len(self.pending) < MAX_PENDING_COMMANDS):
            self._set_reading(True)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return  # what a closed connection had in flight runs nothing (QUIT, POST)
        server = self.server
        if server.clients_paused:
            # A connection made during CLIENT PAUSE reads once before the
            # transport can be paused (it starts reading after connection_made).
            self.held_input = data if self.held_input is None else self.held_input + data
            transport = self.transport
            assert transport is not None  # asyncio reads only after connection_made
            transport.pause_reading()
            return
        server.net_input_bytes += len(data)
        self.atime = self.node.state.now
        commands: list[list[bytes]] = []
        try:
            self.parser.feed(data, commands)
        except ProtocolError as exc:
            self.protocol_error = str(exc)
            self._set_reading(False)
        if commands:
            if self.blocked is not None or self.pending is not None:
                self.pending = (self.pending or []) + commands
                self.read_ahead += sum([len(arg) + ARG_OVERHEAD for cmd in commands for arg in cmd])
                if len(self.pending) >= MAX_PENDING_COMMANDS:
                    self._set_reading(False)
            else:
                self._execute(commands)
        if self.protocol_error is not None and self.blocked is None and self.pending is None:
            self._protocol_error(self.protocol_error)
        elif not self.closing:
            cut = self.parser.held()
            held = cut + self.read_ahead
            if held:
                self._check_query_buffer(held)
            if cut and self.reading and not self.closing:
                # A request longer than a read (ACKJOB of 100,000 IDs): one
                # read of it per loop turn. libuv reads a socket up to 32
                # times in a row, and parsing 2 MB of small arguments held
                # every other client up for 60 ms.
                self._set_reading(False)
                self.batch.loop.call_soon(self._read_on)

    def _read_on(self) -> None:
        """Read the rest of a long request, unless reading stopped meanwhile
        for a reason of its own (full output, a pipeline's rest waiting, too
        much read ahead of a blocked command, a protocol error)."""
        pending = self.pending
        if (not self.reading and not self.closing and self.protocol_error is None
                and not self.paused_for_output
                and (pending is None or (self.blocked is not None
                                         and len(pending) < MAX_PENDING_COMMANDS))):
            self._set_reading(True)

    def _check_query_buffer(self, held: int) -> None:
        """Close a client whose input not yet run (an unfinished request, and
        what it sent while blocked) holds more than it may: the small
        allowance before it authenticated, else client-query-buffer-limit."""
        server = self.server
        config = server.config
        if held > config.unauthenticated_query_buffer_limit and needs_auth(config, self):
            server.limits.unauthenticated_buffer += 1
            self._close_for_limit(held, QUERY_BUFFER_UNAUTHENTICATED
                                  % config.unauthenticated_query_buffer_limit)
        elif held > config.client_query_buffer_limit:
            server.limits.query_buffer += 1
            self._close_for_limit(held, QUERY_BUFFER_EXCEEDED % config.client_query_buffer_limit)

    def _close_for_limit(self, held: int, message: str) -> None:
        logger.warning("Closing client %s: %d bytes held of requests not yet run. %s",
                       self.addr, held, message)
        self._set_reading(False)
        self._write(error(message))
        self.close()

    # ----------------------------------------------------------- commands

    def _execute(self, commands: list[list[bytes]]) -> None:
        call = self.node.call
        if len(commands) == 1 and not self.reply_mode:
            reply = call(self, commands[0])
            if reply is None:
                self._blocked([])
            else:
                if reply:
                    self._write(reply)
                if self.stream is not None:
                    self._start_stream([], False)
        else:
            node = self.node
            run_commands = node.run_commands
            out: list[bytes] = []
            size = 0
            i = 0
            n = len(commands)
            perf_ns = self.node.perf_ns  # the node's time source: virtual in the simulator
            begin = perf_ns()
            check_at = SLICE_CHECK
            while i < n:
                argv = commands[i]
                mode = self.reply_mode
                run = None if mode else run_commands.get(argv[0])
                if run is not None and (end := node.call_run(self, run, commands, i, out)) > i:
                    size += sum(map(len, out[i - end:]))
                    i = end
                else:
                    reply = call(self, argv)
                    i += 1
                    if reply is None:
                        self._blocked(commands[i:])
                        break
                    if mode:
                        reply = self._filter_reply(mode, reply)
                    if reply:
                        out.append(reply)
                        size += len(reply)
                    if self.stream is not None:
                        if out:
                            self._write(b"".join(out))
                            out = []
                        self._start_stream(commands[i:], mode != 0)
                        break
                    if self.close_after_reply:
                        break
                if i >= check_at and i < n:
                    check_at = i + SLICE_CHECK
                    if perf_ns() - begin > SLICE_BUDGET_NS:
                        self._yield_rest(commands[i:])
                        break
                if size >= WRITE_HIGH_WATER and i < n:
                    # A pipeline of big replies: hand them to the transport, which
                    # closes the client past a hard output limit; without one, hold
                    # the rest of the pipeline back while the peer is not reading
                    # (resume_writing runs it), so memory stays bounded either way.
                    self._write(b"".join(out))
                    self._flush_now()
                    out = []
                    size = 0
                    if self.closing:
                        break
                    hard_limit = self.server.config.client_output_buffer_limit[0]
                    if self.paused_for_output and not hard_limit:
                        self.pending = commands[i:]
                        break
            if out:
                self._write(b"".join(out))
        if self.close_after_reply:
            self.close()
        self.server.arm_timer()

    def _start_stream(self, rest: list[list[bytes]], muted: bool) -> None:
        """The command just run goes on in steps (``self.stream``): run them
        for a slice now and in later loop turns, the commands after it
        (``rest``) waiting, reading paused; ``muted``: its reply is dropped
        (CLIENT REPLY OFF or SKIP), its work done."""
        self.pending = rest
        self.stream_muted = muted
        self._set_reading(False)
        self._run_stream()

    def _run_stream(self) -> None:
        """Steps of the stream for about SLICE_BUDGET_NS, while the peer
        reads (``resume_writing`` brings it back). Then the AOF is written:
        the next slice, and the last step's reply (a count of deletions),
        wait until the slice's records are on disk as appendfsync asks
        (fsynced in the fsync thread under ``always``, the loop serving
        others meanwhile; spec: persistence.md)."""
        node = self.node
        perf_ns = node.perf_ns
        begin = perf_ns()
        last: list[bytes] = []
        while True:
            parts: list[bytes] = []
            done = node.stream_step(self, parts)
            if done:
                last = parts
                break
            if parts and not self.stream_muted:
                self._write_parts(parts)
            if self.closing or self.paused_for_output or perf_ns() - begin > SLICE_BUDGET_NS:
                break
        if self.closing:
            return
        self._note_memory()
        if done or not self.paused_for_output:
            self.server.flush_aof_then(lambda: self._slice_on_disk(last))
        else:
            self.batch.before_write()  # resume_writing starts the next slice

    def _slice_on_disk(self, last: list[bytes]) -> None:
        """The slice's records are on disk: its last reply goes, then the
        next slice (or the commands that waited) in a later turn."""
        if self.closing:
            return
        if last and not self.stream_muted:
            self._write_parts(last)
        self.batch.loop.call_soon(self.resume_pending)

    def _yield_rest(self, rest: list[list[bytes]]) -> None:
        """Let other clients in: run ``rest`` in a later loop turn, reading
        nothing more meanwhile (so what is held stays bounded) and keeping
        the replies in order (``resume_pending`` runs it as the next input)."""
        self.pending = rest
        self._set_reading(False)
        self.batch.loop.call_soon(self.resume_pending)

    def _filter_reply(self, mode: int, reply: bytes) -> bytes:
        """CLIENT REPLY OFF / SKIP (``mode`` is the one before the command ran)."""
        if mode == 2:
            if self.reply_mode == 2:
                self.reply_mode = 0
            return b""
        return b"" if self.reply_mode == 1 else reply

    def _blocked(self, rest: list[list[bytes]]) -> None:
        # Reading goes on while blocked (up to a bound), so that a client that
        # goes away is noticed at once: its GETJOB must not take a job, and a
        # waiting ADDJOB's job is deleted (spec: commands.md ADDJOB, GETJOB).
        self.pending = rest
        if len(rest) >= MAX_PENDING_COMMANDS:
            self._set_reading(False)

    def resume(self) -> None:
        """Unblocked by the node: run what was read meanwhile, then read again."""
        if self.closing:
            return
        if not self.pending and self.reading and self.protocol_error is None:
            self.pending = None  # the usual case: nothing arrived while it waited
            self.read_ahead = 0
            return
        self.batch.resume(self)

    def unblocked(self, reply: bytes | None) -> None:
        """``send`` and ``resume`` in one call (the node's unblocking path)."""
        if reply and (self.reply_mode != 1 or self.monitor) and not self.closing:
            self.server.net_output_bytes += len(reply)
            output = self.output
            if output is None:
                self.output = [reply]
                self.batch.add(self)
            else:
                output.append(reply)
        if self.closing:
            return
        if not self.pending and self.reading and self.protocol_error is None:
            self.pending = None
            self.read_ahead = 0
            return
        self.batch.resume(self)

    def resume_pending(self) -> None:
        """Run the commands that waited while the client was blocked (or
        the rest of a pipeline that yielded, or a command going on in
        steps), then read again."""
        if self.closing or self.blocked is not None:
            return
        if self.stream is not None:
            if not self.paused_for_output:
                self._run_stream()
            return
        pending = self.pending
        self.pending = None
        self.read_ahead = 0
        if pending:
            self._execute(pending)
        if self.blocked is None and self.pending is None:
            if self.protocol_error is not None:
                self._protocol_error(self.protocol_error)
            elif not self.paused_for_output:
                self._set_reading(True)

    def _set_reading(self, on: bool) -> None:
        if on != self.reading and not self.closing:
            transport = self.transport
            assert transport is not None  # connected: connection_lost sets closing first
            self.reading = on
            if on:
                if not self.server.clients_paused:  # else the end of the pause resumes it
                    transport.resume_reading()
            else:
                transport.pause_reading()

    def _protocol_error(self, message: str) -> None:
        logger.log(15, "Protocol error from client %s: %s", self.addr, message)
        self._write(error("ERR " + message))
        self.close()

    # ------------------------------------------------------------- output

    def _write(self, data: bytes) -> None:
        if self.closing:
            return
        self.server.net_output_bytes += len(data)
        output = self.output
        if output is None:
            self.output = [data]
            self.batch.add(self)
        else:
            output.append(data)

    def write_output(self) -> None:
        """Hand the collected replies to the transport (their AOF records are
        written: ``OutputBatch.flush`` and ``_flush_now`` see to it)."""
        output = self.output
        transport = self.transport
        # Callers write only collected output, and connection_lost drops it.
        assert output is not None and transport is not None
        self.output = None
        transport.write(output[0] if len(output) == 1 else b"".join(output))
        self._after_write(transport)

    def _write_parts(self, parts: list[bytes]) -> None:
        """A step's reply, to the transport now, after what was collected (and
        the AOF): a part of WRITE_HIGH_WATER bytes or more is written as it
        is, so a large job body is not copied into the reply."""
        self.batch.before_write()  # spec: persistence.md
        if self.output is not None:
            self.write_output()
        transport = self.transport
        if self.closing or transport is None:
            return
        small: list[bytes] = []
        for part in parts:
            self.server.net_output_bytes += len(part)
            if len(part) < WRITE_HIGH_WATER:
                small.append(part)
                continue
            if small:
                transport.write(b"".join(small))
                small = []
            transport.write(part)
        if small:
            transport.write(b"".join(small))
        self._after_write(transport)

    def _after_write(self, transport: asyncio.Transport) -> None:
        held = transport.get_write_buffer_size()
        stream = self.stream
        if stream is not None:
            held += stream.pending_bytes()
        if held or self.noted_memory:
            self.memory.note(self, held)
        if self.server.output_limited or self.monitor:
            self._check_output_limits(held)

    def reply_memory(self) -> int:
        """What this client's replies not yet sent hold: its transport's
        buffer and the part of a reply in steps still to come."""
        transport = self.transport
        held = transport.get_write_buffer_size() if transport is not None else 0
        stream = self.stream
        return held + stream.pending_bytes() if stream is not None else held

    def _note_memory(self) -> None:
        held = self.reply_memory()
        if held or self.noted_memory:
            self.memory.note(self, held)

    def close_for_memory(self) -> None:
        """maxmemory-clients closes this client: at once, its replies dropped."""
        self.closing = True
        self.output = None
        self.stream = None
        transport = self.transport
        if transport is not None:
            transport.abort()

    def _flush_now(self) -> None:
        """Write this client's replies before the turn ends (close, big pipeline)."""
        if self.output is not None:
            self.batch.before_write()  # spec: persistence.md
            self.write_output()

    def _check_output_limits(self, size: int) -> None:
        """``size``: what the client's replies not yet sent hold."""
        config = self.server.config
        hard, soft, soft_seconds = config.client_output_buffer_limit
        transport = self.transport
        assert transport is not None  # after a write, from write_output
        if self.monitor:
            # A MONITOR is a normal client too (as in Disque 1.0); the tighter
            # of its two hard limits, and of its two soft ones, applies.
            m_hard, m_soft, m_seconds = config.monitor_output_buffer_limit
            if m_hard and (not hard or m_hard < hard):
                hard = m_hard
            if m_soft and (not soft or m_soft < soft):
                soft, soft_seconds = m_soft, m_seconds
        over_soft = soft and size > soft
        if over_soft and not self.soft_limit_since:
            self.soft_limit_since = self.node.state.now
        elif not over_soft:
            self.soft_limit_since = 0
        if (hard and size > hard) or (
                over_soft and self.node.state.now - self.soft_limit_since > soft_seconds * 1000):
            logger.warning("Client %s closed for overcoming of output buffer limits.", self.addr)
            if self.monitor:
                self.server.limits.output_monitor += 1
            else:
                self.server.limits.output_normal += 1
            self.closing = True
            transport.abort()

    def send(self, data: bytes) -> None:
        """Asynchronous reply (unblocked client, MONITOR line)."""
        if data and (self.reply_mode != 1 or self.monitor):
            self._write(data)

    def close(self) -> None:
        """Close once pending output is written (QUIT, CLIENT KILL, idle timeout)."""
        if not self.closing:
            self._flush_now()
            self.closing = True
            transport = self.transport
            assert transport is not None  # connected: connection_lost sets closing first
            transport.close()

    # ------------------------------------------------------------ reports

    def describe(self, now_ms: int) -> str:
        """One CLIENT LIST line."""
        flags = ""
        if self.monitor:
            flags += "O"
        if self.blocked is not None:
            flags += "b"
        if self.close_after_reply or self.closing:
            flags += "c"
        if self.fd >= 0 and self.addr.startswith(self.server.config.unixsocket or "\0"):
            flags += "U"
        qbuf = self.parser.buffered()
        omem = self.reply_memory()
        events = "r" if self.reading else ""
        if omem:
            events += "w"
        return ("id=%d addr=%s fd=%d name=%s age=%d idle=%d flags=%s qbuf=%d qbuf-free=%d "
                "obl=0 oll=0 omem=%d events=%s cmd=%s" % (
                    self.id, self.addr, self.fd, self.name.decode("latin-1"),
                    (now_ms - self.ctime) // 1000, (now_ms - self.atime) // 1000,
                    flags or "N", qbuf, max(0, 32768 - qbuf), omem, events,
                    self.last_cmd.decode("latin-1")))
