"""The dashboard's login, sessions and actions on an in-process Server, through
aiohttp's test server as metrics-port mounts them: who may log in, what a
request must carry to act, and that an action is the command run as the user.
(tests/integration/test_dashboard_actions.py drives the same in a browser.)"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from disque.http import actions
from disque.http.actions import (BAD_CSRF, CROSS_ORIGIN, LOGIN_DISABLED, LOGIN_FAILED,
                                 NOT_LOGGED_IN, PLAIN_HTTP_REMOTE, USER_GONE, ActionError,
                                 DashboardActions, queue_named)
from disque.http.dashboard import add_routes
from disque.commands.streams import STEP_JOBS
from disque.http.sessions import LoginLimiter, SessionStore
from disque.context.clients import ClientState
from disque.server import Server
from tests.unit.helpers import Cmd

OPS, OPS_PASSWORD = "ops", "ops-pw"
VIEWER, VIEWER_PASSWORD = "viewer", "viewer-pw"


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def add_users(server: Server) -> Cmd:
    cmd = Cmd(server.node)
    assert cmd("ACL", "SETUSER", OPS, "on", ">" + OPS_PASSWORD, "~*", "+@all") == b"OK"
    assert cmd("ACL", "SETUSER", VIEWER, "on", ">" + VIEWER_PASSWORD, "~*", "+@read",
               "+@connection") == b"OK"
    return cmd


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
async def http(server, clock):
    server.loop = asyncio.get_running_loop()  # arm_timer schedules on it
    app = web.Application(client_max_size=actions.MAX_BODY)
    add_routes(app, server)
    # The handlers' sessions and limiter, on the test's clock.
    for route in app.router.routes():
        handler = getattr(route.handler, "__self__", None)
        if isinstance(handler, DashboardActions):
            handler.sessions.timer = clock
            handler.limiter.timer = clock
    client = TestClient(TestServer(app))
    await client.start_server()
    yield client
    await client.close()


async def login(http, user: str, password: str) -> tuple[int, dict]:
    response = await http.post("/api/login", json={"user": user, "password": password})
    return response.status, await response.json()


async def login_elsewhere(server, http, user: str, password: str):
    """A second browser (its own cookie jar) logged in as ``user``."""
    other = TestClient(TestServer(http.server.app))
    await other.start_server()
    response = await other.post("/api/login", json={"user": user, "password": password})
    assert response.status == 200
    return response.status, other


async def act(http, action: str, token: str | None, **body) -> tuple[int, dict]:
    headers = {} if token is None else {"X-CSRF-Token": token}
    response = await http.post("/api/action/" + action, json=body, headers=headers)
    return response.status, await response.json()


async def test_with_no_password_anywhere_actions_are_off_and_say_why(http):
    session = await (await http.get("/api/session")).json()
    assert session == {"user": None, "csrf_token": None, "login_refused": LOGIN_DISABLED}
    # The open default user takes any password in AUTH user form: still no login.
    assert await login(http, "default", "anything") == (403, {"error": LOGIN_DISABLED})


async def test_a_user_logs_in_and_gets_an_httponly_strict_session(http, server):
    add_users(server)
    response = await http.post("/api/login", json={"user": OPS, "password": OPS_PASSWORD})
    assert response.status == 200
    document = await response.json()
    assert document["user"] == OPS and len(document["csrf_token"]) >= 40
    cookie = response.cookies["disque-session-9711"]
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/"
    assert not cookie["secure"]  # plain HTTP: tests/integration checks Secure over TLS
    assert response.headers["Cache-Control"] == "no-store"
    session = await (await http.get("/api/session")).json()
    assert session == {"user": OPS, "csrf_token": document["csrf_token"], "login_refused": None}


async def test_wrong_passwords_unknown_users_and_nopass_users_are_refused_alike(http, server):
    cmd = add_users(server)
    assert cmd("ACL", "SETUSER", "open", "on", "nopass", "~*", "+@all") == b"OK"
    for user, password in ((OPS, "wrong"), ("nobody", OPS_PASSWORD), ("open", "x"),
                           ("default", "x")):
        assert await login(http, user, password) == (401, {"error": LOGIN_FAILED})
    # AUTH's own count: open's AUTH passed, and the open default user's is "no password set".
    assert server.node.state.access_stats.auth_failures == 2
    assert (await (await http.get("/api/session")).json())["user"] is None


async def test_requirepass_logs_the_default_user_in(http, server):
    server.config.requirepass = "secret"
    assert (await login(http, "", "secret"))[0] == 200
    session = await (await http.get("/api/session")).json()
    status, answer = await act(http, "pause", session["csrf_token"], queue="q", mode="in")
    assert (status, answer) == (200, {"result": "in"})


async def test_failed_logins_from_an_address_are_limited(http, server, clock):
    add_users(server)
    for _ in range(actions.LoginLimiter().max_failures):
        assert (await login(http, OPS, "guess"))[0] == 401
    response = await http.post("/api/login", json={"user": OPS, "password": OPS_PASSWORD})
    assert response.status == 429 and int(response.headers["Retry-After"]) > 0
    clock.now += actions.LoginLimiter().window
    assert (await login(http, OPS, OPS_PASSWORD))[0] == 200


async def test_an_action_runs_the_command_as_the_user(http, server):
    cmd = add_users(server)
    _, document = await login(http, OPS, OPS_PASSWORD)
    token = document["csrf_token"]
    assert await act(http, "pause", token, queue="orders", mode="out") == (200, {"result": "out"})
    assert cmd("PAUSE", "orders", "state") == b"out"
    # BCAST: the other nodes are told (the bus transport here is a message log).
    assert server.node.state.outbox.transport
    assert await act(http, "resume", token, queue="orders") == (200, {"result": "none"})
    job_id = cmd("ADDJOB", "orders", "body", 0).decode()
    assert await act(http, "deljob", token, job=job_id) == (200, {"result": 1})
    assert cmd("SHOW", job_id) is None
    assert await act(http, "redrive", token, queue="orders:dead") == (200, {"result": 0})
    cmd("ADDJOB", "orders", "body", 0)
    cmd("ADDJOB", "orders", "body", 0)
    assert await act(http, "purge", token, queue="orders") == (200, {"result": 2})
    assert cmd("QLEN", "orders") == 0


async def test_a_purge_of_a_long_queue_goes_in_steps_each_on_disk_before_the_next(http, server,
                                                                                   monkeypatch):
    """As a client connection runs it: other clients are served between the
    steps, and the records of each step are written before the next."""
    cmd = add_users(server)
    jobs = 3 * STEP_JOBS + 5
    for i in range(jobs):
        cmd("ADDJOB", "orders", "body %d" % i, 0)
    steps: list[int] = []

    def flush_aof_then(done):
        steps.append(cmd("QLEN", "orders"))
        asyncio.get_running_loop().call_soon(done)
    monkeypatch.setattr(server, "flush_aof_then", flush_aof_then)
    monkeypatch.setattr(actions, "SLICE_BUDGET_NS", 0)  # one step a slice
    _, document = await login(http, OPS, OPS_PASSWORD)
    assert await act(http, "purge", document["csrf_token"], queue="orders") == (
        200, {"result": jobs})
    assert cmd("QLEN", "orders") == 0
    assert len(steps) >= 3 and steps == sorted(steps, reverse=True) and steps[-1] == 0


async def test_a_user_without_the_right_is_refused_by_the_command_table(http, server):
    cmd = add_users(server)
    assert cmd("ACL", "SETUSER", "mailer", "on", ">mailer-pw", "~mail*", "+@all") == b"OK"
    _, document = await login(http, VIEWER, VIEWER_PASSWORD)
    status, answer = await act(http, "pause", document["csrf_token"], queue="orders")
    assert status == 403
    assert answer == {"error": "NOPERM User viewer has no permissions to run the 'pause' command"}
    assert cmd("PAUSE", "orders", "state") == b"none"
    cmd("ADDJOB", "orders", "body", 0)
    _, document = await login(http, "mailer", "mailer-pw")
    status, answer = await act(http, "purge", document["csrf_token"], queue="orders")
    assert (status, answer) == (403, {"error": "NOPERM User mailer has no permissions to "
                                               "access the queue 'orders'"})
    assert cmd("QLEN", "orders") == 1
    assert server.node.state.access_stats.denied_commands == 1
    assert server.node.state.access_stats.denied_queues == 1


async def test_command_errors_and_bad_input_are_shown_as_failures(http, server):
    add_users(server)
    _, document = await login(http, OPS, OPS_PASSWORD)
    token = document["csrf_token"]
    assert await act(http, "deljob", token, job="D-nonsense") == (
        400, {"error": "BADID Invalid Job ID format."})
    for body in ({"queue": "q", "mode": "sideways"}, {"queue": "q", "mode": ["all"]},
                 {"queue": ["q"]}, {}):
        status, answer = await act(http, "pause", token, **body)
        assert status == 400 and answer["error"].startswith("'")
    assert (await act(http, "shutdown", token))[0] == 404


async def test_an_action_needs_a_session_and_its_csrf_token(http, server):
    cmd = add_users(server)
    assert await act(http, "pause", None, queue="q") == (401, {"error": NOT_LOGGED_IN})
    _, document = await login(http, OPS, OPS_PASSWORD)
    assert await act(http, "pause", None, queue="q") == (403, {"error": BAD_CSRF})
    assert await act(http, "pause", "x" * 43, queue="q") == (403, {"error": BAD_CSRF})
    assert cmd("PAUSE", "q", "state") == b"none"


async def test_requests_from_another_origin_or_not_json_are_refused(http, server):
    cmd = add_users(server)
    _, document = await login(http, OPS, OPS_PASSWORD)
    token = {"X-CSRF-Token": document["csrf_token"]}
    elsewhere = [{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                 {"Sec-Fetch-Site": "same-site"}]
    for headers in elsewhere:
        response = await http.post("/api/action/pause", json={"queue": "q"},
                                   headers=dict(token, **headers))
        assert response.status == 403 and (await response.json())["error"] == CROSS_ORIGIN
    response = await http.post("/api/action/pause", data={"queue": "q"}, headers=token)
    assert response.status == 415
    response = await http.post("/api/login", data={"user": OPS, "password": OPS_PASSWORD},
                               headers={"Origin": "http://evil.example"})
    assert response.status == 403
    assert (await http.get("/api/action/pause")).status == 405
    assert (await http.post("/api/action/pause", json={"queue": "q" * (actions.MAX_BODY + 1)},
                            headers=token)).status == 413
    same = "http://%s:%d" % (http.host, http.port)
    response = await http.post("/api/action/pause", json={"queue": "q"},
                               headers=dict(token, Origin=same,
                                            **{"Sec-Fetch-Site": "same-origin"}))
    assert response.status == 200
    assert cmd("PAUSE", "q", "state") == b"all"


async def test_logout_ends_the_session(http, server):
    add_users(server)
    _, document = await login(http, OPS, OPS_PASSWORD)
    token = document["csrf_token"]
    cookie = http.session.cookie_jar.filter_cookies(http.make_url("/"))["disque-session-9711"]
    response = await http.post("/api/logout", json={}, headers={"X-CSRF-Token": token})
    assert response.status == 200
    assert (await (await http.get("/api/session")).json())["user"] is None
    # The old cookie, replayed, opens nothing.
    http.session.cookie_jar.update_cookies({"disque-session-9711": cookie.value})
    assert await act(http, "pause", token, queue="q") == (401, {"error": NOT_LOGGED_IN})


async def test_sessions_expire_when_idle_and_after_their_lifetime(http, server, clock):
    add_users(server)
    store = SessionStore()
    _, document = await login(http, OPS, OPS_PASSWORD)
    token = document["csrf_token"]
    clock.now += store.idle_timeout - 1
    assert (await act(http, "pause", token, queue="q"))[0] == 200
    clock.now += store.idle_timeout
    assert await act(http, "pause", token, queue="q") == (401, {"error": NOT_LOGGED_IN})
    _, document = await login(http, OPS, OPS_PASSWORD)
    token = document["csrf_token"]
    step = store.idle_timeout / 2
    used = 0.0
    while used + step < store.lifetime:  # used all along: never idle
        clock.now += step
        used += step
        assert (await act(http, "resume", token, queue="q"))[0] == 200
    clock.now += store.lifetime - used
    assert await act(http, "resume", token, queue="q") == (401, {"error": NOT_LOGGED_IN})


@pytest.mark.parametrize("change", [("SETUSER", OPS, "off"), ("DELUSER", OPS),
                                    ("SETUSER", OPS, "resetpass", ">new-pw"),
                                    ("SETUSER", OPS, "<" + OPS_PASSWORD, ">new-pw"),
                                    ("SETUSER", OPS, "nopass")])
async def test_a_password_change_or_a_user_gone_ends_its_sessions(http, server, change):
    cmd = add_users(server)
    _, document = await login(http, OPS, OPS_PASSWORD)
    _, viewer = await login_elsewhere(server, http, VIEWER, VIEWER_PASSWORD)
    assert cmd("ACL", *change) in (b"OK", 1)
    assert await act(http, "pause", document["csrf_token"], queue="q") == (
        401, {"error": USER_GONE})
    assert (await (await http.get("/api/session")).json())["user"] is None
    assert cmd("PAUSE", "q", "state") == b"none"
    # Another user's session goes on.
    assert (await (await viewer.get("/api/session")).json())["user"] == VIEWER
    await viewer.close()


async def test_a_rule_change_that_keeps_the_password_keeps_the_session(http, server):
    cmd = add_users(server)
    _, document = await login(http, OPS, OPS_PASSWORD)
    assert cmd("ACL", "SETUSER", OPS, "-pause", ">" + OPS_PASSWORD) == b"OK"
    assert (await act(http, "pause", document["csrf_token"], queue="q"))[0] == 403
    assert (await (await http.get("/api/session")).json())["user"] == OPS


async def test_a_requirepass_change_ends_the_default_users_sessions(http, server):
    server.config.requirepass = "secret"
    _, document = await login(http, "", "secret")
    server.config.requirepass = "another"
    assert await act(http, "pause", document["csrf_token"], queue="q") == (
        401, {"error": USER_GONE})


class PeerTransport:
    """A transport whose peer is ``address``."""

    def __init__(self, address: str) -> None:
        self.address = address

    def get_extra_info(self, name, default=None):
        return (self.address, 40000) if name == "peername" else default


def _request_from(address: str):
    return make_mocked_request("POST", "/api/login", transport=PeerTransport(address))


def test_over_plain_http_only_loopback_peers_may_log_in(server):
    add_users(server)
    handlers = DashboardActions(server)
    assert handlers._logins_refused(_request_from("127.0.0.1")) is None
    assert handlers._logins_refused(_request_from("::1")) is None
    assert handlers._logins_refused(_request_from("192.0.2.7")) == PLAIN_HTTP_REMOTE


def test_a_queue_is_found_by_the_name_the_page_shows():
    queues = {b"orders": None, b"caf\xe9": None, b"\\x80": None, b"\x80": None, b"\xff": None}
    assert queue_named({"queue": "orders"}, queues) == b"orders"
    assert queue_named({"queue": "new queue"}, queues) == b"new queue"  # PAUSE may create it
    assert queue_named({"queue": "caf\\xe9"}, queues) == b"caf\xe9"
    assert queue_named({"queue": "\\xff"}, queues) == b"\xff"
    with pytest.raises(ActionError) as refused:
        queue_named({"queue": "\\x80"}, queues)  # b"\\x80" and b"\x80" both show so
    assert refused.value.status == 409
    for bad in ({}, {"queue": ""}, {"queue": 7}, {"queue": "\ud800"}):
        with pytest.raises(ActionError):
            queue_named(bad, queues)


def test_the_session_store_is_bounded():
    clock = Clock()
    store = SessionStore(timer=clock, limit=2)
    first, _ = store.create(ClientState(), "a", ())
    second, _ = store.create(ClientState(), "b", ())
    third, _ = store.create(ClientState(), "c", ())
    assert store.get(first) is None
    assert store.get(second).user_name == "b" and store.get(third).user_name == "c"
    assert store.get(None) is None and store.get("") is None


def test_the_limiter_forgets_successes_and_bounds_its_addresses():
    clock = Clock()
    limiter = LoginLimiter(timer=clock, max_failures=2, window=10.0, max_addresses=2)
    limiter.failed("a")
    limiter.failed("a")
    assert limiter.wait("a") == 10.0
    limiter.succeeded("a")
    assert limiter.wait("a") == 0.0
    for address in ("b", "b", "c", "d"):
        limiter.failed(address)
    assert limiter.wait("b") == 0.0 and len(limiter.failures) == 2  # b was forgotten first
