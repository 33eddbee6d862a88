"""The dashboard in tests: nodes serving it with ACL users to log in as, and
the page in a real headless browser, Debian's chromium driven by Playwright
(never a downloaded browser). A ``DashboardPage`` is one tab on one node's
dashboard that records what it requested and any script error, and fails
the test at close if the page fetched from elsewhere or logged an error the
test did not expect."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.cluster import parse_cluster_info
from tests.support.process import free_port, wait_until

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # the dev extra is not installed
    expect = sync_playwright = None

CHROMIUM = Path("/usr/bin/chromium")
# Headless in a container, and nothing fetched behind the test's back.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic"]
# How long the page may take to show a change: it polls every second, and
# the machine may be busy; expect() polls the page until then.
PAGE_WAIT_MS = 20_000

# Users to log in to the dashboard as: one may do everything, one only read.
OPS, OPS_PASSWORD = "ops", "ops-pw"
VIEWER, VIEWER_PASSWORD = "viewer", "viewer-pw"
USERS = ("user %s on >%s ~* +@all\nuser %s on >%s ~* +@read +@connection\n"
         % (OPS, OPS_PASSWORD, VIEWER, VIEWER_PASSWORD))

NEEDS_BROWSER = [
    pytest.mark.skipif(sync_playwright is None,
                       reason="playwright is not installed (pip install -e '.[dev]')"),
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="%s is missing (apt-get install chromium)" % CHROMIUM),
]


def start_node(server_factory, extra: str = "") -> tuple[object, int]:
    """A node serving the dashboard on a free metrics-port, with USERS; and that
    port, once it accepts connections (the node answers on its client port first)."""
    metrics_port = free_port()
    node = server_factory("metrics-port %d\n%s%s" % (metrics_port, USERS, extra))
    wait_until(lambda: _accepts(metrics_port), message="metrics-port %d" % metrics_port)
    return node, metrics_port


def start_cluster(server_factory, size: int = 3, extra: str = "") -> list[tuple[object, int]]:
    """``size`` nodes as start_node makes them, joined in a full mesh: each
    with its metrics-port."""
    nodes = [start_node(server_factory, extra) for _ in range(size)]
    for (first, _), (second, _) in zip(nodes, nodes[1:]):
        assert first.call("CLUSTER", "MEET", "127.0.0.1", second.port) == b"OK"
    wait_until(lambda: all(parse_cluster_info(node.call("CLUSTER", "INFO"))
                           ["cluster_reachable_nodes"] == str(size - 1) for node, _ in nodes),
               timeout=30, interval=0.1, message="a full mesh of %d nodes" % size)
    return nodes


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def needs_browser(test):
    """Mark one test as NEEDS_BROWSER marks a module."""
    for mark in NEEDS_BROWSER:
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class DashboardPage:
    """One browser tab on one node's dashboard, recording what it requested
    and any script error."""

    def __init__(self, browser, port: int, scheme: str = "http", **context_options) -> None:
        self.origin = "%s://127.0.0.1:%d" % (scheme, port)
        self.context = browser.new_context(**context_options)
        self.page = self.context.new_page()
        self.requested: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda request: self.requested.append(request.url))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("console", lambda message: self.errors.append(message.text)
                     if message.type == "error" else None)
        self.page.goto(self.origin + "/")

    def queue_cell(self, queue: str, column: str):
        return self.page.locator("#queues tbody tr[data-queue=%s] td.%s" % (css_string(queue),
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


def css_string(text: str) -> str:
    """A CSS string literal for an attribute selector."""
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


@pytest.fixture
def open_dashboard(browser):
    pages: list[DashboardPage] = []

    def open_page(port: int, **options) -> DashboardPage:
        page = DashboardPage(browser, port, **options)
        pages.append(page)
        return page

    yield open_page
    for page in pages:
        page.close()
