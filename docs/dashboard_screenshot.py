"""Redraw docs/images/dashboard.png: the dashboard of a busy 3-node cluster.

Starts three disque-server processes on free loopback ports (node 0 with
metrics-port and a user who may act), joins them, logs the page in, keeps
producers and consumers busy on a few queues (one of them fills its
dead-letter queue) while the page polls, pauses one queue from the page,
then saves a screenshot taken by Debian's chromium through Playwright. Needs the
dev extra (redis-py, playwright) and /usr/bin/chromium; everything started
is stopped on exit.

    .venv/bin/python docs/dashboard_screenshot.py [output.png]
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test support's free_port, run from anywhere
from tests.support.process import free_port  # noqa: E402
OUTPUT = ROOT / "docs" / "images" / "dashboard.png"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic"]
VIEWPORT = {"width": 1200, "height": 400}  # the screenshot takes the whole page
NODES = 3
LOAD_SECONDS = 40           # enough samples for the sparklines
TICK_S = 0.25               # between two rounds of jobs
START_TIMEOUT_S = 15
# The user node 0's page logs in as (ACL rules of a config "user" line).
USER, PASSWORD = "ops", "screenshot-only-password"
USER_RULES = "on >%s ~* +@read +@manage +@connection" % PASSWORD
PAUSED_QUEUE = "emails"


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (redis.ConnectionError, OSError):
            pass
        time.sleep(0.1)
    raise SystemExit("timed out waiting for %s" % what)


def start_node(workdir: Path, port: int, metrics_port: int) -> subprocess.Popen:
    workdir.mkdir()
    config = workdir / "disque.conf"
    config.write_text("user %s %s\n" % (USER, USER_RULES) if metrics_port else "")
    args = [sys.executable, "-m", "disque.server", str(config), "--bind", "127.0.0.1",
            "--port", str(port), "--dir", str(workdir), "--logfile", "disque.log"]
    if metrics_port:
        args += ["--metrics-port", str(metrics_port)]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def load(main: redis.Redis, stop: threading.Event) -> None:
    """Producers and consumers on node 0's queues until ``stop``: a backlog
    that rises and falls, one that slowly grows, and mail whose failed jobs
    end as dead letters."""
    started = time.monotonic()
    while not stop.is_set():
        wave = math.sin((time.monotonic() - started) / LOAD_SECONDS * 2 * math.pi)
        pipe = main.pipeline(transaction=False)
        for _ in range(int(14 + 12 * wave)):
            pipe.execute_command("ADDJOB", "thumbnails", "resize 640x480", 0, "RETRY", 60)
        for _ in range(6):
            pipe.execute_command("ADDJOB", "orders", '{"order": 42}', 0, "RETRY", 60)
        for _ in range(3):
            pipe.execute_command("ADDJOB", "emails", "welcome", 0, "MAXDELIVER", 1, "RETRY", 60)
        pipe.execute()
        for queue, count in (("thumbnails", 13), ("orders", 5), ("emails", 3)):
            jobs = main.execute_command("GETJOB", "NOHANG", "COUNT", count, "FROM", queue) or []
            ids = [job_id for _, job_id, _ in jobs]
            if not ids:
                continue
            if queue == "emails":  # one mail in three bounces: NACKed, it is dead-lettered
                main.execute_command("NACK", ids[0])
                ids = ids[1:]
            if ids:
                main.execute_command("ACKJOB", *ids)
        stop.wait(TICK_S)


def log_in(page) -> None:
    """Log the page in as USER, as an operator would."""
    page.locator("#login-open").click()
    page.locator("#login-user").fill(USER)
    page.locator("#login-password").fill(PASSWORD)
    page.locator("#login-form button[type=submit]").click()
    page.locator("#action-forms").wait_for(state="visible")


def main(argv: list[str]) -> int:
    output = Path(argv[1]) if len(argv) > 1 else OUTPUT
    ports = [free_port() for _ in range(NODES)]
    metrics_port = free_port()
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="disque-dashboard-") as tmp:
        try:
            for index, port in enumerate(ports):
                processes.append(start_node(Path(tmp) / ("node%d" % index), port,
                                            metrics_port if index == 0 else 0))
            clients = [redis.Redis(host="127.0.0.1", port=port) for port in ports]
            for client in clients:
                wait_for(client.ping, "the nodes to start")
            for client, port in zip(clients, ports[1:]):
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", port)
            wait_for(lambda: all(b"cluster_reachable_nodes:%d" % (NODES - 1)
                                 in c.execute_command("CLUSTER", "INFO") for c in clients),
                     "the cluster to join")
            stop = threading.Event()
            producer = threading.Thread(target=load, args=(clients[0], stop))
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport=VIEWPORT)
                page.goto("http://127.0.0.1:%d/" % metrics_port)
                log_in(page)
                producer.start()
                try:
                    page.wait_for_timeout(LOAD_SECONDS * 1000)
                    page.locator("#action-queue").fill(PAUSED_QUEUE)
                    page.locator("#pause-mode").select_option("out")
                    page.locator("button[data-action=pause]").click()
                    page.wait_for_timeout(2000)  # the tables show it at the next poll
                    output.parent.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(output), full_page=True)
                finally:
                    stop.set()
                    producer.join()
                    browser.close()
            for client in clients:
                client.close()
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait()
    print("saved %s (%d bytes)" % (output, output.stat().st_size))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
