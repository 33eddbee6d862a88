"""The live dashboard in a real headless browser: Debian's chromium, driven by
Playwright (never a downloaded browser), on real disque-server processes
serving it on metrics-port. The page must load, show what redis-py did, and
follow it as it changes, loading nothing from anywhere but the node."""

from __future__ import annotations

import re

from tests.support.dashboard import NEEDS_BROWSER, PAGE_WAIT_MS, expect
from tests.support.dashboard import browser, open_dashboard  # noqa: F401 (fixtures)
from tests.support.cluster import parse_cluster_info
from tests.support.process import free_port, wait_until

NODE_TIMEOUT_MS = 1000

pytestmark = NEEDS_BROWSER


def add_jobs(client, queue: str, count: int, *options) -> None:
    for _ in range(count):
        client.execute_command("ADDJOB", queue, "body", 0, *options)


def test_the_page_shows_a_queue_and_follows_its_length(server_factory, open_dashboard):
    metrics_port = free_port()
    node = server_factory("metrics-port %d\nappendonly yes\n" % metrics_port)
    client = node.client()
    add_jobs(client, "orders", 3)
    dashboard = open_dashboard(metrics_port)
    length = dashboard.queue_cell("orders", "length")
    expect(length).to_have_text("3", timeout=PAGE_WAIT_MS)
    expect(dashboard.page.locator("#aof-state")).to_have_text("on", timeout=PAGE_WAIT_MS)
    add_jobs(client, "orders", 4)
    expect(length).to_have_text("7", timeout=PAGE_WAIT_MS)
    client.execute_command("GETJOB", "COUNT", 5, "FROM", "orders")
    expect(length).to_have_text("2", timeout=PAGE_WAIT_MS)
    expect(dashboard.page.locator("#status")).to_have_text("live")


def test_the_page_says_when_the_node_is_gone_and_recovers(server_factory, open_dashboard):
    metrics_port = free_port()
    node = server_factory("metrics-port %d\n" % metrics_port)
    dashboard = open_dashboard(metrics_port)
    status = dashboard.page.locator("#status")
    expect(status).to_have_text("live", timeout=PAGE_WAIT_MS)
    node.stop()
    expect(status).to_have_text("disconnected", timeout=PAGE_WAIT_MS)
    node.start()
    add_jobs(node.client(), "after-restart", 1)
    expect(status).to_have_text("live", timeout=PAGE_WAIT_MS)
    expect(dashboard.queue_cell("after-restart", "length")).to_have_text("1",
                                                                         timeout=PAGE_WAIT_MS)
    # The polls while the node was down failed in the console too (net::ERR_CONNECTION_REFUSED,
    # or a connection closed as the node stopped).
    dashboard.forget_errors(r"^Failed to load resource: net::ERR_")


def test_queue_names_are_shown_as_text_never_as_markup(server_factory, open_dashboard):
    metrics_port = free_port()
    node = server_factory("metrics-port %d\n" % metrics_port)
    hostile = '<img src=x onerror="window.injected=1"><b>bold</b>'
    add_jobs(node.client(), hostile, 1)
    dashboard = open_dashboard(metrics_port)
    expect(dashboard.queue_cell(hostile, "name")).to_have_text(hostile, timeout=PAGE_WAIT_MS)
    assert dashboard.page.locator("#queues img, #queues b").count() == 0
    assert dashboard.page.evaluate("window.injected") is None


def test_dead_letters_show_beside_their_queue(server_factory, open_dashboard):
    metrics_port = free_port()
    node = server_factory("metrics-port %d\n" % metrics_port)
    client = node.client()
    add_jobs(client, "mail", 2, "MAXDELIVER", 1)
    for _queue, job_id, _body in client.execute_command("GETJOB", "COUNT", 2, "FROM", "mail"):
        client.execute_command("NACK", job_id)
    assert client.execute_command("QLEN", "mail:dead") == 2
    dashboard = open_dashboard(metrics_port)
    expect(dashboard.queue_cell("mail", "dead-letters")).to_have_text("2", timeout=PAGE_WAIT_MS)
    dead_row = dashboard.page.locator("#queues tbody tr[data-queue='mail:dead']")
    expect(dead_row).to_have_class("dead")
    expect(dashboard.page.locator("#dead-letter-jobs")).to_have_text("2")
    expect(dashboard.page.locator("#dead-lettered")).to_have_text(
        re.compile(r"^2 on this node · 2 dead-lettered here"))


def test_the_nodes_table_follows_the_cluster(server_factory, open_dashboard):
    metrics_port = free_port()
    timeout = "cluster-node-timeout %d\n" % NODE_TIMEOUT_MS
    nodes = [server_factory(timeout + "metrics-port %d\n" % metrics_port)]
    nodes += [server_factory(timeout) for _ in range(2)]
    for first, second in zip(nodes, nodes[1:]):
        assert first.call("CLUSTER", "MEET", "127.0.0.1", second.port) == b"OK"
    wait_until(lambda: all(parse_cluster_info(n.call("CLUSTER", "INFO"))
                           ["cluster_reachable_nodes"] == "2" for n in nodes),
               timeout=30, interval=0.1, message="a full mesh of 3 nodes")
    ids = [n.call("CLUSTER", "MYID").decode() for n in nodes]
    dashboard = open_dashboard(metrics_port)
    rows = dashboard.page.locator("#nodes tbody tr")
    expect(rows).to_have_count(3, timeout=PAGE_WAIT_MS)
    for node_id in ids:
        expect(dashboard.node_state(node_id)).to_have_text("ok")
    expect(rows.first).to_contain_text("(this node)")
    nodes[2].kill()
    expect(dashboard.node_state(ids[2])).to_have_text(re.compile("^p?fail$"),
                                                      timeout=PAGE_WAIT_MS)
    expect(dashboard.node_state(ids[1])).to_have_text("ok")
