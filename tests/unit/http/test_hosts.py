"""The metrics port answers only to its own names (DNS rebinding): which
``Host`` values pass, and the 421 every route gives the others."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from disque.config import Config
from disque.http.hosts import MISDIRECTED, HostCheck, host_part
from disque.http.service import HttpService
from disque.server import Server

MACHINE = frozenset(("node7.example.com", "node7"))


def check(bind: list[str] | None = None, listed: list[str] | None = None) -> HostCheck:
    config = Config()
    config.bind = bind or []
    config.dashboard_hosts = listed or []
    return HostCheck(config, MACHINE)


@pytest.mark.parametrize("header, host", [
    ("example.com", "example.com"), ("Example.COM:9711", "example.com"),
    ("[::1]:9711", "::1"), ("[fe80::1]", "fe80::1"), ("10.0.0.5:80", "10.0.0.5"),
    ("::1", "::1"), ("[::1", "::1")])
def test_the_host_part_of_a_header(header, host):
    assert host_part(header) == host


@pytest.mark.parametrize("host, allowed", [
    ("127.0.0.1", True), ("::1", True), ("127.1.2.3", True), ("localhost", True),
    ("node7", True), ("node7.example.com", True), ("10.9.9.9", True), ("203.0.113.4", True),
    ("attacker.example", False), ("node7.example.com.attacker.example", False), ("", False)])
def test_without_bind_any_address_and_the_machines_names_pass(host, allowed):
    assert check().allows(host) is allowed


@pytest.mark.parametrize("host, allowed", [
    ("10.0.0.5", True), ("127.0.0.1", True), ("disque.internal", True), ("10.0.0.6", False),
    ("ops.example.com", True), ("2001:db8::1", True), ("2001:db8::2", False),
    ("attacker.example", False)])
def test_with_bind_only_its_addresses_and_the_listed_names_pass(host, allowed):
    hosts = check(bind=["10.0.0.5", "disque.internal", "127.0.0.1"],
                  listed=["ops.example.com", "[2001:db8::1]"])
    assert hosts.allows(host) is allowed


def test_a_wildcard_bind_or_a_listed_star_takes_any_address_or_name():
    assert check(bind=["0.0.0.0"]).allows("198.51.100.1")
    assert not check(bind=["0.0.0.0"]).allows("attacker.example")
    assert check(listed=["*"]).allows("attacker.example")


@pytest.fixture
async def http(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = Config()
    config.cluster_bus_port = 0
    server = Server(config, ["disque-server"])
    client = TestClient(TestServer(HttpService(server).build_app()))
    await client.start_server()
    yield client, config
    await client.close()


@pytest.mark.parametrize("path", ["/", "/api/stats", "/metrics", "/api/session",
                                  "/static/dashboard.js"])
async def test_every_route_refuses_a_foreign_host(http, path):
    client, _ = http
    response = await client.get(path, headers={"Host": "rebound.attacker.example:9711"})
    assert response.status == MISDIRECTED
    assert response.content_type == "text/plain" and "dashboard-hosts" in await response.text()
    response = await client.get(path, headers={"Host": "localhost:9711"})
    assert response.status == 200


async def test_a_login_with_a_foreign_host_is_refused_before_it_runs(http):
    client, _ = http
    response = await client.post("/api/login", json={"user": "u", "password": "p"},
                                 headers={"Host": "rebound.attacker.example"})
    assert response.status == MISDIRECTED


async def test_config_set_dashboard_hosts_applies_at_once(http):
    client, config = http
    headers = {"Host": "disque.example.com"}
    assert (await client.get("/api/stats", headers=headers)).status == MISDIRECTED
    config.set(b"dashboard-hosts", b"disque.example.com")
    assert (await client.get("/api/stats", headers=headers)).status == 200
