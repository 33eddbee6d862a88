"""The live dashboard in a real headless browser: Debian's chromium, driven by
Playwright (never a downloaded browser), on real disque-server processes
serving it on metrics-port. The page must load, show what redis-py did, and
follow it as it changes, loading nothing from anywhere but the node."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.cluster import parse_cluster_info
from tests.support.process import free_port, wait_until

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # the dev extra is not installed
    sync_playwright = None

CHROMIUM = Path("/usr/bin/chromium")
# Headless in a container, and nothing fetched behind the test's back.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic"]
# How long the page may take to show a change: it polls every second, and
# the machine may be busy; expect() polls the page until then.
PAGE_WAIT_MS = 20_000
NODE_TIMEOUT_MS = 1000

pytestmark = [
    pytest.mark.skipif(sync_playwright is None,
                       reason="playwright is not installed (pip install -e '.[dev]')"),
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="%s is missing (apt-get install chromium)" % CHROMIUM),
]


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class DashboardPage:
    """One browser tab on one node's dashboard, recording what it requested
    and any script error."""

    def __init__(self, browser, port: int) -> None:
        self.origin = "http://127.0.0.1:%d" % port
        self.context = browser.new_context()
        self.page = self.context.new_page()
        self.requested: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda request: self.requested.append(request.url))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("console", lambda message: self.errors.append(message.text)
                     if message.type == "error" else None)
        self.page.goto(self.origin + "/")

    def queue_cell(self, queue: str, column: str):
        return self.page.locator("#queues tbody tr[data-queue=%s] td.%s" % (_css_string(queue),
                                                                            column))

    def node_state(self, node_id: str):
        return self.page.locator("#nodes tbody tr[data-node='%s'] .badge" % node_id)

    def forget_errors(self, pattern: str) -> None:
        """Drop the console errors the test caused on purpose."""
        self.errors = [error for error in self.errors if not re.search(pattern, error)]

    def close(self) -> None:
        self.context.close()
        own = urlsplit(self.origin).netloc
        foreign = [url for url in self.requested
                   if not url.startswith("data:") and urlsplit(url).netloc != own]
        assert not foreign, "the page fetched from elsewhere: %s" % foreign
        assert not self.errors, "script errors on the page: %s" % sorted(set(self.errors))


def _css_string(text: str) -> str:
    """A CSS string literal for an attribute selector."""
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


@pytest.fixture
def open_dashboard(browser):
    pages: list[DashboardPage] = []

    def open_page(port: int) -> DashboardPage:
        page = DashboardPage(browser, port)
        pages.append(page)
        return page

    yield open_page
    for page in pages:
        page.close()


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
    expect(dashboard.page.locator("#dead-lettered")).to_have_text(re.compile(r"^2 dead-lettered"))


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
