"""The dashboard's actions refuse forged requests, on a real disque-server
process through aiohttp's client: without the session's CSRF token, from
another origin, as a form or through GET, nothing is done; and password
guessing is limited. (test_dashboard_actions.py drives the page itself.)"""

from __future__ import annotations

import aiohttp

from tests.support.dashboard import OPS, OPS_PASSWORD, start_node

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
