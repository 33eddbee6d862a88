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
import os
import random
import signal
import socket
import sys
import time
from typing import TYPE_CHECKING, Callable

import uvloop

from disque import __version__
from disque.process import cli, logformat, serverinfo
from disque.process.aclfile import AclFile, take_marker
from disque.process.proctitle import set_process_title
from disque.aof.service import AofService, AofStartupError
from disque.aof.writer import AofWriter
from disque.cluster import nodesconf
from disque.queues.ratelimit import RateLimit
from disque.net.bus import BusConfigError, ClusterBus, frame_cap
from disque.cluster.membership import BUS_PORT_OFFSET
from disque.cluster.gossip import random_node_id
from disque.config import Config, ConfigSetError
from disque.serving.interfaces import LimitCounters
from disque.net.connection import ClientConnection
from disque.serving.batch import OutputBatch
from disque.net.replymemory import ReplyMemory
from disque.process.clientcontrol import ClientControl
from disque.process.clusterconfig import ClusterConfigFile
from disque.process.cron import ServerCron
from disque.process.gctuning import GarbageCollector
from disque.process.listeners import Listeners, tune_tcp_socket
from disque.process.startup import StartupError, cannot_listen
from disque.process.supervision import Supervision
from disque.process.tablefile import TableFile, TablesFileError, tables_path
from disque.state.host import Host
from disque.context.log import logger
from disque.context.tablelog import USER_TABLE
from disque.node import Node
from disque.process.osprocess import RESERVED_FDS, daemonize, raise_fd_limit

if TYPE_CHECKING:
    from disque.cluster.schedulerecord import Schedule
    from disque.context.clients import ClientState
    from disque.context.tablelog import Record
    from disque.http.service import HttpService
    from disque.state.nodestate import NodeState


REQUEST_SCAN_INTERVAL_MS = 1000  # client-request-timeout is checked once a second


def wall_clock_ms() -> int:
    """Unix time in milliseconds."""
    return time.time_ns() // 1_000_000


class Server(Host):
    """A running node: the process around ``disque.node.Node``, composed of
    its listeners, its cron, its clients' controls, nodes.conf and the
    supervisor's notices (``disque.process``)."""

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
        self.loop: asyncio.AbstractEventLoop | None = None
        self.listeners: Listeners | None = None
        self.cron: ServerCron | None = None
        self.stopped: asyncio.Future[int] | None = None  # the exit code, once shut down
        self.gc = GarbageCollector()
        self.aof: AofService | None = None
        self.aof_writer: AofWriter | None = None
        self.bus: ClusterBus | None = None
        self.http: HttpService | None = None  # metrics-port: /metrics and the dashboard
        self.output_limited = any(config.client_output_buffer_limit)
        self.limits = LimitCounters()
        self.client_control = ClientControl(self.clients, config, self.limits, self._running_loop)
        self.supervision = Supervision(config)
        self.cluster_config = ClusterConfigFile(config.cluster_config_file)
        self.tables = TableFile(tables_path(config.cluster_config_file))
        self.aclfile: AclFile | None = None  # with the aclfile directive
        self.next_request_scan = 0  # ms: when the cron next looks for stalled requests
        self._output_batch: OutputBatch | None = None
        self._reply_memory: ReplyMemory | None = None
        self.node: Node = self._create_node()

    # ------------------------------------------------------------ startup

    def _create_node(self) -> Node:
        rng = random.Random(os.urandom(32))
        nodes, schedules, limits = self.cluster_config.lock_and_read()
        try:
            records = self.tables.load()
        except TablesFileError as exc:
            raise StartupError(str(exc)) from None
        myself = next((n for n in nodes if n.flags & 1), None)
        node_id = myself.id if myself is not None else random_node_id(rng)
        node = Node(self.config, node_id, clock=wall_clock_ms, rng=rng, host=self,
                    perf_ns=time.perf_counter_ns)
        self.node = node
        state = node.state
        nodesconf.restore(state.membership, nodes, self.config.port)
        marker = take_marker(records)
        self._restore_tables(state, schedules, limits, records)
        if self.config.aclfile:
            self.aclfile = AclFile(self.config.aclfile, self.tables)
            self.aclfile.load_at_startup(marker, state)
        for old, new in self.config.rename_commands:
            node.rename_command(old, new)
        self._apply_stats_config(node)
        if myself is None:
            logger.info("No cluster configuration found, I'm %s", node_id.decode())
            problem = self.save_cluster_config()
            if problem:
                raise StartupError("Can't write the cluster config file: %s" % problem)
        else:
            logger.info("Node configuration loaded, I'm %s", node_id.decode())
        return node

    def _restore_tables(self, state: NodeState, schedules: list[Schedule],
                        limits: list[tuple[bytes, int, int]], records: list[Record]) -> None:
        """The schedules and delivery limits: those an older version left in
        nodes.conf, then the tables file's. From then on each change goes to
        the tables file; the ones nodes.conf held move there at once."""
        state.schedules.restore(schedules)
        for queue, rate, burst in limits:
            state.queues.set_limit(queue, RateLimit(rate, burst, state.now))
        for table, key, value in records:
            if not state.restore_table_record(table, key, value):
                raise StartupError("Invalid record in the tables file %s: %s %r"
                                   % (self.tables.path, table.decode(), key))
        state.table_log.enabled = True
        if not schedules and not limits:
            return
        state.persist_tables()
        problem = self.flush_tables()
        if problem is None:
            problem = self.save_cluster_config()
        if problem is not None:
            raise StartupError("Can't move the schedules and delivery limits of %s to %s: %s"
                               % (self.cluster_config.path, self.tables.path, problem))
        logger.warning("Moved %d schedules and %d delivery limits from %s to %s",
                       len(schedules), len(limits), self.cluster_config.path, self.tables.path)

    def save_cluster_config(self) -> str | None:
        """Rewrite nodes.conf atomically; return the error text on failure."""
        return self.cluster_config.save(self.node.state)

    def flush_tables(self) -> str | None:
        """Append the tables' records of this turn to the tables file; the
        error text when they could not be written."""
        records = self.node.state.table_log.take()
        if not records and not self.tables.unwritten:
            return None
        if self.aclfile is not None and any([record[0] == USER_TABLE for record in records]):
            self.aclfile.changed()
        return self.tables.write(records)

    def before_output(self) -> None:
        """What must be written before any reply or bus message leaves the
        process: the AOF's records, then the tables'."""
        self.flush_aof()
        if self.node.state.table_log.pending:
            self.flush_tables()

    def _close_tables(self) -> None:
        """The tables file and the aclfile written and closed (shutdown, restart)."""
        self.flush_tables()
        if self.aclfile is not None:
            self.aclfile.close(self.node.state.config.users)
        self.tables.close()

    def save_acl_file(self) -> str | None:
        """ACL SAVE: the aclfile written now (process/aclfile.py)."""
        if self.aclfile is None:
            return "no aclfile is set"
        self.flush_tables()  # the records of the changes it holds go first
        return self.aclfile.save_now(self.node.state.config.users, True)

    def read_acl_file(self) -> bytes:
        """ACL LOAD: the aclfile's content."""
        if self.aclfile is None:
            raise FileNotFoundError(2, "No such file or directory")
        return self.aclfile.read()

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
        config.on_change("hz", lambda old, new: self._running_cron().schedule())
        config.on_change("proto-max-bulk-len", self._max_bulk_changed)
        config.on_change("client-output-buffer-limit",
                         lambda old, new: setattr(self, "output_limited", any(new)))

    def _maxmemory_changed(self, old: int, new: int) -> None:
        state = self.node.state
        state.update_memory_limits()
        if new:
            state.free_memory()

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
        loop = self.loop = asyncio.get_running_loop()
        self.stopped = loop.create_future()
        config = self.config
        allowed = raise_fd_limit(config.maxclients)
        if allowed < config.maxclients:
            logger.warning("You requested maxclients of %d requiring at least %d max file "
                           "descriptors; maxclients lowered to %d.",
                           config.maxclients, config.maxclients + RESERVED_FDS, allowed)
            config.maxclients = allowed
        self._watch_config()
        self.aof = AofService(self.node.state, config, loop, logger)
        self.aof_writer = self.aof.writer
        listeners = self.listeners = Listeners(config, loop)
        # The listeners are bound now and serve once the bus is up (or, while
        # an AOF loads, as the load begins, to answer LOADING).
        await listeners.open_clients(lambda: ClientConnection(self))
        if config.metrics_port:
            # Imported here: aiohttp and prometheus_client take 0.2 s to load,
            # which a node without metrics-port does not pay.
            from disque.http.service import HttpService
            self.http = HttpService(self)
            await listeners.open_http(self.http)
        loop.add_signal_handler(signal.SIGTERM, self._signal_shutdown, "SIGTERM")
        loop.add_signal_handler(signal.SIGINT, self._signal_shutdown, "SIGINT")
        try:
            await self.aof.load_at_startup(self.supervision.loading_progress, listeners.serve)
        except AofStartupError as exc:
            raise StartupError(str(exc)) from None
        await self._start_bus()
        # The node's first cron runs now, before clients are served: links to
        # the known nodes open at once, so a restarted node is heard from
        # without waiting a cron period.
        self.node.cron()
        cron = self._running_cron()
        cron.schedule()
        cron.arm_timer()
        await listeners.serve()
        self._log_ready()
        self.supervision.notify("READY=1")

    def _log_ready(self) -> None:
        config = self.config
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

    async def _start_bus(self) -> None:
        """Listen for cluster bus connections on port + 10000 (or cluster-bus-port)."""
        config = self.config
        bus = ClusterBus(self.node, self._running_loop(), after_bus=self._after_bus,
                         before_write=self.before_output)
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
            raise cannot_listen("the cluster bus", config.bind, port, exc) from None

    def write_pidfile(self) -> None:
        """Write the pid file (when daemonized)."""
        self.supervision.write_pidfile()

    # --------------------------------------------------- loop and timers

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The loop ``start`` runs the server on: nothing is scheduled before."""
        loop = self.loop
        assert loop is not None, "the server has not started"
        return loop

    def _running_cron(self) -> ServerCron:
        """The cron of the loop the server runs on (made with the first timer)."""
        cron = self.cron
        if cron is None:
            cron = self.cron = ServerCron(self._running_loop(), self.node,
                                          lambda: self.config.hz, self._cron_pass)
        return cron

    def next_client_id(self) -> int:
        """Monotonic client IDs for CLIENT ID / LIST / KILL ID."""
        self.client_id += 1
        return self.client_id

    def arm_timer(self) -> None:
        """Have the node's timers fire at its next due time."""
        self._running_cron().arm_timer()

    def _after_bus(self) -> None:
        """Bus frames were handled: clients they unblocked go on at once (a
        pipeline's next synchronous ADDJOB sends its REPLJOBs in this loop
        turn), then the timer follows the node's next due time."""
        self.output_batch.run_resumed()
        self.arm_timer()

    def _cron_pass(self) -> None:
        """What the process does hz times a second."""
        node = self.node
        node.cron()
        now = node.state.now
        node.state.stats.sample_ops(now)
        self.net_rate.sample(self.net_input_bytes, self.net_output_bytes)
        self.client_control.close_idle(now)
        self.reply_memory.check()
        if now >= self.next_request_scan:
            self.next_request_scan = now + REQUEST_SCAN_INTERVAL_MS
            self.client_control.close_stalled(now)
        if self.aof is not None:
            self.aof.cron()
        self.flush_tables()
        self.tables.cron()
        if self.aclfile is not None:
            self.aclfile.cron(node.state.config.users)
        self.gc.tick()

    @property
    def clients_paused(self) -> bool:
        """CLIENT PAUSE is in force: connections do not read."""
        return self.client_control.paused

    def tune_tcp_socket(self, sock: socket.socket) -> None:
        """TCP_NODELAY always; keepalive probes when tcp-keepalive is set."""
        tune_tcp_socket(sock, self.config.tcp_keepalive)

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
            batch = self._output_batch = OutputBatch(self._running_loop(), self.before_output)
        return batch

    @property
    def reply_memory(self) -> ReplyMemory:
        """What every client's replies not yet sent hold (maxmemory-clients)."""
        account = self._reply_memory
        if account is None or account.loop is not self.loop:
            account = self._reply_memory = ReplyMemory(self._running_loop(), self.config,
                                                       self.limits)
        return account

    def flush_aof(self) -> None:
        """Write pending AOF records: called before any reply leaves the process."""
        writer = self.aof_writer
        if writer is not None and writer.pending:
            writer.flush()

    def flush_aof_then(self, done: Callable[[], None]) -> None:
        """``flush_aof`` between the steps of a long command: ``done`` once
        the records are on disk as appendfsync asks (under ``always``, the
        fsync runs in its thread while the loop serves other clients)."""
        writer = self.aof_writer
        if writer is not None and writer.pending:
            writer.flush_then(done)
        else:
            done()

    def shutdown(self, rewrite_aof: bool) -> bool:
        """Prepare to exit, then stop the loop on its next turn."""
        logger.warning("User requested shutdown...")
        if self.aof is not None and not self.aof.shutdown(rewrite_aof):
            return False
        self.supervision.notify("STOPPING=1")
        if self.listeners is not None:
            self.listeners.close()
        if self.bus is not None:
            self.bus.shutdown()
        self.save_cluster_config()
        self._close_tables()
        self.supervision.remove_pidfile()
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
        return self.client_control.describe(now_ms)

    def kill_clients(self, caller: ClientState, *, addr: str | None = None,
                     client_id: int | None = None, skip_caller: bool = True) -> int:
        return self.client_control.kill(caller, addr, client_id, skip_caller)

    def pause_clients(self, ms: int) -> None:
        self.client_control.pause(ms)

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
        self._close_tables()
        if self.listeners is not None:
            self.listeners.close()
        if delay_ms:
            time.sleep(delay_ms / 1000)
        self.cluster_config.release()
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
