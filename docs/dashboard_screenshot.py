"""Redraw docs/images/dashboard*.png: the dashboard of a busy 3-node cluster.

Starts three disque-server processes on free loopback ports (node 0 with
metrics-port and a user who may act), joins them, logs node 0's page in,
keeps producers and consumers busy on queues of every node (node 2's
thumbnails are on node 2 only; mail fills its dead-letter queue on node 1,
the workers saying why) while the page polls, pauses one queue from the
page, then saves what Debian's chromium shows through Playwright: the
whole page (dashboard.png), a queue looked inside (dashboard-queue.png), a
job found by its ID (dashboard-job.png) and the failed jobs with their
reasons (dashboard-failed.png). Needs the dev extra (redis-py, playwright)
and /usr/bin/chromium; everything started is stopped on exit.

    .venv/bin/python docs/dashboard_screenshot.py [output directory]
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
OUTPUT = ROOT / "docs" / "images"
OVERVIEW, QUEUE, JOB, FAILED = ("dashboard.png", "dashboard-queue.png", "dashboard-job.png",
                                "dashboard-failed.png")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic"]
VIEWPORT = {"width": 1280, "height": 400}  # the overview takes the whole page
NODES = 3
LOAD_SECONDS = 40           # enough samples for the sparklines
TICK_S = 0.25               # between two rounds of jobs
START_TIMEOUT_S = 15
# The user node 0's page logs in as (ACL rules of a config "user" line).
USER, PASSWORD = "ops", "screenshot-only-password"
USER_RULES = "on >%s ~* +@read +@manage +@connection" % PASSWORD
PAUSED_QUEUE = "emails"
INSPECTED_QUEUE = "thumbnails"
BOUNCES = (b"550 mailbox full", b"DNS lookup failed: no MX for example.invalid",
           b"SMTP timeout after 30 s")


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


def nack(client: redis.Redis, job_id: bytes, reason: bytes) -> None:
    """NACK with the worker's reason where the node takes one."""
    try:
        client.execute_command("NACK", job_id, "REASON", reason)
    except redis.ResponseError:
        client.execute_command("NACK", job_id)


def load(clients: list[redis.Redis], stop: threading.Event) -> None:
    """Producers and consumers on every node's queues until ``stop``: a
    backlog on node 2 only that rises and falls, orders on every node that
    slowly grow, and mail on node 1 whose failed jobs end as dead letters."""
    started = time.monotonic()
    rounds = 0
    while not stop.is_set():
        wave = math.sin((time.monotonic() - started) / LOAD_SECONDS * 2 * math.pi)
        for index, client in enumerate(clients):
            pipe = client.pipeline(transaction=False)
            if index == 2:
                for i in range(int(14 + 12 * wave)):
                    pipe.execute_command("ADDJOB", INSPECTED_QUEUE, "resize photo-%d.jpg 640x480"
                                         % (rounds * 100 + i), 0, "REPLICATE", 1, "RETRY", 60,
                                         "HEADER", "trace-id", "%016x" % (rounds * 7919 + i))
            for _ in range(2):
                pipe.execute_command("ADDJOB", "orders", '{"order": 42, "items": 3}', 0,
                                     "RETRY", 60)
            if index == 1:
                for _ in range(3):
                    pipe.execute_command("ADDJOB", PAUSED_QUEUE, "welcome", 0, "RETRY", 60)
                pipe.execute_command("ADDJOB", "mail", "to: ann@example.invalid", 0,
                                     "MAXDELIVER", 2, "REPLICATE", 1, "RETRY", 60)
            pipe.execute()
            # Each queue consumed where it is produced (orders everywhere), so
            # that federation leaves node 2's thumbnails on node 2.
            consumed = {0: (("orders", 1),), 1: (("orders", 1), (PAUSED_QUEUE, 3), ("mail", 1)),
                        2: ((INSPECTED_QUEUE, 13), ("orders", 1))}[index]
            for queue, count in consumed:
                jobs = client.execute_command("GETJOB", "NOHANG", "COUNT", count, "FROM", queue)
                ids = [job_id for _, job_id, _ in jobs or []]
                if queue == "mail":  # every mail bounces: twice NACKed, it is dead-lettered
                    for job_id in ids:
                        nack(client, job_id, BOUNCES[rounds % len(BOUNCES)])
                elif ids:
                    client.execute_command("ACKJOB", *ids)
        rounds += 1
        stop.wait(TICK_S)


def log_in(page) -> None:
    """Log the page in as USER, as an operator would."""
    page.locator("#login-open").click()
    page.locator("#login-user").fill(USER)
    page.locator("#login-password").fill(PASSWORD)
    page.locator("#login-form button[type=submit]").click()
    page.locator("#action-forms").wait_for(state="visible")


def element_shot(page, output: Path, *selectors: str) -> None:
    """A screenshot of the page's part from the first selector's top to the
    last one's bottom."""
    scrolled = page.evaluate("window.scrollY")  # boxes are in the viewport's coordinates
    boxes = [page.locator(selector).bounding_box() for selector in selectors]
    top = min(box["y"] for box in boxes) + scrolled
    bottom = max(box["y"] + box["height"] for box in boxes) + scrolled
    page.screenshot(path=str(output), full_page=True,
                    clip={"x": 0, "y": top - 8, "width": VIEWPORT["width"],
                          "height": bottom - top + 16})


def main(argv: list[str]) -> int:
    output = Path(argv[1]) if len(argv) > 1 else OUTPUT
    output.mkdir(parents=True, exist_ok=True)
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
            producer = threading.Thread(target=load, args=(clients, stop))
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
                    page.screenshot(path=str(output / OVERVIEW), full_page=True)
                    stop.set()  # the views below stay as they are shot
                    producer.join()
                    page.locator("#queues tbody tr[data-queue=%s]" % INSPECTED_QUEUE).click()
                    page.locator("#inspect-nodes table").first.wait_for()
                    element_shot(page, output / QUEUE, "#inspect")
                    page.locator("#inspect-nodes button.link").nth(2).click()
                    page.locator("#job-copies tbody tr").first.wait_for()
                    element_shot(page, output / JOB, "#job-view")
                    page.locator("#job-close").click()
                    page.locator("#dead-queues tbody tr[data-queue='mail:dead'] button").click()
                    page.locator("#inspect-nodes td.reason").first.wait_for()
                    element_shot(page, output / FAILED, "#inspect", "#failed")
                finally:
                    stop.set()
                    if producer.is_alive():
                        producer.join()
                    browser.close()
            for client in clients:
                client.close()
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait()
    for name in (OVERVIEW, QUEUE, JOB, FAILED):
        print("saved %s (%d bytes)" % (output / name, (output / name).stat().st_size))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
