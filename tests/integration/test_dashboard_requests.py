"""The dashboard's actions refuse forged requests, on a real disque-server
process through aiohttp's client: without the session's CSRF token, from
another origin, as a form or through GET, nothing is done; password
guessing is limited; a Host that is not the node's is refused (DNS
rebinding); a password change ends the user's sessions.
(test_dashboard_actions.py drives the page itself.)"""

from __future__ import annotations

import aiohttp

from tests.support.dashboard import OPS, OPS_PASSWORD, start_node
from tests.support.process import wait_until

LOGIN_FAILURES_ALLOWED = 5  # disque.http.sessions.MAX_FAILURES


async def _login(session: aiohttp.ClientSession, base: str, user: str,
                 password: str) -> aiohttp.ClientResponse:
    return await session.post(base + "/api/login", json={"user": user, "password": password})


async def test_requests_without_the_csrf_token_or_from_elsewhere_do_nothing(server_factory):
    node, metrics_port = start_node(server_factory)
    client = node.client()
    base = "http://127.0.0.1:%d" % metrics_port

    # unsafe: the jar keeps cookies of an IP address (127.0.0.1) too.
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        assert (await _login(session, base, OPS, OPS_PASSWORD)).status == 200
        token = (await (await session.get(base + "/api/session")).json())["csrf_token"]
        url = base + "/api/action/pause"
        forged = [
            await session.post(url, json={"queue": "orders"}),
            await session.post(url, json={"queue": "orders"},
                               headers={"X-CSRF-Token": "forged"}),
            await session.post(url, json={"queue": "orders"},
                               headers={"X-CSRF-Token": token,
                                        "Origin": "http://attacker.example"}),
            await session.post(url, data="queue=orders",
                               headers={"X-CSRF-Token": token,
                                        "Content-Type": "application/x-www-form-urlencoded"}),
            await session.get(url, params={"queue": "orders"}),
        ]
        assert [response.status for response in forged] == [403, 403, 403, 415, 405]
        assert client.execute_command("PAUSE", "orders", "STATE") == b"none"
        done = await session.post(url, json={"queue": "orders"}, headers={"X-CSRF-Token": token})
        assert done.status == 200
    assert client.execute_command("PAUSE", "orders", "STATE") == b"all"


async def test_password_guessing_is_limited(server_factory):
    _node, metrics_port = start_node(server_factory)
    base = "http://127.0.0.1:%d" % metrics_port

    async with aiohttp.ClientSession() as session:
        statuses = [(await _login(session, base, OPS, "guess-%d" % i)).status
                    for i in range(LOGIN_FAILURES_ALLOWED)]
        assert statuses == [401] * LOGIN_FAILURES_ALLOWED
        refused = await _login(session, base, OPS, OPS_PASSWORD)  # right, but too late
        assert refused.status == 429 and int(refused.headers["Retry-After"]) > 0


async def test_only_the_nodes_own_host_names_are_answered(server_factory):
    node, metrics_port = start_node(server_factory)
    url = "http://127.0.0.1:%d/api/stats" % metrics_port
    async with aiohttp.ClientSession() as session:
        async def status(host: str) -> int:
            async with session.get(url, headers={"Host": host}) as response:
                return response.status
        assert await status("127.0.0.1:%d" % metrics_port) == 200
        assert await status("localhost:%d" % metrics_port) == 200
        assert await status("rebound.attacker.example:%d" % metrics_port) == 421
        assert node.call("CONFIG", "SET", "dashboard-hosts", "disque.example.com") == b"OK"
        assert await status("disque.example.com") == 200
        assert await status("rebound.attacker.example") == 421


async def test_a_password_change_ends_the_users_sessions(server_factory):
    node, metrics_port = start_node(server_factory)
    base = "http://127.0.0.1:%d" % metrics_port
    jar = aiohttp.CookieJar(unsafe=True)  # keeps the cookies of 127.0.0.1
    async with aiohttp.ClientSession(cookie_jar=jar) as session:
        login = await session.post(base + "/api/login",
                                   json={"user": OPS, "password": OPS_PASSWORD})
        token = (await login.json())["csrf_token"]
        url = base + "/api/action/pause"
        headers = {"X-CSRF-Token": token}
        assert (await session.post(url, json={"queue": "q"}, headers=headers)).status == 200
        assert node.call("ACL", "SETUSER", OPS, "resetpass", ">a-new-password") == b"OK"
        refused = await session.post(url, json={"queue": "other"}, headers=headers)
        assert refused.status == 401
        assert (await (await session.get(base + "/api/session")).json())["user"] is None
    assert node.call("PAUSE", "other", "STATE") == b"none"
    wait_until(lambda: "ended: the user's password changed" in node.log_path.read_text(),
               message="the log line of the session's end")
