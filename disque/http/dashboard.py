"""The live dashboard on metrics-port: ``/`` (a static page) and ``/api/stats`` (JSON);
its actions, behind a login, are ``disque.http.actions``'.

The page polls ``/api/stats`` about once a second instead of holding a
server-sent-event stream: a poll leaves no open stream for shutdown to
close, works through any proxy, serves scripts and curl alike, and the
node samples only while someone is watching. A poll samples the job
counters and the longest queues into a short history (at most once per
``SAMPLE_INTERVAL_S``, less often when the node has so many queues that a
sample is costly), from which the rates and the sparklines come. Nothing
runs in the cron or on the job path.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from disque import __version__
from disque.cluster.membership import (FAIL, FLAGS_BY_NAME, HANDSHAKE, LEAVING, MYSELF, NOADDR,
                                       PFAIL)
from disque.context.memory import format_human
from disque.http import actions
from disque.queues.queue import PAUSE_NAMES

if TYPE_CHECKING:
    from disque.http.observed import DashboardServer, ObservedNode, ObservedServer
    from disque.queues.queue import Queue

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

QUEUES_SHOWN = 50           # the longest queues listed; the rest are only counted
SAMPLE_INTERVAL_S = 0.9     # polls closer than this share one sample (the page polls each 1 s)
HISTORY_POINTS = 60         # samples kept per shown queue (a minute at one poll a second)
RATE_WINDOW_S = 5.0         # rates are averaged over at least this long once samples allow
STALE_AFTER_S = 10.0        # a longer gap between polls starts the history afresh
SCAN_COST_RATIO = 50        # a sample costing t waits at least 50 t for the next: <= 2 % of the loop
DEAD_LETTER_SUFFIX = b":dead"  # the default dead-letter queue of <queue> (docs/dead-letters.md)
# state.counters (stats.JobCounters), in the order the sampler keeps them.
JOB_COUNTERS = ("added", "delivered", "acked", "nacked", "requeued", "expired", "evicted",
                "dead_lettered")
# The counters whose per-interval rates the page draws as sparklines.
JOB_SPARKLINES = ("added", "delivered")

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


class QueueTrack:
    """The recent samples of one shown queue: (length, jobs in, jobs out)."""

    __slots__ = ("queue", "points")

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.points: deque[Point] = deque(maxlen=HISTORY_POINTS)

    def add(self, at: float) -> None:
        """Sample the queue now."""
        queue = self.queue
        self.points.append((at, (len(queue), queue.jobs_in, queue.jobs_out)))


class Sampler:
    """Recent samples of the node's job counters and of its longest queues,
    taken when the dashboard asks.

    Picking the longest queues is a pass over all of them (about 0.1 s for
    a million): the next sample waits SCAN_COST_RATIO times as long as the
    last one took, so the dashboard never takes more than a small share of
    the event loop the node serves its clients on."""

    def __init__(self, limit: int = QUEUES_SHOWN,
                 timer: Callable[[], float] = time.perf_counter) -> None:
        self.limit = limit
        self.timer = timer
        self.tracks: dict[bytes, QueueTrack] = {}
        self.counters: deque[Point] = deque(maxlen=HISTORY_POINTS)
        self.shown: list[QueueTrack] = []
        self.dead_letter_jobs = 0
        self.polled_at = float("-inf")
        self.next_sample_at = float("-inf")

    def sample(self, node: ObservedNode, at: float) -> None:
        """Sample now, unless the last sample is too recent."""
        if at - self.polled_at > STALE_AFTER_S:
            self.tracks.clear()
            self.counters.clear()
            self.next_sample_at = at
        self.polled_at = at
        if at < self.next_sample_at:
            return
        started = self.timer()
        counters = node.state.counters
        self.counters.append((at, tuple(getattr(counters, name) for name in JOB_COUNTERS)))
        queues = node.state.queues.by_name
        longest = heapq.nlargest(self.limit, queues.values(), key=len)
        tracks: dict[bytes, QueueTrack] = {}
        for queue in longest:
            track = self.tracks.get(queue.name)
            # A queue collected and created again restarts its counters.
            if track is None or track.queue is not queue:
                track = QueueTrack(queue)
            track.add(at)
            tracks[queue.name] = track
        self.tracks = tracks
        self.shown = list(tracks.values())
        self.dead_letter_jobs = sum(len(queue) for name, queue in queues.items()
                                    if name.endswith(DEAD_LETTER_SUFFIX))
        cost = self.timer() - started
        self.next_sample_at = at + max(SAMPLE_INTERVAL_S, cost * SCAN_COST_RATIO)


def queue_entry(track: QueueTrack, queues: dict[bytes, Queue]) -> dict[str, Any]:
    """One row of the queues table."""
    queue = track.queue
    name = queue.name
    dead = queues.get(name + DEAD_LETTER_SUFFIX)
    rates = window_rates(track.points)
    return {
        "name": queue_name_text(name),
        "length": len(queue),
        "jobs_in": queue.jobs_in,
        "jobs_out": queue.jobs_out,
        "rate_in": None if rates is None else round(rates[1], 2),
        "rate_out": None if rates is None else round(rates[2], 2),
        "blocked_clients": queue.blocked_count,
        "paused": PAUSE_NAMES[queue.paused].decode(),
        "dead_letter_queue": name.endswith(DEAD_LETTER_SUFFIX),
        "dead_letters": None if dead is None else len(dead),
        "history": [values[0] for _, values in track.points],
    }


def nodes_entries(server: ObservedServer, own_host: str) -> list[dict[str, Any]]:
    """The cluster as this node sees it (CLUSTER NODES), itself first.

    A node learns its own IP from its peers; until then it is shown at
    ``own_host``, the host the page was loaded from."""
    nodes = sorted(server.node.state.membership.nodes.values(),
                   key=lambda node: (not node.flags & MYSELF, node.ip, node.port))
    return [{
        "id": node.id.decode("ascii", "replace"),
        "address": "%s:%d" % (node.ip or (own_host if node.flags & MYSELF else ""), node.port),
        "state": node_state(node.flags),
        "flags": [name for name, flag in FLAGS_BY_NAME.items() if node.flags & flag],
        "myself": bool(node.flags & MYSELF),
        "connected": bool(node.flags & MYSELF) or node.link,
        "priority": int(node.priority()),
    } for node in nodes]


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
    """Registered jobs, what happened to jobs since start, and how fast lately."""
    counters = node.state.counters
    points = sampler.counters
    rates = window_rates(points)
    return {
        "registered": len(node.state.jobs),
        "counters": {name: getattr(counters, name) for name in JOB_COUNTERS},
        "rates": (dict.fromkeys(JOB_COUNTERS) if rates is None
                  else {name: round(rate, 2) for name, rate in zip(JOB_COUNTERS, rates)}),
        "history": {name: interval_rates(points, JOB_COUNTERS.index(name))
                    for name in JOB_SPARKLINES},
    }


def build_stats(server: ObservedServer, sampler: Sampler, at: float,
                own_host: str = "") -> dict[str, Any]:
    """The whole /api/stats document, sampled at monotonic time ``at``."""
    node = server.node
    queues = node.state.queues.by_name
    sampler.sample(node, at)
    return {
        "time_ms": int(time.time() * 1000),
        "node": {
            "id": node.state.id.decode("ascii", "replace"),
            "version": __version__,
            "port": server.config.port,
            "uptime_s": int(time.time() - server.start_time),
            "connected_clients": len(server.clients),
            "blocked_clients": len(node.state.blocked),
            "ops_per_sec": node.state.stats.ops_per_sec(),
        },
        "jobs": jobs_entry(node, sampler),
        "nodes": nodes_entries(server, own_host),
        "queues": {
            "total": len(queues),
            "shown": [queue_entry(track, queues) for track in sampler.shown],
            # Jobs waiting in dead-letter queues (named <queue>:dead), on this node.
            "dead_letter_jobs": sampler.dead_letter_jobs,
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
    actions.add_routes(app, server)
