"""Periodic jobs (docs/schedules.md): the cluster's table of schedules, how
nodes agree on it, and which ticks this node fires.

A schedule's definition (EVERY seconds or a five-field CRON, a queue, a
body, ADDJOB options) carries a version, the time it was set and the node
that set it: the highest version wins on every node (last writer wins; a
DEL leaves a tombstone with its version). Its last fired tick only grows.
Both travel in SCHEDULE messages (one record on SET and DEL; the whole
table when a link comes up, answered with the peer's table, and every
``SYNC_INTERVAL_MS`` to one peer) and in SCHEDFIRED (a tick was fired).

Which node fires a tick: among the nodes this one counts (itself, and the
peers whose table it received since their link last came up, none failing),
ranked per schedule by a hash of the name and the node ID, the first fires
at the tick and the r-th at the tick plus r times cluster-node-timeout,
unless a SCHEDFIRED for that tick arrived first. A node that counts less
than a majority of the cluster fires nothing, and one whose view changed
less than ``HANDOVER_MS`` ago fires as if it were second at best. This part says which ticks
are due here; ``commands/schedule.fire_due`` makes their jobs.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final, Protocol

from disque.cluster import messages as m
from disque.cluster.membership import FAIL, HANDSHAKE, LEAVING, NOADDR, PFAIL, Membership
from disque.cluster.outbox import Outbox
from disque.cluster.transport import Link
from disque.context.log import logger
from disque.context.runtime import Runtime

NEVER: Final = 1 << 62  # next_tick of a schedule that will not fire again
MAX_NAME: Final = 200  # bytes: the tick's DEDUPID (name and time) stays within 256
MAX_EVERY: Final = 10 * 366 * 86400  # seconds
SYNC_INTERVAL_MS: Final = 5000  # the whole table to one peer this often
RETRY_MS: Final = 1000  # a tick whose ADDJOB was refused is tried again after this
MAX_TICKS_PER_PASS: Final = 16  # ticks of one schedule fired by one cron pass
MIN_CATCHUP_MS: Final = 60_000  # older unfired ticks are skipped (see catchup_ms)
TOMBSTONE_MS: Final = 86_400_000  # a DEL is remembered this long
# A node fires first only under a view (the nodes it ranks) this old: the
# node that fired before it learns of the change and stops meanwhile.
HANDOVER_MS: Final = 1000
CONF_LINE: Final = "schedule"  # nodes.conf lines holding a schedule
_FIELDS: Final = 11  # a record's fields on the wire and in nodes.conf


class ScheduleHost(Protocol):
    """What schedules ask of the process: nodes.conf, and the CRON calendar
    (a parser outside the core, see docs/architecture.md)."""

    def save_cluster_config(self) -> str | None:
        """Persist the node table and the schedules; an error text on failure."""

    def cron_next(self, expr: bytes, after_ms: int) -> int:
        """The first time (unix ms) after ``after_ms`` that ``expr`` names, or -1."""


class ScheduleSettings(Protocol):
    """The configuration schedules read."""

    cluster_node_timeout: int


class Schedule:
    """One schedule: its definition, version and last fired tick, and what
    this node derives from them (``next_tick``, the retry time)."""

    __slots__ = ("name", "every", "cron", "queue", "body", "options", "version", "origin",
                 "deleted", "last_tick", "last_by", "next_tick", "retry_at", "failing")

    def __init__(self, name: bytes, every: int, cron: bytes, queue: bytes, body: bytes,
                 options: list[bytes], version: int, origin: bytes, deleted: bool = False,
                 last_tick: int = 0, last_by: bytes = b"") -> None:
        self.name = name
        self.every = every  # seconds; 0 for a CRON schedule
        self.cron = cron  # the five fields; b"" for an EVERY schedule
        self.queue = queue
        self.body = body
        self.options = options  # ADDJOB's words after the timeout
        self.version = version  # unix ms when set (or deleted), see Schedules.set
        self.origin = origin  # the node that set it: breaks ties between equal versions
        self.deleted = deleted
        self.last_tick = last_tick  # unix ms of the last tick fired, 0: none yet
        self.last_by = last_by  # the node that fired it
        self.next_tick = NEVER
        self.retry_at = 0
        self.failing = False  # its last ADDJOB was refused (logged once per streak)

    def spec(self) -> bytes:
        """``EVERY <seconds>`` or ``CRON <fields>``, as SCHEDULE LIST shows it."""
        return b"EVERY %d" % self.every if self.every else b"CRON " + self.cron

    def newer_than(self, other: Schedule) -> bool:
        """This definition wins over ``other``'s (last writer wins)."""
        return (self.version, self.origin) > (other.version, other.origin)

    def to_wire(self) -> list:
        """The record as SCHEDULE messages carry it."""
        return [self.name, self.version, self.origin, int(self.deleted), self.every, self.cron,
                self.queue, self.body, self.options, self.last_tick, self.last_by]


def _is_node_id(value: object) -> bool:
    # 40 hex characters: nodes.conf writes it as text.
    return type(value) is bytes and len(value) == 40 and not value.translate(None, _HEX)


_HEX: Final = b"0123456789abcdefABCDEF"


def from_wire(record: object) -> Schedule | None:
    """A record of a SCHEDULE message, checked field by field; None when malformed."""
    if type(record) is not list or len(record) != _FIELDS:
        return None
    (name, version, origin, deleted, every, cron, queue, body, options, last_tick,
     last_by) = record
    if (type(name) is not bytes or not 0 < len(name) <= MAX_NAME or type(version) is not int
            or not 0 <= version < NEVER or not _is_node_id(origin) or type(deleted) is not int
            or type(every) is not int or not 0 <= every <= MAX_EVERY
            or type(cron) is not bytes or type(queue) is not bytes or type(body) is not bytes
            or type(options) is not list or type(last_tick) is not int
            or not 0 <= last_tick < NEVER
            or type(last_by) is not bytes or (last_by and not _is_node_id(last_by))):
        return None
    words: list[bytes] = []
    for word in options:
        if type(word) is not bytes:
            return None
        words.append(word)
    if not deleted and (not queue or (every > 0) == bool(cron)):
        return None
    return Schedule(name, every, cron, queue, body, words, version, origin, bool(deleted),
                    last_tick, last_by)


# ----------------------------------------------------------- nodes.conf

def _text(data: bytes) -> str:
    return base64.b64encode(data).decode() if data else "-"


def _data(text: str) -> bytes:
    return b"" if text == "-" else base64.b64decode(text, validate=True)


def render_line(s: Schedule) -> str:
    """The nodes.conf line of a schedule (binary fields in base64, ``-`` when empty)."""
    options = ",".join([_text(word) for word in s.options]) or "-"
    return "%s %s %d %s %d %d %s %s %s %s %d %s\n" % (
        CONF_LINE, _text(s.name), s.version, s.origin.decode(), int(s.deleted), s.every,
        _text(s.cron), _text(s.queue), _text(s.body), options, s.last_tick,
        s.last_by.decode() or "-")


def parse_line(fields: list[str]) -> Schedule | None:
    """A schedule from the words of its nodes.conf line; None when malformed."""
    if len(fields) != _FIELDS + 1 or fields[0] != CONF_LINE:
        return None
    try:
        options = [] if fields[9] == "-" else [_data(w) for w in fields[9].split(",")]
        record = [_data(fields[1]), int(fields[2]), fields[3].encode(), int(fields[4]),
                  int(fields[5]), _data(fields[6]), _data(fields[7]), _data(fields[8]),
                  options, int(fields[10]), b"" if fields[11] == "-" else fields[11].encode()]
    except (ValueError, binascii.Error):
        return None
    return from_wire(record)


# ------------------------------------------------------------------ part

class Schedules:
    """The schedules this node knows, and the ticks it fires."""

    def __init__(self, runtime: Runtime, membership: Membership, outbox: Outbox,
                 settings: ScheduleSettings, host: ScheduleHost) -> None:
        self.runtime = runtime
        self.membership = membership
        self.outbox = outbox
        self.settings = settings
        self.host = host
        self.table: dict[bytes, Schedule] = {}  # tombstones included
        # Peers whose whole table arrived since their link last came up: the
        # nodes counted for firing (a node that just started or whose peer
        # was cut off knows nothing of the ticks fired meanwhile until then).
        self.synced: dict[bytes, None] = {}
        self.dirty = False  # nodes.conf is behind the table
        self.next_sync = 0
        self.fired = 0  # ticks whose job this node made
        self.refused = 0  # ADDJOBs of ticks refused here (retried)
        self.skipped = 0  # ticks older than the catch-up window, never fired
        self.view: list[bytes] | None = None  # firers() at the last cron pass
        self.view_since = 0  # when it last changed

    # ------------------------------------------------------------ reads

    def listing(self) -> list[Schedule]:
        """The live schedules, by name."""
        return sorted([s for s in self.table.values() if not s.deleted], key=_by_name)

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
            options: list[bytes]) -> None:
        """SCHEDULE SET: a new version of ``name``, told to every node."""
        self._write(Schedule(name, every, cron, queue, body, options, self._version(name),
                             self.runtime.node_id))

    def delete(self, name: bytes) -> bool:
        """SCHEDULE DEL: a tombstone, told to every node; False if unknown."""
        if self.get(name) is None:
            return False
        self._write(Schedule(name, 0, b"", b"", b"", [], self._version(name),
                             self.runtime.node_id, True))
        return True

    def _version(self, name: bytes) -> int:
        # Later than the version it replaces even if this clock is behind.
        known = self.table.get(name)
        now = self.runtime.now
        return now if known is None or known.version < now else known.version + 1

    def _write(self, s: Schedule) -> None:
        self._merge(s)
        self.outbox.broadcast({m.TYPE: m.SCHEDULE, m.SCHEDULES: [self.table[s.name].to_wire()],
                               m.SCHED_SYNC: m.SYNC_PART})
        self.save()

    def restore(self, records: list[Schedule]) -> None:
        """Schedules read from nodes.conf at startup."""
        for s in records:
            self._merge(s)
        self.dirty = False

    def save(self) -> None:
        """Write nodes.conf now."""
        self.dirty = False
        self.host.save_cluster_config()

    def _merge(self, s: Schedule) -> bool:
        """Take what ``s`` knows that is newer: its definition if its version
        wins, its last tick if later. True when something changed."""
        known = self.table.get(s.name)
        if known is None:
            self.table[s.name] = s
            self._plan(s)
            return True
        changed = False
        if s.newer_than(known):
            known.every, known.cron, known.queue = s.every, s.cron, s.queue
            known.body, known.options, known.deleted = s.body, s.options, s.deleted
            known.version, known.origin = s.version, s.origin
            known.failing = False
            changed = True
        if s.last_tick > known.last_tick:
            known.last_tick, known.last_by = s.last_tick, s.last_by
            changed = True
        if changed:
            self._plan(known)
        return changed

    def _plan(self, s: Schedule) -> None:
        """Compute the schedule's next tick: the first after its version and
        after the last tick fired."""
        s.next_tick = NEVER if s.deleted else self.tick_after(s, max(s.version, s.last_tick))
        s.retry_at = 0

    def tick_after(self, s: Schedule, after_ms: int) -> int:
        """The schedule's first tick after ``after_ms``: EVERY n ticks at the
        multiples of n seconds since the epoch, CRON at the calendar's times."""
        if s.every:
            period = s.every * 1000
            return (after_ms // period + 1) * period
        tick = self.host.cron_next(s.cron, after_ms)
        return tick if tick > after_ms else NEVER

    # -------------------------------------------------------------- bus

    def link_up(self, node_id: bytes) -> None:
        """A link came up: send our table and ask for the peer's (a node in
        handshake is asked by the next sync round, once known). A node with
        no schedule sends nothing: a cluster that does not use them carries
        no message of theirs, and the first SET starts the sync rounds."""
        node = self.membership.nodes.get(node_id)
        if self.table and node is not None and not node.flags & HANDSHAKE:
            self._send_table(node_id, m.SYNC_ASK)

    def link_down(self, node_id: bytes) -> None:
        """A link went down: the peer counts again once its table arrives."""
        self.synced.pop(node_id, None)

    def _table_message(self, kind: int) -> dict:
        return {m.TYPE: m.SCHEDULE, m.SCHEDULES: [s.to_wire() for s in self.table.values()],
                m.SCHED_SYNC: kind}

    def _send_table(self, node_id: bytes, kind: int) -> None:
        self.outbox.send_to(node_id, self._table_message(kind))

    def on_schedule(self, sender: bytes, msg: dict, link: Link) -> None:
        """SCHEDULE: records to merge; a whole table makes the sender counted,
        and one that asks for ours is answered on the same link."""
        changed = False
        for record in msg[m.SCHEDULES]:
            s = from_wire(record)
            if s is None:
                logger.warning("Bad schedule record from %s", sender.decode("latin-1"))
                continue
            if self._merge(s):
                changed = True
        if changed:
            self.dirty = True
        kind = msg[m.SCHED_SYNC]
        if kind != m.SYNC_PART:
            self.synced[sender] = None
            if kind == m.SYNC_ASK:
                self.outbox.reply(link, self._table_message(m.SYNC_ALL))

    def on_fired(self, sender: bytes, msg: dict, link: Link) -> None:
        """SCHEDFIRED: ``sender`` fired the schedule's tick."""
        s = self.table.get(msg[m.SCHED_NAME])
        tick = msg[m.SCHED_TICK]
        if s is not None and tick > s.last_tick:
            s.last_tick, s.last_by = tick, sender
            self._plan(s)
            self.dirty = True

    # ------------------------------------------------------------- time

    def cron(self) -> None:
        """Housekeeping (only while the table holds something): the view of
        who fires, tombstones past their time, our table to peers now and
        then, and nodes.conf catching up with what arrived."""
        now = self.runtime.now
        view = self.firers()
        if view != self.view:
            self.view = view
            self.view_since = now
        for name in [n for n, s in self.table.items()
                     if s.deleted and s.version < now - TOMBSTONE_MS]:
            del self.table[name]
            self.dirty = True
        if now >= self.next_sync:
            self.next_sync = now + SYNC_INTERVAL_MS
            self._sync_round()
        if self.dirty:
            self.save()

    def _sync_round(self) -> None:
        """Ask every linked peer not counted yet for its table (a link that
        came up during a handshake, a lost answer), and one counted peer,
        which catches up on a lost message."""
        counted = []
        for node in self.membership.others():
            if not node.link or node.flags & HANDSHAKE:
                continue
            if node.id in self.synced:
                counted.append(node.id)
            else:
                self._send_table(node.id, m.SYNC_ASK)
        if counted:
            self._send_table(self.runtime.rng.choice(counted), m.SYNC_ASK)

    def firers(self) -> list[bytes] | None:
        """The nodes that may fire, this one first if it may (see the module
        docstring); None when this node counts less than a majority."""
        membership = self.membership
        myself = membership.myself
        counted = 1
        firers = [] if myself.flags & LEAVING else [self.runtime.node_id]
        nodes = membership.nodes
        for node_id in list(self.synced):
            node = nodes.get(node_id)
            if node is None or not node.link or node.flags & (PFAIL | FAIL | HANDSHAKE | NOADDR):
                del self.synced[node_id]
                continue
            counted += 1
            if not node.flags & LEAVING:
                firers.append(node_id)
        if counted < membership.size // 2 + 1:
            return None
        return firers

    def rank(self, s: Schedule, firers: list[bytes]) -> int:
        """This node's place among ``firers`` for ``s`` (0: it fires first)."""
        own = _score(s.name, self.runtime.node_id)
        return sum([1 for node_id in firers if _score(s.name, node_id) < own])

    def due(self) -> list[tuple[Schedule, int]]:
        """The ticks this node must fire now, each schedule's oldest first
        (under the view of the last ``cron`` pass)."""
        firers = self.view
        if firers is None or self.membership.leaving:
            return []
        now = self.runtime.now
        waiting = [s for s in self.table.values() if s.next_tick <= now and s.retry_at <= now]
        if not waiting:
            return []
        settled = now - self.view_since >= HANDOVER_MS
        delay = self.settings.cluster_node_timeout
        oldest = now - self.catchup_ms()
        due: list[tuple[Schedule, int]] = []
        for s in waiting:
            tick = s.next_tick
            if tick < oldest:
                tick = self._skip_to(s, oldest)
            rank = self.rank(s, firers)
            latest = now - (rank if rank or settled else 1) * delay
            count = 0
            while tick <= latest and count < MAX_TICKS_PER_PASS:
                due.append((s, tick))
                tick = self.tick_after(s, tick)
                count += 1
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
        s.last_tick = tick
        s.last_by = self.runtime.node_id
        s.next_tick = self.tick_after(s, tick)
        s.failing = False
        self.fired += 1
        self.dirty = True

    def refused_here(self, s: Schedule, tick: int, reply: bytes) -> None:
        """The tick's ADDJOB was refused: try again after ``RETRY_MS``."""
        self.refused += 1
        s.retry_at = self.runtime.now + RETRY_MS
        if not s.failing:
            s.failing = True
            logger.warning("Schedule %s: the job of tick %d was refused (%s), retrying",
                           s.name.decode("utf-8", "backslashreplace"), tick,
                           reply.strip().decode("utf-8", "backslashreplace"))

    def announce(self, s: Schedule) -> None:
        """Tell every node the last tick fired here."""
        self.outbox.broadcast({m.TYPE: m.SCHEDFIRED, m.SCHED_NAME: s.name,
                               m.SCHED_TICK: s.last_tick})


def _score(name: bytes, node_id: bytes) -> bytes:
    import hashlib  # loaded with the first schedule, not by every start
    return hashlib.blake2b(name + b"\0" + node_id, digest_size=8).digest()


def _by_name(s: Schedule) -> bytes:
    return s.name
