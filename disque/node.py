"""One Disque node's state, sans I/O.

Commands come in through ``call(client, argv)``, bus messages through
``receive(sender, msg)``, time through ``cron()`` / ``run_timers()``;
replies go back as return values or ``client.send``, bus messages through
the injected ``outbox``, AOF records through ``aof``. The clock and the
random source are injected, so tests and the simulator run many nodes in
one process with a virtual clock.
"""

from __future__ import annotations

import random
from typing import Callable

from disque import errors
from disque.cluster import messages as m
from disque.cluster.acks import AckPropagation
from disque.cluster.federation import Federation
from disque.cluster.gossip import Gossip
from disque.cluster.membership import Membership
from disque.cluster.replication import Replication
from disque.cluster.requeue import RequeueCoordination
from disque.cluster.transport import BusTransport
from disque.commands import Command, build_command_table, unique_commands
from disque.commands.monitor import format_monitor_line
from disque.config import Config
from disque.eviction import evict
from disque.host import Host
from disque.jobs.ids import JobIdGenerator
from disque.jobs.lifecycle import JobLifecycle
from disque.jobs.timers import TimerWheel
from disque.memory import BASE_MEMORY, warning_level
from disque.queues.blocking import Blocking
from disque.queues.queueset import QueueSet
from disque.resp import OK
from disque.scanindex import ScanIndex
from disque.stats import Stats

_QUIT = b"QUIT"
# A run of commands is timed as a whole, which the slow log can only use
# when its threshold is well above what a command of the run takes.
RUN_NOTICE_FLOOR_US = 1000


class Node(JobLifecycle, QueueSet, Blocking, Replication, Federation, AckPropagation,
           RequeueCoordination, Gossip):
    """A Disque node: jobs, queues, blocked clients, cluster view."""

    def __init__(self, config: Config, node_id: bytes, *, clock: Callable[[], int],
                 rng: random.Random, host: Host | None = None,
                 bus: BusTransport | None = None,
                 perf_ns: Callable[[], int] | None = None) -> None:
        self.config = config
        self.clock = clock
        self.rng = rng
        self.random = rng.random
        self.host = host if host is not None else Host()
        self.bus = bus if bus is not None else BusTransport()
        self.perf_ns = perf_ns if perf_ns is not None else (lambda: 0)
        self.now = clock()
        self.id = node_id
        self.membership = Membership(node_id, config.port)
        self.ids = JobIdGenerator(node_id, rng)
        self.commands: dict[bytes, Command] = build_command_table()
        self.run_commands = _with_run_handler(self.commands)
        self.stats = Stats()
        self.aof = None  # set by the AOF writer while appendonly is on
        self.aof_error: str | None = None  # last failed AOF write, for MISCONF
        self.used_memory_peak = 0
        self.forget_blacklist: dict[bytes, int] = {}
        self.cluster_config_dirty = False
        self.last_random_ping = 0
        self.loading = False
        self.monitors: dict = {}
        self.self_delivered = (node_id,)  # shared nodes-delivered of local-only jobs
        self._header: dict | None = None  # see bus_header
        self.update_memory_limits()
        self._init_dataset()

    def _init_dataset(self) -> None:
        self.jobs: dict = {}
        self.job_scan = ScanIndex()
        self.queues: dict = {}
        self.queue_scan = ScanIndex()
        self.queue_gc_cursor = 0
        self.timers = TimerWheel()
        self.ready_queues: dict = {}
        self.blocked_clients: dict = {}
        self.block_deadlines: list = []
        self.block_seq = 0
        self.repl_waiters: dict = {}
        self.evictable: dict = {}  # jobs safe to drop under memory pressure
        self.interest: dict = {}  # queue name -> {node id: (expire ms, count)} (federation)
        self.interest_ready: dict = {}  # queues with jobs for interested nodes
        self.last_ctime = 0
        self.used_memory = BASE_MEMORY

    # ------------------------------------------------------------ commands

    def call(self, client, argv: list) -> bytes | None:
        """Execute one command; return its reply, or None if the client blocked."""
        self.now = self.clock()
        name = argv[0]
        cmd = self.commands.get(name)
        if cmd is None:
            cmd = self.commands.get(name.upper())
            if cmd is None:
                if name.upper() == _QUIT:
                    client.close_after_reply = True
                    return OK
                return errors.unknown_command(name)
        if not cmd.min_args <= len(argv) <= cmd.max_args:
            return cmd.arity_error
        if self.config.requirepass and not client.authenticated and not cmd.is_auth:
            return errors.NOAUTH
        if self.used_memory > self.mem_evict_threshold:
            if not self.free_memory() and cmd.denyoom:
                return errors.OOM
        if self.aof_error is not None and (cmd.write or cmd.is_ping):
            return errors.misconf(self.aof_error)
        if self.loading and not cmd.loading_ok:
            return errors.LOADING
        if self.monitors and cmd.monitored:
            self.feed_monitors(client, argv)
        client.last_cmd = cmd.lname
        perf_ns = self.perf_ns
        start = perf_ns()
        reply = cmd.handler(self, client, argv)
        usec = (perf_ns() - start) // 1000
        cmd.calls += 1
        cmd.usec += usec
        stats = self.stats
        stats.commands_processed += 1
        if usec >= stats.notice_us:
            stats.command_slow(cmd, argv, usec, self.now)
        if self.ready_queues:
            self.serve_ready_queues()
        if self.interest_ready:
            self.push_to_interested()
        return reply

    def call_run(self, client, cmd: Command, commands: list, start: int, out: list) -> int:
        """Execute pipelined commands from ``start`` that ``cmd``'s run handler
        takes together (today: plain ADDJOBs on a lone node), appending their
        replies to ``out``; return the index of the first command not executed
        (``start`` when the run path does not apply).

        Checked once for the run instead of once per command: nothing that
        ``call`` could refuse or must see (AUTH pending, MISCONF, LOADING,
        MONITOR, memory above the warning level) is going on, and the clock
        is read once. The run is timed as a whole: when it is slower than the
        slow log threshold it is logged as its last command with the run's time.
        """
        if ((self.config.requirepass and not client.authenticated)
                or self.aof_error is not None or self.loading or self.monitors
                or self.used_memory > self.mem_warn_threshold
                or self.stats.notice_us < RUN_NOTICE_FLOOR_US):
            return start
        self.now = self.clock()
        perf_ns = self.perf_ns
        begin = perf_ns()
        end = cmd.run_handler(self, commands, start, out)
        if end > start:
            usec = (perf_ns() - begin) // 1000
            count = end - start
            cmd.calls += count
            cmd.usec += usec
            stats = self.stats
            stats.commands_processed += count
            client.last_cmd = cmd.lname
            if usec >= stats.notice_us:
                stats.command_slow(cmd, commands[end - 1], usec, self.now)
        return end

    def feed_monitors(self, client, argv: list) -> None:
        """Stream a command to every MONITOR client."""
        line = format_monitor_line(self.host.time_us(self.now), client, argv)
        for monitor in list(self.monitors):
            monitor.send(line)

    def rename_command(self, old: str, new: str) -> None:
        """rename-command: ``new`` empty disables the command."""
        cmd = self.commands.pop(old.lower().encode(), None)
        self.commands.pop(old.upper().encode(), None)
        if cmd is not None and new:
            self.commands[new.lower().encode()] = cmd
            self.commands[new.upper().encode()] = cmd
        self.run_commands = _with_run_handler(self.commands)

    def reset_stats(self) -> None:
        """CONFIG RESETSTAT."""
        self.stats.reset()
        for cmd in unique_commands(self.commands):
            cmd.calls = cmd.usec = 0
        self.host.reset_stats()

    # ---------------------------------------------------------------- time

    def run_timers(self) -> None:
        """Fire due job timers and blocked-client timeouts (called every few ms)."""
        self.now = self.clock()
        self.process_job_timers()
        self.timers.next_due()
        if self.block_deadlines:
            self.expire_blocked_clients()
        if self.ready_queues:
            self.serve_ready_queues()
        if self.interest_ready:
            self.push_to_interested()

    def next_timer(self) -> int:
        """A lower bound of the next ms at which ``run_timers`` has work
        (NEVER when idle); cheap enough to ask after every request."""
        due = self.timers.earliest
        if self.block_deadlines:
            deadline = self.block_deadlines[0][0]
            if deadline < due:
                return deadline
        return due

    def cron(self) -> None:
        """Periodic housekeeping, ``hz`` times per second."""
        self.now = self.clock()
        self.cluster_cron()
        if self.membership.leaving and self.blocked_clients:
            self.unblock_all_leaving()
        if self.repl_waiters:
            self.retry_pending_replications()
        if self.blocked_clients:
            self.ask_jobs_for_blocked()
        if self.interest:
            self.expire_interest()
        self.collect_idle_queues()
        if self.used_memory > self.mem_evict_threshold:
            self.free_memory()
        self.run_timers()

    # ----------------------------------------------------------------- bus

    def receive(self, sender: bytes, msg: dict) -> None:
        """Dispatch a validated job message; ignored unless the sender is known (spec §1)."""
        if sender in self.membership.nodes:
            self.bus_handlers[msg[m.TYPE]](self, sender, msg)

    # Job messages; PING, PONG, MEET and FAIL are handled by Gossip.receive_frame.
    bus_handlers = {
        m.REPLJOB: Replication.on_repljob,
        m.GOTJOB: Replication.on_gotjob,
        m.ENQUEUE: Replication.on_enqueue,
        m.QUEUED: RequeueCoordination.on_queued,
        m.WORKING: RequeueCoordination.on_working,
        m.WILLQUEUE: RequeueCoordination.on_willqueue,
        m.SETACK: AckPropagation.on_setack,
        m.GOTACK: AckPropagation.on_gotack,
        m.DELJOB: AckPropagation.on_deljob,
        m.NEEDJOBS: Federation.on_needjobs,
        m.YOURJOBS: Federation.on_yourjobs,
        m.PAUSE: RequeueCoordination.on_pause,
    }

    def has_link(self, node_id: bytes) -> bool:
        """An outbound bus link to ``node_id`` is up."""
        node = self.membership.nodes.get(node_id)
        return node is not None and node.link

    def bus_header(self) -> dict:
        """The common header of this node's messages (spec: cluster-bus.md §1);
        the transport sends it once per frame. The same dict is returned
        until a field changes, so the transport can keep it packed."""
        myself = self.membership.myself
        header = self._header
        if (header is None or header[m.FLAGS] != myself.flags or header[m.SENDER] != self.id
                or header[m.PORT] != self.config.port
                or header.get(m.BPORT, 0) != myself.bport):
            header = {m.VERSION: m.PROTOCOL_VERSION, m.SENDER: self.id,
                      m.PORT: self.config.port, m.FLAGS: myself.flags}
            if myself.bport:
                header[m.BPORT] = myself.bport
            self._header = header
        return header

    def send_to(self, node_id: bytes, msg: dict) -> None:
        """Send to one node; skipped silently when there is no link (best effort)."""
        node = self.membership.nodes.get(node_id)
        if node is not None and node.link and node_id != self.id:
            self.membership.messages_sent += 1
            self.bus.send(node_id, msg)

    def send_to_holders(self, job, msg: dict) -> None:
        """Send to every other node that may hold a copy of ``job``."""
        for node_id in job.delivered:
            if node_id != self.id:
                self.send_to(node_id, msg)

    def broadcast(self, msg: dict) -> None:
        """Send to every node with a link."""
        for node_id in list(self.membership.nodes):
            self.send_to(node_id, msg)

    # -------------------------------------------------------------- memory

    def update_memory_limits(self) -> None:
        """Recompute the 75 % / 95 % thresholds after maxmemory changed."""
        maxmemory = self.config.maxmemory
        if maxmemory > 0:
            self.mem_warn_threshold = (maxmemory // 100) * 75
            self.mem_evict_threshold = (maxmemory // 100) * 95
        else:
            self.mem_warn_threshold = self.mem_evict_threshold = float("inf")

    def memory_level(self) -> int:
        """Memory warning level 0, 1 (>75 %) or 2 (>95 %)."""
        return warning_level(self.used_memory, self.config.maxmemory)

    def free_memory(self) -> bool:
        """Evict what is safe to evict until under 95 %; False if still above."""
        return evict(self)

    # --------------------------------------------------------------- flush

    def flush_all(self) -> None:
        """DEBUG FLUSHALL: delete every job and queue (cluster view untouched)."""
        for job in list(self.jobs.values()):
            self.delete_job(job)
        self.unblock_all_flushed()
        for queue in list(self.queues.values()):
            queue.jobs.clear()
            queue.blocked = None
        last_ctime = self.last_ctime
        self._init_dataset()
        self.last_ctime = last_ctime


def _with_run_handler(commands: dict[bytes, Command]) -> dict[bytes, Command]:
    """The entries of the command table whose command can run pipelined in a batch."""
    return {name: cmd for name, cmd in commands.items() if cmd.run_handler is not None}
