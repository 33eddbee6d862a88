"""One Disque node, sans I/O: its entry points.

Inputs: commands through ``call(client, argv)`` (and ``call_run`` for a
pipelined run), bus frames through ``receive_frame(link, frame)``, link
events through ``link_up`` / ``link_down``, time through ``run_timers()``
and ``cron()``. Outputs: replies as return values or ``client.send``, bus
messages through the outbox's transport, persistence events through the
journal. The clock and the random source are injected, so tests and the
simulator run many nodes in one process with a virtual clock. The parts
and what command handlers see are ``NodeState`` (``disque.state.nodestate``);
which part owns what is in docs/architecture.md.
"""

from __future__ import annotations

import random
from typing import Callable, Final

from disque.protocol import errors
from disque.context.clients import Block, ClientState
from disque.cluster import messages as m
from disque.cluster.membership import PFAIL
from disque.cluster.transport import BusTransport, Link
from disque.commands.access import (CROSS_PROTOCOL_NAMES, check_access, format_monitor_line,
                                    redact, refuse_cross_protocol)
from disque.context.stats import AccessStats
from disque.commands.command import Command
from disque.commands.schedule import fire_due
from disque.commands.table import build_command_table
from disque.config import Config
from disque.state.host import Host
from disque.state.nodestate import NodeState
from disque.jobs.ids import JobIdGenerator
from disque.jobs.journal import Journal
from disque.context.log import logger
from disque.protocol.resp import NIL_ARRAY, OK

_QUIT: Final = b"QUIT"
# A run of commands is timed as a whole, which the slow log can only use
# when its threshold is well above what a command of the run takes.
RUN_NOTICE_FLOOR_US: Final = 1000
# Commands of one pipelined run executed in one go: about 5 ms of ADDJOBs
# in pure Python, after which the connection may yield to other clients.
RUN_LIMIT: Final = 512


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
    """A Disque node: the entry points over one ``NodeState`` (``state``).

    Handlers are called with ``state``. For the adapters and tests, the
    node's parts (``jobs``, ``queues``, ``config``, ``lifecycle``, ...) are
    also attributes here: the same objects as the state's, assigned once.
    The state's fields that change (``loading``, ``aof_error``, ``guarded``,
    ``clock``, the journal) are properties that read and write the state's,
    so each value lives in one place.
    """

    def __init__(self, config: Config, node_id: bytes, *, clock: Callable[[], int],
                 rng: random.Random, host: Host | None = None,
                 bus: BusTransport | None = None,
                 perf_ns: Callable[[], int] | None = None) -> None:
        commands = build_command_table()
        state = self.state = NodeState(
            config, node_id, clock=clock, rng=rng,
            host=host if host is not None else Host(),
            bus=bus if bus is not None else BusTransport(),
            commands=commands, access_stats=AccessStats())
        self.perf_ns = perf_ns if perf_ns is not None else (lambda: 0)
        self.config = config
        self.host = state.host
        self.runtime = state.runtime
        self.memory = state.memory
        self.membership = state.membership
        self.counters = state.counters
        self.outbox = state.outbox
        self.jobs = state.jobs
        self.dedup = state.dedup
        self.queues = state.queues
        self.timers = state.timers
        self.blocked = state.blocked
        self.interest = state.interest
        self.lifecycle = state.lifecycle
        self.replication = state.replication
        self.federation = state.federation
        self.consumers = state.consumers
        self.acks = state.acks
        self.requeue = state.requeue
        self.gossip = state.gossip
        self.eviction = state.eviction
        self.schedules = state.schedules
        self.stats = state.stats
        self.monitors = state.monitors
        self.access_stats = state.access_stats
        self.commands: dict[bytes, Command] = commands
        self.run_commands = _with_run_handler(commands)
        self.bus_routes = self._bus_routes()

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
            m.SCHEDULE: BusRoute(self.schedules.on_schedule, False),
            m.SCHEDFIRED: BusRoute(self.schedules.on_fired, False),
        }

    # ---------------------------------------------- the state, for adapters

    @property
    def id(self) -> bytes:
        """This node's ID."""
        return self.state.runtime.node_id

    @property
    def now(self) -> int:
        """The time of the input being handled (unix ms)."""
        return self.state.runtime.now

    @property
    def used_memory(self) -> int:
        """The dataset's estimated size in bytes."""
        return self.state.memory.used

    @property
    def clock(self) -> Callable[[], int]:
        """The injected clock (unix ms)."""
        return self.state.clock

    @clock.setter
    def clock(self, clock: Callable[[], int]) -> None:
        self.state.clock = clock

    @property
    def ids(self) -> JobIdGenerator:
        """The job ID generator."""
        return self.state.ids

    @property
    def loading(self) -> bool:
        """The AOF is being loaded: commands without the loading flag get LOADING."""
        return self.state.loading

    @loading.setter
    def loading(self, loading: bool) -> None:
        self.state.loading = loading

    @property
    def aof_error(self) -> str | None:
        """The last failed AOF write (writes get MISCONF while set), or None."""
        return self.state.aof_error

    @aof_error.setter
    def aof_error(self, error: str | None) -> None:
        self.state.aof_error = error

    @property
    def guarded(self) -> bool:
        """Every command goes through the access check (NodeState.guarded)."""
        return self.state.guarded

    @guarded.setter
    def guarded(self, guarded: bool) -> None:
        self.state.guarded = guarded

    @property
    def journal(self) -> Journal:
        """Where persistence events go."""
        return self.state.journal

    @property
    def journaling(self) -> bool:
        """Persistence events go somewhere (the journal is not the null one)."""
        return self.state.journaling

    def set_journal(self, journal: Journal) -> None:
        """Report persistence events to ``journal`` from now on."""
        self.state.set_journal(journal)

    def read_clock(self) -> int:
        """Read the injected clock for an input handled outside the entry
        points below (the AOF loader's batches); return the time."""
        return self.state.read_clock()

    def update_memory_limits(self) -> None:
        """Recompute the memory thresholds after maxmemory changed."""
        self.state.update_memory_limits()

    def free_memory(self) -> bool:
        """Evict what is safe to evict until under 95 %; False if still above."""
        return self.state.free_memory()

    def after_input(self) -> None:
        """Serve waiting consumers and other nodes' open requests."""
        self.state.after_input()

    def flush_all(self) -> None:
        """Delete every job and queue (cluster view untouched)."""
        self.state.flush_all()

    # ------------------------------------------------------------ commands

    def call(self, client: ClientState, argv: list[bytes]) -> bytes | None:
        """Execute one command; return its reply, or None if the client blocked."""
        state = self.state
        runtime = state.runtime
        runtime.now = state.clock()
        name = argv[0]
        cmd = self.commands.get(name)
        if cmd is None:
            cmd = self.commands.get(name.upper())
            if cmd is None:
                upper = name.upper()
                if upper == _QUIT:
                    client.close_after_reply = True
                    return OK
                if upper in CROSS_PROTOCOL_NAMES:
                    return refuse_cross_protocol(state, client)
                return errors.unknown_command(name)
        if not cmd.min_args <= len(argv) <= cmd.max_args:
            return cmd.arity_error
        if state.guarded:
            denied = check_access(state, client, cmd, argv)
            if denied is not None:
                return denied
        elif state.config.requirepass and not client.authenticated and not cmd.is_auth:
            return errors.NOAUTH
        memory = state.memory
        if memory.used > memory.evict_threshold:
            if not state.eviction.free_memory() and cmd.denyoom:
                return errors.OOM
        if state.aof_error is not None and (cmd.write or cmd.is_ping):
            return errors.misconf(state.aof_error)
        if state.loading and not cmd.loading_ok:
            return errors.LOADING
        if state.monitors and cmd.monitored:
            self.feed_monitors(client, redact(cmd, argv) if cmd.redacts else argv)
        client.last_cmd = cmd.lname
        perf_ns = self.perf_ns
        start = perf_ns()
        reply = cmd.handler(state, client, argv)
        usec = (perf_ns() - start) // 1000
        cmd.calls += 1
        cmd.usec += usec
        stats = state.stats
        stats.commands_processed += 1
        if usec >= stats.notice_us:
            stats.command_slow(cmd, redact(cmd, argv) if cmd.redacts else argv, usec,
                               runtime.now)
        if state.ready_queues or state.wanted_queues:
            state.after_input()
        return reply

    def call_run(self, client: ClientState, cmd: Command, commands: list[list[bytes]],
                 start: int, out: list[bytes], limit: int = RUN_LIMIT) -> int:
        """Execute pipelined commands from ``start`` that ``cmd``'s run handler
        takes together (today: ADDJOBs on a lone node), at most ``limit`` of
        them, appending their replies to ``out``; return the index of the
        first command not executed (``start`` when the run path does not apply).

        The limit keeps one run short enough for the connection to let other
        clients in between runs (``net/connection.py``, ``SLICE_BUDGET_NS``).

        Checked once for the run instead of once per command: nothing that
        ``call`` could refuse or must see (AUTH pending, MISCONF, LOADING,
        MONITOR, memory above the warning level) is going on, and the clock
        is read once. The run is timed as a whole: when it is slower than the
        slow log threshold it is logged as its last command with the run's time.
        """
        state = self.state
        if ((state.config.requirepass and not client.authenticated) or state.guarded
                or state.aof_error is not None or state.loading or state.monitors
                or state.memory.used > state.memory.warn_threshold
                or state.stats.notice_us < RUN_NOTICE_FLOOR_US):
            return start
        run_handler = cmd.run_handler
        assert run_handler is not None  # callers take cmd from run_commands
        runtime = state.runtime
        runtime.now = state.clock()
        perf_ns = self.perf_ns
        begin = perf_ns()
        if len(commands) - start > limit:
            end: int = start + run_handler(state, client, commands[start:start + limit], 0, out)
        else:
            end = run_handler(state, client, commands, start, out)
        if end > start:
            usec = (perf_ns() - begin) // 1000
            count = end - start
            cmd.calls += count
            cmd.usec += usec
            stats = state.stats
            stats.commands_processed += count
            client.last_cmd = cmd.lname
            if usec >= stats.notice_us:
                stats.command_slow(cmd, commands[end - 1], usec, runtime.now)
        return end

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
        self.state.read_clock()
        self.lifecycle.process_job_timers()
        self.timers.next_due()
        if self.blocked.deadlines:
            self._expire_blocked_clients()
        if self.queues.throttled:
            self.queues.wake_throttled()
        self.state.after_input()

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
            due = deadline
        if self.queues.throttled:
            wake = self.queues.next_wake()
            if wake is not None and wake < due:
                due = wake
        return due

    def cron(self) -> None:
        """Periodic housekeeping, ``hz`` times per second."""
        self.state.read_clock()
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
        if self.schedules.table:
            fire_due(self.state)
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
        self.state.read_clock()
        sender = header[m.SENDER]
        membership = self.membership
        known = membership.nodes.get(sender)
        if known is not None:
            known.data_received = self.runtime.now  # a sign of life, whatever the frame
            if known.flags & PFAIL or not known.link:
                self.gossip.heard_from(known)
        routes = self.bus_routes
        for i in range(1, len(frame)):
            msg = frame[i]
            problem = m.body_problem(msg)  # compiled: a direct call (a local alias is not)
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
        self.state.after_input()

    def receive_bus(self, link: Link, msg: object) -> None:
        """Handle one decoded message that carries its own header (the
        simulator's network); like a frame, it may be anything."""
        self.receive_frame(link, [msg, msg])

    def link_up(self, node_id: bytes, link: Link) -> None:
        """The transport connected the outbound link of ``node_id``."""
        self.state.read_clock()
        self.gossip.link_up(node_id, link)
        self.schedules.link_up(node_id)

    def link_down(self, node_id: bytes) -> None:
        """The outbound link of ``node_id`` closed or could not be opened."""
        self.state.read_clock()
        self.gossip.link_down(node_id)
        self.schedules.link_down(node_id)

    def bus_header(self) -> dict:
        """The header the transport puts on each frame."""
        return self.outbox.header()

    @property
    def bus(self) -> BusTransport:
        """The transport behind the outbox."""
        return self.outbox.transport

    @bus.setter
    def bus(self, transport: BusTransport) -> None:
        self.outbox.use(transport)


def _with_run_handler(commands: dict[bytes, Command]) -> dict[bytes, Command]:
    """The entries of the command table whose command can run pipelined in a batch."""
    return {name: cmd for name, cmd in commands.items() if cmd.run_handler is not None}
