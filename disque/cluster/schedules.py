"""Periodic jobs (docs/schedules.md): the cluster's table of schedules, how
nodes agree on it, and which ticks this node fires.

A schedule's definition (EVERY seconds or a CRON expression, a queue, a
body, ADDJOB options, the user who set it) carries a version, the time it
was set and the node that set it: the highest version wins on every node
(last writer wins; a DEL leaves a tombstone with its version). Its last
fired tick only grows. A SET or DEL travels as one SCHEDULE message (one
record), fired ticks as SCHEDFIRED; what a node missed comes back through
``cluster/tablesync``'s digests, the definitions and the last ticks in
buckets of their own. Each change is persisted as one record
(``context/tablelog``).

Which node fires a tick: among the nodes this one counts (itself, and the
peers synced with it, none failing), ranked per schedule by a hash of the
name and the node ID, the first fires at the tick and the r-th r times
cluster-node-timeout after it, and no sooner than that long after its
view of the ranking formed, unless a SCHEDFIRED for the tick arrived
first: ticks missed while no majority was up are caught up by the first
alone. A node that counts less than a majority of the cluster fires
nothing; one whose view changed less than ``HANDOVER_MS`` ago, or that
is linked to a peer not synced yet, fires as if it were second at best.
This part says which ticks are due here; ``commands/schedule.fire_due``
makes their jobs.
"""

from __future__ import annotations

from typing import Final, Protocol

from disque.cluster import messages as m
from disque.cluster.membership import FAIL, HANDSHAKE, LEAVING, NOADDR, PFAIL, Membership
from disque.cluster.outbox import Outbox
from disque.cluster.schedulerecord import NEVER, Schedule, from_wire, tick_from_record
from disque.cluster.tablesync import BucketDigest, TableSync, fingerprint
from disque.cluster.transport import Link
from disque.context.log import logger
from disque.context.runtime import Runtime
from disque.context.tablelog import SCHEDULE_TABLE, TICK_TABLE, TableLog

RETRY_MS: Final = 1000  # a tick whose ADDJOB was refused is tried again after this
MAX_TICKS_PER_PASS: Final = 16  # ticks of one schedule fired by one cron pass
MAX_JOBS_PER_PASS: Final = 500  # ticks of all schedules fired by one cron pass
MIN_CATCHUP_MS: Final = 60_000  # older unfired ticks are skipped (see catchup_ms)
TOMBSTONE_MS: Final = 86_400_000  # a DEL is remembered this long
# A node fires first only under a view (the nodes it ranks) this old: the
# node that fired before it learns of the change and stops meanwhile.
HANDOVER_MS: Final = 1000
TABLE_NAME: Final = b"schedules"  # in TABLESYNC messages
# Digest buckets: the definitions in the first BUCKETS, the last ticks in
# the next BUCKETS (a tick heard late resends a tick, not a body).
BUCKETS: Final = 128
TICKS_PER_MESSAGE: Final = 256  # entries of a SCHEDFIRED
_TICK_ENTRY_SIZE: Final = 64  # bytes of a SCHEDFIRED entry besides the name (about)


class ScheduleHost(Protocol):
    """What schedules ask of the process: the CRON calendar (a parser
    outside the core, see docs/architecture.md)."""

    def cron_next(self, expr: bytes, after_ms: int) -> int:
        """The first time (unix ms) after ``after_ms`` that ``expr`` names, or -1."""


class ScheduleSettings(Protocol):
    """The configuration schedules read."""

    cluster_node_timeout: int


# ------------------------------------------------------------------ part

class Schedules:
    """The schedules this node knows, and the ticks it fires."""

    def __init__(self, runtime: Runtime, membership: Membership, outbox: Outbox,
                 settings: ScheduleSettings, host: ScheduleHost, sync: TableSync,
                 log: TableLog) -> None:
        self.runtime = runtime
        self.membership = membership
        self.outbox = outbox
        self.settings = settings
        self.host = host
        self.log = log
        self.table: dict[bytes, Schedule] = {}  # tombstones included
        self.buckets: list[dict[bytes, Schedule]] = [{} for _ in range(BUCKETS)]
        self.digest = BucketDigest(2 * BUCKETS)
        self.sync = sync
        sync.register(TABLE_NAME, self)
        # The peers synced with this node (cluster/tablesync.py): the nodes
        # counted for firing (a node that just started or whose peer was cut
        # off knows nothing of the ticks fired meanwhile until then).
        self.synced = sync.synced[TABLE_NAME]
        self.fired = 0  # ticks whose job this node made
        self.refused = 0  # ticks not made here: ADDJOB refused, owner unknown or over quota
        self.over_quota = 0  # of those, ticks skipped: the owner was over its quota
        self.skipped = 0  # ticks older than the catch-up window, never fired
        self.view: list[bytes] | None = None  # firers() at the last cron pass
        self.view_since = 0  # when it last changed
        self.complete = False  # at the last cron pass, every linked peer was synced
        self.soonest = NEVER  # no schedule is due before (``due`` looks again from then)
        self.next_expiry = NEVER  # when the oldest tombstone is forgotten

    # ------------------------------------------------------------ reads

    def listing(self) -> list[Schedule]:
        """The live schedules, by name."""
        return sorted([s for s in self.table.values() if not s.deleted], key=_by_name)

    def in_use(self) -> bool:
        """The table holds a schedule or a tombstone."""
        return bool(self.table)

    def shared(self) -> bool:
        """Schedules cross any bus (a node without a secret trusts its peers)."""
        return True

    def live_count(self) -> int:
        """How many live schedules this node knows."""
        return sum([1 for s in self.table.values() if not s.deleted])

    def get(self, name: bytes) -> Schedule | None:
        """The live schedule called ``name``."""
        s = self.table.get(name)
        return None if s is None or s.deleted else s

    def catchup_ms(self) -> int:
        """How far back an unfired tick is still fired: a minute, or four
        node timeouts when longer (a takeover is later than one)."""
        return max(MIN_CATCHUP_MS, 4 * self.settings.cluster_node_timeout)

    # ----------------------------------------------------------- writes

    def set(self, name: bytes, every: int, cron: bytes, queue: bytes, body: bytes,
            options: list[bytes], owner: bytes) -> None:
        """SCHEDULE SET: a new version of ``name``, told to every node."""
        self._write(Schedule(name, every, cron, queue, body, options, self._version(name),
                             self.runtime.node_id, owner=owner))

    def delete(self, name: bytes) -> bool:
        """SCHEDULE DEL: a tombstone, told to every node; False if unknown."""
        if self.get(name) is None:
            return False
        self._write(Schedule(name, 0, b"", b"", b"", [], self._version(name),
                             self.runtime.node_id, True))
        return True

    def delete_owned_by(self, owner: bytes) -> int:
        """The schedules ``owner`` set are deleted (ACL DELUSER); how many."""
        names = [s.name for s in self.table.values() if s.owner == owner and not s.deleted]
        for name in names:
            self.delete(name)
        return len(names)

    def _version(self, name: bytes) -> int:
        # Later than the version it replaces even if this clock is behind.
        known = self.table.get(name)
        now = self.runtime.now
        return now if known is None or known.version < now else known.version + 1

    def _write(self, s: Schedule) -> None:
        self._merge(s)
        self.outbox.broadcast({m.TYPE: m.SCHEDULE, m.SCHED: self.table[s.name].to_wire()})

    def restore(self, records: list[Schedule]) -> None:
        """Schedules read from nodes.conf at startup (as versions that kept
        them there wrote them)."""
        for s in records:
            self._merge(s)

    def restore_record(self, table: bytes, key: bytes, value: object) -> bool:
        """A record of the tables file at startup; False when malformed."""
        if table == SCHEDULE_TABLE:
            s = from_wire(value)
            if s is None or s.name != key:
                return False
            self._merge(s)
            return True
        tick = tick_from_record(value)
        if tick is None:
            return False
        known = self.table.get(key)
        if known is not None and tick[0] > known.last_tick:
            self._take_tick(known, tick[0], tick[1])
        return True

    def persist_all(self) -> None:
        """Put every schedule in the tables log (moving them out of nodes.conf)."""
        for s in self.table.values():
            self.log.put(SCHEDULE_TABLE, s.name, s.to_wire())

    def _merge(self, s: Schedule) -> bool:
        """Take what ``s`` knows that is newer: its definition if its version
        wins, its last tick if later. True when something changed."""
        known = self.table.get(s.name)
        if known is None:
            self.table[s.name] = s
            self.sync.wake()
            s.bucket = fingerprint(s.name) % BUCKETS
            self.buckets[s.bucket][s.name] = s
            self._definition_changed(s)
            if s.last_tick:
                self._reprint_tick(s)
            self._plan(s)
            return True
        defined = s.newer_than(known)
        ticked = s.last_tick > known.last_tick
        if ticked:
            known.last_tick, known.last_by = s.last_tick, s.last_by
            self._reprint_tick(known)
        if defined:
            known.every, known.cron, known.queue = s.every, s.cron, s.queue
            known.body, known.options, known.deleted = s.body, s.options, s.deleted
            known.owner, known.version, known.origin = s.owner, s.version, s.origin
            known.failing = False
            self._definition_changed(known)
        elif ticked:
            self.log.put(TICK_TABLE, known.name, [known.last_tick, known.last_by])
        if defined or ticked:
            self._plan(known)
            return True
        return False

    def _definition_changed(self, s: Schedule) -> None:
        """File the definition's fingerprint and persist it (with its last tick)."""
        new = fingerprint(b"%s\0%d\0%s" % (s.name, s.version, s.origin))
        self.digest.toggle(s.bucket, s.definition_print ^ new)
        s.definition_print = new
        self.log.put(SCHEDULE_TABLE, s.name, s.to_wire())
        if s.deleted:
            expiry = s.version + TOMBSTONE_MS
            if expiry < self.next_expiry:
                self.next_expiry = expiry

    def _reprint_tick(self, s: Schedule) -> None:
        new = fingerprint(b"%s\0%d" % (s.name, s.last_tick))
        self.digest.toggle(BUCKETS + s.bucket, s.tick_print ^ new)
        s.tick_print = new

    def _take_tick(self, s: Schedule, tick: int, by: bytes) -> None:
        """A later tick of ``s`` was fired (here or by ``by``)."""
        s.last_tick = tick
        s.last_by = by
        self._reprint_tick(s)
        self.log.put(TICK_TABLE, s.name, [tick, by])
        self._plan(s)

    def _forget(self, s: Schedule) -> None:
        """A tombstone past its time leaves the table, the digest and the file."""
        del self.table[s.name]
        del self.buckets[s.bucket][s.name]
        self.digest.toggle(s.bucket, s.definition_print)
        self.digest.toggle(BUCKETS + s.bucket, s.tick_print)
        self.log.drop(SCHEDULE_TABLE, s.name)
        self.log.drop(TICK_TABLE, s.name)

    def _plan(self, s: Schedule) -> None:
        """Compute the schedule's next tick: the first after its version and
        after the last tick fired."""
        s.next_tick = NEVER if s.deleted else self.tick_after(s, max(s.version, s.last_tick))
        s.retry_at = 0
        if s.next_tick < self.soonest:
            self.soonest = s.next_tick

    def tick_after(self, s: Schedule, after_ms: int) -> int:
        """The schedule's first tick after ``after_ms``: EVERY n ticks at the
        multiples of n seconds since the epoch, CRON at the calendar's times."""
        if s.every:
            period = s.every * 1000
            return (after_ms // period + 1) * period
        tick = self.host.cron_next(s.cron, after_ms)
        return tick if tick > after_ms else NEVER

    # -------------------------------------------------------------- bus

    def bucket_messages(self, bucket: int) -> list[tuple[dict, int]]:
        """What answers a peer whose digest differs in ``bucket``: each
        definition filed there in a SCHEDULE message of its own, or their
        last ticks, a few hundred per SCHEDFIRED."""
        if bucket < BUCKETS:
            return [({m.TYPE: m.SCHEDULE, m.SCHED: s.to_wire()}, s.size())
                    for s in self.buckets[bucket].values()]
        entries = [[s.name, s.last_tick, s.last_by]
                   for s in self.buckets[bucket - BUCKETS].values() if s.last_tick]
        return [_ticks_message(entries[i:i + TICKS_PER_MESSAGE])
                for i in range(0, len(entries), TICKS_PER_MESSAGE)]

    def on_schedule(self, sender: bytes, msg: dict, link: Link) -> None:
        """SCHEDULE: one record to merge."""
        s = from_wire(msg[m.SCHED])
        if s is None:
            logger.warning("Bad schedule record from %s", sender.decode("latin-1"))
            return
        if (s.deleted and s.version < self.runtime.now - TOMBSTONE_MS
                and s.name not in self.table):
            return  # forgotten here already (a node that forgets later sent it)
        self._merge(s)

    def on_fired(self, sender: bytes, msg: dict, link: Link) -> None:
        """SCHEDFIRED: ticks fired, each by the node it names (the sender
        when it names none)."""
        bad = False
        for entry in msg[m.SCHED_TICKS]:
            if type(entry) is not list or len(entry) != 3:
                bad = True
                continue
            name, tick, by = entry
            if (type(name) is not bytes or type(tick) is not int or not 0 < tick < NEVER
                    or type(by) is not bytes or (by and not m.is_node_id(by))):
                bad = True
                continue
            s = self.table.get(name)
            if s is not None and tick > s.last_tick:
                self._take_tick(s, tick, by or sender)
        if bad:
            logger.warning("Bad schedule tick from %s", sender.decode("latin-1"))

    # ------------------------------------------------------------- time

    def cron(self) -> None:
        """Housekeeping (only while the table holds something): the view of
        who fires, and tombstones past their time."""
        now = self.runtime.now
        view = self.firers()
        if view != self.view:
            self.view = view
            self.view_since = now
        self.complete = self._all_synced()
        if now >= self.next_expiry:
            self._forget_tombstones(now)

    def _forget_tombstones(self, now: int) -> None:
        horizon = now - TOMBSTONE_MS
        following = NEVER
        for s in list(self.table.values()):
            if s.deleted:
                if s.version < horizon:
                    self._forget(s)
                elif s.version + TOMBSTONE_MS < following:
                    following = s.version + TOMBSTONE_MS
        self.next_expiry = following

    def firers(self) -> list[bytes] | None:
        """The nodes that may fire, this one first if it may (see the module
        docstring); None when this node counts less than a majority."""
        membership = self.membership
        myself = membership.myself
        counted = 1
        firers = [] if myself.flags & LEAVING else [self.runtime.node_id]
        nodes = membership.nodes
        synced = self.synced
        for node_id in list(synced):
            node = nodes.get(node_id)
            if node is None or not node.link or node.flags & (PFAIL | FAIL | HANDSHAKE | NOADDR):
                del synced[node_id]
                continue
            counted += 1
            if not node.flags & LEAVING:
                firers.append(node_id)
        if counted < membership.size // 2 + 1:
            return None
        return firers

    def _all_synced(self) -> bool:
        """Every peer this node is linked to and does not suspect is synced:
        the ranking this node sees is the one its peers see."""
        synced = self.synced
        for node in self.membership.others():
            if (node.link and not node.flags & (PFAIL | FAIL | HANDSHAKE | NOADDR)
                    and node.id not in synced):
                return False
        return True

    def rank(self, s: Schedule, firers: list[bytes]) -> int:
        """This node's place among ``firers`` for ``s`` (0: it fires first)."""
        own = _score(s.name, self.runtime.node_id)
        return sum([1 for node_id in firers if _score(s.name, node_id) < own])

    def due(self) -> list[tuple[Schedule, int]]:
        """The ticks this node must fire now, each schedule's oldest first,
        at most ``MAX_JOBS_PER_PASS`` (under the view of the last ``cron``
        pass)."""
        firers = self.view
        if firers is None or self.membership.leaving:
            return []
        now = self.runtime.now
        if now < self.soonest:
            return []
        soonest = NEVER
        formed = now - self.view_since
        settled = self.complete and formed >= HANDOVER_MS
        delay = self.settings.cluster_node_timeout
        oldest = now - self.catchup_ms()
        due: list[tuple[Schedule, int]] = []
        for s in self.table.values():
            start = s.next_tick if s.next_tick > s.retry_at else s.retry_at
            if start > now:
                if start < soonest:
                    soonest = start
                continue
            soonest = now  # due, or waiting for its turn: looked at again next pass
            tick = s.next_tick
            if tick < oldest:
                tick = self._skip_to(s, oldest)
            if s.ranked_in is not firers:  # the view is a new list each time it changes
                s.place = self.rank(s, firers)
                s.ranked_in = firers
            rank = s.place
            wait = (rank if rank or settled else 1) * delay
            if formed < wait:
                continue  # a tick missed before this view formed: the first catches up
            latest = now - wait
            count = 0
            while tick <= latest and count < MAX_TICKS_PER_PASS:
                due.append((s, tick))
                tick = self.tick_after(s, tick)
                count += 1
        self.soonest = soonest
        if len(due) > MAX_JOBS_PER_PASS:
            due.sort(key=_by_tick)  # stable: each schedule's ticks stay in order
            del due[MAX_JOBS_PER_PASS:]
        return due

    def _skip_to(self, s: Schedule, oldest: int) -> int:
        """The first tick of ``s`` at or after ``oldest``: older ones are
        skipped (no node could fire them in time)."""
        tick = self.tick_after(s, oldest - 1)
        logger.warning("Schedule %s: ticks from %d to %d were not fired in time, skipped",
                       s.name.decode("utf-8", "backslashreplace"), s.next_tick, tick - 1)
        self.skipped += 1
        s.next_tick = tick
        return tick

    def fired_here(self, s: Schedule, tick: int) -> None:
        """This node made the job of ``s``'s tick."""
        s.failing = False
        self.fired += 1
        self._take_tick(s, tick, self.runtime.node_id)

    def over_quota_here(self, s: Schedule, tick: int, reply: bytes) -> None:
        """The owner of ``s`` is over its quota here: the tick is skipped
        (no job; no other node makes it either) and counted as refused."""
        self.refused += 1
        self.over_quota += 1
        self._failed(s, tick, reply)
        self._take_tick(s, tick, self.runtime.node_id)

    def refused_here(self, s: Schedule, tick: int, reply: bytes) -> None:
        """The tick's ADDJOB was refused, or its owner is not a user here:
        try again after ``RETRY_MS`` (another node may fire it meanwhile)."""
        self.refused += 1
        s.retry_at = self.runtime.now + RETRY_MS
        if s.retry_at < self.soonest:
            self.soonest = s.retry_at
        self._failed(s, tick, reply)

    def _failed(self, s: Schedule, tick: int, reply: bytes) -> None:
        """Log the first refusal of a streak."""
        if not s.failing:
            s.failing = True
            logger.warning("Schedule %s: the job of tick %d was refused (%s)",
                           s.name.decode("utf-8", "backslashreplace"), tick,
                           reply.strip().decode("utf-8", "backslashreplace"))

    def announce(self, fired: list[Schedule]) -> None:
        """Tell every node the last ticks fired (or skipped) here."""
        entries = [[s.name, s.last_tick, s.last_by] for s in fired]
        for i in range(0, len(entries), TICKS_PER_MESSAGE):
            msg, _ = _ticks_message(entries[i:i + TICKS_PER_MESSAGE])
            self.outbox.broadcast(msg)


def _ticks_message(entries: list[list]) -> tuple[dict, int]:
    """A SCHEDFIRED of ``entries`` (``[name, tick, node]``), with its size."""
    size = sum([len(entry[0]) + _TICK_ENTRY_SIZE for entry in entries])
    return {m.TYPE: m.SCHEDFIRED, m.SCHED_TICKS: entries}, size


def _score(name: bytes, node_id: bytes) -> int:
    return fingerprint(name + b"\0" + node_id)


def _by_name(s: Schedule) -> bytes:
    return s.name


def _by_tick(item: tuple[Schedule, int]) -> int:
    return item[1]
