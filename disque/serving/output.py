"""A client's replies on their way out: collected for the loop turn's
``OutputBatch`` (``serving/batch``), written to the transport, and bounded.

Output that must leave before the turn ends (``close``, a pipeline of big
replies) goes through ``_flush_now``, which writes the AOF first too (spec:
persistence.md). After each write the client's unread replies (its
transport's buffer, and the rest of a reply made in steps) are noted in
the account of maxmemory-clients (``net/replymemory``) and held to
client-output-buffer-limit (and the MONITOR class's limit).
"""

from __future__ import annotations

from typing import Final

from mypy_extensions import mypyc_attr

from disque.context.clients import ClientState
from disque.context.log import logger
from disque.serving.batch import OutputBatch
from disque.serving.interfaces import ClientTransport, ReplyAccount, ServingNode, ServingServer

WRITE_HIGH_WATER: Final = 256 * 1024


# The connection's asyncio protocol (``net/connection.ClientConnection``) extends it.
@mypyc_attr(allow_interpreted_subclasses=True)
class ClientOutput(ClientState):
    """The output side of a client connection."""

    __slots__ = ("server", "node", "batch", "memory", "transport", "output", "noted_memory",
                 "soft_limit_since", "closing")

    def __init__(self, client_id: int, now_ms: int, server: ServingServer,
                 node: ServingNode) -> None:
        ClientState.__init__(self, client_id, "", now_ms)
        self.server = server
        self.node = node
        self.batch: OutputBatch = server.output_batch
        self.memory: ReplyAccount = server.reply_memory
        self.noted_memory = 0  # this client's figure in ``memory``
        self.transport: ClientTransport | None = None
        self.output: list[bytes] | None = None  # replies waiting for the end of the loop turn
        self.soft_limit_since = 0
        self.closing = False

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

    def _after_write(self, transport: ClientTransport) -> None:
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
