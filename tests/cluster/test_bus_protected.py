"""Protected mode on the cluster bus, seen from another host (a network
namespace, as root): a node without a cluster secret refuses bus links with
nodes beyond loopback in both directions, and links once a secret is set on
both sides or protected mode is off (docs/security.md "Protected mode")."""

from __future__ import annotations

import redis

from tests.support.cluster import parse_cluster_nodes, raw_command
from tests.support.netns import namespace  # noqa: F401  (a fixture)
from tests.support.process import wait_until

SECRET = "a-long-random-cluster-secret-for-this-test-only-0123456789"
MEET_REFUSED = (b"-ERR Cannot meet a node beyond loopback: protected mode is on and no "
                b"cluster secret is set")


def nodes_of(client: redis.Redis) -> dict:
    return parse_cluster_nodes(client.execute_command("CLUSTER", "NODES"))


def linked(client: redis.Redis, count: int) -> bool:
    """``count`` nodes known, none in handshake, every link connected."""
    nodes = nodes_of(client)
    return len(nodes) == count and all("handshake" not in n.flags and n.link == "connected"
                                       for n in nodes.values())


def test_a_protected_node_refuses_bus_links_from_another_host(server_factory, namespace):
    inside = server_factory("bind 127.0.0.1 %s\n" % namespace.host_ip)
    # The stranger's node has protected mode off: it is not the one protecting itself.
    outside = server_factory("bind %s\nprotected-mode no\n" % namespace.peer_ip, name="outside",
                             host=namespace.peer_ip, prefix=namespace.prefix)
    local = inside.client()
    stranger = outside.client()
    assert stranger.execute_command("CLUSTER", "MEET", namespace.host_ip, inside.port)

    # It keeps trying (its handshake node lives on); each try is refused and counted.
    wait_until(lambda: local.info("bus")["bus_rejected_connections"] >= 3,
               message="the stranger's bus links to be refused")
    assert list(nodes_of(local)) == [local.execute_command("CLUSTER", "MYID").decode()]
    assert set(n.link for n in nodes_of(stranger).values()
               if "myself" not in n.flags) <= {"disconnected"}
    log = inside.log_path.read_text()
    assert ("Bus link from %s refused: protected mode is on and no cluster secret is set"
            % namespace.peer_ip) in log
    assert "cluster-secret" in log and "protected-mode off" in log

    # Outbound: CLUSTER MEET says why and how out; loopback is still met.
    refused = raw_command(inside.port, "CLUSTER", "MEET", namespace.peer_ip, outside.port)
    assert refused.startswith(MEET_REFUSED) and refused.endswith(b"(docs/security.md)\r\n")
    assert b"cluster-secret" in refused



def test_with_protected_mode_off_hosts_link_without_a_secret(server_factory, namespace):
    inside = server_factory("bind 127.0.0.1 %s\nprotected-mode no\n" % namespace.host_ip)
    outside = server_factory("bind %s\nprotected-mode no\n" % namespace.peer_ip, name="outside",
                             host=namespace.peer_ip, prefix=namespace.prefix)
    local = inside.client()
    stranger = outside.client()
    assert local.execute_command("CLUSTER", "MEET", namespace.peer_ip, outside.port)
    wait_until(lambda: linked(local, 2) and linked(stranger, 2),
               message="the two hosts to link with protected mode off")
    assert local.info("bus")["bus_rejected_connections"] == 0


def test_a_cluster_secret_on_both_sides_lets_hosts_link_in_protected_mode(server_factory,
                                                                          namespace):
    secret = "cluster-secret %s\n" % SECRET
    inside = server_factory("bind 127.0.0.1 %s\n%s" % (namespace.host_ip, secret))
    # Protected mode on both; a password lets this test's client in from the host.
    outside = server_factory("bind %s\n%srequirepass pw\n" % (namespace.peer_ip, secret),
                             name="outside", host=namespace.peer_ip, prefix=namespace.prefix)
    local = inside.client()
    remote = outside.client(password="pw")
    assert remote.execute_command("CONFIG", "GET", "protected-mode") == {b"protected-mode": b"yes"}
    assert local.execute_command("CLUSTER", "MEET", namespace.peer_ip, outside.port)
    wait_until(lambda: linked(local, 2) and linked(remote, 2),
               message="the two hosts to link with a cluster secret")
    for client in (local, remote):
        bus = client.info("bus")
        assert bus["bus_rejected_connections"] == 0 and bus["bus_secret"] == "yes"


def test_turning_protected_mode_off_at_run_time_lets_the_refused_host_in(server_factory,
                                                                         namespace):
    inside = server_factory("bind 127.0.0.1 %s\n" % namespace.host_ip)
    outside = server_factory("bind %s\nprotected-mode no\n" % namespace.peer_ip, name="outside",
                             host=namespace.peer_ip, prefix=namespace.prefix)
    local = inside.client()
    stranger = outside.client()
    assert stranger.execute_command("CLUSTER", "MEET", namespace.host_ip, inside.port)
    wait_until(lambda: local.info("bus")["bus_rejected_connections"] >= 1,
               message="the stranger's bus link to be refused")

    # The stranger's next link after the change carries its MEET again (the
    # refused one took the first), so the node learns it and links back.
    assert local.execute_command("CONFIG", "SET", "protected-mode", "no") == b"OK"
    wait_until(lambda: linked(local, 2) and linked(stranger, 2),
               message="the refused host to link once protected mode is off")
