"""The project's own client and worker on a TLS-only node that asks for client
certificates and an ACL user (``ConnectionSecurity``, docs/worker.md "TLS and
ACL users")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from disque.client import (AuthenticationError, ConnectionSecurity, DisqueClient,
                           NoNodeAvailable)
from tests.support.process import REPO, wait_until
from tests.support.tls import APP_PASSWORD, APP_USER, gen_certs, start_tls_only_node

WORKER_CLI = [sys.executable, "-m", "disque.worker.cli"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return gen_certs(tmp_path_factory.mktemp("certs") / "tls")


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory, certs):
    """A TLS-only node (tests/support/tls.py): "127.0.0.1:port"."""
    node, address = start_tls_only_node(tmp_path_factory.mktemp("tls-only"), certs)
    node.shared = True
    yield address
    node.stop()
    assert node.verify() == []


def secure(certs: Path, **changes) -> ConnectionSecurity:
    fields = dict(tls=True, tls_ca_cert_file=str(certs / "ca.crt"),
                  tls_cert_file=str(certs / "client.crt"), tls_key_file=str(certs / "client.key"),
                  user=APP_USER, password=APP_PASSWORD)
    fields.update(changes)
    return ConnectionSecurity(**fields)


def test_client_adds_and_gets_a_job_over_tls_as_an_acl_user(tls_node, certs):
    with DisqueClient(tls_node, security=secure(certs)) as client:
        job_id = client.add("tq", b"over tls")
        [job] = client.get_jobs("tq", timeout_ms=5000)
        assert (job.queue, job.id, job.body) == ("tq", job_id, b"over tls")
        assert client.ack_jobs([job.id]) == 1
        # Pipelined paths read the TLS socket too.
        ids = client.add_jobs([("tq", b"a"), ("tq", b"b")])
        assert client.qlen("tq") == 2 and client.ack_jobs(ids) == 2
        assert client.execute("ACL", "WHOAMI") == b"app"


def test_wrong_ca_fails_verification(tls_node, certs, tmp_path):
    other = gen_certs(tmp_path / "other")
    client = DisqueClient(tls_node, security=secure(certs, tls_ca_cert_file=str(other / "ca.crt")),
                          max_attempts=1)
    with pytest.raises(NoNodeAvailable, match="certificate verify failed"):
        client.add("tq", b"never")
    # The same CA with verification turned off connects.
    with DisqueClient(tls_node, security=secure(certs, tls_ca_cert_file=None,
                                                tls_insecure=True)) as client:
        assert client.execute("PING") == b"PONG"


def test_hostname_is_checked(tls_node, certs):
    """The node's certificate names 127.0.0.1 and localhost, not 127.0.0.2 (loopback too)."""
    port = tls_node.rsplit(":", 1)[1]
    with pytest.raises(NoNodeAvailable, match="match"):
        DisqueClient("127.0.0.2:%s" % port, security=secure(certs), max_attempts=1).connect()


def test_what_the_node_refuses(tls_node, certs):
    # Plain RESP on the TLS port: the handshake fails, no reply.
    with pytest.raises(NoNodeAvailable):
        DisqueClient(tls_node, max_attempts=1).connect()
    # No client certificate with tls-auth-clients yes.
    with pytest.raises(NoNodeAvailable):
        DisqueClient(tls_node, security=secure(certs, tls_cert_file=None, tls_key_file=None),
                     max_attempts=1).connect()
    with pytest.raises(AuthenticationError):
        DisqueClient(tls_node, security=secure(certs, password="wrong")).connect()


def test_security_options_are_checked():
    with pytest.raises(ValueError, match="tls_key_file"):
        ConnectionSecurity(tls_cert_file="client.crt")
    with pytest.raises(ValueError, match="needs a password"):
        ConnectionSecurity(user="app")
    assert "pw" not in repr(ConnectionSecurity(user="app", password="pw"))
    assert ConnectionSecurity(tls_ca_cert_file="ca.crt").uses_tls
    assert not ConnectionSecurity(password="pw").uses_tls
    with pytest.raises(TypeError):
        DisqueClient(security=ConnectionSecurity(password="a"), password="b")


def test_disque_worker_processes_a_job_over_tls(tls_node, certs, tmp_path):
    """The real command: flags for the files, the user and password from the environment."""
    (tmp_path / "tlsjob.py").write_text(
        "def handle(job):\n    open(%r, 'ab').write(job.body + b'\\n')\n"
        % str(tmp_path / "done.txt"))
    env = dict(os.environ, PYTHONPATH=str(REPO), DISQUE_USER=APP_USER,
               DISQUE_PASSWORD=APP_PASSWORD)
    with DisqueClient(tls_node, security=secure(certs)) as client:
        client.add("tqworker", b"via the worker")
        log = open(tmp_path / "worker.log", "wb")
        proc = subprocess.Popen(
            WORKER_CLI + ["tlsjob:handle", "--queue", "tqworker", "--cluster", tls_node,
                          "--tls", "--tls-ca-cert-file", str(certs / "ca.crt"),
                          "--tls-cert-file", str(certs / "client.crt"),
                          "--tls-key-file", str(certs / "client.key")],
            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: (tmp_path / "done.txt").exists()
                       and (tmp_path / "done.txt").read_bytes() == b"via the worker\n",
                       timeout=20, message="the worker ran the job")
            wait_until(lambda: client.qlen("tqworker") == 0
                       and not list(client.jscan("tqworker")), message="the job acknowledged")
            proc.terminate()
            assert proc.wait(15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
            print((tmp_path / "worker.log").read_text())


def test_disque_worker_with_the_wrong_password_exits_3(tls_node, certs, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    (tmp_path / "tlsjob.py").write_text("def handle(job):\n    pass\n")
    result = subprocess.run(
        WORKER_CLI + ["tlsjob:handle", "--queue", "tqworker", "--cluster", tls_node,
                      "--tls-ca-cert-file", str(certs / "ca.crt"),
                      "--tls-cert-file", str(certs / "client.crt"),
                      "--tls-key-file", str(certs / "client.key"),
                      "--user", APP_USER, "--password", "wrong"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 3, result.stderr
