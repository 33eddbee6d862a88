"""What /metrics and the dashboard read of the running server, and what
the dashboard's actions ask of it.

Both read only when asked (a scrape, a poll), and only these: the node,
the process's counters and the AOF writer. An action runs one command
through ``Node.call``, as a RESP client's would. ``disque.server.Server``
is the implementation; naming the members here keeps ``disque.http`` from
depending on the whole process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sized
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from disque.aof.writer import AofWriter
    from disque.config import Config
    from disque.context.clients import ClientState
    from disque.state.nodestate import NodeState


class CountedRoute(Protocol):
    """One bus route as the metrics read it: how many messages of its type arrived."""

    @property
    def received(self) -> int:
        """Messages of the route's type handled."""


class ObservedNode(Protocol):
    """The node (``disque.node.Node``) as HTTP reads and drives it."""

    @property
    def state(self) -> NodeState:
        """The node's parts: they keep the job, queue, bus and cluster counters."""

    @property
    def bus_routes(self) -> Mapping[str, CountedRoute]:
        """The bus message types and how many of each arrived."""

    def call(self, client: ClientState, argv: list[bytes]) -> bytes | None:
        """Run one command as ``client`` (a dashboard action); None if it blocked."""

    def stream_step(self, client: ClientState, out: list[bytes]) -> bool:
        """The next step of a command going on in steps; True once its reply is complete."""

    def perf_ns(self) -> int:
        """The time source of the command statistics (ns)."""


class ObservedServer(Protocol):
    """The node and the process around it, as the HTTP collectors read them."""

    @property
    def node(self) -> ObservedNode:
        """The node."""

    @property
    def config(self) -> Config:
        """The port shown, appendfsync, metrics-max-queues."""

    @property
    def start_time(self) -> float:
        """When the process started (unix time, seconds)."""

    @property
    def clients(self) -> Sized:
        """The open client connections (only their number is read)."""

    @property
    def connections_received(self) -> int:
        """Client connections accepted."""

    @property
    def rejected_connections(self) -> int:
        """Client connections refused (maxclients)."""

    @property
    def net_input_bytes(self) -> int:
        """Bytes read from clients."""

    @property
    def net_output_bytes(self) -> int:
        """Bytes written to clients."""

    @property
    def aof_writer(self) -> AofWriter | None:
        """The AOF writer (None before the server starts)."""

    def info_fields(self, section: str) -> list[tuple[str, object]]:
        """The process's INFO fields of ``section`` (memory, persistence)."""


class DashboardServer(ObservedServer, Protocol):
    """The server as the dashboard's actions use it: around ``Node.call``,
    what a client connection does around it."""

    def next_client_id(self) -> int:
        """An ID for a login's client (MONITOR and the log show its address)."""

    def flush_aof(self) -> None:
        """Write the AOF records of a command before its reply leaves."""

    def flush_aof_then(self, done: Callable[[], None]) -> None:
        """Write them, and call ``done`` once they are on disk as appendfsync asks."""

    def arm_timer(self) -> None:
        """Have the node's timers fire at its next due time."""
