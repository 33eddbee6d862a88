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
from disque.state.command import Command
from disque.commands.schedule import fire_due
from disque.commands.table import build_command_table
from disque.config import Config
from disque.state.host import Host
from disque.state.nodestate import NodeState
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

    The state owns the node's parts and fields (``state.jobs``,
    ``state.queues``, ``state.loading``, ...): handlers are called with it,
    and adapters and tests reach the parts through it, the one way there
    is. The node holds only what routing needs: the command table's
    pipelined-run entries, the bus routes and the time source of the
    statistics.
    """

    def __init__(self, config: Config, node_id: bytes, *, clock: Callable[[], int],
                 rng: random.Random, host: Host | None = None,
                 bus: BusTransport | None = None,
                 perf_ns: Callable[[], int] | None = None) -> None:
        commands = build_command_table()
        self.state = NodeState(
            config, node_id, clock=clock, rng=rng,
            host=host if host is not None else Host(),
            bus=bus if bus is not None else BusTransport(),
            commands=commands, access_stats=AccessStats())
        self.perf_ns = perf_ns if perf_ns is not None else (lambda: 0)
        self.run_commands = _with_run_handler(commands)
        self.bus_routes = self._bus_routes()

    def _bus_routes(self) -> dict[str, BusRoute]:
        """The one table from bus message type to handler."""
        state = self.state
        gossip, repl, acks = state.gossip, state.replication, state.acks
        requeue, federation, schedules = state.requeue, state.federation, state.schedules
        peerstats, inspection = state.peerstats, state.inspection
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
            m.SCHEDULE: BusRoute(schedules.on_schedule, False),
            m.SCHEDFIRED: BusRoute(schedules.on_fired, False),
            m.STATSWANT: BusRoute(peerstats.on_want, False),
            m.NODESTATS: BusRoute(peerstats.on_stats, False),
            m.QUEUEPEEK: BusRoute(inspection.on_queuepeek, False),
            m.JOBPEEK: BusRoute(inspection.on_jobpeek, False),
            m.REDRIVE: BusRoute(inspection.on_redrive, False),
            m.ANSWER: BusRoute(inspection.on_answer, False),
            m.TABLESYNC: BusRoute(state.table_sync.on_sync, False),
            m.TABLEDONE: BusRoute(state.table_sync.on_done, False),
            m.ACLUSER: BusRoute(state.user_table.on_user, False),
        }

    # ------------------------------------------------------------ commands

    def call(self, client: ClientState, argv: list[bytes]) -> bytes | None:
        """Execute one command; return its reply, or None if the client blocked."""
        state = self.state
        runtime = state.runtime
        runtime.now = state.clock()
        name = argv[0]
        commands = state.commands
        cmd = commands.get(name)
        if cmd is None:
            cmd = commands.get(name.upper())
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
            stats.command_slow(cmd.fast, redact(cmd, argv) if cmd.redacts else argv, usec,
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
        clients in between runs (``serving/commands.py``, ``SLICE_BUDGET_NS``).

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
                stats.command_slow(cmd.fast, commands[end - 1], usec, runtime.now)
        return end

    def feed_monitors(self, client: ClientState, argv: list[bytes]) -> None:
        """Stream a command to every MONITOR client."""
        state = self.state
        line = format_monitor_line(state.host.time_us(state.runtime.now), client, argv)
        for monitor in list(state.monitors):
            monitor.send(line)

    def rename_command(self, old: str, new: str) -> None:
        """rename-command: ``new`` empty disables the command."""
        commands = self.state.commands
        cmd = commands.pop(old.lower().encode(), None)
        commands.pop(old.upper().encode(), None)
        if cmd is not None and new:
            commands[new.lower().encode()] = cmd
            commands[new.upper().encode()] = cmd
        self.run_commands = _with_run_handler(commands)

    def stream_step(self, client: ClientState, out: list[bytes]) -> bool:
        """The next step of the command ``client.stream`` continues, its
        reply's next bytes appended to ``out``; True (and the stream let go
        of) once the reply is complete."""
        stream = client.stream
        assert stream is not None  # the connection steps only a client with one
        state = self.state
        state.runtime.now = state.clock()
        done = stream.step(out)
        if done:
            client.stream = None
        if state.ready_queues or state.wanted_queues:
            state.after_input()
        return done

    def client_gone(self, client: ClientState) -> None:
        """The connection closed: drop its block (and a waiting ADDJOB's job)
        and its MONITOR feed, and what it had still to do in steps."""
        client.stream = None
        self.state.monitors.pop(client, None)
        self._let_go(client, None)

    def _let_go(self, client: ClientState, reply: bytes | None) -> None:
        """Unblock ``client`` with ``reply``; a waiting producer's job goes too."""
        block = client.blocked
        if block is None:
            return
        state = self.state
        state.blocked.unblock(client, reply)
        if block.kind == Block.ADDJOB:
            state.replication.producer_gone(block)

    # ---------------------------------------------------------------- time

    def run_timers(self) -> None:
        """Fire due job timers and blocked-client timeouts (called every few ms)."""
        state = self.state
        state.read_clock()
        state.lifecycle.process_job_timers()
        state.timers.next_due()
        if state.blocked.deadlines:
            self._expire_blocked_clients()
        queues = state.queues
        if queues.throttled:
            queues.wake_throttled()
        state.after_input()

    def _expire_blocked_clients(self) -> None:
        """Answer blocked clients whose timeout elapsed."""
        for client, block in self.state.blocked.expired():
            if client.blocked is not block:
                continue  # released by an earlier one of these
            self._let_go(client, NIL_ARRAY if block.kind == Block.GETJOB
                         else errors.NOREPL_TIMEOUT)

    def next_timer(self) -> int:
        """A lower bound of the next ms at which ``run_timers`` has work
        (NEVER when idle); cheap enough to ask after every request."""
        state = self.state
        due = state.timers.earliest
        deadline = state.blocked.next_deadline()
        if deadline is not None and deadline < due:
            due = deadline
        queues = state.queues
        if queues.throttled:
            wake = queues.next_wake()
            if wake is not None and wake < due:
                due = wake
        return due

    def cron(self) -> None:
        """Periodic housekeeping, ``hz`` times per second."""
        state = self.state
        state.read_clock()
        state.gossip.cluster_cron()
        blocked = state.blocked
        if state.membership.leaving and blocked.clients:
            self._release_blocked(errors.LEAVING)  # spec: cluster-bus.md §7
        if blocked.producers:
            state.replication.retry_pending()
        if blocked.clients:
            state.federation.ask_jobs_for_blocked()
        if state.interest.wants:
            state.federation.expire_interest()
        state.queues.collect_idle()
        if state.dedup:
            state.dedup.expire(state.runtime.now, state.config.dedup_window * 1000)
        memory = state.memory
        if memory.used > memory.evict_threshold:
            state.eviction.free_memory()
        state.table_sync.cron()
        if state.schedules.table:
            fire_due(state)
        if state.peerstats.watchers:
            state.peerstats.send_due()
        self.run_timers()

    def _release_blocked(self, reply: bytes) -> None:
        """Answer every blocked client with ``reply``; waiting producers' jobs go."""
        for client in self.state.blocked:
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
        state = self.state
        state.read_clock()
        sender = header[m.SENDER]
        membership = state.membership
        known = membership.nodes.get(sender)
        if known is not None:
            known.data_received = state.runtime.now  # a sign of life, whatever the frame
            if known.flags & PFAIL or not known.link:
                state.gossip.heard_from(known)
        routes = self.bus_routes
        for i in range(1, len(frame)):
            msg = frame[i]
            if type(msg) is list:  # bus format 2's batch of messages of one type
                self._receive_batch(sender, msg, link)
                continue
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
        state.after_input()

    def _receive_batch(self, sender: bytes, batch: list, link: Link) -> None:
        """The messages of one batch (``messages.batch_messages``), handed over
        in order as the maps they stand for would be."""
        msgs = m.batch_messages(batch)
        if isinstance(msgs, str):
            logger.warning("Bad bus message from %s: %s", link.peer_ip or "?", msgs)
            return
        if not msgs:
            return
        membership = self.state.membership
        route = self.bus_routes[msgs[0][m.TYPE]]
        membership.messages_received += len(msgs)
        route.received += len(msgs)
        handler = route.handler
        nodes = membership.nodes
        for msg in msgs:
            if sender in nodes:  # job messages from an unknown sender are ignored
                handler(sender, msg, link)

    def receive_bus(self, link: Link, msg: object) -> None:
        """Handle one decoded message that carries its own header (the
        simulator's network); like a frame, it may be anything."""
        self.receive_frame(link, [msg, msg])

    def link_up(self, node_id: bytes, link: Link) -> None:
        """The transport connected the outbound link of ``node_id``."""
        state = self.state
        state.read_clock()
        state.gossip.link_up(node_id, link)
        state.table_sync.link_up(node_id)

    def link_down(self, node_id: bytes) -> None:
        """The outbound link of ``node_id`` closed or could not be opened."""
        state = self.state
        state.read_clock()
        state.gossip.link_down(node_id)
        state.table_sync.link_down(node_id)

    def bus_header(self) -> dict:
        """The header the transport puts on each frame."""
        return self.state.outbox.header()


def _with_run_handler(commands: dict[bytes, Command]) -> dict[bytes, Command]:
    """The entries of the command table whose command can run pipelined in a batch."""
    return {name: cmd for name, cmd in commands.items() if cmd.run_handler is not None}

