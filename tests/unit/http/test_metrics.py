"""The Prometheus collectors (disque.http.metrics) and /metrics, on in-process
nodes: every exposition is parsed back with prometheus_client's own parser."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from disque.cluster import messages as m
from disque.cluster.membership import FAIL, HANDSHAKE, LEAVING, PFAIL, ClusterNode
from disque.config import Config
from disque.http.metrics import histogram, node_registry, server_registry
from disque.http.service import METRICS_PATH, HttpService
from disque.server import Server
from disque.context.stats import LatencyHistogram
from tests.unit.helpers import PEER_ID, Cmd, add_peer, deliver, make_node


def scrape(registry) -> dict[str, dict[tuple, float]]:
    """Family name -> {(sample name, sorted labels): value}, from the text format."""
    text = generate_latest(registry).decode()
    families = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = {(s.name, tuple(sorted(s.labels.items()))): s.value
                                 for s in family.samples}
    return families


def value(families, name: str, **labels) -> float:
    family = name.removesuffix("_total")
    for suffix in ("_bucket", "_count", "_sum"):
        if name.endswith(suffix) and family not in families:
            family = name.removesuffix(suffix)
    return families[family][(name, tuple(sorted(labels.items())))]


def test_job_counters_and_jobs_by_state():
    node = make_node()
    cmd = Cmd(node)
    first = cmd.addjob("q", "a")
    cmd.addjob("q", "b")
    cmd.addjob("q", "c")
    cmd.ok("GETJOB", "COUNT", 2, "FROM", "q")
    cmd.ok("ACKJOB", first)
    families = scrape(node_registry(node))
    assert value(families, "disque_jobs_added_total") == 3
    assert value(families, "disque_jobs_delivered_total") == 2
    assert value(families, "disque_jobs_acked_total") == 1
    assert value(families, "disque_jobs_nacked_total") == 0
    # A lone node deletes an acked job at once: nothing left acked.
    for state, count in (("queued", 1), ("active", 1), ("acked", 0), ("wait-repl", 0)):
        assert value(families, "disque_jobs", state=state) == count
    assert value(families, "disque_queues") == 1
    assert value(families, "disque_memory_used_bytes") == node.state.used_memory
    assert value(families, "disque_commands_processed_total") == 5


def test_queue_series_only_for_the_longest_queues():
    node = make_node(metrics_max_queues=3)
    cmd = Cmd(node)
    for n in range(1, 6):
        for _ in range(n):
            cmd.addjob("q%d" % n, "x")
    cmd.ok("GETJOB", "FROM", "q5")
    families = scrape(node_registry(node))
    lengths = {dict(labels)["queue"]: v for (_, labels), v in
               families["disque_queue_length"].items()}
    assert lengths == {"q5": 4, "q4": 4, "q3": 3}
    assert value(families, "disque_queue_jobs_added_total", queue="q5") == 5
    assert value(families, "disque_queue_jobs_delivered_total", queue="q5") == 1
    assert value(families, "disque_queues") == 5
    assert value(families, "disque_queues_exported") == 3


def test_metrics_max_queues_zero_exports_no_queue_series():
    node = make_node(metrics_max_queues=0)
    Cmd(node).addjob("q", "x")
    families = scrape(node_registry(node))
    assert families["disque_queue_length"] == {}
    assert value(families, "disque_queues") == 1


def test_age_of_the_oldest_job():
    node = make_node()
    cmd = Cmd(node)
    cmd.addjob("q", "old")
    node.state.clock.advance(1500)
    cmd.addjob("q", "new")
    node.state.clock.advance(500)
    node.run_timers()  # the node's time is that of its last input
    families = scrape(node_registry(node))
    assert value(families, "disque_queue_oldest_job_age_seconds", queue="q") == pytest.approx(2.0)


def test_a_queue_name_that_is_not_utf8_is_escaped():
    node = make_node()
    Cmd(node).addjob(b"q\xff", "x")
    families = scrape(node_registry(node))
    assert value(families, "disque_queue_length", queue="q\\xff") == 1


def test_bus_messages_by_type_and_nodes_by_state():
    node = make_node()
    add_peer(node)
    deliver(node, PEER_ID, {m.TYPE: m.PING, m.GOSSIP: []})  # answered with a PONG
    for i, flag in enumerate((PFAIL, FAIL, FAIL, HANDSHAKE, LEAVING)):
        other = ClusterNode(bytes([ord("a") + i]) * 40, "127.0.0.1", 7720 + i, flag)
        node.state.membership.add(other)
    families = scrape(node_registry(node))
    assert value(families, "disque_bus_messages_received_total", type="PING") == 1
    assert value(families, "disque_bus_messages_received_total", type="REPLJOB") == 0
    assert value(families, "disque_bus_messages_sent_total", type="PONG") == 1
    states = {dict(labels)["state"]: v for (_, labels), v in
              families["disque_cluster_nodes"].items()}
    assert states == {"up": 2, "pfail": 1, "fail": 2, "handshake": 1, "leaving": 1}


def test_schedules_and_their_ticks():
    node = make_node()
    assert value(scrape(node_registry(node)), "disque_schedules") == 0
    Cmd(node)("SCHEDULE", "SET", "beat", "EVERY", "1", "beats", "ping")
    schedules = node.state.schedules
    schedules.fired, schedules.refused, schedules.over_quota, schedules.skipped = 3, 2, 1, 1
    families = scrape(node_registry(node))
    assert value(families, "disque_schedules") == 1
    assert value(families, "disque_schedule_ticks_fired_total") == 3
    assert value(families, "disque_schedule_ticks_refused_total") == 2
    assert value(families, "disque_schedule_ticks_over_quota_total") == 1
    assert value(families, "disque_schedule_ticks_skipped_total") == 1


def test_replication_wait_latency():
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "x", 0, "REPLICATE", 2) is None  # waits for the copy
    (_, repljob), = node.state.outbox.transport.of_type(m.REPLJOB)
    job_id = repljob[m.JOB][0]
    node.state.clock.advance(30)
    deliver(node, PEER_ID, m.job_message(m.GOTJOB, job_id))
    assert cmd.sent() == [job_id]
    families = scrape(node_registry(node))
    assert value(families, "disque_replication_waits_total") == 1
    assert value(families, "disque_replication_wait_failures_total") == 0
    assert value(families, "disque_replication_wait_seconds_count") == 1
    assert value(families, "disque_replication_wait_seconds_sum") == pytest.approx(0.03)
    assert value(families, "disque_replication_wait_seconds_bucket", le="0.025") == 0
    assert value(families, "disque_replication_wait_seconds_bucket", le="0.05") == 1


def test_an_addjobs_waiting_for_replicas_is_one_producer():
    node = make_node()
    add_peer(node)
    assert Cmd(node).raw("ADDJOBS", "q", 0, "REPLICATE", 2, "BODIES", "a", "b", "c") is None
    assert Cmd(node).raw("ADDJOB", "q", "x", 0, "REPLICATE", 2) is None
    families = scrape(node_registry(node))
    assert value(families, "disque_replication_waiting_producers") == 2
    assert value(families, "disque_replication_waits_total") == 4


def test_histogram_buckets_are_cumulative_and_end_with_inf():
    source = LatencyHistogram((1, 10))
    for duration in (0, 1, 5, 10, 11, 500):
        source.observe(duration)
    family = histogram("h_seconds", "test", source, 1e-3)
    samples = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    assert samples[("disque_h_seconds_bucket", "0.001")] == 2
    assert samples[("disque_h_seconds_bucket", "0.01")] == 4
    assert samples[("disque_h_seconds_bucket", "+Inf")] == 6
    assert samples[("disque_h_seconds_count", None)] == 6
    assert samples[("disque_h_seconds_sum", None)] == pytest.approx(0.527)


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return Server(Config(), ["disque-server"])


def test_server_series_without_aof_writer(server):
    families = scrape(server_registry(server))
    assert value(families, "disque_connected_clients") == 0
    assert value(families, "disque_memory_rss_bytes") > 0
    (_, labels), = families["disque_build_info"]
    assert dict(labels)["node_id"] == server.node.state.id.decode()
    assert "disque_aof_enabled" not in families  # no AOF service before start()


async def test_metrics_route_serves_the_text_format(server):
    service = HttpService(server)
    async with TestClient(TestServer(service.build_app())) as client:
        response = await client.get(METRICS_PATH)
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        families = {f.name for f in text_string_to_metric_families(await response.text())}
        assert {"disque_jobs_added", "disque_queue_length", "disque_cluster_nodes"} <= families
        response = await client.get(METRICS_PATH,
                                    headers={"Accept": "application/openmetrics-text"})
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        assert (await response.text()).endswith("# EOF\n")
