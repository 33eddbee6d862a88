"""Running what a client sent: the bytes parsed, its commands run in
slices, and the replies made in steps.

``data_received`` (the asyncio protocol's callback, compiled here) feeds
the bytes to the ``RequestParser`` and holds what is read to
client-query-buffer-limit (or the small allowance before AUTH); a request
longer than a read is read one read per loop turn (libuv would read the
socket up to 32 times in a row). ``_execute`` runs the commands of a
read (consecutive ones that a command's run handler takes together,
ADDJOBs on a lone node, go to ``Node.call_run`` as one batch, with the
same replies) and collects their replies through ``_write``
(``serving/output``). Compiled, this path from the bytes read to the
replies collected costs about a sixth fewer instructions per unpipelined
ADDJOB than interpreted (docs/benchmarks.md).

A long pipeline runs in slices of about SLICE_BUDGET_NS: the rest of the
read waits for a later loop turn (``_yield_rest``, reading paused, replies
in order), so one client cannot hold every other one up. A command whose
work or reply goes on in steps (``ClientState.stream``: QPEEK or GETJOB of
many jobs, SHOW of a large body, QPURGE, ACKJOB of many IDs) runs them in
slices the same way (``_run_stream``), making more of its reply only while
the peer reads it; the commands after it wait.

A blocked client (GETJOB, synchronous ADDJOB) stops executing until the
node unblocks it; what it sends meanwhile is kept (reading pauses past
MAX_PENDING_COMMANDS) so that its disconnect is still noticed. A pipeline
of big replies is held back while the transport's write buffer is above
its high-water mark, so a slow reader cannot make the node buffer replies
without bound.
"""

from __future__ import annotations

from typing import Final

from mypy_extensions import mypyc_attr

from disque.commands.access import needs_auth
from disque.context.log import logger
from disque.protocol.request import ARG_OVERHEAD, ProtocolError, RequestParser
from disque.protocol.request_hiredis import HiredisRequestParser
from disque.protocol.resp import error
from disque.serving.interfaces import ServingNode, ServingServer
from disque.serving.output import WRITE_HIGH_WATER, ClientOutput

# One read's commands run for at most about this long before the rest waits
# for a later loop turn, so a long pipeline does not hold up other clients
# (the time is read every SLICE_CHECK commands, and after each pipelined run).
SLICE_BUDGET_NS: Final = 5_000_000
SLICE_CHECK: Final = 32
MAX_PENDING_COMMANDS: Final = 1024  # read ahead of a blocked client before reading pauses
QUERY_BUFFER_EXCEEDED: Final = ("ERR client-query-buffer-limit reached: a request may not make "
                                "the node hold more than %d bytes; closing the connection")
QUERY_BUFFER_UNAUTHENTICATED: Final = ("NOAUTH Authentication required before sending more "
                                       "than %d bytes of a request; closing the connection")


# The connection's asyncio protocol (``net/connection.ClientConnection``) extends it.
@mypyc_attr(allow_interpreted_subclasses=True)
class ClientCommands(ClientOutput):
    """The command side of a client connection: what was read, run."""

    __slots__ = ("parser", "pending", "reading", "paused_for_output", "protocol_error",
                 "read_ahead", "held_input", "stream_muted")

    def __init__(self, client_id: int, now_ms: int, server: ServingServer,
                 node: ServingNode) -> None:
        ClientOutput.__init__(self, client_id, now_ms, server, node)
        self.parser: RequestParser = HiredisRequestParser(server.config.proto_max_bulk_len)
        self.held_input: bytes | None = None  # read during CLIENT PAUSE, run when it ends
        self.streams_replies = True
        self.stream_muted = False  # the stream's command was under CLIENT REPLY OFF / SKIP
        self.pending: list[list[bytes]] | None = None  # commands read while blocked
        self.reading = True
        self.paused_for_output = False
        self.protocol_error: str | None = None  # answered once the commands before it ran
        self.read_ahead = 0  # bytes of the commands read while blocked, since it last resumed

    def data_received(self, data: bytes) -> None:
        """asyncio's read callback (the protocol takes it from here as it is)."""
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
        if reply:
            self.send(reply)
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
        # Read into a local: a test of the attribute itself would let the
        # compiled code take ``blocked`` for None after running the commands.
        blocked = self.blocked
        if self.closing or blocked is not None:
            return
        if self.stream is not None:
            if not self.paused_for_output:
                self._run_stream()
            return
        pending = self._take_pending()
        if pending:
            self._execute(pending)
        if self.blocked is None and self.pending is None:
            if self.protocol_error is not None:
                self._protocol_error(self.protocol_error)
            elif not self.paused_for_output:
                self._set_reading(True)

    def _take_pending(self) -> list[list[bytes]] | None:
        """The commands waiting, no longer held (a method of its own, for the
        same reason as ``blocked`` above: ``pending`` is read again after)."""
        pending = self.pending
        self.pending = None
        self.read_ahead = 0
        return pending

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
