"""The disque-server process: listeners, clients, cron, shutdown.

Everything that touches sockets, files and the operating system for the
node lives here (with ``connection``, ``cluster.bus`` and ``aof``); the
node core in ``disque.node`` only sees commands, messages and time.
"""

from __future__ import annotations

import gc

if __name__ == "__main__":
    # Started as the server (python -m disque.server): no cyclic collection
    # while the modules below load, which spares about 6 ms of an 85 ms start
    # (bench.startup); Server then sets the collector's schedule
    # (process/gctuning.py).
    gc.disable()

import asyncio
import fcntl
import os
import random
import signal
import socket
import sys
import time
from typing import TYPE_CHECKING, Callable

import uvloop

from disque import __version__
from disque.context import log
from disque.process import cli, logformat, serverinfo
from disque.process.proctitle import set_process_title
from disque.aof.service import AofService, AofStartupError
from disque.aof.writer import AofWriter
from disque.cluster import nodesconf
from disque.queues import ratelimit
from disque.queues.ratelimit import RateLimit
from disque.net import loop_hosts
from disque.net.bus import BusConfigError, ClusterBus, frame_cap
from disque.cluster.membership import BUS_PORT_OFFSET
from disque.cluster.gossip import random_node_id
from disque.config import Config, ConfigSetError
from disque.net.connection import REQUEST_TIMEOUT_LOG, ClientConnection, LimitCounters, OutputBatch
from disque.process.gctuning import GarbageCollector
from disque.state.host import Host
from disque.jobs.timers import NEVER
from disque.context.log import logger
from disque.node import Node
from disque.process.osprocess import (RESERVED_FDS, atomic_write, daemonize, notify_systemd,
                               raise_fd_limit)

if TYPE_CHECKING:
    from disque.context.clients import ClientState
    from disque.http.service import HttpService
    from disque.net.tls import HandshakeFailures
    from disque.state.nodestate import NodeState

TIMER_SLACK_MS = 1
REQUEST_SCAN_INTERVAL_MS = 1000  # client-request-timeout is checked once a second
DEFAULT_TLS_HANDSHAKE_TIMEOUT = 60.0  # asyncio's, when client-request-timeout is 0
# While the AOF loads, systemd's start timeout (TimeoutStartSec) is pushed
# back: each EXTEND_TIMEOUT_USEC gives this long from when it is sent, and a
# new one goes out every LOADING_NOTIFY_INTERVAL, so a node that stops
# making progress is still killed within about that long.
LOADING_EXTEND_USEC = 10_000_000
LOADING_NOTIFY_INTERVAL = 0.25  # seconds; a datagram each time, a few per second at most


def wall_clock_ms() -> int:
    """Unix time in milliseconds."""
    return time.time_ns() // 1_000_000


class StartupError(Exception):
    """The server cannot start; the message says why."""


class Server(Host):
    """A running node: the process around ``disque.node.Node``."""

    def __init__(self, config: Config, argv: list[str]) -> None:
        self.config = config
        self.argv = argv
        self.clients: dict[int, ClientConnection] = {}
        self.client_id = 0
        self.connections_received = 0
        self.rejected_connections = 0
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.net_rate = serverinfo.NetworkRate()
        self.start_time = time.time()
        self.run_id = "%040x" % random.SystemRandom().getrandbits(160)
        self.listeners: list[asyncio.AbstractServer] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.timer_handle: asyncio.TimerHandle | None = None
        self.timer_at = NEVER
        self.cron_handle: asyncio.TimerHandle | None = None
        self.stopped: asyncio.Future[int] | None = None  # the exit code, once shut down
        self.paused_until = 0.0
        self.clients_paused = False  # CLIENT PAUSE in force: connections do not read
        self.lock_fd = -1
        self.pidfile_written = False
        self.gc = GarbageCollector()
        self.aof: AofService | None = None
        self.aof_writer: AofWriter | None = None
        self.bus: ClusterBus | None = None
        self.http: HttpService | None = None  # metrics-port: /metrics and the dashboard
        self.tls_handshakes: HandshakeFailures | None = None  # tls-port's failed handshakes
        self.output_limited = any(config.client_output_buffer_limit)
        self.limits = LimitCounters()
        self.next_request_scan = 0  # ms: when the cron next looks for stalled requests
        self._output_batch: OutputBatch | None = None
        self._next_loading_notify = 0.0  # monotonic: when the next EXTEND_TIMEOUT_USEC is due
        self.node: Node = self._create_node()

    # ------------------------------------------------------------ startup

    def _create_node(self) -> Node:
        rng = random.Random(os.urandom(32))
        nodes, schedules, limits = self._load_cluster_config()
        myself = next((n for n in nodes if n.flags & 1), None)
        node_id = myself.id if myself is not None else random_node_id(rng)
        node = Node(self.config, node_id, clock=wall_clock_ms, rng=rng, host=self,
                    perf_ns=time.perf_counter_ns)
        nodesconf.restore(node.state.membership, nodes, self.config.port)
        node.state.schedules.restore(schedules)
        for queue, rate, burst in limits:
            node.state.queues.set_limit(queue, RateLimit(rate, burst, node.state.now))
        for old, new in self.config.rename_commands:
            node.rename_command(old, new)
        self._apply_stats_config(node)
        if myself is None:
            logger.info("No cluster configuration found, I'm %s", node_id.decode())
            self.node = node
            problem = self.save_cluster_config()
            if problem:
                raise StartupError("Can't write the cluster config file: %s" % problem)
        else:
            logger.info("Node configuration loaded, I'm %s", node_id.decode())
        return node

    def _load_cluster_config(self) -> tuple[list, list, list[tuple[bytes, int, int]]]:
        """The nodes, the schedules and the queues' delivery limits of nodes.conf."""
        path = self.config.cluster_config_file
        self.lock_fd = os.open(path + ".lock", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise StartupError(
                "Sorry, the cluster configuration file %s is already used by a different "
                "Disque node. Please make sure that different nodes use different cluster "
                "configuration files." % path) from None
        try:
            with open(path) as f:
                text = f.read()
        except FileNotFoundError:
            return [], [], []
        except OSError as exc:
            raise StartupError("Can't read the cluster config file %s: %s" % (path, exc)) from None
        try:
            return (nodesconf.parse(text, wall_clock_ms()), nodesconf.parse_schedules(text),
                    ratelimit.parse_conf(text))
        except (nodesconf.NodesConfError, ValueError) as exc:
            raise StartupError(str(exc)) from None

    def save_cluster_config(self) -> str | None:
        """Rewrite nodes.conf atomically; return the error text on failure."""
        try:
            atomic_write(self.config.cluster_config_file,
                         nodesconf.render(self.node.state.membership, self.node.state.schedules)
                         + ratelimit.conf_lines(self.node.state.queues.limits))
        except OSError as exc:
            logger.warning("Could not save the cluster config file: %s", exc)
            return exc.strerror or str(exc)
        return None

    def cron_problem(self, expr: bytes) -> str | None:
        """SCHEDULE SET ... CRON: croniter reads the expression (process/cronspec)."""
        from disque.process import cronspec  # croniter loads only for a CRON schedule
        return cronspec.cron_problem(expr)

    def cron_next(self, expr: bytes, after_ms: int) -> int:
        """The next CRON tick after ``after_ms`` (process/cronspec)."""
        from disque.process import cronspec
        return cronspec.cron_next(expr, after_ms)

    def _apply_stats_config(self, node: Node) -> None:
        stats = node.state.stats
        stats.slowlog_threshold_us = self.config.slowlog_log_slower_than
        stats.slowlog_max_len = self.config.slowlog_max_len
        stats.latency_threshold_ms = self.config.latency_monitor_threshold

    def _watch_config(self) -> None:
        config = self.config
        node = self.node
        stats_fields = ("slowlog-log-slower-than", "slowlog-max-len", "latency-monitor-threshold")
        for name in stats_fields:
            config.on_change(name, lambda old, new: self._apply_stats_config(node))
        config.on_change("maxmemory", self._maxmemory_changed)
        config.on_change("loglevel", lambda old, new: logformat.set_level(new))
        config.on_change("maxclients", self._maxclients_changed)
        config.on_change("hz", lambda old, new: self._schedule_cron())
        config.on_change("proto-max-bulk-len", self._max_bulk_changed)
        config.on_change("client-output-buffer-limit",
                         lambda old, new: setattr(self, "output_limited", any(new)))

    def _maxmemory_changed(self, old: int, new: int) -> None:
        self.node.state.update_memory_limits()
        if new:
            self.node.state.free_memory()

    def _maxclients_changed(self, old: int, new: int) -> None:
        allowed = raise_fd_limit(new)
        if allowed < new:
            raise ConfigSetError("ERR The operating system is not able to handle the specified "
                                 "number of clients, try with %d" % allowed)

    def _max_bulk_changed(self, old: int, new: int) -> None:
        if self.bus is not None:
            self.bus.max_frame = frame_cap(new)
        for client in self.clients.values():
            client.parser.max_bulk_len = new

    async def start(self) -> None:
        """Open listeners and start the cron."""
        self.loop = asyncio.get_running_loop()
        self.stopped = self.loop.create_future()
        config = self.config
        allowed = raise_fd_limit(config.maxclients)
        if allowed < config.maxclients:
            logger.warning("You requested maxclients of %d requiring at least %d max file "
                           "descriptors; maxclients lowered to %d.",
                           config.maxclients, config.maxclients + RESERVED_FDS, allowed)
            config.maxclients = allowed
        self._watch_config()
        self.aof = AofService(self.node.state, config, self.loop, logger)
        self.aof_writer = self.aof.writer
        factory = lambda: ClientConnection(self)  # noqa: E731
        # The listeners are bound now and serve once the bus is up (or, while
        # an AOF loads, as the load begins, to answer LOADING): a node that
        # answers PING is reachable on the bus, as the original's is.
        if config.tls_port:
            await self._start_tls_listener(factory)
        if config.port:
            try:
                self.listeners.append(await self.loop.create_server(
                    factory, loop_hosts(config.bind), config.port, backlog=config.tcp_backlog, reuse_address=True,
                    start_serving=False))
            except OSError as exc:
                raise self._cannot_listen("Server TCP", config.port, exc) from None
        if config.unixsocket:
            try:
                os.unlink(config.unixsocket)
            except FileNotFoundError:
                pass
            try:
                self.listeners.append(await self.loop.create_unix_server(
                    factory, config.unixsocket, backlog=config.tcp_backlog, start_serving=False))
            except OSError as exc:
                raise StartupError("Opening Unix socket %s: %s" % (config.unixsocket, exc)) from None
            if config.unixsocketperm:
                os.chmod(config.unixsocket, config.unixsocketperm)
        if config.metrics_port:
            await self._start_http()
        self.loop.add_signal_handler(signal.SIGTERM, self._signal_shutdown, "SIGTERM")
        self.loop.add_signal_handler(signal.SIGINT, self._signal_shutdown, "SIGINT")
        try:
            await self.aof.load_at_startup(self._loading_progress, self._serve_clients)
        except AofStartupError as exc:
            raise StartupError(str(exc)) from None
        await self._start_bus()
        # The node's first cron runs now, before clients are served: links to
        # the known nodes open at once, so a restarted node is heard from
        # without waiting a cron period.
        self.node.cron()
        self._schedule_cron()
        self.arm_timer()
        await self._serve_clients()
        logger.info("Server started, Disque version %s", __version__)
        if config.port:
            logger.info("The server is now ready to accept connections on port %d", config.port)
        if config.tls_port:
            logger.info("The server is now ready to accept TLS connections on port %d",
                        config.tls_port)
        if config.unixsocket:
            logger.info("The server is now ready to accept connections at %s", config.unixsocket)
        if config.metrics_port:
            logger.info("Metrics and the dashboard are served over %s on port %d",
                        "HTTPS" if config.tls_port else "HTTP", config.metrics_port)
        self._notify("READY=1")

    async def _serve_clients(self) -> None:
        """Start accepting on the client listeners (those already serving stay so)."""
        for listener in self.listeners:
            if not listener.is_serving():
                await listener.start_serving()

    def _cannot_listen(self, what: str, port: int, exc: OSError) -> StartupError:
        """The start-up error of a listener that could not be opened."""
        return StartupError("Creating %s listening socket %s:%d: %s" % (
            what, ",".join(self.config.bind) or "*", port, exc.strerror or exc))

    async def _start_tls_listener(self, factory: Callable[[], ClientConnection]) -> None:
        """TLS on tls-port beside the plain port: the same connection class on
        the same loop; the handshake is bounded by client-request-timeout."""
        from disque.net import tls  # loaded only by a node that uses TLS
        config = self.config
        self.tls_handshakes = tls.HandshakeFailures(config.tls_port)
        try:
            context = tls.server_context(config, failures=self.tls_handshakes)
        except tls.TlsConfigError as exc:
            raise StartupError("Can't configure TLS: %s" % exc) from None
        handshake_timeout = config.client_request_timeout or DEFAULT_TLS_HANDSHAKE_TIMEOUT
        try:
            self.listeners.append(await self._running_loop().create_server(
                factory, loop_hosts(config.bind), config.tls_port, backlog=config.tcp_backlog,
                reuse_address=True, ssl=context, ssl_handshake_timeout=handshake_timeout,
                start_serving=False))
        except OSError as exc:
            raise self._cannot_listen("Server TLS", config.tls_port, exc) from None

    async def _start_http(self) -> None:
        """Serve /metrics and the dashboard on metrics-port, at the client
        port's addresses (over TLS when tls-port is set); its listener
        closes with theirs."""
        # Imported here: aiohttp and prometheus_client take 0.2 s to load,
        # which a node without metrics-port does not pay.
        from disque.http.service import HttpService
        config = self.config
        self.http = HttpService(self)
        context = None
        handshake_timeout = None
        if config.tls_port:
            from disque.net import tls  # loaded only by a node that uses TLS
            # HTTPS with the client port's certificate. Browsers and scrapers are
            # not asked for a certificate, whatever tls-auth-clients says: the
            # dashboard's actions need an ACL login (docs/dashboard.md).
            try:
                context = tls.server_context(config, auth_clients="no")
            except tls.TlsConfigError as exc:
                raise StartupError("Can't configure TLS: %s" % exc) from None
            handshake_timeout = config.client_request_timeout or DEFAULT_TLS_HANDSHAKE_TIMEOUT
        try:
            self.listeners.append(await self.http.listen(config.bind or None, config.metrics_port,
                                                         config.tcp_backlog, context,
                                                         handshake_timeout))
        except OSError as exc:
            raise self._cannot_listen("the metrics HTTP", config.metrics_port, exc) from None

    async def _start_bus(self) -> None:
        """Listen for cluster bus connections on port + 10000 (or cluster-bus-port)."""
        config = self.config
        bus = ClusterBus(self.node, self._running_loop(), after_bus=self._after_bus,
                         before_write=self.flush_aof)
        self.node.state.outbox.use(bus)
        self.bus = bus
        if not config.port:
            return
        port = config.cluster_bus_port or config.port + BUS_PORT_OFFSET
        if port > 65535:
            raise StartupError("Port %d is too high: the cluster bus would need port %d. Use a "
                               "port <= 55535 or set cluster-bus-port." % (config.port, port))
        if port != config.port + BUS_PORT_OFFSET:
            self.node.state.membership.myself.bport = port
        try:
            for warning in bus.configure(config):
                logger.warning(warning)
        except BusConfigError as exc:
            raise StartupError("Can't secure the cluster bus: %s" % exc) from None
        try:
            await bus.listen(config.bind, port, config.tcp_backlog)
        except OSError as exc:
            raise self._cannot_listen("the cluster bus", port, exc) from None

    def _loading_progress(self) -> None:
        """A slice of the AOF was loaded: keep systemd from timing the start out."""
        now = time.monotonic()
        if now >= self._next_loading_notify:
            self._next_loading_notify = now + LOADING_NOTIFY_INTERVAL
            self._notify("EXTEND_TIMEOUT_USEC=%d" % LOADING_EXTEND_USEC)

    def _notify(self, state: str) -> None:
        supervised = self.config.supervised
        if supervised == "systemd" or (supervised == "auto" and "NOTIFY_SOCKET" in os.environ):
            if not notify_systemd(state) and supervised == "systemd" and state == "READY=1":
                logger.warning("systemd supervision requested, but NOTIFY_SOCKET not found")

    def write_pidfile(self) -> None:
        """Write the pid file (when daemonized)."""
        try:
            with open(self.config.pidfile, "w") as f:
                f.write("%d\n" % os.getpid())
            self.pidfile_written = True
        except OSError as exc:
            logger.warning("Can't write the pid file %s: %s", self.config.pidfile, exc)

    # -------------------------------------------------------------- timers

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The loop ``start`` runs the server on: nothing is scheduled before."""
        loop = self.loop
        assert loop is not None, "the server has not started"
        return loop

    def next_client_id(self) -> int:
        """Monotonic client IDs for CLIENT ID / LIST / KILL ID."""
        self.client_id += 1
        return self.client_id

    def arm_timer(self) -> None:
        """Make sure the single timer handle fires at the node's next due time."""
        due = self.node.next_timer()
        if due >= self.timer_at:
            return
        handle = self.timer_handle
        if handle is not None:
            handle.cancel()
        self.timer_at = due
        delay = max(0.0, (due - wall_clock_ms() + TIMER_SLACK_MS) / 1000)
        self.timer_handle = self._running_loop().call_later(delay, self._on_timer)

    def _after_bus(self) -> None:
        """Bus frames were handled: clients they unblocked go on at once (a
        pipeline's next synchronous ADDJOB sends its REPLJOBs in this loop
        turn), then the timer follows the node's next due time."""
        self.output_batch.run_resumed()
        self.arm_timer()

    def _on_timer(self) -> None:
        self.timer_handle = None
        self.timer_at = NEVER
        self.node.run_timers()
        self.arm_timer()

    def _schedule_cron(self) -> None:
        if self.cron_handle is not None:
            self.cron_handle.cancel()
        self.cron_handle = self._running_loop().call_later(1 / self.config.hz, self._cron)

    def _cron(self) -> None:
        self.cron_handle = None
        node = self.node
        try:
            node.cron()
            now = node.state.now
            node.state.stats.sample_ops(now)
            self.net_rate.sample(self.net_input_bytes, self.net_output_bytes)
            self._close_idle_clients(now)
            if now >= self.next_request_scan:
                self.next_request_scan = now + REQUEST_SCAN_INTERVAL_MS
                self._close_stalled_requests(now)
            if self.aof is not None:
                self.aof.cron()
            self.gc.tick()
        except Exception:  # the cron must survive any bug in one pass
            logger.exception("Error in server cron")
        self._schedule_cron()
        self.arm_timer()

    def _close_idle_clients(self, now: int) -> None:
        timeout = self.config.timeout
        if not timeout:
            return
        limit = now - timeout * 1000
        for client in list(self.clients.values()):
            if client.atime < limit and client.blocked is None and not client.monitor:
                logger.log(log.VERBOSE, "Closing idle client %s", client.addr)
                client.close()

    def _close_stalled_requests(self, now: int) -> None:
        """client-request-timeout: close a client holding part of a request
        that received no byte for that long (slowloris); a slow upload that
        keeps sending is never cut, as the time counts from its last byte."""
        timeout = self.config.client_request_timeout
        if not timeout:
            return
        limit = now - timeout * 1000
        for client in list(self.clients.values()):
            if client.atime < limit and not client.closing and client.parser.held():
                logger.warning(REQUEST_TIMEOUT_LOG, client.addr, timeout)
                self.limits.request_timeout += 1
                client.close()

    def tune_tcp_socket(self, sock: socket.socket) -> None:
        """TCP_NODELAY always; keepalive probes when tcp-keepalive is set."""
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            interval = self.config.tcp_keepalive
            if interval > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, interval)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, interval // 3))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
        except OSError:
            pass

    # ------------------------------------------------------------ shutdown

    def _signal_shutdown(self, name: str) -> None:
        logger.warning("Received %s scheduling shutdown...", name)
        if not self.shutdown(False):
            logger.warning("SHUTDOWN failed, exiting anyway")
            self._stop(1)

    @property
    def output_batch(self) -> OutputBatch:
        """The replies of this loop turn, handed to each new connection."""
        batch = self._output_batch
        if batch is None or batch.loop is not self.loop:
            batch = self._output_batch = OutputBatch(self._running_loop(), self.flush_aof)
        return batch

    def flush_aof(self) -> None:
        """Write pending AOF records: called before any reply leaves the process."""
        writer = self.aof_writer
        if writer is not None and writer.pending:
            writer.flush()

    def shutdown(self, rewrite_aof: bool) -> bool:
        """Prepare to exit, then stop the loop on its next turn."""
        logger.warning("User requested shutdown...")
        if self.aof is not None and not self.aof.shutdown(rewrite_aof):
            return False
        self._notify("STOPPING=1")
        for listener in self.listeners:
            listener.close()
        if self.bus is not None:
            self.bus.shutdown()
        if self.config.unixsocket:
            try:
                os.unlink(self.config.unixsocket)
            except OSError:
                pass
        self.save_cluster_config()
        if self.pidfile_written:
            try:
                os.unlink(self.config.pidfile)
            except OSError:
                pass
        logger.warning("Disque is now ready to exit, bye bye...")
        self._stop(0)
        return True

    def _stop(self, code: int) -> None:
        if self.stopped is not None and not self.stopped.done():
            self.stopped.set_result(code)

    # --------------------------------------------------- admin host calls

    def time_us(self, now_ms: int) -> int:
        return time.time_ns() // 1000

    def reset_stats(self) -> None:
        self.connections_received = 0
        self.rejected_connections = 0
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.net_rate.clear()

    def client_list(self, now_ms: int) -> bytes:
        return "".join(c.describe(now_ms) + "\n" for c in self.clients.values()).encode()

    def kill_clients(self, caller: ClientState, *, addr: str | None = None,
                     client_id: int | None = None, skip_caller: bool = True) -> int:
        killed = 0
        for client in list(self.clients.values()):
            if addr is not None and client.addr != addr:
                continue
            if client_id is not None and client.id != client_id:
                continue
            if client is caller and skip_caller:
                continue
            if client is caller:
                client.close_after_reply = True
            else:
                client.close()
            killed += 1
        return killed

    def pause_clients(self, ms: int) -> None:
        # A shorter pause given during a longer one does not end it early.
        self.paused_until = max(self.paused_until, time.monotonic() + ms / 1000)
        self.clients_paused = True
        for client in self.clients.values():
            transport = client.transport
            assert transport is not None  # a listed client is connected
            transport.pause_reading()
        self._running_loop().call_later(ms / 1000, self._resume_clients)

    def _resume_clients(self) -> None:
        remaining = self.paused_until - time.monotonic()
        if remaining > 0:  # a longer pause came, or the timer fired early
            self._running_loop().call_later(remaining, self._resume_clients)
            return
        self.clients_paused = False
        for client in list(self.clients.values()):
            held = client.held_input
            if held is not None:
                client.held_input = None
                client.data_received(held)
        for client in self.clients.values():
            transport = client.transport
            if client.reading and not client.closing:
                assert transport is not None  # a listed client is connected
                transport.resume_reading()

    def debug_sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def debug_restart(self, delay_ms: int, graceful: bool) -> bool:
        if graceful:
            try:
                if self.config.config_file:
                    self.config.rewrite()
            except ConfigSetError as exc:
                logger.warning("DEBUG RESTART: config rewrite failed: %s", exc)
                return False
            self.save_cluster_config()
        for listener in self.listeners:
            listener.close()
        if delay_ms:
            time.sleep(delay_ms / 1000)
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
        logger.warning("Restarting the server with %s", " ".join(self.argv))
        try:
            os.execv(sys.executable, [sys.executable, "-m", "disque.server"] + self.argv[1:])
        except OSError as exc:
            logger.warning("Can't restart: %s", exc)
            return False
        return True

    def info_fields(self, section: str) -> list[tuple[str, object]]:
        return serverinfo.info_fields(self, section)

    def bgrewriteaof(self) -> bytes:
        assert self.aof is not None  # start() makes it before any listener opens
        return self.aof.bgrewriteaof()

    def debug_reload_aof(self) -> bool:
        assert self.aof is not None  # start() makes it before any listener opens
        return self.aof.reload()


async def _serve(server: Server) -> int:
    await server.start()
    stopped = server.stopped
    assert stopped is not None  # start() made it
    code = await stopped
    server.output_batch.flush()
    for client in list(server.clients.values()):
        transport = client.transport
        assert transport is not None  # a listed client is connected
        transport.close()
    if server.http is not None:
        await server.http.close()
    return code


def main(argv: list[str] | None = None) -> int:
    """``disque-server [config] [--directive value ...]``."""
    argv = list(sys.argv if argv is None else argv)
    try:
        config = cli.load_config(argv[1:], cli.program_name(argv[0]) if argv else cli.PROGRAM_NAME)
    except cli.CommandLineExit as exc:
        return exc.code
    if config.daemonize:
        daemonize()
    set_process_title(config)
    logformat.configure(config.logfile, config.loglevel, config.syslog_enabled,
                        config.syslog_ident, config.syslog_facility)
    if config.config_file is None and not cli.reads_stdin(argv[1:]):
        logger.warning(cli.NO_CONFIG_WARNING)
    try:
        server = Server(config, argv)
        if config.daemonize:
            server.write_pidfile()
        uvloop.install()
        return asyncio.run(_serve(server))
    except StartupError as exc:
        logger.warning(str(exc))
        if config.logfile:
            sys.stderr.write(str(exc) + "\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
