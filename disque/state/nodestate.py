"""What command handlers see of a node: its parts wired together, the
node-level fields and the operations that span several parts.

``NodeState`` builds each part and passes it the collaborators it needs
(docs/architecture.md, "The parts of a node"). ``disque.node.Node`` owns
one and drives it from its entry points; every handler of
``disque.commands`` is given it as ``node``. It is a plain class, not a
Protocol, because the compiled core reads its attributes as C struct
fields: ADDJOB's hot path reads a dozen of them per command.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Callable

from disque.context.clients import Block, ClientState
from disque.cluster.acks import AckPropagation
from disque.cluster.consumers import Consumers
from disque.cluster.federation import Federation, Interest
from disque.cluster.gossip import Gossip, random_node_id
from disque.cluster.lifecycle import JobLifecycle
from disque.cluster.inspection import Inspection
from disque.cluster.membership import Membership
from disque.cluster.outbox import Outbox
from disque.cluster.peerstats import PeerStats
from disque.cluster.replication import Replication
from disque.cluster.requeue import RequeueCoordination
from disque.cluster.schedules import Schedules
from disque.cluster.tablesync import TableSync
from disque.cluster.usertable import UserTable
from disque.cluster.transport import BusTransport
from disque.config import Config
from disque.config.users import users_have_quotas, users_restrict
from disque.context.memory import MemoryAccount
from disque.context.runtime import Runtime
from disque.context.stats import AccessStats, JobCounters, Stats
from disque.context.tablelog import (LIMIT_TABLE, SCHEDULE_TABLE, TICK_TABLE, USER_TABLE,
                                     TableLog)
from disque.jobs.dedup import DedupIndex
from disque.jobs.ids import JobIdGenerator
from disque.jobs.journal import NULL_JOURNAL, Journal
from disque.jobs.quotas import QuotaLedger
from disque.jobs.registry import JobRegistry
from disque.jobs.timers import TimerWheel
from disque.protocol.resp import NIL_ARRAY
from disque.queues.blocking import BlockedClients
from disque.queues.queueset import QueueSet
from disque.queues.ratelimit import limit_from_record, limit_record
from disque.state.eviction import MemoryPolicy
from disque.state.host import Host

if TYPE_CHECKING:
    from disque.state.command import Command


class NodeState:
    """One node's parts and node-level fields (see the module docstring)."""

    def __init__(self, config: Config, node_id: bytes, *, clock: Callable[[], int],
                 rng: random.Random, host: Host, bus: BusTransport,
                 commands: dict[bytes, Command], access_stats: AccessStats) -> None:
        self.config = config
        self.clock = clock
        self.host = host
        runtime = self.runtime = Runtime(node_id, rng, clock())
        memory = self.memory = MemoryAccount(config.maxmemory)
        membership = self.membership = Membership(node_id, config.port)
        membership.myself.tport = config.tls_port
        counters = self.counters = JobCounters()
        self.stats = Stats()
        self.ids = JobIdGenerator(node_id, rng, counters)
        self.outbox = Outbox(runtime, membership, bus, config.port)
        self.jobs = JobRegistry(memory)
        self.dedup = DedupIndex()
        self.queues = QueueSet(runtime, memory)
        self.timers = TimerWheel()
        self.blocked = BlockedClients(runtime, self.queues)
        self.interest = Interest()
        # The journal itself is the lifecycle's (``journal`` below); this flag
        # says whether it goes anywhere, so ADDJOB's hot path skips the null
        # journal's call with one attribute test. Only set_journal changes both.
        self.journaling = False
        self.quotas = QuotaLedger()  # the users' pending jobs (ADDJOB charges, lifecycle releases)
        self.quotas.active = users_have_quotas(config.users)
        self.lifecycle = JobLifecycle(runtime, self.jobs, self.queues, self.timers, self.blocked,
                                      membership, self.outbox, NULL_JOURNAL, self.interest,
                                      self.dedup, counters, self.quotas)
        self.replication = Replication(runtime, self.jobs, self.queues, self.lifecycle,
                                       self.blocked, membership, self.outbox, memory)
        self.federation = Federation(runtime, self.jobs, self.queues, self.lifecycle,
                                     self.blocked, membership, self.outbox, self.interest)
        self.consumers = Consumers(self.queues, self.lifecycle, self.blocked, self.federation,
                                   counters)
        self.acks = AckPropagation(runtime, self.jobs, self.lifecycle, self.replication,
                                   membership, self.outbox)
        self.requeue = RequeueCoordination(runtime, self.jobs, self.queues, self.lifecycle,
                                           self.outbox)
        self.gossip = Gossip(runtime, membership, self.outbox, config, host)
        self.eviction = MemoryPolicy(config, memory, self.jobs, self.lifecycle, self.queues,
                                     counters)
        # The small tables' records for the process to persist (schedules,
        # their ticks, delivery limits), and the cluster-wide ones kept alike.
        self.table_log = TableLog()
        self.table_sync = TableSync(runtime, membership, self.outbox)
        self.schedules = Schedules(runtime, membership, self.outbox, config, host,
                                   self.table_sync, self.table_log)
        # The users changed at run time, as versioned records: persisted, and
        # kept alike on every node over an authenticated bus.
        self.user_table = UserTable(runtime, membership, self.outbox, config, self.table_sync,
                                    self.table_log, self.schedules, self)
        # The dashboard's: the nodes' summaries and looking inside other nodes.
        self.peerstats = PeerStats(runtime, membership, self.outbox, config, self.jobs,
                                   self.queues, self.blocked, memory, counters, self.stats)
        self.inspection = Inspection(runtime, self.jobs, self.queues, self.lifecycle,
                                     self.outbox)
        # The same dicts as QueueSet.ready and Interest.ready (cleared in
        # place, never replaced): after every input, one test says whether
        # ``after_input`` has work, without a call.
        self.ready_queues = self.queues.ready
        self.wanted_queues = self.interest.ready
        # The node's command table (COMMAND, rename-command and the call
        # statistics read it; Node dispatches through it).
        self.commands = commands
        self.aof_error: str | None = None  # last failed AOF write, for MISCONF
        self.loading = False
        self.monitors: dict[ClientState, None] = {}
        # A named user exists or the default user is restricted: every command
        # goes through check_access (ACL SETUSER turns it on; never off at run
        # time, as a connection may still be logged in as a deleted user).
        self.guarded = users_restrict(config.users)
        self.access_stats = access_stats

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
        """Read the injected clock for an input handled outside the node's
        entry points (the AOF loader's batches); return the time."""
        now = self.runtime.now = self.clock()
        return now

    @property
    def used_memory(self) -> int:
        """The dataset's estimated size in bytes."""
        return self.memory.used

    # ------------------------------------------------------------- input

    def after_input(self) -> None:
        """What every input may have made possible: waiting consumers and
        other nodes' open requests get the jobs just queued."""
        if self.queues.ready:
            self.consumers.serve_ready()
        if self.interest.ready:
            self.federation.push_to_interested()

    def reset_stats(self) -> None:
        """CONFIG RESETSTAT."""
        self.stats.reset()
        # The table holds each command under two names: reset twice, harmlessly.
        for cmd in self.commands.values():
            cmd.calls = cmd.usec = 0
        self.host.reset_stats()

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

    @property
    def journal(self) -> Journal:
        """Where persistence events go (the lifecycle holds it)."""
        return self.lifecycle.journal

    def set_journal(self, journal: Journal) -> None:
        """Report persistence events to ``journal`` from now on (the AOF
        while appendonly is on, the null journal otherwise)."""
        self.lifecycle.journal = journal
        self.journaling = journal is not NULL_JOURNAL

    # ------------------------------------------------------------- users

    def users_changed(self, had_quota: bool, has_quota: bool) -> None:
        """A user was added, changed or removed (here or by another node);
        it had a quota before, or has one now. Each is one test, but for a
        quota taken away: a cluster's users arriving one by one cost no
        pass over the users each."""
        users = self.config.users
        # Only ever turned on at run time: a connection may still be logged in as
        # a user deleted earlier, and check_access must meet it to close it.
        if not self.guarded:
            self.guarded = users_restrict(users)
        if has_quota:
            self.quotas.active = True
        elif had_quota:
            self.quotas.active = users_have_quotas(users)

    # ------------------------------------------------------ small tables

    def restore_table_record(self, table: bytes, key: bytes, value: object) -> bool:
        """One record of the tables file at startup (the schedules' first,
        then their ticks); False when malformed."""
        if table == SCHEDULE_TABLE or table == TICK_TABLE:
            return self.schedules.restore_record(table, key, value)
        if table == USER_TABLE:
            return self.user_table.restore_record(key, value)
        if table == LIMIT_TABLE:
            limit = limit_from_record(value, self.runtime.now)
            if limit is None:
                return False
            self.queues.set_limit(key, limit)
            return True
        return False

    def persist_tables(self) -> None:
        """Put every record of the small tables in the log (moving them
        out of nodes.conf, where versions before the tables file kept them)."""
        self.schedules.persist_all()
        for name, limit in self.queues.limits.items():
            self.table_log.put(LIMIT_TABLE, name, limit_record(limit))

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
