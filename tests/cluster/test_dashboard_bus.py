"""The cluster's dashboard over the real bus, as DISQUE_TEST_BUS secures it
(a cluster secret's MAC on every frame, TLS): node 0's /api/stats gets the
other nodes' summaries, and a logged-in user looks inside node 2's queue
and finds its job from node 0."""

from __future__ import annotations

import http.cookiejar
import json
import urllib.request
from urllib.parse import urlencode

from tests.support.dashboard import OPS, OPS_PASSWORD, USERS
from tests.support.process import free_port, wait_until


class Browser:
    """HTTP requests to one node's dashboard with a session cookie."""

    def __init__(self, port: int) -> None:
        self.base = "http://127.0.0.1:%d" % port
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        self.token = None

    def get(self, path: str):
        request = urllib.request.Request(self.base + path)
        if self.token:
            request.add_header("X-CSRF-Token", self.token)
        with self.opener.open(request, timeout=10) as response:
            return json.load(response)

    def login(self, user: str, password: str) -> None:
        request = urllib.request.Request(
            self.base + "/api/login", data=json.dumps({"user": user, "password": password}).encode(),
            headers={"Content-Type": "application/json"})
        with self.opener.open(request, timeout=10) as response:
            self.token = json.load(response)["csrf_token"]


def test_summaries_and_looking_inside_cross_the_bus(cluster_factory):
    ports = [free_port() for _ in range(3)]
    cluster = cluster_factory(3, config=USERS,
                              node_config=lambda i: "metrics-port %d\n" % ports[i])
    for _ in range(4):
        cluster.call(2, "ADDJOB", "on-2", "body", 0, "REPLICATE", 1)
    job_id = cluster.call(2, "ADDJOB", "on-2", "found", 0, "REPLICATE", 1).decode()
    page = Browser(ports[0])

    def node2_listed() -> bool:
        stats = page.get("/api/stats")
        shown = {queue["name"]: queue for queue in stats["queues"]["shown"]}
        figures = {node["id"]: node["figures"] for node in stats["nodes"]}
        return (all(figures.get(node_id) for node_id in cluster.ids)
                and shown.get("on-2", {}).get("shares") == [{"node": cluster.ids[2],
                                                             "length": 5}])
    wait_until(node2_listed, timeout=20, interval=0.5, message="node 2's queue on node 0's page")
    page.login(OPS, OPS_PASSWORD)
    # A node that does not answer within the page's wait is reported as
    # unanswered (a loaded machine): ask again until every node answered.
    inside = wait_until(lambda: (lambda r: r if all(n["answered"] for n in r["nodes"]) else None)(
        page.get("/api/queue?name=on-2")), timeout=20, message="every node's answer")
    assert [(n["node"], n["length"], len(n["jobs"])) for n in inside["nodes"]] == [
        (cluster.ids[2], 5, 5)]
    found = wait_until(lambda: (lambda r: r if not r["unanswered"] else None)(
        page.get("/api/job?" + urlencode({"id": job_id}))), timeout=20,
        message="every node's answer")
    assert [copy["node"] for copy in found["copies"]] == [cluster.ids[2]]
    assert found["copies"][0]["job"]["body"]["text"] == "found"
