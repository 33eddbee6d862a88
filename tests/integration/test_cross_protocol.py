"""Cross-protocol requests (docs/security.md "Requests that are not Disque's"):
an HTTP request sent to the client port, by curl or by a browser's fetch,
closes the connection at its first line (``POST``) or its ``Host:`` header,
before anything in its body runs, on the plain and the TLS port alike."""

from __future__ import annotations

import socket
import ssl
import subprocess
from pathlib import Path

import pytest

from tests.support.process import free_port, wait_until
from tests.support.tls import gen_certs, tls_config

ATTACK_BODY = b"ADDJOB q x 0\r\nCONFIG SET protected-mode no\r\n"
# What Chromium sends for fetch("http://127.0.0.1:7711/", {method: "POST",
# mode: "no-cors", body: ...}) from a page on another origin.
BROWSER_HEAD = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: keep-alive\r\n"
                b"Content-Length: %d\r\nsec-ch-ua-platform: \"Linux\"\r\n"
                b"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like "
                b"Gecko) Chrome/131.0.0.0 Safari/537.36\r\nContent-Type: text/plain;charset=UTF-8"
                b"\r\nAccept: */*\r\nOrigin: http://attacker.example\r\nSec-Fetch-Site: "
                b"cross-site\r\nSec-Fetch-Mode: no-cors\r\nSec-Fetch-Dest: empty\r\n"
                b"Referer: http://attacker.example/\r\nAccept-Encoding: gzip, deflate, br\r\n"
                b"Accept-Language: en-US,en;q=0.9\r\n\r\n")
CURL_TIMEOUT = 20


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return gen_certs(tmp_path_factory.mktemp("certs") / "tls")


def unharmed(node) -> None:
    """Nothing of the request's body ran, and the attempt was counted and logged."""
    assert node.call("QLEN", "q") == 0
    assert node.call("CONFIG", "GET", "protected-mode") == {b"protected-mode": b"yes"}
    wait_until(lambda: "Possible SECURITY ATTACK" in node.log_path.read_text(),
               message="the attack logged")


def closed_count(node) -> int:
    return int(node.call("INFO", "security")["cross_protocol_closed_connections"])


def curl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["curl", "-sS", "--max-time", "10", *args], capture_output=True,
                          timeout=CURL_TIMEOUT)


def test_curl_posting_commands_runs_none_of_them(server):
    result = curl("-H", "Content-Type: text/plain", "--data-binary", ATTACK_BODY.decode(),
                  "http://127.0.0.1:%d/" % server.port)
    assert result.stdout == b""  # curl: (52) Empty reply from server
    assert result.returncode == 52, result.stderr
    unharmed(server)
    assert closed_count(server) == 1
    assert server.call("PING") is True  # other clients go on


def test_a_browsers_request_from_a_raw_socket_runs_none_of_it(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(BROWSER_HEAD % (server.port, len(ATTACK_BODY)) + ATTACK_BODY)
        assert sock.recv(4096) == b""  # closed with no reply
    unharmed(server)
    # A GET's first line is only an unknown command; its Host: header closes it.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + ATTACK_BODY)
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply == b"-ERR unknown command 'GET'\r\n"
    assert closed_count(server) == 2
    unharmed(server)


def test_the_tls_port_closes_an_https_post_too(server_factory, certs):
    tls_port = free_port()
    node = server_factory(tls_config(certs, tls_port))
    result = curl("--cacert", str(certs / "ca.crt"), "--cert", str(certs / "client.crt"),
                  "--key", str(certs / "client.key"), "-H", "Content-Type: text/plain",
                  "--data-binary", ATTACK_BODY.decode(), "https://127.0.0.1:%d/" % tls_port)
    assert result.stdout == b"" and result.returncode in (52, 56), result.stderr
    unharmed(node)
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    context.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    with socket.create_connection(("127.0.0.1", tls_port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
            conn.sendall(BROWSER_HEAD % (tls_port, len(ATTACK_BODY)) + ATTACK_BODY)
            try:
                assert conn.recv(4096) == b""
            except ssl.SSLError:  # closed without close_notify: closed all the same
                pass
    assert closed_count(node) == 2
    unharmed(node)
