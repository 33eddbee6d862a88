"""The process's INFO fields: what the server adds to the node's INFO sections.

The node renders INFO and asks its host for the fields only the process
knows (sockets, memory as the OS sees it, CPU time, uptime); this module
computes them from what ``InfoServer`` names of the running server.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from disque import __version__
from disque.build import core_build
from disque.net.replymemory import memory_limit

if TYPE_CHECKING:
    from disque.aof.service import AofService
    from disque.config import Config
    from disque.net.bus import ClusterBus
    from disque.serving.interfaces import LimitCounters
    from disque.net.connection import ClientConnection
    from disque.process.listeners import Listeners

GIT_SHA1 = "00000000"       # not built from a git checkout, as the C server reports then
MEM_ALLOCATOR = "pymalloc"
NETWORK_SAMPLES = 16        # cron ticks over which instantaneous_*_kbps is averaged

InfoFields = list[tuple[str, object]]


class NetworkRate:
    """Byte counters sampled by the cron, for INFO's instantaneous kbps."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int, int]] = []

    def sample(self, input_bytes: int, output_bytes: int) -> None:
        """Record the counters now; only the last NETWORK_SAMPLES are kept."""
        samples = self.samples
        samples.append((time.monotonic(), input_bytes, output_bytes))
        if len(samples) > NETWORK_SAMPLES:
            del samples[0]

    def kbps(self) -> tuple[float, float]:
        """(input, output) KiB per second across the kept samples."""
        samples = self.samples
        if len(samples) < 2:
            return 0.0, 0.0
        (t0, in0, out0), (t1, in1, out1) = samples[0], samples[-1]
        elapsed = max(t1 - t0, 1e-3)
        return (in1 - in0) / 1024 / elapsed, (out1 - out0) / 1024 / elapsed

    def clear(self) -> None:
        """CONFIG RESETSTAT."""
        self.samples.clear()


class InfoServer(Protocol):
    """What the process's INFO fields read of the running server
    (``disque.server.Server``)."""

    start_time: float
    run_id: str
    argv: list[str]
    config: Config
    connections_received: int
    rejected_connections: int
    net_input_bytes: int
    net_output_bytes: int
    net_rate: NetworkRate
    limits: LimitCounters

    @property
    def clients(self) -> Mapping[int, ClientConnection]:
        """The open client connections."""

    @property
    def aof(self) -> AofService | None:
        """The AOF (None before the server starts)."""

    @property
    def bus(self) -> ClusterBus | None:
        """The cluster bus (None before the server starts)."""

    @property
    def listeners(self) -> Listeners | None:
        """The client listeners (tls-port's handshake failures)."""


def rss_bytes() -> int:
    """Resident set size (peak RSS where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _server_fields(server: InfoServer) -> InfoFields:
    import platform  # only INFO needs it: a node answers PING without loading it
    uname = platform.uname()
    uptime = int(time.time() - server.start_time)
    compiler = platform.python_compiler().split()
    return [("disque_version", __version__),
            ("disque_git_sha1", GIT_SHA1),
            ("disque_git_dirty", 0),
            ("disque_build_id", "%016x" % (hash(__version__) & 0xFFFFFFFFFFFFFFFF)),
            ("os", "%s %s %s" % (uname.system, uname.release, uname.machine)),
            ("arch_bits", 64 if sys.maxsize > 2 ** 32 else 32),
            ("multiplexing_api", "epoll" if sys.platform.startswith("linux") else "kqueue"),
            ("gcc_version", compiler[1] if len(compiler) > 1 else "0.0.0"),
            ("process_id", os.getpid()),
            ("run_id", server.run_id),
            ("uptime_in_seconds", uptime),
            ("uptime_in_days", uptime // 86400),
            ("executable", os.path.abspath(server.argv[0])),
            ("config_file", server.config.config_file or "")]


def _build_fields(server: InfoServer) -> InfoFields:
    # Not in the original (INFO build): which build of the core this process loaded.
    return [("core_build", core_build())]


def _clients_fields(server: InfoServer) -> InfoFields:
    biggest = max((c.parser.buffered() for c in server.clients.values()), default=0)
    return [("connected_clients", len(server.clients)),
            ("client_longest_output_list", 0),
            ("client_biggest_input_buf", biggest)]


def _memory_fields(server: InfoServer) -> InfoFields:
    # The fragmentation ratio is the node's: it knows the dataset's size.
    return [("used_memory_rss", rss_bytes()), ("mem_allocator", MEM_ALLOCATOR)]


def _persistence_fields(server: InfoServer) -> InfoFields:
    if server.aof is None:
        return [("loading", 0)]
    return server.aof.info_fields()


def _stats_fields(server: InfoServer) -> InfoFields:
    in_kbps, out_kbps = server.net_rate.kbps()
    return [("total_connections_received", server.connections_received),
            ("total_net_input_bytes", server.net_input_bytes),
            ("total_net_output_bytes", server.net_output_bytes),
            ("instantaneous_input_kbps", "%.2f" % in_kbps),
            ("instantaneous_output_kbps", "%.2f" % out_kbps),
            ("rejected_connections", server.rejected_connections),
            ("latest_fork_usec", 0)]


def _cpu_fields(server: InfoServer) -> InfoFields:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return [("used_cpu_sys", "%.2f" % usage.ru_stime),
            ("used_cpu_user", "%.2f" % usage.ru_utime),
            ("used_cpu_sys_children", "%.2f" % children.ru_stime),
            ("used_cpu_user_children", "%.2f" % children.ru_utime)]


def _bus_fields(server: InfoServer) -> InfoFields:
    bus = server.bus
    if bus is None:
        return []
    by_format, unnamed = bus.link_formats()
    return [("bus_secret", "yes" if bus.keys is not None else "no"),
            ("bus_tls", "yes" if bus.server_tls is not None else "no"),
            ("bus_max_frame", bus.max_frame),
            ("bus_formats", ",".join(str(f) for f in bus.formats)),
            ("bus_links_outbound", len(bus.outbound)),
            ("bus_links_inbound", len(bus.inbound)),
            ("bus_link_formats", ",".join("%d=%d" % (f, n) for f, n in sorted(by_format.items()))),
            ("bus_links_unversioned", unnamed),
            ("bus_format_refusals", bus.format_refusals),
            ("bus_auth_failures", bus.auth_failures),
            ("bus_mac_failures", bus.mac_failures),
            ("bus_frames_too_large", bus.frames_too_large),
            ("bus_messages_too_large", bus.messages_too_large),
            ("bus_handshake_timeouts", bus.handshake_timeouts),
            ("bus_rejected_connections", bus.rejected_connections),
            ("bus_messages_sent", bus.wire.messages),
            ("bus_frames_sent", bus.frames_sent)]


def _security_fields(server: InfoServer) -> InfoFields:
    # Not in the original (INFO security): the node gives the rest of the section.
    handshakes = server.listeners.tls_handshakes if server.listeners is not None else None
    return [("tls_client_handshake_failures", handshakes.count if handshakes else 0)]


def _limits_fields(server: InfoServer) -> InfoFields:
    # Not in the original (INFO limits): connections closed by a limit.
    limits = server.limits
    return [("client_query_buffer_limit_closed", limits.query_buffer),
            ("unauthenticated_buffer_limit_closed", limits.unauthenticated_buffer),
            ("client_request_timeout_closed", limits.request_timeout),
            ("output_buffer_limit_closed_normal", limits.output_normal),
            ("output_buffer_limit_closed_monitor", limits.output_monitor),
            ("client_memory_limit_closed", limits.client_memory),
            # What replies not yet sent hold now, all clients together, and its limit.
            ("clients_reply_memory", sum([client.reply_memory()
                                          for client in server.clients.values()])),
            ("maxmemory_clients", memory_limit(server.config)),
            ("maxclients_rejected_connections", server.rejected_connections)]


_SECTIONS: dict[str, Callable[[InfoServer], InfoFields]] = {
    "server": _server_fields,
    "clients": _clients_fields,
    "memory": _memory_fields,
    "persistence": _persistence_fields,
    "stats": _stats_fields,
    "cpu": _cpu_fields,
    "build": _build_fields,
    "security": _security_fields,
    "limits": _limits_fields,
    "bus": _bus_fields,
}


def info_fields(server: InfoServer, section: str) -> InfoFields:
    """The process-level fields of INFO ``section``; none for sections the node owns alone."""
    fields = _SECTIONS.get(section)
    return fields(server) if fields is not None else []
