"""TLS on the client port (docs/security.md "TLS"): certificates from
``disque-server --gen-certs``, clients through redis-py ``ssl=True`` and
``redis-cli --tls``, client certificates as tls-auth-clients says, and
the protocols tls-protocols allows.
"""

from __future__ import annotations

import socket
import ssl
import stat
import subprocess
import time
from pathlib import Path

import pytest
import redis

from disque.net import tls
from tests.support.process import REPO, SERVER, DisqueProcess, free_port, wait_until
from tests.support.tls import GEN_CERTS_TIMEOUT, gen_certs, tls_config, tls_handshake


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    """A development CA and certificates, made by the real command line."""
    return gen_certs(tmp_path_factory.mktemp("certs") / "tls")


def tls_client(certs: Path, port: int, with_cert: bool = True, **kwargs) -> redis.Redis:
    if with_cert:
        kwargs.update(ssl_certfile=str(certs / "client.crt"), ssl_keyfile=str(certs / "client.key"))
    return redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(certs / "ca.crt"),
                       socket_timeout=10, **kwargs)


def refused(certs: Path, port: int, **kwargs) -> bool:
    try:
        reply = tls_handshake(certs, port, **kwargs)
    except (ssl.SSLError, OSError):
        return True
    # TLS 1.3 sends the client's certificate after the handshake: the
    # server's refusal arrives as the connection closing instead of a reply.
    return reply == b""


def test_gen_certs_writes_a_ca_and_certificates_for_loopback(certs):
    from cryptography import x509

    names = sorted(p.name for p in certs.iterdir())
    assert names == ["ca.crt", "ca.key", "client.crt", "client.key", "node.crt", "node.key"]
    for key in ("ca.key", "node.key", "client.key"):
        assert stat.S_IMODE((certs / key).stat().st_mode) == 0o600
    node = x509.load_pem_x509_certificate((certs / "node.crt").read_bytes())
    san = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert socket.gethostname() in san.get_values_for_type(x509.DNSName)
    assert "127.0.0.1" in [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    usage = node.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {u._name for u in usage} == {"serverAuth", "clientAuth"}
    # Never overwrites: a second run into the same place fails and says why.
    again = subprocess.run(SERVER + ["--gen-certs", str(certs)], cwd=REPO, capture_output=True,
                           text=True, timeout=GEN_CERTS_TIMEOUT)
    assert again.returncode == 1 and "exists" in again.stderr


def test_job_life_cycle_over_tls_beside_the_plain_port(server_factory, certs):
    tls_port = free_port()
    node = server_factory(tls_config(certs, tls_port))
    client = tls_client(certs, tls_port)
    try:
        job_id = client.execute_command("ADDJOB", "tlsq", "over tls", 0).decode()
        assert client.execute_command("QLEN", "tlsq") == 1
        [[queue, got_id, body]] = client.execute_command("GETJOB", "FROM", "tlsq")
        assert (queue, got_id.decode(), body) == (b"tlsq", job_id, b"over tls")
        assert client.execute_command("ACKJOB", job_id) == 1
        assert client.execute_command("SHOW", job_id) is None
        # The plain port serves the same node meanwhile.
        assert node.call("ADDJOB", "tlsq", "plain", 0)
        assert client.execute_command("QLEN", "tlsq") == 1
    finally:
        client.close()


def test_redis_cli_over_tls(server_factory, certs, redis_cli):
    tls_port = free_port()
    server_factory(tls_config(certs, tls_port))

    def cli(*args: str) -> str:
        result = subprocess.run([redis_cli, "--tls", "--cacert", str(certs / "ca.crt"),
                                 "--cert", str(certs / "client.crt"),
                                 "--key", str(certs / "client.key"),
                                 "-p", str(tls_port), *args],
                                capture_output=True, text=True, timeout=20)
        assert result.stderr == "", result.stderr
        return result.stdout.strip()

    job_id = cli("ADDJOB", "cliq", "hello", "0")
    assert job_id.startswith("D-")
    assert cli("GETJOB", "FROM", "cliq").splitlines() == ["cliq", job_id, "hello"]
    assert cli("ACKJOB", job_id) == "1"


def test_auth_clients_yes_refuses_a_client_without_certificate(server_factory, certs):
    tls_port = free_port()
    server_factory(tls_config(certs, tls_port, "tls-auth-clients yes\n"))
    assert refused(certs, tls_port, with_cert=False)
    assert tls_handshake(certs, tls_port, with_cert=True) == b"+PONG\r\n"
    client = tls_client(certs, tls_port, with_cert=False)
    with pytest.raises(redis.ConnectionError):
        client.execute_command("ADDJOB", "q", "x", 0)
    client.close()


def test_failed_handshakes_are_counted_each_and_logged_once_per_burst(server_factory, certs):
    """A client without a certificate was dropped with nothing in the log."""
    tls_port = free_port()
    node = server_factory(tls_config(certs, tls_port, "tls-auth-clients yes\n"))
    burst = 8
    started = time.monotonic()
    for _ in range(burst):
        assert refused(certs, tls_port, with_cert=False)
    elapsed_ms = (time.monotonic() - started) * 1000
    wait_until(lambda: int(node.call("INFO", "security")["tls_client_handshake_failures"])
               == burst, message="every failed handshake counted")
    assert tls_handshake(certs, tls_port, with_cert=True) == b"+PONG\r\n"
    lines = [line for line in node.log_path.read_text().splitlines()
             if "TLS handshake with a client on port %d failed" % tls_port in line]
    # One line per interval at most: one for a burst shorter than the interval.
    assert 1 <= len(lines) <= 1 + elapsed_ms // tls.HANDSHAKE_LOG_INTERVAL_MS, lines
    assert lines[0].endswith("failed: peer did not return a certificate")
    assert int(node.call("INFO", "security")["tls_client_handshake_failures"]) == burst


def test_auth_clients_optional_and_no_accept_both(server_factory, certs):
    optional_port, no_port = free_port(), free_port()
    server_factory(tls_config(certs, optional_port, "tls-auth-clients optional\n"))
    server_factory(tls_config(certs, no_port, "tls-auth-clients no\n"))
    for port in (optional_port, no_port):
        assert tls_handshake(certs, port, with_cert=False) == b"+PONG\r\n"
        assert tls_handshake(certs, port, with_cert=True) == b"+PONG\r\n"


def test_tls_protocols_restricts_the_versions(server_factory, certs):
    tls_port = free_port()
    server_factory(tls_config(certs, tls_port, 'tls-protocols "TLSv1.3"\n'))
    assert tls_handshake(certs, tls_port, True, ssl.TLSVersion.TLSv1_3) == b"+PONG\r\n"
    assert refused(certs, tls_port, with_cert=True, version=ssl.TLSVersion.TLSv1_2)


def test_tls_only_node_with_port_zero(tmp_path, certs):
    tls_port = free_port()
    node = DisqueProcess(tmp_path / "tls-only", config=tls_config(certs, tls_port, "port 0\n"))
    node.start(wait=False)
    wait_until(lambda: tls_handshake(certs, tls_port, True) == b"+PONG\r\n",
               message="PING over TLS on %d" % tls_port)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", node.port), timeout=2).close()


def test_ciphersuites_are_applied(server_factory, certs):
    tls_port = free_port()
    server_factory(tls_config(certs, tls_port,
                              "tls-ciphersuites TLS_CHACHA20_POLY1305_SHA256\n"))
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    context.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    with socket.create_connection(("127.0.0.1", tls_port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
            assert conn.cipher()[0] == "TLS_CHACHA20_POLY1305_SHA256"


def test_handshake_never_finished_is_closed(server_factory, certs):
    tls_port = free_port()
    server_factory(tls_config(certs, tls_port, "client-request-timeout 1\n"))
    with socket.create_connection(("127.0.0.1", tls_port), timeout=10) as raw:
        # No ClientHello: the server gives up after the timeout and closes.
        assert raw.recv(64) == b""


def test_bad_tls_config_stops_the_start_with_a_reason(tmp_path, certs):
    node = DisqueProcess(tmp_path / "bad", config="tls-port %d\ntls-cert-file %s\n"
                         % (free_port(), certs / "missing.crt"))
    node.start(wait=False)
    assert node.wait_exit() == 1
    assert "Can't configure TLS: TLS needs tls-cert-file and tls-key-file" in node.tail_log()
