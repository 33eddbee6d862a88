"""ACL users on a real 3-node cluster (docs/security.md "Users across the
cluster"): with a cluster secret, a user made on one node logs in on the
others within a second or two, and still after every node was killed and
restarted; a deletion spreads too; ``DisqueClient`` logged in as that
user fails over from a killed node and goes on. Without a secret the
user stays on its node, and INFO and the log say why; once the secret is
rolled out at run time the user reaches the others."""

from __future__ import annotations

import time

import pytest
import redis

from disque.client import DisqueClient
from tests.support.process import wait_until

pytestmark = pytest.mark.cluster

SECRET = "the-secret-of-the-acl-users-test-0123456789"
WITH_SECRET = "cluster-secret %s\n" % SECRET
NO_SECRET = 'cluster-secret ""\n'  # whatever DISQUE_TEST_BUS asks for
APP_RULES = ("on", ">app-pw", "~jobs*", "+@produce", "+@consume", "+@connection")
SPREAD_S = 2.0  # "within a second or two"


def logs_in(cluster, i: int, user: str = "app", password: str = "app-pw") -> bool:
    client = redis.Redis(host="127.0.0.1", port=cluster.port(i), username=user,
                         password=password, socket_timeout=5, protocol=2)
    try:
        return client.ping() is True
    except redis.AuthenticationError:
        return False
    finally:
        client.close()


def test_a_user_spreads_survives_restarts_and_its_deletion_spreads(cluster_factory):
    cluster = cluster_factory(3, config=WITH_SECRET)
    made = time.monotonic()
    assert cluster.call(0, "ACL", "SETUSER", "app", *APP_RULES) == b"OK"
    wait_until(lambda: logs_in(cluster, 2), SPREAD_S, interval=0.01,
               message="the user logging in on node 2")
    print("ACL SETUSER on node 0 to a login on node 2: %.3f s" % (time.monotonic() - made))
    assert logs_in(cluster, 1)
    assert cluster.call(2, "INFO", "security")["acl_users_scope"] == "cluster"
    # Every node killed, then started again: each still knows the user.
    for i in range(3):
        cluster.kill(i)
    cluster.restart_many(range(3))
    assert all(logs_in(cluster, i) for i in range(3))
    cluster.wait_joined()
    assert cluster.call(1, "ACL", "DELUSER", "app") == 1
    wait_until(lambda: not logs_in(cluster, 0) and not logs_in(cluster, 2), SPREAD_S,
               interval=0.01, message="the deletion on nodes 0 and 2")


def test_disque_client_fails_over_with_a_user_made_on_another_node(cluster_factory):
    cluster = cluster_factory(3, config=WITH_SECRET)
    assert cluster.call(1, "ACL", "SETUSER", "app", *APP_RULES) == b"OK"
    wait_until(lambda: all(logs_in(cluster, i) for i in range(3)), SPREAD_S, interval=0.01)
    nodes = ["127.0.0.1:%d" % cluster.port(i) for i in range(3)]
    with DisqueClient(nodes, username="app", password="app-pw", socket_timeout=5,
                      connect_timeout=2) as client:
        before = client.add("jobs", b"before", replicate=2, retry=1)
        victim = next(i for i in range(3) if cluster.port(i) == client.node.port)
        cluster.kill(victim)  # SIGKILL
        after = client.add("jobs", b"after", replicate=2, retry=1)
        assert client.failovers >= 1 and client.node.port != cluster.port(victim)
        got: dict[str, bytes] = {}

        def both_taken() -> bool:
            for job in client.get_jobs("jobs", count=10, timeout_ms=100):
                got[job.id] = job.body
            return {before, after} <= set(got)
        wait_until(both_taken, 20, message="both jobs delivered after the failover")
        assert client.ack_jobs(list(got)) >= 1


def test_without_a_secret_the_user_stays_until_the_secret_is_rolled_out(cluster_factory):
    cluster = cluster_factory(3, config=NO_SECRET)
    assert cluster.call(0, "ACL", "SETUSER", "app", *APP_RULES) == b"OK"
    # A schedule set after it on the same node reaches node 2 over the same
    # link: had the user been sent, it would have arrived first.
    assert cluster.call(0, "SCHEDULE", "SET", "marker", "EVERY", 3600, "q", "b") == b"OK"
    wait_until(lambda: cluster.call(2, "SCHEDULE", "LIST"), 10,
               message="the schedule on node 2")
    assert not logs_in(cluster, 2) and not logs_in(cluster, 1)
    assert cluster.call(0, "INFO", "security")["acl_users_scope"] == "node"
    assert "users spread to the other nodes only over an authenticated bus" in (
        cluster.nodes[0].log_path.read_text())
    # The secret rolled out node by node: links between a node that has it and
    # one that has not close; once all have it, the user reaches the others.
    for i in range(3):
        assert cluster.call(i, "CONFIG", "SET", "cluster-secret", SECRET) == b"OK"
    cluster.wait_joined()
    wait_until(lambda: logs_in(cluster, 1) and logs_in(cluster, 2), 15,
               message="the user on every node once the secret is everywhere")
