"""One dashboard for the cluster, on three real disque-server processes in
Debian's chromium (Playwright): node 1's page shows a queue whose jobs are
all on node 2, with node 2's share; looks inside it; finds a job by ID
from node 3; lists the dead letters with why they failed, and redrives
and deletes from there; and shows hostile queue names, bodies, header
values and reasons as text, running nothing of theirs.
(test_dashboard_requests.py checks the Host and the sessions without the browser.)"""

from __future__ import annotations

import re

from tests.support.dashboard import (OPS, OPS_PASSWORD, PAGE_WAIT_MS, VIEWER, VIEWER_PASSWORD,
                                     css_string, expect, needs_browser, start_cluster)
from tests.support.dashboard import browser, open_dashboard  # noqa: F401 (fixtures)

HOSTILE_QUEUE = "<img src=x onerror=window.injected=1>"
HOSTILE_BODY = b"</script><script>window.injected=2</script><b>bold</b>\x00\xff\xfe"
HOSTILE_HEADER = b"<img src=y onerror=window.injected=3>\x00"
HOSTILE_REASON = b"<svg onload=window.injected=4>\xff"
# What the hostile texts would make as markup (the page's own SVGs are sparklines).
HOSTILE_SELECTOR = "img, b, svg:not(.spark), script"


def log_in(dashboard, user: str = OPS, password: str = OPS_PASSWORD) -> None:
    page = dashboard.page
    page.locator("#login-open").click()
    page.locator("#login-user").fill(user)
    page.locator("#login-password").fill(password)
    page.locator("#login-form button[type=submit]").click()
    expect(page.locator("#action-forms")).to_be_visible(timeout=PAGE_WAIT_MS)


def node_id(node) -> str:
    return node.call("CLUSTER", "MYID").decode()


def dead_letter(client, queue: str, body: bytes, *options) -> str:
    """A job of ``queue`` that its first NACK moves to ``queue``:dead, on this node only."""
    job_id = client.execute_command("ADDJOB", queue, body, 0, "REPLICATE", 1, "MAXDELIVER", 1,
                                    *options).decode()
    client.execute_command("GETJOB", "FROM", queue)
    nack_with_reason(client, job_id, HOSTILE_REASON)
    return job_id


def nack_with_reason(client, job_id: str, reason: bytes) -> None:
    """NACK ... REASON where the node has it (the reason then shows as
    nack-reason); a plain NACK where it does not."""
    try:
        client.execute_command("NACK", job_id, "REASON", reason)
    except Exception as exc:  # redis-py raises the reply's error
        if "syntax" not in str(exc).lower() and "BADID" not in str(exc):
            raise
        client.execute_command("NACK", job_id)


def inspect_section(dashboard, node):
    return dashboard.page.locator("#inspect-nodes .inspect-node[data-node='%s']" % node_id(node))


@needs_browser
def test_a_queue_on_one_node_is_on_every_page_and_looked_inside_from_any(server_factory,
                                                                          open_dashboard):
    (node1, port1), (node2, _), (node3, port3) = start_cluster(server_factory)
    client2 = node2.client()
    job_ids = [client2.execute_command("ADDJOB", "only-on-2", "job %d" % i, 0,
                                       "REPLICATE", 1).decode() for i in range(3)]
    page1 = open_dashboard(port1)
    expect(page1.queue_cell("only-on-2", "length")).to_have_text("3", timeout=PAGE_WAIT_MS)
    share = page1.page.locator("#queues tbody tr[data-queue='only-on-2'] .share")
    expect(share).to_have_count(1)
    expect(share).to_have_attribute("data-node", node_id(node2))
    expect(share).to_have_text(re.compile(r"^%s 3$" % node_id(node2)[:8]))
    for node, jobs in ((node1, "0"), (node2, "3"), (node3, "0")):
        row = page1.page.locator("#nodes tbody tr[data-node='%s'] td.jobs" % node_id(node))
        expect(row).to_have_text(jobs, timeout=PAGE_WAIT_MS)

    # Look inside it from node 1: node 2's jobs, first served first.
    log_in(page1)
    page1.queue_cell("only-on-2", "name").click()
    section = inspect_section(page1, node2)
    expect(section.locator("tbody tr")).to_have_count(3, timeout=PAGE_WAIT_MS)
    expect(section.locator("tbody tr").first).to_have_attribute("data-job", job_ids[0])
    expect(section.locator("tbody tr td.body-preview").first).to_have_text("job 0")
    expect(inspect_section(page1, node1)).to_have_count(0)

    # Find a job by ID from node 3.
    page3 = open_dashboard(port3)
    log_in(page3)
    page3.page.locator("#action-job").fill(job_ids[1])
    page3.page.locator("button[data-action=find]").click()
    copies = page3.page.locator("#job-copies tbody tr")
    expect(copies).to_have_count(1, timeout=PAGE_WAIT_MS)
    expect(copies).to_have_attribute("data-node", node_id(node2))
    expect(page3.page.locator("#job-body")).to_have_text("job 1")
    expect(page3.page.locator("#job-fields tr[data-field=queue] td")).to_have_text("only-on-2")


@needs_browser
def test_failed_jobs_show_why_and_are_redriven_or_deleted_from_there(server_factory,
                                                                   open_dashboard):
    (node1, port1), (node2, _), _ = start_cluster(server_factory)
    client2 = node2.client()
    first = dead_letter(client2, "mail", b"bounce 1")
    second = dead_letter(client2, "mail", b"bounce 2")
    dashboard = open_dashboard(port1)
    page = dashboard.page
    dead_row = page.locator("#dead-queues tbody tr[data-queue='mail:dead']")
    expect(dead_row.locator("td.length")).to_have_text("2", timeout=PAGE_WAIT_MS)
    expect(page.locator("#failed-note")).to_contain_text("log in")
    log_in(dashboard)
    dead_row.locator("button").click()
    section = inspect_section(dashboard, node2)
    rows = section.locator("tbody tr")
    expect(rows).to_have_count(2, timeout=PAGE_WAIT_MS)
    expect(rows.first.locator("td.reason")).to_contain_text("dead: maxdeliver")

    # Delete one from there: gone from node 2 (it had the only copy).
    page.once("dialog", lambda dialog: dialog.accept())
    section.locator("tr[data-job='%s'] button.danger" % first).click()
    expect(page.locator("#action-result")).to_have_text("%s: deleted on 1 node" % first,
                                                        timeout=PAGE_WAIT_MS)
    assert client2.execute_command("SHOW", first) is None
    expect(rows).to_have_count(1, timeout=PAGE_WAIT_MS)

    # Redrive the other from there: back in mail on node 2.
    section.locator("button", has_text="Redrive them").click()
    expect(page.locator("#action-result")).to_have_text(
        "mail:dead on node %s: 1 dead letter redriven" % node_id(node2)[:8], timeout=PAGE_WAIT_MS)
    assert client2.execute_command("QLEN", "mail") == 1
    assert client2.execute_command("SHOW", second)[5] == b"queued"


@needs_browser
def test_a_viewer_may_look_but_not_act(server_factory, open_dashboard):
    (_, port1), (node2, _), _ = start_cluster(server_factory)
    dead_letter(node2.client(), "mail", b"bounce")
    dashboard = open_dashboard(port1)
    log_in(dashboard, VIEWER, VIEWER_PASSWORD)
    dashboard.page.locator("#dead-queues tbody tr[data-queue='mail:dead'] button").click(
        timeout=PAGE_WAIT_MS)
    section = inspect_section(dashboard, node2)
    section.locator("button", has_text="Redrive them").click()
    expect(dashboard.page.locator("#action-result")).to_have_text(
        re.compile(r"^Refused: NOPERM User viewer has no permissions to run the 'qredrive'"),
        timeout=PAGE_WAIT_MS)
    assert node2.call("QLEN", "mail:dead") == 1
    dashboard.forget_errors(r"status of 403")  # the refusal, as the console logs it


@needs_browser
def test_hostile_names_bodies_headers_and_reasons_are_only_text(server_factory, open_dashboard):
    (_, port1), (node2, _), _ = start_cluster(server_factory)
    client2 = node2.client()
    job_id = dead_letter(client2, HOSTILE_QUEUE, HOSTILE_BODY, "HEADER", "x-<b>", HOSTILE_HEADER)
    dead_queue = HOSTILE_QUEUE + ":dead"
    dashboard = open_dashboard(port1)
    page = dashboard.page
    fired: list[str] = []
    page.on("dialog", lambda dialog: (fired.append(dialog.message), dialog.dismiss()))
    log_in(dashboard)
    row = page.locator("#dead-queues tbody tr[data-queue=%s]" % css_string(dead_queue))
    expect(row.locator("td.name")).to_have_text(dead_queue, timeout=PAGE_WAIT_MS)
    row.locator("button").click()
    job_row = inspect_section(dashboard, node2).locator("tr[data-job='%s']" % job_id)
    expect(job_row.locator("td.body-preview")).to_have_text(
        "</script><script>window.injected=2</script><b>bold</b>\\x00\\xff\\xfe",
        timeout=PAGE_WAIT_MS)
    expect(job_row.locator("td.reason")).to_contain_text("dead: maxdeliver")
    job_row.locator("button.link").click()
    expect(page.locator("#job-headers tr[data-field='x-<b>'] td")).to_have_text(
        "<img src=y onerror=window.injected=3>\\x00", timeout=PAGE_WAIT_MS)
    expect(page.locator("#job-body")).to_contain_text("<script>window.injected=2</script>")
    nack_reason = page.locator("#job-fields tr[data-field='nack-reason'] td")
    if nack_reason.count():  # nodes whose NACK takes a REASON
        expect(nack_reason).to_have_text("<svg onload=window.injected=4>\\xff")
        expect(job_row.locator("td.reason")).to_contain_text("nack: <svg onload")
    for scope in ("#inspect", "#job-view", "#queues", "#dead-queues", "#nodes"):
        assert page.locator(scope).locator(HOSTILE_SELECTOR).count() == 0, scope
    assert page.evaluate("window.injected") is None
    assert fired == []
