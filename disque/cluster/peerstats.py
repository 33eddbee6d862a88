"""Every node's figures on any node's dashboard: a summary per node (its
job, memory and command figures and its longest queues), sent over the bus
to the nodes whose dashboard is being watched (docs/dashboard.md "One
dashboard for the cluster").

A node whose dashboard is polled asks its peers with STATSWANT, at most
every WANT_INTERVAL_MS; a node asked within WATCH_MS sends the asker its
NODESTATS every SEND_INTERVAL_MS, and one at once when first asked. With
no dashboard open anywhere nothing is sent, and the cron tests one dict.
A summary lists at most ``metrics-max-queues`` queues (and
MAX_SUMMARY_QUEUES), the longest; picking them is a pass over every queue,
repeated at most once per QUEUES_PER_MS queues per millisecond so that a
node with a million queues spends a small share of its loop on it. The last
summary of each peer is kept, and dropped once STALE_MS old or when the
node is forgotten.
"""

from __future__ import annotations

import heapq
from typing import Final

from disque.cluster import messages as m
from disque.cluster.membership import Membership
from disque.cluster.outbox import Outbox
from disque.cluster.transport import Link
from disque.config import Config
from disque.context.memory import MemoryAccount
from disque.context.runtime import Runtime
from disque.context.stats import JobCounters, Stats
from disque.jobs.registry import JobRegistry
from disque.jobs.replies import DEAD_SUFFIX
from disque.queues.blocking import BlockedClients
from disque.queues.queue import PAUSE_ALL, Queue
from disque.queues.queueset import QueueSet

SEND_INTERVAL_MS: Final = 1000  # a watched node hears from each peer this often
WANT_INTERVAL_MS: Final = 3000  # a watched node asks its peers again this often
WATCH_MS: Final = 10_000  # a STATSWANT is answered this long
STALE_MS: Final = 10_000  # a peer's summary older than this is no longer shown
MAX_SUMMARY_QUEUES: Final = 1000  # whatever metrics-max-queues says
MAX_NAME: Final = 1024  # bytes: longer queue names are left out of summaries
# The longest queues are picked again after at least (queues / QUEUES_PER_MS)
# ms: a pass costs about 0.5 us per queue (pure Python; less compiled), so
# it takes at most 1 % of the loop.
QUEUES_PER_MS: Final = 20
# A summary's figures, in this order on the wire (docs/cluster.md).
STATS_FIELDS: Final = ("registered", "memory", "ops_per_sec", "queues", "dead_letter_jobs",
                       "blocked_clients", "added", "delivered", "acked", "nacked", "requeued",
                       "expired", "evicted", "dead_lettered")
QUEUE_FIELDS: Final = 7  # a QueueShare's

# One queue in a summary: name, length, jobs in, jobs out, blocked consumers,
# pause state (queue.PAUSE_*), the length of <name>:dead (-1: no such queue).
QueueShare = tuple[bytes, int, int, int, int, int, int]


class NodeSummary:
    """What one node said of itself, and when it was heard (unix ms)."""

    __slots__ = ("received", "stats", "queues")

    def __init__(self, received: int, stats: list[int], queues: list[QueueShare]) -> None:
        self.received = received
        self.stats = stats  # STATS_FIELDS
        self.queues = queues

    def to_wire(self) -> dict:
        """The NODESTATS message of this summary."""
        return {m.TYPE: m.NODESTATS, m.STATS: self.stats,
                m.QUEUES: [list(share) for share in self.queues]}


def _count(value: object) -> int:
    """A non-negative int, or -1."""
    return value if type(value) is int and value >= 0 else -1


def share_from_wire(entry: object) -> QueueShare | None:
    """One queue of a NODESTATS, checked field by field (later fields, from a
    newer node, are ignored); None when malformed."""
    if type(entry) is not list or len(entry) < QUEUE_FIELDS:
        return None
    name = entry[0]
    if type(name) is not bytes or not 0 < len(name) <= MAX_NAME:
        return None
    length, jobs_in, jobs_out, blocked, paused = (_count(entry[1]), _count(entry[2]),
                                                  _count(entry[3]), _count(entry[4]),
                                                  _count(entry[5]))
    dead = entry[6]
    if min(length, jobs_in, jobs_out, blocked, paused) < 0 or paused > PAUSE_ALL:
        return None
    if type(dead) is not int or dead < -1:
        return None
    return name, length, jobs_in, jobs_out, blocked, paused, dead


def summary_from_wire(msg: dict, now: int) -> NodeSummary | None:
    """A NODESTATS message's summary; None when its figures are malformed
    (a malformed queue is left out)."""
    raw_stats = msg[m.STATS]
    raw_queues = msg[m.QUEUES]
    if len(raw_stats) < len(STATS_FIELDS) or len(raw_queues) > MAX_SUMMARY_QUEUES:
        return None
    stats: list[int] = []
    for i in range(len(STATS_FIELDS)):
        value = _count(raw_stats[i])
        if value < 0:
            return None
        stats.append(value)
    queues: list[QueueShare] = []
    for entry in raw_queues:
        share = share_from_wire(entry)
        if share is not None:
            queues.append(share)
    return NodeSummary(now, stats, queues)


class PeerStats:
    """This node's summary, who asked for it, and the peers' summaries."""

    def __init__(self, runtime: Runtime, membership: Membership, outbox: Outbox,
                 config: Config, registry: JobRegistry, queues: QueueSet,
                 blocked: BlockedClients, memory: MemoryAccount, counters: JobCounters,
                 stats: Stats) -> None:
        self.runtime = runtime
        self.membership = membership
        self.outbox = outbox
        self.config = config
        self.registry = registry
        self.queues = queues
        self.blocked = blocked
        self.memory = memory
        self.counters = counters
        self.stats = stats
        self.watchers: dict[bytes, int] = {}  # node ID -> when it last asked (ms)
        self.summaries: dict[bytes, NodeSummary] = {}  # the peers', by node ID
        self.next_send = 0
        self.want_sent = -WANT_INTERVAL_MS
        self.picked: list[bytes] = []  # the queues summaries list, longest first when picked
        self.dead_letter_jobs = 0  # in <queue>:dead queues, when picked
        self.next_pick = 0

    # ------------------------------------------------------- own summary

    def own(self) -> NodeSummary:
        """This node's summary now."""
        now = self.runtime.now
        if now >= self.next_pick:
            self._pick(now)
        by_name = self.queues.by_name
        shares: list[QueueShare] = []
        for name in self.picked:
            queue = by_name.get(name)
            if queue is not None:
                shares.append(_share(queue, by_name.get(name + DEAD_SUFFIX)))
        counters = self.counters
        stats = [len(self.registry), self.memory.used, self.stats.ops_per_sec(), len(by_name),
                 self.dead_letter_jobs, len(self.blocked), counters.added, counters.delivered,
                 counters.acked, counters.nacked, counters.requeued, counters.expired,
                 counters.evicted, counters.dead_lettered]
        return NodeSummary(now, stats, shares)

    def _pick(self, now: int) -> None:
        """Choose the queues summaries list: the longest, up to the limit."""
        by_name = self.queues.by_name
        limit = min(self.config.metrics_max_queues, MAX_SUMMARY_QUEUES)
        longest = heapq.nlargest(limit, by_name.values(), key=len) if limit else []
        self.picked = [queue.name for queue in longest if len(queue.name) <= MAX_NAME]
        dead = 0
        for name, queue in by_name.items():
            if name.endswith(DEAD_SUFFIX):
                dead += len(queue)
        self.dead_letter_jobs = dead
        self.next_pick = now + max(SEND_INTERVAL_MS, len(by_name) // QUEUES_PER_MS)

    # ---------------------------------------------------------- watching

    def watched(self) -> None:
        """This node's dashboard was polled: keep the peers' summaries coming,
        and forget those of nodes gone or silent."""
        now = self.runtime.now
        if now - self.want_sent >= WANT_INTERVAL_MS:
            self.want_sent = now
            self.outbox.broadcast({m.TYPE: m.STATSWANT})
        known = self.membership.nodes
        for node_id in [node_id for node_id, summary in self.summaries.items()
                        if node_id not in known or now - summary.received > STALE_MS]:
            del self.summaries[node_id]

    def on_want(self, sender: bytes, msg: dict, link: Link) -> None:
        """A node's dashboard is watched: it gets our summary for WATCH_MS."""
        now = self.runtime.now
        asked = self.watchers.get(sender)
        self.watchers[sender] = now
        if asked is None or now - asked > WATCH_MS:
            self.outbox.send_to(sender, self.own().to_wire())

    def on_stats(self, sender: bytes, msg: dict, link: Link) -> None:
        """A peer's summary: kept until the next one (or STALE_MS)."""
        summary = summary_from_wire(msg, self.runtime.now)
        if summary is not None:
            self.summaries[sender] = summary

    def send_due(self) -> None:
        """Cron, while some node watches: our summary to each watcher, every
        SEND_INTERVAL_MS; watchers that stopped asking are dropped."""
        now = self.runtime.now
        if now < self.next_send:
            return
        self.next_send = now + SEND_INTERVAL_MS
        watchers = self.watchers
        known = self.membership.nodes
        for node_id in [node_id for node_id, asked in watchers.items()
                        if now - asked > WATCH_MS or node_id not in known]:
            del watchers[node_id]
        if watchers:
            msg = self.own().to_wire()
            for node_id in watchers:
                self.outbox.send_to(node_id, msg)


def _share(queue: Queue, dead: Queue | None) -> QueueShare:
    return (queue.name, len(queue), queue.jobs_in, queue.jobs_out, queue.blocked_count,
            queue.paused, -1 if dead is None else len(dead))
