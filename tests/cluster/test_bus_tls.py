"""The cluster bus over TLS (``tls-cluster yes``), through real processes:
nodes present certificates to each other and verify them against the CA,
and a cluster formed so replicates and federates jobs. Without a
certificate of the cluster's CA, a peer gets no further than the TLS
handshake."""

from __future__ import annotations

import socket
import ssl

import pytest

from disque.net import tls
from tests.cluster.test_bus_auth import frame, header, secret_config
from tests.support.cluster import BUS_SECURITY
from tests.support.process import wait_until

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(bool(BUS_SECURITY), reason="sets up its own bus security")]

BUS_OFFSET = 10000


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """The cluster's CA and node certificate, and another CA's (a stranger's)."""
    ours = tmp_path_factory.mktemp("certs")
    theirs = tmp_path_factory.mktemp("stranger")
    tls.generate_certificates(str(ours))
    tls.generate_certificates(str(theirs))
    return ours, theirs


def tls_config(directory) -> str:
    return ("tls-cluster yes\ntls-cert-file %s/node.crt\ntls-key-file %s/node.key\n"
            "tls-ca-cert-file %s/ca.crt\n" % (directory, directory, directory))


def tls_peer(port: int, directory=None, cert: bool = True) -> ssl.SSLSocket:
    """A TLS connection to a node's bus, presenting ``directory``'s node certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the peer's test is the node's, not ours
    if cert:
        context.load_cert_chain(directory / "node.crt", directory / "node.key")
    raw = socket.create_connection(("127.0.0.1", port + BUS_OFFSET), timeout=10)
    return context.wrap_socket(raw)


def received_until_closed(sock) -> bytes:
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
    except (ssl.SSLError, ConnectionResetError, OSError):
        return data


@pytest.mark.parametrize("secret", [False, True], ids=["tls", "tls+secret"])
def test_a_tls_cluster_replicates_and_federates(cluster_factory, certs, tmp_path, secret):
    ours, theirs = certs
    config = tls_config(ours) + (secret_config(tmp_path) if secret else "")
    cluster = cluster_factory(3, config=config)
    for i in range(3):
        info = cluster.info_section(i, "bus")
        assert (info["bus_tls"], info["bus_secret"]) == ("yes", "yes" if secret else "no")
    job_id = cluster.call(0, "ADDJOB", "tq", "over tls", 5000, "REPLICATE", 3)
    assert cluster.holders(job_id) == [0, 1, 2]
    # Federation: a job only node 0 holds, asked for on node 2.
    lone = cluster.call(0, "ADDJOB", "fq", "moved over tls", 5000, "REPLICATE", 1)
    got = cluster.call(2, "GETJOB", "TIMEOUT", 5000, "FROM", "fq")
    assert got and got[0][1] == lone and got[0][2] == b"moved over tls"

    # Strangers: a plain TCP peer, a TLS peer without a certificate, one
    # whose certificate another CA signed: none completes the handshake.
    port = cluster.port(0)
    with socket.create_connection(("127.0.0.1", port + BUS_OFFSET), timeout=10) as plain:
        plain.sendall(frame([header(b"e" * 40, 1), {"type": "PING", "gossip": []}]))
        reply = received_until_closed(plain)
        assert cluster.ids[0].encode() not in reply
    for directory, cert in ((None, False), (theirs, True)):
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            with tls_peer(port, directory, cert) as peer:
                # TLS 1.3 reports a refused client certificate on the first read.
                peer.sendall(frame([header(b"e" * 40, 1), {"type": "PING", "gossip": []}]))
                assert received_until_closed(peer) == b""
                raise ConnectionResetError("closed without a word")
    if not secret:
        cluster.wait_joined()
        return
    # A peer with the cluster's certificate but not the secret: still refused.
    with tls_peer(port, ours) as peer:
        peer.sendall(frame([header(b"e" * 40, 1), {"type": "MEET", "gossip": []}]))
        reply = received_until_closed(peer)
        assert cluster.ids[0].encode() not in reply
    wait_until(lambda: int(cluster.info_section(0, "bus")["bus_auth_failures"]) >= 1, 5)
    assert set(cluster.cluster_nodes(0)) == set(cluster.ids)  # no rogue joined
    cluster.wait_joined()
