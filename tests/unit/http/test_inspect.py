"""Looking inside queues and jobs held by another node, and acting on them,
through aiohttp's test server on an in-process Server whose node talks to
a second in-process node over a loopback bus: who may see what, what the
page gets of hostile bytes, and what a silent node does to each view."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from disque.http import actions, inspect
from disque.http.dashboard import add_routes
from disque.http.inspect import job_json, printable
from tests.unit.helpers import PEER_ID, Cmd, add_peer, deliver, make_node

OPS, OPS_PASSWORD = "ops", "ops-pw"
VIEWER, VIEWER_PASSWORD = "viewer", "viewer-pw"
ORDERS, ORDERS_PASSWORD = "orders", "orders-pw"
HOSTILE_BODY = b"<img src=x onerror=alert(1)>\x00\xff\xe2\x80\xaeevil</script>"


class LoopbackBus:
    """One node's bus to the other: each message arrives in a later loop turn
    (or never, while ``silent``)."""

    def __init__(self, sender: bytes) -> None:
        self.sender = sender
        self.target = None
        self.silent = False

    def send(self, node_id: bytes, msg: dict) -> None:
        if not self.silent:
            asyncio.get_running_loop().call_soon(deliver, self.target, self.sender, msg)

    def connect(self, *args) -> None:
        pass

    def close(self, *args) -> None:
        pass

    def reply(self, *args) -> None:
        pass


@pytest.fixture
def peer(server):
    """A second node, linked both ways with the server's through LoopbackBus."""
    other = make_node(node_id=PEER_ID)
    add_peer(server.node)
    own = add_peer(other, server.node.state.id)
    own.port = server.config.port
    to_peer, to_server = LoopbackBus(server.node.state.id), LoopbackBus(PEER_ID)
    to_peer.target, to_server.target = other, server.node
    server.node.state.outbox.use(to_peer)
    other.state.outbox.use(to_server)
    server.to_peer = to_peer  # the server is interpreted; a compiled Node takes no new attribute
    return other


@pytest.fixture
async def http(server, peer, monkeypatch):
    monkeypatch.setattr(inspect, "ANSWER_TIMEOUT_S", 0.2)
    server.loop = asyncio.get_running_loop()
    cmd = Cmd(server.node)
    for name, password, rules in ((OPS, OPS_PASSWORD, ("~*", "+@all")),
                                  (VIEWER, VIEWER_PASSWORD, ("~*", "+@read", "+@connection")),
                                  (ORDERS, ORDERS_PASSWORD, ("~orders*", "+@all"))):
        assert cmd("ACL", "SETUSER", name, "on", ">" + password, *rules) == b"OK"
    app = web.Application(client_max_size=actions.MAX_BODY)
    add_routes(app, server)
    client = TestClient(TestServer(app))
    await client.start_server()
    yield client
    await client.close()


async def login(http, user: str, password: str) -> str:
    response = await http.post("/api/login", json={"user": user, "password": password})
    assert response.status == 200
    return (await response.json())["csrf_token"]


async def get(http, path: str, token: str | None, **params) -> tuple[int, dict]:
    headers = {} if token is None else {"X-CSRF-Token": token}
    response = await http.get(path, params=params, headers=headers)
    return response.status, await response.json()


async def post(http, path: str, token: str, **body) -> tuple[int, dict]:
    response = await http.post(path, json=body, headers={"X-CSRF-Token": token})
    return response.status, await response.json()


def dead_letter(node, body: bytes = HOSTILE_BODY) -> bytes:
    """A job of ``mail`` moved to mail:dead on ``node`` by its only NACK."""
    cmd = Cmd(node)
    job_id = cmd.addjob("mail", body, "MAXDELIVER", 1, "REPLICATE", 1,
                        "HEADER", "<b>h</b>", b"v\x00\xff")
    cmd("GETJOB", "FROM", "mail")
    assert cmd("NACK", job_id) == 1
    return job_id


async def test_a_queue_held_only_by_another_node_is_looked_inside(http, server, peer):
    job_id = dead_letter(peer)
    token = await login(http, OPS, OPS_PASSWORD)
    status, answer = await get(http, "/api/queue", token, name="mail:dead")
    assert status == 200 and answer["dead_letter_queue"] is True
    (node,) = answer["nodes"]
    assert node["node"] == PEER_ID.decode() and node["answered"] and node["length"] == 1
    (job,) = node["jobs"]
    assert job["id"] == job_id.decode() and job["dead-reason"] == "maxdeliver"
    assert job["body"] == {"text": "<img src=x onerror=alert(1)>\\x00\\xff\\u202eevil</script>",
                           "binary": True, "size": len(HOSTILE_BODY), "truncated": False}
    assert job["headers"] == ["<b>h</b>", "v\\x00\\xff"]


async def test_the_views_need_a_session_and_its_csrf_token(http, peer):
    assert (await get(http, "/api/queue", None, name="q"))[0] == 401
    await login(http, OPS, OPS_PASSWORD)
    assert (await get(http, "/api/queue", None, name="q"))[0] == 403
    assert (await get(http, "/api/job", "x" * 43, id="D-x"))[0] == 403


async def test_a_user_sees_only_the_queues_its_rights_cover(http, server, peer):
    job_id = dead_letter(peer)
    token = await login(http, ORDERS, ORDERS_PASSWORD)
    status, answer = await get(http, "/api/queue", token, name="mail:dead")
    assert status == 403 and answer["error"].startswith("NOPERM User orders has no permissions "
                                                        "to access the queue 'mail:dead'")
    # A job's queue is known only from the answers: the body is not shown either.
    status, answer = await get(http, "/api/job", token, id=job_id.decode())
    assert status == 403 and "mail:dead" in answer["error"] and "onerror" not in str(answer)
    assert server.node.state.access_stats.denied_queues == 2


async def test_a_job_is_found_from_any_node_with_every_copy(http, server, peer):
    job_id = Cmd(peer).addjob("orders", "body", "REPLICATE", 2, "ASYNC")
    await asyncio.sleep(0)  # the copy reaches the server's node, its GOTJOB the peer
    await asyncio.sleep(0)
    token = await login(http, VIEWER, VIEWER_PASSWORD)
    status, answer = await get(http, "/api/job", token, id=job_id.decode())
    assert status == 200 and answer["unanswered"] == []
    copies = {copy["node"]: copy["job"]["state"] for copy in answer["copies"]}
    assert copies == {PEER_ID.decode(): "queued", server.node.state.id.decode(): "active"}
    assert (await get(http, "/api/job", token, id="D-nonsense"))[0] == 400
    status, answer = await get(http, "/api/job", token, id="D-" + job_id.decode()[2:-4] + "ffff")
    assert (status, answer["copies"]) == (200, [])


async def test_a_silent_node_is_reported_and_a_delete_it_may_miss_is_refused(http, server, peer):
    job_id = Cmd(peer).addjob("orders", "body", "REPLICATE", 1)
    server.to_peer.silent = True
    token = await login(http, OPS, OPS_PASSWORD)
    status, answer = await get(http, "/api/queue", token, name="orders")
    assert status == 200 and answer["nodes"] == [{
        "node": PEER_ID.decode(), "address": "127.0.0.1:7712", "myself": False,
        "answered": False, "length": None, "jobs": []}]
    status, answer = await post(http, "/api/cluster/deljob", token, job=job_id.decode())
    assert status == 504 and Cmd(peer)("SHOW", job_id) is not None
    assert server.node.state.inspection.listener.waiting == {}


async def test_a_node_without_a_link_is_reported_and_a_delete_it_may_miss_is_refused(
        http, server, peer):
    """A node this one has no link to (restarting, cut off) is not asked,
    and is reported as not answering instead of being left out."""
    job_id = Cmd(server.node).addjob("orders", "body", "REPLICATE", 1)
    server.node.state.membership.nodes[PEER_ID].link = False
    token = await login(http, OPS, OPS_PASSWORD)
    status, answer = await get(http, "/api/job", token, id=job_id.decode())
    assert status == 200 and [copy["node"] for copy in answer["copies"]] == [
        server.node.state.id.decode()]
    assert [node["node"] for node in answer["unanswered"]] == [PEER_ID.decode()]
    status, answer = await post(http, "/api/cluster/deljob", token, job=job_id.decode())
    assert status == 504 and Cmd(server.node)("SHOW", job_id) is not None


async def test_dead_letters_are_redriven_on_the_node_that_queues_them(http, server, peer):
    dead_letter(peer)
    token = await login(http, VIEWER, VIEWER_PASSWORD)
    status, answer = await post(http, "/api/cluster/redrive", token, queue="mail:dead",
                                node=PEER_ID.decode())
    assert status == 403 and "qredrive" in answer["error"]
    token = await login(http, OPS, OPS_PASSWORD)
    assert await post(http, "/api/cluster/redrive", token, queue="mail:dead",
                      node=PEER_ID.decode()) == (200, {"result": 1})
    assert Cmd(peer)("QLEN", "mail") == 1
    # No node named: the redrive of the dead letters queued here (none).
    assert await post(http, "/api/cluster/redrive", token, queue="mail:dead") == (
        200, {"result": 0})
    assert (await post(http, "/api/cluster/redrive", token, queue="mail:dead",
                       node="f" * 40))[0] == 404


async def test_a_job_is_deleted_on_every_node_holding_a_copy(http, server, peer):
    job_id = Cmd(peer).addjob("orders", "body", "REPLICATE", 2, "ASYNC")
    for _ in range(2):
        await asyncio.sleep(0)
    assert Cmd(server.node)("SHOW", job_id) is not None
    token = await login(http, VIEWER, VIEWER_PASSWORD)
    status, answer = await post(http, "/api/cluster/deljob", token, job=job_id.decode())
    assert status == 403 and "deljob" in answer["error"]
    token = await login(http, OPS, OPS_PASSWORD)
    assert await post(http, "/api/cluster/deljob", token, job=job_id.decode()) == (
        200, {"result": 2})
    await asyncio.sleep(0)
    assert Cmd(server.node)("SHOW", job_id) is None and Cmd(peer)("SHOW", job_id) is None


@pytest.mark.parametrize("data, shown, escaped", [
    (b"plain text\nline 2\ttab", "plain text\nline 2\ttab", False),
    ("café ✓".encode(), "café ✓", False),
    (b"\x00\x1b[31m\r", "\\x00\\x1b[31m\\x0d", True),
    (b"\xff\xfe", "\\xff\\xfe", True),
    ("a\u202eb\u200bc".encode(), "a\\u202eb\\u200bc", True),
    (b"\xc2\x85", "\\x85", True),  # C1 control
])
def test_printable_shows_every_byte_as_text(data, shown, escaped):
    assert printable(data) == (shown, escaped)


def test_a_malformed_record_is_no_job():
    for bad in (None, [b"id"], [b"id", 1], ["id", b"D-x"], [b"id", b"D-x", b"body", 7], {}):
        assert job_json(bad) is None, bad
    job = job_json([b"id", b"D-x", b"body", b"abc", b"body-size", 10, b"odd", {1: 2}])
    assert job["body"] == {"text": "abc", "binary": False, "size": 10, "truncated": True}
    assert job["odd"] is None
