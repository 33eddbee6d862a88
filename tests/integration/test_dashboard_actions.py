"""The dashboard's actions on real disque-server processes: in Debian's
chromium (Playwright), a user logs in and pauses, resumes, redrives, purges
and deletes, and sees the effect that redis-py sees; a user without the
right sees the command's refusal; a wrong password is refused; HTTPS when
tls-port is set. (test_dashboard_requests.py sends forged requests.)"""

from __future__ import annotations

import re
import ssl
import urllib.error
import urllib.request

import pytest

from tests.support.dashboard import (OPS, OPS_PASSWORD, PAGE_WAIT_MS, USERS,
                                     VIEWER, VIEWER_PASSWORD, expect, needs_browser, start_node)
from tests.support.dashboard import browser, open_dashboard  # noqa: F401 (fixtures)
from tests.support.process import free_port
from tests.support.tls import gen_certs, tls_config


def add_jobs(client, queue: str, count: int, *options) -> list[str]:
    return [client.execute_command("ADDJOB", queue, "body", 0, *options).decode()
            for _ in range(count)]


# ------------------------------------------------------------- in the browser

def log_in(dashboard, user: str, password: str) -> None:
    page = dashboard.page
    page.locator("#login-open").click()
    page.locator("#login-user").fill(user)
    page.locator("#login-password").fill(password)
    page.locator("#login-form button[type=submit]").click()


def run_action(dashboard, action: str, queue: str | None = None, job: str | None = None,
               mode: str | None = None, confirm: bool = False) -> None:
    page = dashboard.page
    if queue is not None:
        page.locator("#action-queue").fill(queue)
    if job is not None:
        page.locator("#action-job").fill(job)
    if mode is not None:
        page.locator("#pause-mode").select_option(mode)
    if confirm:
        page.once("dialog", lambda dialog: dialog.accept())
    page.locator("button[data-action=%s]" % action).click()


def action_result(dashboard):
    return dashboard.page.locator("#action-result")


def paused_cell(dashboard, queue: str):
    return dashboard.page.locator("#queues tbody tr[data-queue='%s'] td:last-child" % queue)


@needs_browser
def test_a_user_with_the_rights_pauses_resumes_redrives_and_deletes(server_factory,
                                                                    open_dashboard):
    node, metrics_port = start_node(server_factory)
    client = node.client()
    job_ids = add_jobs(client, "orders", 3)
    add_jobs(client, "mail", 2, "MAXDELIVER", 1)
    for _queue, job_id, _body in client.execute_command("GETJOB", "COUNT", 2, "FROM", "mail"):
        client.execute_command("NACK", job_id)
    dashboard = open_dashboard(metrics_port)
    expect(dashboard.queue_cell("orders", "length")).to_have_text("3", timeout=PAGE_WAIT_MS)
    assert dashboard.page.locator("#action-forms").is_hidden()
    log_in(dashboard, OPS, OPS_PASSWORD)
    expect(dashboard.page.locator("#account-user")).to_have_text("logged in as ops")

    run_action(dashboard, "pause", queue="orders", mode="out")
    expect(action_result(dashboard)).to_have_text("orders: paused out on every node")
    expect(paused_cell(dashboard, "orders")).to_have_text("out", timeout=PAGE_WAIT_MS)
    assert client.execute_command("PAUSE", "orders", "STATE") == b"out"
    assert client.execute_command("GETJOB", "NOHANG", "FROM", "orders") is None

    run_action(dashboard, "resume", queue="orders")
    expect(action_result(dashboard)).to_have_text("orders: resumed on every node")
    expect(paused_cell(dashboard, "orders")).to_have_text("", timeout=PAGE_WAIT_MS)
    assert client.execute_command("PAUSE", "orders", "STATE") == b"none"

    # A click on a queue's row names it in the form.
    dashboard.queue_cell("mail:dead", "name").click()
    expect(dashboard.page.locator("#action-queue")).to_have_value("mail:dead")
    run_action(dashboard, "redrive")
    expect(action_result(dashboard)).to_have_text("mail:dead: 2 dead letters redriven")
    expect(dashboard.queue_cell("mail", "length")).to_have_text("2", timeout=PAGE_WAIT_MS)
    assert client.execute_command("QLEN", "mail:dead") == 0

    run_action(dashboard, "deljob", job=job_ids[0], confirm=True)
    expect(action_result(dashboard)).to_have_text("%s: deleted on 1 node" % job_ids[0])
    expect(dashboard.queue_cell("orders", "length")).to_have_text("2", timeout=PAGE_WAIT_MS)
    assert client.execute_command("SHOW", job_ids[0]) is None

    # Declined in the confirmation dialog: nothing is deleted.
    dashboard.page.once("dialog", lambda dialog: dialog.dismiss())
    run_action(dashboard, "deljob", job=job_ids[1])
    assert client.execute_command("SHOW", job_ids[1]) is not None

    dashboard.page.locator("#logout").click()
    expect(dashboard.page.locator("#login-open")).to_be_visible()
    assert dashboard.page.locator("#action-forms").is_hidden()


@needs_browser
def test_a_user_with_the_right_purges_a_queue(server_factory, open_dashboard):
    node, metrics_port = start_node(server_factory)
    client = node.client()
    add_jobs(client, "thumbnails", 4)
    dashboard = open_dashboard(metrics_port)
    expect(dashboard.queue_cell("thumbnails", "length")).to_have_text("4", timeout=PAGE_WAIT_MS)
    log_in(dashboard, OPS, OPS_PASSWORD)
    run_action(dashboard, "purge", queue="thumbnails", confirm=True)
    expect(action_result(dashboard)).to_have_text("thumbnails: 4 jobs purged")
    expect(dashboard.queue_cell("thumbnails", "length")).to_have_text("0", timeout=PAGE_WAIT_MS)
    assert client.execute_command("QLEN", "thumbnails") == 0


@needs_browser
def test_a_user_without_the_right_sees_the_action_refused(server_factory, open_dashboard):
    node, metrics_port = start_node(server_factory)
    client = node.client()
    job_id, = add_jobs(client, "orders", 1)
    dashboard = open_dashboard(metrics_port)
    log_in(dashboard, VIEWER, VIEWER_PASSWORD)
    expect(dashboard.page.locator("#account-user")).to_have_text("logged in as viewer")
    for action, options, command in (("pause", {"queue": "orders"}, "pause"),
                                      ("redrive", {"queue": "orders:dead"}, "qredrive"),
                                      ("purge", {"queue": "orders", "confirm": True}, "qpurge"),
                                      ("deljob", {"job": job_id, "confirm": True}, "deljob")):
        run_action(dashboard, action, **options)
        expect(action_result(dashboard)).to_have_text(
            "Refused: NOPERM User viewer has no permissions to run the '%s' command" % command)
    assert client.execute_command("PAUSE", "orders", "STATE") == b"none"
    assert client.execute_command("SHOW", job_id) is not None
    # The refused fetches are in the console as failed requests (HTTP 403).
    dashboard.forget_errors(r"status of 403")


@needs_browser
def test_a_wrong_password_is_refused(server_factory, open_dashboard):
    _node, metrics_port = start_node(server_factory)
    dashboard = open_dashboard(metrics_port)
    log_in(dashboard, OPS, "not-the-password")
    expect(dashboard.page.locator("#login-error")).to_have_text(
        "Invalid user name or password, or the user is off or has no password.")
    assert dashboard.page.locator("#action-forms").is_hidden()
    assert dashboard.page.locator("#account-user").text_content() == ""
    dashboard.forget_errors(r"status of 401")


@needs_browser
def test_without_any_password_actions_are_off_and_the_page_says_why(server_factory,
                                                                    open_dashboard):
    metrics_port = free_port()
    server_factory("metrics-port %d\n" % metrics_port)
    dashboard = open_dashboard(metrics_port)
    expect(dashboard.page.locator("#actions-off")).to_have_text(
        re.compile(r"^Actions are disabled: no user of this node has a password\."))
    assert dashboard.page.locator("#login-open").is_hidden()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return gen_certs(tmp_path_factory.mktemp("certs") / "tls")


@needs_browser
def test_with_tls_port_the_dashboard_is_https_and_its_cookie_secure(server_factory,
                                                                    open_dashboard, certs):
    metrics_port = free_port()
    # tls-auth-clients yes binds the RESP port; browsers are not asked for a certificate.
    node = server_factory(tls_config(certs, free_port(), "tls-auth-clients yes\n")
                          + "metrics-port %d\n%s" % (metrics_port, USERS))
    client = node.client()
    add_jobs(client, "orders", 1)
    verified = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    with urllib.request.urlopen("https://127.0.0.1:%d/api/stats" % metrics_port,
                                context=verified, timeout=10) as response:
        assert response.status == 200
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen("http://127.0.0.1:%d/api/stats" % metrics_port, timeout=10)
    # Chromium does not know the test CA: its certificate errors are ignored here,
    # the chain was verified above.
    dashboard = open_dashboard(metrics_port, scheme="https", ignore_https_errors=True)
    expect(dashboard.queue_cell("orders", "length")).to_have_text("1", timeout=PAGE_WAIT_MS)
    log_in(dashboard, OPS, OPS_PASSWORD)
    expect(dashboard.page.locator("#account-user")).to_have_text("logged in as ops")
    [cookie] = dashboard.context.cookies()
    assert cookie["name"] == "__Host-disque-session-%d" % metrics_port
    assert cookie["secure"] and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    run_action(dashboard, "pause", queue="orders", mode="in")
    expect(action_result(dashboard)).to_have_text("orders: paused in on every node")
    assert client.execute_command("PAUSE", "orders", "STATE") == b"in"
