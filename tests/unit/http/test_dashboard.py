"""The dashboard's routes and its /api/stats document, on an in-process Server
(no listener: aiohttp's test server mounts the routes as metrics-port would)."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from disque.cluster.membership import FAIL, HANDSHAKE, LEAVING, MYSELF, NOADDR, PFAIL
from disque.config import Config
from disque.http import dashboard
from disque.cluster.peerstats import NodeSummary
from disque.http.dashboard import (HISTORY_POINTS, RATE_WINDOW_S, SAMPLE_INTERVAL_S,
                                   STALE_AFTER_S, Sampler, add_routes, build_stats, node_state)
from disque.server import Server
from tests.unit.helpers import PEER_ID, Cmd, add_peer, deliver, make_node


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = Config()
    config.cluster_bus_port = 0
    return Server(config, ["disque-server"])


@pytest.fixture
async def http(server):
    app = web.Application()
    add_routes(app, server)
    client = TestClient(TestServer(app))
    await client.start_server()
    yield client
    await client.close()


def add_jobs(server: Server, queue: bytes | str, count: int) -> None:
    cmd = Cmd(server.node)
    for _ in range(count):
        cmd.addjob(queue, "body")


def shown(stats: dict) -> dict[str, dict]:
    return {entry["name"]: entry for entry in stats["queues"]["shown"]}


def peer_summary(server: Server, peer, age_ms: int = 0) -> None:
    """``peer``'s summary a second later reaches the server's node (``age_ms`` ago)."""
    peer.state.clock.advance(1000)
    peer.state.read_clock()
    message = peer.state.peerstats.own().to_wire()
    deliver(server.node, peer.state.id, message)
    summary = server.node.state.peerstats.summaries[peer.state.id]
    server.node.state.peerstats.summaries[peer.state.id] = NodeSummary(
        summary.received - age_ms, summary.stats, summary.queues)


def peer_node(server: Server):
    """A second node the server's node knows and links to; both on the
    peer's fake clock from now on."""
    peer = make_node(node_id=PEER_ID)
    server.node.state.clock = peer.state.clock
    add_peer(server.node)
    return peer


def test_the_document_has_every_section_the_page_reads(server):
    add_jobs(server, "orders", 3)
    stats = build_stats(server, Sampler(), 100.0)
    assert set(stats) == {"time_ms", "node", "jobs", "cluster", "nodes", "queues", "memory",
                          "aof"}
    assert stats["node"]["id"] == server.node.state.id.decode()
    assert set(stats["node"]) == {"id", "version", "port", "uptime_s", "connected_clients",
                                  "blocked_clients", "ops_per_sec"}
    assert stats["jobs"]["registered"] == 3
    assert stats["jobs"]["counters"] == {
        "added": 3, "delivered": 0, "acked": 0, "nacked": 0, "requeued": 0, "expired": 0,
        "evicted": 0, "dead_lettered": 0}
    assert stats["jobs"]["rates"] == dict.fromkeys(stats["jobs"]["counters"])
    assert stats["jobs"]["history"] == {"added": [], "delivered": []}
    assert stats["queues"]["total"] == 1
    assert stats["queues"]["dead_letter_jobs"] == 0
    own = server.node.state.id.decode()
    assert shown(stats)["orders"] == {
        "name": "orders", "length": 3, "shares": [{"node": own, "length": 3}], "jobs_in": 3,
        "jobs_out": 0, "rate_in": None, "rate_out": None, "blocked_clients": 0,
        "paused": "none", "dead_letter_queue": False, "dead_letters": None, "history": [3]}
    assert stats["cluster"] == {
        "nodes_with_figures": 1, "registered": 3, "dead_letter_jobs": 0, "queue_objects": 1,
        "rates": dict.fromkeys(("added", "delivered", "acked", "nacked")),
        "history": {"added": [0.0], "delivered": [0.0]}}
    memory = stats["memory"]
    assert memory["used"] == server.node.state.memory.used
    assert memory["maxmemory"] == server.config.maxmemory and memory["rss"] > 0
    assert stats["aof"]["enabled"] is False and stats["aof"]["size"] is None


def test_a_node_without_maxmemory_says_so(server):
    server.config.maxmemory = 0
    server.node.state.update_memory_limits()
    memory = build_stats(server, Sampler(), 0.0)["memory"]
    assert memory["maxmemory"] == 0 and memory["maxmemory_human"] is None


def test_nodes_are_listed_with_their_state_myself_first(server):
    peer = add_peer(server.node)
    peer.flags = PFAIL
    add_peer(server.node, b"c" * 40).flags = 0
    nodes = build_stats(server, Sampler(), 0.0)["nodes"]
    assert [n["myself"] for n in nodes] == [True, False, False]
    assert nodes[0]["state"] == "ok" and nodes[0]["connected"] is True
    assert nodes[0]["flags"] == ["myself"]
    assert nodes[1] == {"id": peer.id.decode(), "address": "127.0.0.1:7712", "state": "pfail",
                        "flags": ["fail?"], "myself": False, "connected": True, "priority": 10,
                        "figures": None}
    assert nodes[0]["figures"]["registered"] == 0 and nodes[0]["figures"]["age_s"] == 0
    assert nodes[2]["flags"] == [] and nodes[2]["state"] == "ok"


@pytest.mark.parametrize("flags, state", [
    (0, "ok"), (MYSELF, "ok"), (PFAIL, "pfail"), (PFAIL | FAIL, "fail"), (LEAVING, "leaving"),
    (HANDSHAKE, "handshake"), (NOADDR, "noaddr"), (LEAVING | PFAIL, "pfail")])
def test_a_node_shows_its_worst_flag(flags, state):
    assert node_state(flags) == state


def test_rates_come_from_the_samples_of_successive_polls(server):
    sampler = Sampler()
    add_jobs(server, "q", 2)
    build_stats(server, sampler, 10.0)
    add_jobs(server, "q", 8)
    Cmd(server.node)("GETJOB", "COUNT", 4, "FROM", "q")
    stats = build_stats(server, sampler, 12.0)
    entry = shown(stats)["q"]
    assert entry["rate_in"] == 4.0 and entry["rate_out"] == 2.0
    assert entry["history"] == [2, 6]
    jobs = stats["jobs"]
    assert jobs["rates"]["added"] == 4.0 and jobs["rates"]["delivered"] == 2.0
    assert jobs["rates"]["acked"] == 0.0
    assert jobs["history"] == {"added": [4.0], "delivered": [2.0]}


def test_rates_are_averaged_over_the_last_seconds_only(server):
    sampler = Sampler()
    add_jobs(server, "q", 1)
    build_stats(server, sampler, 0.0)
    add_jobs(server, "q", 100)
    build_stats(server, sampler, 1.0)
    for second in range(2, 2 + int(RATE_WINDOW_S)):
        add_jobs(server, "q", 2)
        stats = build_stats(server, sampler, float(second))
    assert shown(stats)["q"]["rate_in"] == 2.0
    assert stats["jobs"]["history"]["added"][0] == 100.0


def test_polls_closer_than_the_interval_share_a_sample(server):
    sampler = Sampler()
    add_jobs(server, "q", 1)
    build_stats(server, sampler, 10.0)
    add_jobs(server, "q", 1)
    entry = shown(build_stats(server, sampler, 10.0 + SAMPLE_INTERVAL_S / 2))["q"]
    assert entry["history"] == [1] and entry["length"] == 1
    entry = shown(build_stats(server, sampler, 10.0 + SAMPLE_INTERVAL_S))["q"]
    assert entry["history"] == [1, 2] and entry["length"] == 2


def test_a_queue_only_on_a_peer_is_shown_with_its_share(server):
    peer = peer_node(server)
    peer_cmd = Cmd(peer)
    for _ in range(4):
        peer_cmd.addjob("elsewhere", "body")
    Cmd(server.node).addjob("both", "body", "REPLICATE", 1)
    peer_cmd.addjob("both", "body")
    peer_summary(server, peer)
    stats = build_stats(server, Sampler(), 0.0)
    entries = shown(stats)
    own, other = server.node.state.id.decode(), PEER_ID.decode()
    assert entries["elsewhere"]["length"] == 4
    assert entries["elsewhere"]["shares"] == [{"node": other, "length": 4}]
    assert entries["both"]["shares"] == sorted([{"node": other, "length": 1},
                                                {"node": own, "length": 1}],
                                               key=lambda share: share["node"])
    assert entries["both"]["length"] == 2
    figures = {n["id"]: n["figures"] for n in stats["nodes"]}
    assert figures[other]["registered"] == 5 and figures[own]["registered"] == 1
    assert stats["cluster"]["registered"] == 6 and stats["cluster"]["nodes_with_figures"] == 2
    # The page polling asked the peer for its summaries.
    assert server.node.state.outbox.sent["STATSWANT"] == 1


def test_a_peers_rates_come_from_its_summaries_dated_by_their_age(server):
    peer = peer_node(server)
    sampler = Sampler()
    peer_summary(server, peer, age_ms=500)
    build_stats(server, sampler, 10.0)
    for _ in range(6):
        Cmd(peer).addjob("q", "body")
    peer_summary(server, peer, age_ms=500)
    build_stats(server, sampler, 11.0)
    build_stats(server, sampler, 12.0)  # no new summary since: no new sample of the peer
    stats = build_stats(server, sampler, 13.0)
    other = PEER_ID.decode()
    assert shown(stats)["q"]["rate_in"] is None  # the queue's first summary
    rate = {n["id"]: n["figures"]["rate_added"] for n in stats["nodes"]}[other]
    assert rate == 6.0
    assert stats["cluster"]["rates"]["added"] == 6.0


def test_a_peer_that_restarted_starts_its_rates_afresh(server):
    peer = peer_node(server)
    sampler = Sampler()
    for _ in range(5):
        Cmd(peer).addjob("q", "body")
    peer_summary(server, peer)
    build_stats(server, sampler, 1.0)
    restarted = make_node(node_id=PEER_ID, now=peer.state.clock.now)
    restarted.state.clock = peer.state.clock
    Cmd(restarted).addjob("q", "body")
    peer_summary(server, restarted)
    stats = build_stats(server, sampler, 2.0)
    assert {n["id"]: n["figures"]["rate_added"] for n in stats["nodes"]}[PEER_ID.decode()] is None


def test_history_is_bounded_and_restarts_after_a_gap_without_polls(server):
    sampler = Sampler()
    add_jobs(server, "q", 1)
    for tick in range(HISTORY_POINTS + 5):
        stats = build_stats(server, sampler, float(tick))
    assert len(shown(stats)["q"]["history"]) == HISTORY_POINTS
    stats = build_stats(server, sampler, HISTORY_POINTS + 5 + STALE_AFTER_S + 1)
    assert shown(stats)["q"]["history"] == [1] and shown(stats)["q"]["rate_in"] is None


def test_a_queue_collected_and_created_again_starts_a_new_history(server):
    sampler = Sampler()
    add_jobs(server, "q", 3)
    build_stats(server, sampler, 1.0)
    queues = server.node.state.queues
    Cmd(server.node)("GETJOB", "COUNT", 3, "FROM", "q")
    queues.destroy(queues[b"q"])
    add_jobs(server, "q", 1)
    entry = shown(build_stats(server, sampler, 2.0))["q"]
    assert entry["history"] == [3, 1] and entry["rate_in"] is None


def test_only_the_longest_queues_are_shown(server):
    for index, length in enumerate([5, 1, 7, 3, 2]):
        add_jobs(server, "q%d" % index, length)
    stats = build_stats(server, Sampler(limit=3), 0.0)
    assert stats["queues"]["total"] == 5 and stats["queues"]["listed"] == 5
    assert [(e["name"], e["length"]) for e in stats["queues"]["shown"]] == [
        ("q2", 7), ("q0", 5), ("q3", 3)]


def test_dead_letter_queues_are_counted_and_linked_to_their_origin(server):
    add_jobs(server, "mail", 2)
    add_jobs(server, "mail:dead", 3)
    add_jobs(server, "other:dead", 1)
    stats = build_stats(server, Sampler(), 0.0)
    entries = shown(stats)
    assert entries["mail"]["dead_letters"] == 3
    assert entries["mail:dead"]["dead_letter_queue"] is True
    assert entries["mail"]["dead_letter_queue"] is False
    assert stats["queues"]["dead_letter_jobs"] == 4


def test_queue_names_are_text_whatever_their_bytes(server):
    add_jobs(server, b"<img src=x onerror=alert(1)>", 1)
    add_jobs(server, b"bin\xff\x00", 1)
    names = set(shown(build_stats(server, Sampler(), 0.0)))
    assert names == {"<img src=x onerror=alert(1)>", "bin\\xff\x00"}


async def test_the_page_and_its_assets_are_served_from_the_package(http):
    page = await http.get("/")
    assert page.status == 200 and page.content_type == "text/html"
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    html = await page.text()
    assert 'src="static/dashboard.js"' in html and "http" not in html.split("<footer")[0]
    script = await http.get("/static/dashboard.js")
    assert script.status == 200 and script.content_type == "text/javascript"
    assert "api/stats" in await script.text()
    style = await http.get("/static/dashboard.css")
    assert style.status == 200 and style.content_type == "text/css"


@pytest.mark.parametrize("path", ["/static/index.htm", "/static/..%2Fdashboard.py",
                                  "/static/%2E%2E/dashboard.py", "/static/"])
async def test_nothing_else_is_served_under_static(http, path):
    response = await http.get(path)
    assert response.status == 404


async def test_api_stats_answers_json_that_is_never_cached(http, server):
    add_jobs(server, "orders", 2)
    response = await http.get("/api/stats")
    assert response.status == 200 and response.content_type == "application/json"
    assert response.headers["Cache-Control"] == "no-store"
    stats = await response.json()
    assert shown(stats)["orders"]["length"] == 2
    # Alone, a node knows no IP of its own: it is shown at the host the page came from.
    assert stats["nodes"][0]["address"] == "127.0.0.1:%d" % server.config.port


def test_the_static_files_are_the_ones_the_routes_name():
    files = {path.name for path in dashboard.STATIC_DIR.iterdir()}
    assert files == {dashboard.INDEX_FILE, *dashboard.ASSETS}
