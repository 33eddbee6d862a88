"""One Disque node's state, sans I/O: a facade over its parts.

Inputs: commands through ``call(client, argv)`` (and ``call_run`` for a
pipelined run), bus frames through ``receive_frame(link, frame)``, link
events through ``link_up`` / ``link_down``, time through ``run_timers()``
and ``cron()``. Outputs: replies as return values or ``client.send``, bus
messages through the outbox's transport, persistence events through the
journal. The clock and the random source are injected, so tests and the
simulator run many nodes in one process with a virtual clock. Which part
owns what is in docs/architecture.md.
"""

from __future__ import annotations

import random
from typing import Callable, Final

from disque.protocol import errors
from disque.context.clients import Block, ClientState
from disque.cluster import messages as m
from disque.cluster.acks import AckPropagation
from disque.cluster.consumers import Consumers
from disque.cluster.federation import Federation, Interest
from disque.cluster.gossip import Gossip, random_node_id
from disque.cluster.lifecycle import JobLifecycle
from disque.cluster.membership import Membership
from disque.cluster.outbox import Outbox
from disque.cluster.replication import Replication
from disque.cluster.requeue import RequeueCoordination
from disque.cluster.transport import BusTransport, Link
from disque.commands import Command, build_command_table, unique_commands
from disque.commands.acl import AccessStats, check_access, redact
from disque.commands.monitor import format_monitor_line
from disque.config import Config
from disque.config.users import users_restrict
from disque.state.eviction import MemoryPolicy
from disque.state.host import Host
from disque.jobs.dedup import DedupIndex
from disque.jobs.ids import JobIdGenerator
from disque.jobs.journal import NULL_JOURNAL, Journal
from disque.jobs.registry import JobRegistry
from disque.jobs.timers import TimerWheel
from disque.context.log import logger
from disque.context.memory import MemoryAccount
from disque.queues.blocking import BlockedClients
from disque.queues.queueset import QueueSet
from disque.protocol.resp import NIL_ARRAY, OK
from disque.context.runtime import Runtime
from disque.context.stats import JobCounters, Stats

_QUIT: Final = b"QUIT"
# A run of commands is timed as a whole, which the slow log can only use
# when its threshold is well above what a command of the run takes.
RUN_NOTICE_FLOOR_US: Final = 1000


class BusRoute:
    """Where one type of bus message goes, and how many of it arrived
    (``received``: the metrics' bus messages in, by type)."""

    def __init__(self, handler: Callable[[bytes, dict, Link], None], membership: bool) -> None:
        self.handler = handler
        # Membership messages (PING, PONG, MEET, FAIL) read the sender's header
        # fields and come from unknown nodes too; job messages from an unknown
        # sender are ignored (spec: cluster-bus.md §1).
        self.membership = membership
        self.received = 0


class Node:
    """A Disque node: jobs, queues, blocked clients, cluster view."""

    def __init__(self, config: Config, node_id: bytes, *, clock: Callable[[], int],
                 rng: random.Random, host: Host | None = None,
                 bus: BusTransport | None = None,
                 perf_ns: Callable[[], int] | None = None) -> None:
        self.config = config
        self.clock = clock
        self.host = host if host is not None else Host()
        self.perf_ns = perf_ns if perf_ns is not None else (lambda: 0)
        runtime = self.runtime = Runtime(node_id, rng, clock())
        memory = self.memory = MemoryAccount(config.maxmemory)
        membership = self.membership = Membership(node_id, config.port)
        counters = self.counters = JobCounters()
        self.ids = JobIdGenerator(node_id, rng, counters)
        self.outbox = Outbox(runtime, membership, bus if bus is not None else BusTransport(),
                             config.port)
        self.jobs = JobRegistry(memory)
        self.dedup = DedupIndex()
        self.queues = QueueSet(runtime, memory)
        self.timers = TimerWheel()
        self.blocked = BlockedClients(runtime, self.queues)
        self.interest = Interest()
        self.journal: Journal = NULL_JOURNAL
        self.journaling = False  # see set_journal
        self.lifecycle = JobLifecycle(runtime, self.jobs, self.queues, self.timers, self.blocked,
                                      membership, self.outbox, self.journal, self.interest,
                                      self.dedup, counters)
        self.replication = Replication(runtime, self.jobs, self.queues, self.lifecycle,
                                       self.blocked, membership, self.outbox, self.journal,
                                       memory)
        self.federation = Federation(runtime, self.jobs, self.queues, self.lifecycle,
                                     self.blocked, membership, self.outbox, self.interest)
        self.consumers = Consumers(self.queues, self.lifecycle, self.blocked, self.federation,
                                   counters)
        self.acks = AckPropagation(runtime, self.jobs, self.lifecycle, self.replication,
                                   membership, self.outbox)
        self.requeue = RequeueCoordination(runtime, self.jobs, self.queues, self.lifecycle,
                                           self.outbox)
        self.gossip = Gossip(runtime, membership, self.outbox, config, self.host)
        self.eviction = MemoryPolicy(config, memory, self.jobs, self.lifecycle, self.queues,
                                     counters)
        # The same dicts as QueueSet.ready and Interest.ready (cleared in
        # place, never replaced): after every input, one test says whether
        # ``after_input`` has work, without a call.
        self.ready_queues = self.queues.ready
        self.wanted_queues = self.interest.ready
        self.bus_routes = self._bus_routes()
        self.commands: dict[bytes, Command] = build_command_table()
        self.run_commands = _with_run_handler(self.commands)
        self.stats = Stats()
        self.aof_error: str | None = None  # last failed AOF write, for MISCONF
        self.loading = False
        self.monitors: dict[ClientState, None] = {}
        # A named user exists or the default user is restricted: every command
        # goes through check_access (ACL SETUSER turns it on; never off at run
        # time, as a connection may still be logged in as a deleted user).
        self.guarded = users_restrict(config.users)
        self.access_stats = AccessStats()

    def _bus_routes(self) -> dict[str, BusRoute]:
        """The one table from bus message type to handler."""
        gossip, repl, acks = self.gossip, self.replication, self.acks
        requeue, federation = self.requeue, self.federation
        return {
            m.PING: BusRoute(gossip.on_ping, True),
            m.PONG: BusRoute(gossip.on_ping, True),
            m.MEET: BusRoute(gossip.on_ping, True),
            m.FAIL: BusRoute(gossip.on_fail, True),
            m.REPLJOB: BusRoute(repl.on_repljob, False),
            m.GOTJOB: BusRoute(repl.on_gotjob, False),
            m.ENQUEUE: BusRoute(repl.on_enqueue, False),
            m.QUEUED: BusRoute(requeue.on_queued, False),
            m.WORKING: BusRoute(requeue.on_working, False),
            m.WILLQUEUE: BusRoute(requeue.on_willqueue, False),
            m.PAUSE: BusRoute(requeue.on_pause, False),
            m.SETACK: BusRoute(acks.on_setack, False),
            m.GOTACK: BusRoute(acks.on_gotack, False),
            m.DELJOB: BusRoute(acks.on_deljob, False),
            m.NEEDJOBS: BusRoute(federation.on_needjobs, False),
            m.YOURJOBS: BusRoute(federation.on_yourjobs, False),
        }

    # --------------------------------------------------------- read-outs

    @property
    def id(self) -> bytes:
        """This node's ID."""
        return self.runtime.node_id

    @property
    def now(self) -> int:
        """The time of the input being handled (unix ms)."""
        return self.runtime.now

    def read_clock(self) -> int:
        """Read the injected clock for an input handled outside the entry
        points below (the AOF loader's batches); return the time."""
        now = self.runtime.now = self.clock()
        return now

    @property
    def used_memory(self) -> int:
        """The dataset's estimated size in bytes."""
        return self.memory.used

    # ------------------------------------------------------------ commands

    def call(self, client: ClientState, argv: list[bytes]) -> bytes | None:
        """Execute one command; return its reply, or None if the client blocked."""
        self.runtime.now = self.clock()
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
        if self.guarded:
            denied = check_access(self, client, cmd, argv)
            if denied is not None:
                return denied
        elif self.config.requirepass and not client.authenticated and not cmd.is_auth:
            return errors.NOAUTH
        if self.memory.used > self.memory.evict_threshold:
            if not self.eviction.free_memory() and cmd.denyoom:
                return errors.OOM
        if self.aof_error is not None and (cmd.write or cmd.is_ping):
            return errors.misconf(self.aof_error)
        if self.loading and not cmd.loading_ok:
            return errors.LOADING
        if self.monitors and cmd.monitored:
            self.feed_monitors(client, redact(cmd, argv) if cmd.redacts else argv)
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
            stats.command_slow(cmd, redact(cmd, argv) if cmd.redacts else argv, usec,
                               self.runtime.now)
        if self.ready_queues or self.wanted_queues:
            self.after_input()
        return reply

    def call_run(self, client: ClientState, cmd: Command, commands: list[list[bytes]],
                 start: int, out: list[bytes]) -> int:
        """Execute pipelined commands from ``start`` that ``cmd``'s run handler
        takes together (today: ADDJOBs on a lone node), appending their
        replies to ``out``; return the index of the first command not executed
        (``start`` when the run path does not apply).

        Checked once for the run instead of once per command: nothing that
        ``call`` could refuse or must see (AUTH pending, MISCONF, LOADING,
        MONITOR, memory above the warning level) is going on, and the clock
        is read once. The run is timed as a whole: when it is slower than the
        slow log threshold it is logged as its last command with the run's time.
        """
        if ((self.config.requirepass and not client.authenticated) or self.guarded
                or self.aof_error is not None or self.loading or self.monitors
                or self.memory.used > self.memory.warn_threshold
                or self.stats.notice_us < RUN_NOTICE_FLOOR_US):
            return start
        run_handler = cmd.run_handler
        assert run_handler is not None  # callers take cmd from run_commands
        self.runtime.now = self.clock()
        perf_ns = self.perf_ns
        begin = perf_ns()
        end: int = run_handler(self, client, commands, start, out)
        if end > start:
            usec = (perf_ns() - begin) // 1000
            count = end - start
            cmd.calls += count
            cmd.usec += usec
            stats = self.stats
            stats.commands_processed += count
            client.last_cmd = cmd.lname
            if usec >= stats.notice_us:
                stats.command_slow(cmd, commands[end - 1], usec, self.runtime.now)
        return end

    def after_input(self) -> None:
        """What every input may have made possible: waiting consumers and
        other nodes' open requests get the jobs just queued."""
        if self.queues.ready:
            self.consumers.serve_ready()
        if self.interest.ready:
            self.federation.push_to_interested()

    def feed_monitors(self, client: ClientState, argv: list[bytes]) -> None:
        """Stream a command to every MONITOR client."""
        line = format_monitor_line(self.host.time_us(self.runtime.now), client, argv)
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

    def client_gone(self, client: ClientState) -> None:
        """The connection closed: drop its block (and a waiting ADDJOB's job)."""
        self._let_go(client, None)

    def _let_go(self, client: ClientState, reply: bytes | None) -> None:
        """Unblock ``client`` with ``reply``; a waiting producer's job goes too."""
        block = client.blocked
        if block is None:
            return
        self.blocked.unblock(client, reply)
        if block.kind == Block.ADDJOB:
            self.replication.producer_gone(block)

    # ---------------------------------------------------------------- time

    def run_timers(self) -> None:
        """Fire due job timers and blocked-client timeouts (called every few ms)."""
        self.runtime.now = self.clock()
        self.lifecycle.process_job_timers()
        self.timers.next_due()
        if self.blocked.deadlines:
            self._expire_blocked_clients()
        self.after_input()

    def _expire_blocked_clients(self) -> None:
        """Answer blocked clients whose timeout elapsed."""
        for client, block in self.blocked.expired():
            if client.blocked is not block:
                continue  # released by an earlier one of these
            self._let_go(client, NIL_ARRAY if block.kind == Block.GETJOB
                         else errors.NOREPL_TIMEOUT)

    def next_timer(self) -> int:
        """A lower bound of the next ms at which ``run_timers`` has work
        (NEVER when idle); cheap enough to ask after every request."""
        due = self.timers.earliest
        deadline = self.blocked.next_deadline()
        if deadline is not None and deadline < due:
            return deadline
        return due

    def cron(self) -> None:
        """Periodic housekeeping, ``hz`` times per second."""
        self.runtime.now = self.clock()
        self.gossip.cluster_cron()
        if self.membership.leaving and self.blocked.clients:
            self._release_blocked(errors.LEAVING)  # spec: cluster-bus.md §7
        if self.blocked.producers:
            self.replication.retry_pending()
        if self.blocked.clients:
            self.federation.ask_jobs_for_blocked()
        if self.interest.wants:
            self.federation.expire_interest()
        self.queues.collect_idle()
        if self.dedup:
            self.dedup.expire(self.runtime.now, self.config.dedup_window * 1000)
        if self.memory.used > self.memory.evict_threshold:
            self.eviction.free_memory()
        self.run_timers()

    def _release_blocked(self, reply: bytes) -> None:
        """Answer every blocked client with ``reply``; waiting producers' jobs go."""
        for client in self.blocked:
            self._let_go(client, reply)

    # ----------------------------------------------------------------- bus

    def receive_frame(self, link: Link, frame: list) -> None:
        """Handle one bus frame: the sender's header, then its messages in order.

        The header is checked, the clock read and unblocked clients served
        once per frame, not per message. Every message goes through
        ``bus_routes``, the one table of bus handlers.
        """
        header = frame[0] if frame else None
        problem = m.header_problem(header)
        if problem is not None:
            logger.warning("Bad bus message from %s: %s", link.peer_ip or "?", problem)
            return
        assert header is not None
        self.runtime.now = self.clock()
        sender = header[m.SENDER]
        body_problem = m.body_problem
        membership = self.membership
        routes = self.bus_routes
        for i in range(1, len(frame)):
            msg = frame[i]
            problem = body_problem(msg)
            if problem is not None:
                logger.warning("Bad bus message from %s: %s", link.peer_ip or "?", problem)
                continue
            membership.messages_received += 1
            route = routes[msg[m.TYPE]]
            route.received += 1
            if route.membership:
                if msg is not header:
                    msg = {**header, **msg}
            elif sender not in membership.nodes:
                continue
            route.handler(sender, msg, link)
        self.after_input()

    def receive_bus(self, link: Link, msg: object) -> None:
        """Handle one decoded message that carries its own header (the
        simulator's network); like a frame, it may be anything."""
        self.receive_frame(link, [msg, msg])

    def link_up(self, node_id: bytes, link: Link) -> None:
        """The transport connected the outbound link of ``node_id``."""
        self.runtime.now = self.clock()
        self.gossip.link_up(node_id, link)

    def link_down(self, node_id: bytes) -> None:
        """The outbound link of ``node_id`` closed or could not be opened."""
        self.runtime.now = self.clock()
        self.gossip.link_down(node_id)

    def bus_header(self) -> dict:
        """The header the transport puts on each frame."""
        return self.outbox.header()

    @property
    def bus(self) -> BusTransport:
        """The transport behind the outbox."""
        return self.outbox.transport

    @bus.setter
    def bus(self, transport: BusTransport) -> None:
        self.outbox.transport = transport

    # ------------------------------------------------------ cluster admin

    def cluster_reset(self, hard: bool) -> None:
        """Forget every other node and flush all data; HARD also takes a new ID."""
        self.gossip.forget_others()
        if hard:
            new_id = random_node_id(self.runtime.rng)
            self.membership.rename(self.runtime.node_id, new_id)
            self.runtime.set_node_id(new_id)
            self.ids.set_node_id(new_id)
        self.membership.update_reachable()
        self.flush_all()
        self.host.save_cluster_config()

    # -------------------------------------------------------------- memory

    def update_memory_limits(self) -> None:
        """Recompute the 75 % / 95 % thresholds after maxmemory changed."""
        self.memory.set_limit(self.config.maxmemory)

    def free_memory(self) -> bool:
        """Evict what is safe to evict until under 95 %; False if still above."""
        return self.eviction.free_memory()

    # ---------------------------------------------------------- journal

    def set_journal(self, journal: Journal) -> None:
        """Report persistence events to ``journal`` from now on (the AOF
        while appendonly is on, the null journal otherwise). ``journaling``
        says whether events go anywhere, so ADDJOB's hot path skips the
        null journal's call."""
        self.journal = journal
        self.journaling = journal is not NULL_JOURNAL
        self.lifecycle.journal = journal
        self.replication.journal = journal

    # --------------------------------------------------------------- flush

    def flush_all(self) -> None:
        """DEBUG FLUSHALL: delete every job and queue (cluster view untouched)."""
        self.lifecycle.delete_all()
        for client in self.blocked:
            block = client.blocked
            if block is not None and block.kind == Block.GETJOB:
                self.blocked.unblock(client, NIL_ARRAY)
        self.queues.clear()
        self.blocked.clear()
        self.interest.clear()
        self.dedup.clear()
        self.memory.reset()


def _with_run_handler(commands: dict[bytes, Command]) -> dict[bytes, Command]:
    """The entries of the command table whose command can run pipelined in a batch."""
    return {name: cmd for name, cmd in commands.items() if cmd.run_handler is not None}
