"""The live dashboard on metrics-port: ``/`` (a static page) and ``/api/stats``
(JSON), the whole cluster as any node sees it; looking inside queues and jobs
is ``disque.http.inspect``'s, the actions, behind a login, ``disque.http.actions``'.

The page polls ``/api/stats`` about once a second instead of holding a
server-sent-event stream: a poll leaves no open stream for shutdown to
close, works through any proxy, serves scripts and curl alike, and the
node samples only while someone is watching. Every node's figures come
from its summary (``cluster/peerstats.py``): this node's made at the
sample, the others' as they last sent them, which the polls keep coming.
A poll samples them into a short history (at most once per
``SAMPLE_INTERVAL_S``), from which the rates and the sparklines come.
Nothing runs in the cron or on the job path while no page is open.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from disque import __version__
from disque.cluster.membership import (FAIL, FLAGS_BY_NAME, HANDSHAKE, LEAVING, MYSELF, NOADDR,
                                       PFAIL)
from disque.cluster.peerstats import STATS_FIELDS, NodeSummary, QueueShare
from disque.context.memory import format_human
from disque.http import actions, inspect
from disque.jobs.replies import DEAD_SUFFIX
from disque.queues.queue import PAUSE_NAMES

if TYPE_CHECKING:
    from disque.http.observed import DashboardServer, ObservedNode, ObservedServer

STATIC_DIR = Path(__file__).parent / "static"
INDEX_FILE = "index.html"
# Served under /static/ by name only: nothing else in the package is reachable.
ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}

ROUTE_INDEX = "/"
ROUTE_ASSET = "/static/{name}"
ROUTE_STATS = "/api/stats"

# The page loads nothing from elsewhere; a queue name that slipped into markup
# still could not run a script.
INDEX_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; "
                                "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                                "form-action 'none'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}
ASSET_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
STATS_HEADERS = {"Cache-Control": "no-store"}

QUEUES_SHOWN = 50           # the longest queues of the cluster listed; the rest are only counted
SAMPLE_INTERVAL_S = 0.9     # polls closer than this share one sample (the page polls each 1 s)
HISTORY_POINTS = 60         # samples kept per node and per shown queue (a minute)
RATE_POINTS = 8             # samples kept per queue of each node: enough for RATE_WINDOW_S
RATE_WINDOW_S = 5.0         # rates are averaged over at least this long once samples allow
STALE_AFTER_S = 10.0        # a longer gap between polls starts the history afresh
DEAD_LETTER_SUFFIX = DEAD_SUFFIX  # the default dead-letter queue of <queue> (docs/dead-letters.md)
# A summary's job counters (stats.JobCounters), which only grow: the rest of
# its figures come before them.
FIRST_COUNTER = STATS_FIELDS.index("added")
JOB_COUNTERS = STATS_FIELDS[FIRST_COUNTER:]
FIGURES = dict(zip(STATS_FIELDS, range(len(STATS_FIELDS))))  # a figure's index
# The counters whose rates the page shows for the cluster, and draws.
CLUSTER_RATES = ("added", "delivered", "acked", "nacked")
JOB_SPARKLINES = ("added", "delivered")
# A queue's values in its samples: length, jobs in, jobs out (the last two only grow).
QUEUE_FIRST_COUNTER = 1

# A node's state for the page, from its flags: the worst one wins.
NODE_STATES = ((FAIL, "fail"), (PFAIL, "pfail"), (LEAVING, "leaving"),
               (HANDSHAKE, "handshake"), (NOADDR, "noaddr"))
NODE_STATE_OK = "ok"


def queue_name_text(name: bytes) -> str:
    """A queue name for JSON: names are arbitrary bytes, so undecodable ones keep ``\\xNN``."""
    return name.decode("utf-8", "backslashreplace")


def node_state(flags: int) -> str:
    """``ok``, ``pfail``, ``fail``, ``leaving``, ``handshake`` or ``noaddr``."""
    for flag, state in NODE_STATES:
        if flags & flag:
            return state
    return NODE_STATE_OK


Point = tuple[float, tuple[int, ...]]  # (monotonic s, values)


def window_rates(points: deque[Point]) -> list[float] | None:
    """Each value's change per second since the newest sample at least
    RATE_WINDOW_S old (or the oldest kept); None before two samples."""
    if not points:
        return None
    newest_at, newest = points[-1]
    oldest_at, oldest = points[0]
    for at, values in reversed(points):
        if newest_at - at >= RATE_WINDOW_S:
            oldest_at, oldest = at, values
            break
    elapsed = newest_at - oldest_at
    if elapsed <= 0:
        return None
    return [(new - old) / elapsed for new, old in zip(newest, oldest)]


def interval_rates(points: deque[Point], index: int) -> list[float]:
    """Value ``index``'s change per second between successive samples (a sparkline)."""
    pairs = zip(points, itertools.islice(points, 1, None))
    return [round((new[index] - old[index]) / (new_at - old_at), 2)
            for (old_at, old), (new_at, new) in pairs]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


class Track:
    """The samples of one node's figures, or of one queue on one node, and
    the summary they were last taken from."""

    __slots__ = ("points", "source", "first_counter")

    def __init__(self, size: int, first_counter: int) -> None:
        self.points: deque[Point] = deque(maxlen=size)
        self.source: NodeSummary | None = None  # the summary of the newest point
        self.first_counter = first_counter  # values from here on only grow

    def add(self, at: float, source: NodeSummary | None, values: tuple[int, ...]) -> None:
        """Sample a peer's summary once (``source``), or this node's (None:
        made for this sample); a counter that went down (the node restarted,
        the queue was made again) starts the samples afresh."""
        if source is not None:
            if source is self.source:
                return
            self.source = source
        points = self.points
        if points:
            first = self.first_counter
            if any(new < old for new, old in zip(values[first:], points[-1][1][first:])):
                points.clear()
        points.append((at, values))


class QueueRow:
    """One queue across the cluster: its totals and each node's share."""

    __slots__ = ("name", "length", "shares", "jobs_in", "jobs_out", "rate_in", "rate_out",
                 "blocked", "paused", "dead_letters")

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.length = 0
        self.shares: list[tuple[bytes, int]] = []
        self.jobs_in = self.jobs_out = self.blocked = self.paused = 0
        self.rate_in: float | None = None
        self.rate_out: float | None = None
        self.dead_letters: int | None = None

    def add(self, node_id: bytes, share: QueueShare, rates: list[float] | None) -> None:
        """Count one node's share of the queue."""
        _name, length, jobs_in, jobs_out, blocked, paused, dead = share
        self.length += length
        self.shares.append((node_id, length))
        self.jobs_in += jobs_in
        self.jobs_out += jobs_out
        self.blocked += blocked
        self.paused |= paused
        if dead >= 0:
            self.dead_letters = (self.dead_letters or 0) + dead
        if rates is not None:
            self.rate_in = (self.rate_in or 0.0) + rates[1]
            self.rate_out = (self.rate_out or 0.0) + rates[2]


class Sampler:
    """Recent samples of every node's summary, taken when the dashboard asks.

    This node's summary is made at the sample, the others' are the last
    they sent (a sample keeps them coming: ``PeerStats.watched``). A peer's
    sample is dated by the summary's age, so that its rates do not depend on
    when the page polls."""

    def __init__(self, limit: int = QUEUES_SHOWN) -> None:
        self.limit = limit
        self.nodes: dict[bytes, Track] = {}
        self.queues: dict[tuple[bytes, bytes], Track] = {}
        self.summaries: dict[bytes, NodeSummary] = {}
        self.rows: list[QueueRow] = []  # the longest of the queues the summaries list
        self.listed = 0  # queues the summaries list (by name)
        self.lengths: dict[bytes, deque[int]] = {}  # the shown queues' total lengths
        # The cluster's CLUSTER_RATES at each sample (None: not known yet).
        self.cluster: deque[tuple[float | None, ...]] = deque(maxlen=HISTORY_POINTS)
        self.polled_at = float("-inf")
        self.next_sample_at = float("-inf")

    def sample(self, node: ObservedNode, at: float) -> None:
        """Sample now, unless the last sample is too recent."""
        if at - self.polled_at > STALE_AFTER_S:
            self.nodes.clear()
            self.queues.clear()
            self.lengths.clear()
            self.cluster.clear()
            self.next_sample_at = at
        self.polled_at = at
        if at < self.next_sample_at:
            return
        self.next_sample_at = at + SAMPLE_INTERVAL_S
        state = node.state
        now = state.read_clock()
        peerstats = state.peerstats
        peerstats.watched()
        summaries = dict(peerstats.summaries)
        summaries[state.id] = peerstats.own()
        self.summaries = summaries
        nodes: dict[bytes, Track] = {}
        queues: dict[tuple[bytes, bytes], Track] = {}
        rows: dict[bytes, QueueRow] = {}
        for node_id, summary in summaries.items():
            seen_at = at - (now - summary.received) / 1000
            source = None if node_id == state.id else summary
            track = nodes[node_id] = self.nodes.get(node_id) or Track(HISTORY_POINTS,
                                                                      FIRST_COUNTER)
            track.add(seen_at, source, tuple(summary.stats))
            for share in summary.queues:
                key = (node_id, share[0])
                queue_track = queues[key] = self.queues.get(key) or Track(
                    RATE_POINTS, QUEUE_FIRST_COUNTER)
                queue_track.add(seen_at, source, share[1:4])
                row = rows.get(share[0])
                if row is None:
                    row = rows[share[0]] = QueueRow(share[0])
                row.add(node_id, share, window_rates(queue_track.points))
        self.nodes = nodes
        self.queues = queues
        self.listed = len(rows)
        self.rows = heapq.nsmallest(self.limit, rows.values(),
                                    key=lambda row: (-row.length, row.name))
        lengths: dict[bytes, deque[int]] = {}
        for row in self.rows:
            history = lengths[row.name] = self.lengths.get(row.name) or deque(
                maxlen=HISTORY_POINTS)
            history.append(row.length)
        self.lengths = lengths
        self.cluster.append(tuple(self.cluster_rates().values()))

    def cluster_rates(self) -> dict[str, float | None]:
        """CLUSTER_RATES summed over the nodes with a rate (None: none has one yet)."""
        totals: dict[str, float | None] = dict.fromkeys(CLUSTER_RATES)
        for track in self.nodes.values():
            rates = window_rates(track.points)
            if rates is None:
                continue
            for name in CLUSTER_RATES:
                totals[name] = (totals[name] or 0.0) + rates[FIGURES[name]]
        return totals


def queue_entry(row: QueueRow, sampler: Sampler) -> dict[str, Any]:
    """One row of the queues table: the cluster's totals and each node's share."""
    name = row.name
    return {
        "name": queue_name_text(name),
        "length": row.length,
        "shares": [{"node": node_id.decode("ascii", "replace"), "length": length}
                   for node_id, length in sorted(row.shares, key=lambda s: (-s[1], s[0]))],
        "jobs_in": row.jobs_in,
        "jobs_out": row.jobs_out,
        "rate_in": _rounded(row.rate_in),
        "rate_out": _rounded(row.rate_out),
        "blocked_clients": row.blocked,
        "paused": PAUSE_NAMES[row.paused].decode(),
        "dead_letter_queue": name.endswith(DEAD_LETTER_SUFFIX),
        "dead_letters": row.dead_letters,
        "history": list(sampler.lengths.get(name, ())),
    }


def figures_entry(summary: NodeSummary, track: Track, now: int) -> dict[str, Any]:
    """A node's figures from its summary: what the nodes table shows beside it."""
    stats = summary.stats
    rates = window_rates(track.points)
    return {
        "registered": stats[FIGURES["registered"]],
        "memory": stats[FIGURES["memory"]],
        "memory_human": format_human(stats[FIGURES["memory"]]),
        "ops_per_sec": stats[FIGURES["ops_per_sec"]],
        "queues": stats[FIGURES["queues"]],
        "dead_letter_jobs": stats[FIGURES["dead_letter_jobs"]],
        "blocked_clients": stats[FIGURES["blocked_clients"]],
        "rate_added": None if rates is None else round(rates[FIGURES["added"]], 2),
        "rate_delivered": None if rates is None else round(rates[FIGURES["delivered"]], 2),
        "age_s": round(max(0, now - summary.received) / 1000, 1),
    }


def cluster_entry(sampler: Sampler) -> dict[str, Any]:
    """The cluster's totals over the nodes whose figures are known."""
    summaries = sampler.summaries
    rates_now = sampler.cluster_rates()
    points = sampler.cluster
    return {
        "nodes_with_figures": len(summaries),
        "registered": sum(s.stats[FIGURES["registered"]] for s in summaries.values()),
        "dead_letter_jobs": sum(s.stats[FIGURES["dead_letter_jobs"]]
                                for s in summaries.values()),
        # Queues on the nodes: one on several nodes counts once on each.
        "queue_objects": sum(s.stats[FIGURES["queues"]] for s in summaries.values()),
        "rates": {name: _rounded(rate) for name, rate in rates_now.items()},
        "history": {name: [_rounded(rates[CLUSTER_RATES.index(name)]) or 0.0
                           for rates in points]
                    for name in JOB_SPARKLINES},
    }


def nodes_entries(server: ObservedServer, own_host: str,
                  sampler: Sampler) -> list[dict[str, Any]]:
    """The cluster as this node sees it (CLUSTER NODES), itself first, with
    each node's figures (``null`` until its summary arrives).

    A node learns its own IP from its peers; until then it is shown at
    ``own_host``, the host the page was loaded from."""
    state = server.node.state
    now = state.now
    nodes = sorted(state.membership.nodes.values(),
                   key=lambda node: (not node.flags & MYSELF, node.ip, node.port))
    entries = []
    for node in nodes:
        summary = sampler.summaries.get(node.id)
        track = sampler.nodes.get(node.id)
        entries.append({
            "id": node.id.decode("ascii", "replace"),
            "address": "%s:%d" % (node.ip or (own_host if node.flags & MYSELF else ""),
                                  node.port),
            "state": node_state(node.flags),
            "flags": [name for name, flag in FLAGS_BY_NAME.items() if node.flags & flag],
            "myself": bool(node.flags & MYSELF),
            "connected": bool(node.flags & MYSELF) or node.link,
            "priority": int(node.priority()),
            "figures": (None if summary is None or track is None
                        else figures_entry(summary, track, now)),
        })
    return entries


def _info(server: ObservedServer, section: str) -> dict[str, object]:
    return dict(server.info_fields(section))


def memory_entry(server: ObservedServer) -> dict[str, Any]:
    """The dataset's estimated size, its limit and the process RSS."""
    account = server.node.state.memory
    peak = account.update_peak()
    return {
        "used": account.used,
        "used_human": format_human(account.used),
        "peak": peak,
        "peak_human": format_human(peak),
        "maxmemory": account.maxmemory,
        "maxmemory_human": format_human(account.maxmemory) if account.maxmemory else None,
        "rss": _info(server, "memory").get("used_memory_rss", 0),
    }


def aof_entry(server: ObservedServer) -> dict[str, Any]:
    """The append-only file's state (INFO Persistence)."""
    fields = _info(server, "persistence")
    enabled = bool(fields.get("aof_enabled", 0))
    size = fields.get("aof_current_size") if enabled else None
    return {
        "enabled": enabled,
        "state": fields.get("aof_state"),
        "fsync": server.config.appendfsync,
        "size": size,
        "size_human": format_human(size) if isinstance(size, int) else None,
        "loading": bool(fields.get("loading", 0)),
        "rewrite_in_progress": bool(fields.get("aof_rewrite_in_progress", 0)),
        "last_write_status": fields.get("aof_last_write_status"),
        "last_rewrite_status": fields.get("aof_last_bgrewrite_status"),
    }


def jobs_entry(node: ObservedNode, sampler: Sampler) -> dict[str, Any]:
    """This node's registered jobs, what happened to jobs here since start,
    and how fast lately."""
    counters = node.state.counters
    track = sampler.nodes.get(node.state.id)
    points: deque[Point] = deque() if track is None else track.points
    rates = window_rates(points)
    return {
        "registered": len(node.state.jobs),
        "counters": {name: getattr(counters, name) for name in JOB_COUNTERS},
        "rates": (dict.fromkeys(JOB_COUNTERS) if rates is None
                  else {name: round(rates[FIGURES[name]], 2) for name in JOB_COUNTERS}),
        "history": {name: interval_rates(points, FIGURES[name]) for name in JOB_SPARKLINES},
    }


def build_stats(server: ObservedServer, sampler: Sampler, at: float,
                own_host: str = "") -> dict[str, Any]:
    """The whole /api/stats document, sampled at monotonic time ``at``."""
    node = server.node
    state = node.state
    sampler.sample(node, at)
    own = sampler.summaries.get(state.id)
    return {
        "time_ms": int(time.time() * 1000),
        "node": {
            "id": state.id.decode("ascii", "replace"),
            "version": __version__,
            "port": server.config.port,
            "uptime_s": int(time.time() - server.start_time),
            "connected_clients": len(server.clients),
            "blocked_clients": len(state.blocked),
            "ops_per_sec": state.stats.ops_per_sec(),
        },
        "jobs": jobs_entry(node, sampler),
        "cluster": cluster_entry(sampler),
        "nodes": nodes_entries(server, own_host, sampler),
        "queues": {
            "total": len(state.queues.by_name),
            "shown": [queue_entry(row, sampler) for row in sampler.rows],
            # Queues the nodes' summaries list, by name: more than shown when
            # the cluster has more than QUEUES_SHOWN.
            "listed": sampler.listed,
            # Jobs waiting in this node's dead-letter queues (named <queue>:dead).
            "dead_letter_jobs": 0 if own is None else own.stats[FIGURES["dead_letter_jobs"]],
        },
        "memory": memory_entry(server),
        "aof": aof_entry(server),
    }


class Dashboard:
    """The request handlers, with the sampler they share."""

    def __init__(self, server: ObservedServer) -> None:
        self.server = server
        self.sampler = Sampler()

    async def index(self, request: web.Request) -> web.StreamResponse:
        """The page itself."""
        return web.FileResponse(STATIC_DIR / INDEX_FILE, headers=INDEX_HEADERS)

    async def asset(self, request: web.Request) -> web.StreamResponse:
        """The page's script and style sheet."""
        name = request.match_info["name"]
        content_type = ASSETS.get(name)
        if content_type is None:
            raise web.HTTPNotFound()
        headers = dict(ASSET_HEADERS, **{"Content-Type": content_type})
        return web.FileResponse(STATIC_DIR / name, headers=headers)

    async def stats(self, request: web.Request) -> web.StreamResponse:
        """The numbers the page shows."""
        document = build_stats(self.server, self.sampler, time.monotonic(),
                                request.url.host or "")
        return web.json_response(document, headers=STATS_HEADERS)


def add_routes(app: web.Application, server: DashboardServer) -> None:
    """Serve the dashboard and its actions from ``app`` (the metrics-port application)."""
    dashboard = Dashboard(server)
    app.router.add_get(ROUTE_INDEX, dashboard.index)
    app.router.add_get(ROUTE_ASSET, dashboard.asset)
    app.router.add_get(ROUTE_STATS, dashboard.stats)
    inspect.add_routes(app, server, actions.add_routes(app, server))
