"""What serving a client is given: its transport, the server and node it
runs on (``net/connection.ConnectionServer`` and ``disque.node.Node``), the
account of maxmemory-clients, and the counters of the limits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

from disque.context.clients import ClientState

if TYPE_CHECKING:
    from disque.config import Config
    from disque.serving.batch import OutputBatch
    from disque.state.command import Command
    from disque.state.nodestate import NodeState


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


class ClientTransport(Protocol):
    """What serving a client asks of its transport (asyncio's ``Transport``)."""

    def write(self, data: bytes) -> None:
        """Send ``data`` (buffered past what the socket takes now)."""

    def get_write_buffer_size(self) -> int:
        """Bytes written and not yet sent."""

    def pause_reading(self) -> None:
        """Stop reading the socket."""

    def resume_reading(self) -> None:
        """Read the socket again."""

    def close(self) -> None:
        """Close once what was written is sent."""

    def abort(self) -> None:
        """Close at once, dropping what was not sent."""


class MemoryHolder(Protocol):
    """A connection as the account of maxmemory-clients sees it."""

    addr: str
    noted_memory: int  # its figure in the account

    def reply_memory(self) -> int:
        """What its replies not yet sent hold now (bytes)."""

    def close_for_memory(self) -> None:
        """Close it at once, its replies dropped."""


class ReplyAccount(Protocol):
    """maxmemory-clients' account of unread replies (``net/replymemory.ReplyMemory``)."""

    def note(self, client: MemoryHolder, held: int) -> None:
        """``client``'s replies not yet sent hold ``held`` bytes now."""

    def forget(self, client: MemoryHolder) -> None:
        """``client`` is gone."""


class ServingNode(Protocol):
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


class ServingServer(Protocol):
    """What serving a client needs of the server (``net/connection.ConnectionServer``)."""

    # Counted by the connection (INFO stats).
    net_input_bytes: int
    net_output_bytes: int

    @property
    def config(self) -> Config:
        """The limits."""

    @property
    def output_batch(self) -> OutputBatch:
        """This loop turn's replies, which the connection's join."""

    @property
    def reply_memory(self) -> ReplyAccount:
        """What all clients' replies not yet sent hold (maxmemory-clients)."""

    @property
    def limits(self) -> LimitCounters:
        """Connections closed by a limit."""

    @property
    def output_limited(self) -> bool:
        """client-output-buffer-limit sets a limit."""

    @property
    def clients_paused(self) -> bool:
        """CLIENT PAUSE is in force: connections do not read."""

    def flush_aof_then(self, done: Callable[[], None]) -> None:
        """Write the AOF's pending records; ``done`` (soon or at once) once
        they are on disk as appendfsync asks, the loop serving others meanwhile."""

    def arm_timer(self) -> None:
        """Have the node's timers fire at its next due time."""
