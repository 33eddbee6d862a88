"""What ``disque-cluster`` asks its local nodes over RESP, through
``disque.tools.resp_client`` (hiredis, a dependency of the server), so it
needs no client library."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from disque.cluster.membership import FLAGS_BY_NAME, UNREACHABLE
from disque.tools.node_config import METRICS_PORT, TLS_PORT, dashboard_url
from disque.tools.node_files import HOST, NodeFiles
from disque.tools.resp_client import CommandError, Connection

REPLY_TIMEOUT_S: Final = 5.0
SHORT_REPLY_TIMEOUT_S: Final = 1.0   # PING, and INFO before a SHUTDOWN: no work to wait for

PING: Final = ("PING",)
PONG: Final = b"PONG"
OK: Final = b"OK"
HELLO: Final = ("HELLO",)
CLUSTER_MEET: Final = ("CLUSTER", "MEET")
CLUSTER_NODES: Final = ("CLUSTER", "NODES")
CLUSTER_INFO: Final = ("CLUSTER", "INFO")
CONFIG_GET: Final = ("CONFIG", "GET")
INFO_SERVER: Final = ("INFO", "server")
INFO_JOBS: Final = ("INFO", "jobs")
QSCAN_ALL: Final = ("QSCAN", "BUSYLOOP")
QLEN: Final = "QLEN"
SHUTDOWN: Final = ("SHUTDOWN",)
INFO_PROCESS_ID: Final = "process_id"
INFO_REGISTERED_JOBS: Final = "registered_jobs"
INFO_REACHABLE_NODES: Final = "cluster_reachable_nodes"   # other nodes, not counting itself
MYSELF_FLAG: Final = "myself"
CONNECTED: Final = "connected"
# CLUSTER NODES flags of a node that is not reached, whatever its link says.
UNREACHABLE_FLAGS: Final = frozenset(name for name, flag in FLAGS_BY_NAME.items()
                                     if flag & UNREACHABLE)

# What a failed query raises: the node is down, does not answer in time, or refused.
QUERY_ERRORS: Final = (OSError, CommandError)


@dataclass(frozen=True)
class NodeStatus:
    """What ``status`` shows of one node; None where a down node cannot tell."""

    port: int
    pid: int | None
    up: bool
    known_nodes: int | None = None
    reachable_nodes: int | None = None   # itself included
    jobs: int | None = None
    queued: int | None = None
    dashboard: str | None = None   # the URL of its metrics port, when it has one

    @property
    def state(self) -> str:
        """up, down, or a running process that does not answer (loading, stuck)."""
        if self.up:
            return "up"
        return "down" if self.pid is None else "no-reply"


def link(port: int, timeout: float = REPLY_TIMEOUT_S) -> Connection:
    """A short-lived connection to the local node on ``port``."""
    return Connection(port, HOST, timeout)


def info_fields(text: bytes) -> dict[str, str]:
    """``field:value`` lines of INFO or CLUSTER INFO."""
    fields = {}
    for line in text.decode(errors="replace").splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields[name] = value
    return fields


def _view(cluster_nodes: bytes, cluster_info: bytes) -> tuple[int, int]:
    """The nodes a node knows, and those it reaches now, itself included.

    A node reached now has an open bus link and no flag saying it fails, is
    in handshake or leaves (CLUSTER NODES): a link closes as soon as the
    peer's process ends, so a stopped node stops counting at once, where the
    failure flags wait for node-timeout. It must also be in the set that
    ADDJOB replicates to (CLUSTER INFO's count), which the node's cron
    refreshes after a link opens."""
    known = linked = 0
    for line in cluster_nodes.decode(errors="replace").splitlines():
        fields = line.split()
        if len(fields) < 6:
            continue
        known += 1
        flags = set(fields[2].split(","))
        if MYSELF_FLAG in flags or (fields[5] == CONNECTED and not flags & UNREACHABLE_FLAGS):
            linked += 1
    return known, min(linked, int(info_fields(cluster_info)[INFO_REACHABLE_NODES]) + 1)


def answers_ping(port: int) -> bool:
    """True if a node answers PING on ``port`` now."""
    try:
        with link(port, timeout=SHORT_REPLY_TIMEOUT_S) as connection:
            return bool(connection.call(*PING) == PONG)
    except QUERY_ERRORS:
        return False


def cluster_view(port: int) -> tuple[int, int]:
    """The nodes the node on ``port`` knows, and those it reaches now (itself included)."""
    with link(port) as connection:
        return _view(*connection.pipeline([CLUSTER_NODES, CLUSTER_INFO]))


def node_ids(nodes: Sequence[NodeFiles]) -> list[str]:
    """Each node's ID, from its HELLO reply (version, own ID, nodes...)."""
    ids = []
    for node in nodes:
        with link(node.port) as connection:
            ids.append(connection.call(*HELLO)[1].decode())
    return ids


def node_status(node: NodeFiles, pid: int | None) -> NodeStatus:
    """Ask one node about itself; a node that does not answer is down
    (``pid``: the running process its pid file names, if any)."""
    try:
        with link(node.port) as connection:
            server, nodes, cluster, jobs, queues, metrics, tls = connection.pipeline(
                [INFO_SERVER, CLUSTER_NODES, CLUSTER_INFO, INFO_JOBS, QSCAN_ALL,
                 (*CONFIG_GET, METRICS_PORT), (*CONFIG_GET, TLS_PORT)])
            lengths = connection.pipeline([(QLEN, queue) for queue in queues[1]])
    except QUERY_ERRORS:
        return NodeStatus(node.port, pid, up=False)
    known, reachable = _view(nodes, cluster)
    metrics_port, tls_port = int(metrics[1]), int(tls[1])
    return NodeStatus(
        node.port, int(info_fields(server)[INFO_PROCESS_ID]), up=True,
        known_nodes=known, reachable_nodes=reachable,
        jobs=int(info_fields(jobs)[INFO_REGISTERED_JOBS]), queued=sum(lengths),
        dashboard=dashboard_url(metrics_port, tls_port) if metrics_port else None)
