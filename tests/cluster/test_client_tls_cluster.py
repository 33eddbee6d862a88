"""The project's client on a cluster whose nodes serve TLS beside the plain
port (the bus stays on the plain port + 10000): HELLO on a TLS connection
gives each node's tls-port, learnt from its bus messages, so the client
moves and fails over between nodes over TLS (docs/security.md "TLS")."""

from __future__ import annotations

from pathlib import Path

import pytest

from disque.client import ConnectionSecurity, DisqueClient
from tests.support.cluster import Cluster
from tests.support.process import free_port, wait_until
from tests.support.tls import gen_certs, tls_config


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return gen_certs(tmp_path_factory.mktemp("certs") / "tls")


@pytest.fixture
def tls_cluster(tmp_path, certs):
    cluster = Cluster(tmp_path / "cluster", 3)
    tls_ports = []
    for node in cluster.nodes:
        tls_ports.append(free_port())
        with open(node.config_path, "a") as config:
            config.write(tls_config(certs, tls_ports[-1], "tls-auth-clients yes\n"))
    try:
        yield cluster.start(), tls_ports
    finally:
        cluster.stop_all()
        assert [problem for node in cluster.nodes for problem in node.verify()] == []


def test_hello_over_tls_gives_tls_ports_and_the_client_fails_over_on_them(tls_cluster, certs):
    cluster, tls_ports = tls_cluster
    plain = {int(cluster.nodes[i].port) for i in range(3)}
    # A plain connection's HELLO is Disque's: the client ports.
    hello = cluster.call(0, "HELLO")
    assert {int(entry[2]) for entry in hello[2:]} == plain
    security = ConnectionSecurity(tls=True, tls_ca_cert_file=str(certs / "ca.crt"),
                                  tls_cert_file=str(certs / "client.crt"),
                                  tls_key_file=str(certs / "client.key"))
    with DisqueClient("127.0.0.1:%d" % tls_ports[0], security=security) as client:
        wait_until(lambda: {n.port for n in client.hello()} == set(tls_ports),
                   message="HELLO over TLS to list every node's tls-port")
        job_id = client.add("tq", b"over tls", replicate=3)
        cluster.kill(0)
        # The next command fails over to another node's TLS port, found by HELLO.
        wait_until(lambda: client.show(job_id) is not None,
                   message="the client to fail over to another node over TLS")
        assert client.node.port in tls_ports[1:]
