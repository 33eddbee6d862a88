"""TLS for tests: certificates from the real ``--gen-certs``, node configs, and a
TLS-only node that asks for client certificates and an ACL user."""

from __future__ import annotations

import socket
import ssl
import subprocess
from pathlib import Path

from tests.support.process import REPO, SERVER, DisqueProcess, free_port, wait_until

GEN_CERTS_TIMEOUT = 60
# The user the TLS-only node lets in (the default user is off).
APP_USER, APP_PASSWORD = "app", "app-pw"


def gen_certs(directory: Path) -> Path:
    """A development CA and certificates, made by the real command line."""
    result = subprocess.run(SERVER + ["--gen-certs", str(directory)], cwd=REPO,
                            capture_output=True, text=True, timeout=GEN_CERTS_TIMEOUT)
    assert result.returncode == 0, result.stderr
    return directory


def tls_config(certs: Path, tls_port: int, extra: str = "") -> str:
    return ("tls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n%s"
            % (tls_port, certs / "node.crt", certs / "node.key", certs / "ca.crt", extra))


def tls_handshake(certs: Path, port: int, with_cert: bool,
                  version: ssl.TLSVersion | None = None) -> bytes:
    """Handshake, send PING and return the reply (an SSL/OS error when refused)."""
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    if with_cert:
        context.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    if version is not None:
        context.minimum_version = context.maximum_version = version
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64)


def start_tls_only_node(workdir: Path, certs: Path) -> tuple[DisqueProcess, str]:
    """A node serving TLS only (``port 0``), client certificates required, the default
    user off: only APP_USER with its password gets in. Listens on 127.0.0.2 too, an
    address its certificate does not name. The caller stops it."""
    tls_port = free_port()
    extra = ("port 0\nbind 127.0.0.1 127.0.0.2\ntls-auth-clients yes\n"
             "user default off\nuser %s on >%s ~* +@all\n" % (APP_USER, APP_PASSWORD))
    node = DisqueProcess(workdir, config=tls_config(certs, tls_port, extra))
    node.start(wait=False)
    wait_until(lambda: tls_handshake(certs, tls_port, True).startswith(b"-NOAUTH"),
               message="the TLS port answering")
    return node, "127.0.0.1:%d" % tls_port
