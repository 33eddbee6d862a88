"""disque/net/tls.py: SSL contexts from the TLS directives, and their errors."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from disque.net import tls
from disque.config import Config, ConfigError


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    tls.generate_certificates(str(directory))
    return directory


def config(certs: Path, *overrides: str) -> Config:
    base = ["--tls-port", "7712", "--tls-cert-file", str(certs / "node.crt"),
            "--tls-key-file", str(certs / "node.key"),
            "--tls-ca-cert-file", str(certs / "ca.crt")]
    return Config.load(None, base + list(overrides))


def test_server_context_follows_tls_auth_clients(certs):
    assert tls.server_context(config(certs)).verify_mode == ssl.CERT_REQUIRED
    assert tls.server_context(config(certs, "--tls-auth-clients", "optional")).verify_mode \
        == ssl.CERT_OPTIONAL
    assert tls.server_context(config(certs, "--tls-auth-clients", "no")).verify_mode \
        == ssl.CERT_NONE
    # The bus asks for certificates whatever clients are asked.
    no_clients = config(certs, "--tls-auth-clients", "no")
    assert tls.server_context(no_clients, "yes").verify_mode == ssl.CERT_REQUIRED


def test_client_context_verifies_the_peer_without_hostnames(certs):
    context = tls.client_context(config(certs))
    assert context.verify_mode == ssl.CERT_REQUIRED and not context.check_hostname
    assert tls.client_context(config(certs), check_hostname=True).check_hostname


def test_protocols_become_a_version_range(certs):
    default = tls.server_context(config(certs))
    assert (default.minimum_version, default.maximum_version) == (
        ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
    only13 = tls.server_context(config(certs, "--tls-protocols", "tlsv1.3"))
    assert only13.minimum_version == only13.maximum_version == ssl.TLSVersion.TLSv1_3


def test_tls_protocols_directive_takes_known_names_in_any_case():
    assert Config.load(None, ["--tls-protocols", "tlsv1.2 TLSV1.3"]).tls_protocols \
        == "TLSv1.2 TLSv1.3"
    with pytest.raises(ConfigError, match="tls-protocols takes TLSv1"):
        Config.load(None, ["--tls-protocols", "SSLv3"])


@pytest.mark.parametrize("overrides, message", [
    (("--tls-key-file", ""), "TLS needs tls-cert-file and tls-key-file"),
    (("--tls-cert-file", "/nonexistent/node.crt"), "Can't load the certificate"),
    (("--tls-ca-cert-file", ""), "tls-auth-clients needs tls-ca-cert-file"),
    (("--tls-ciphers", "NO-SUCH-CIPHER"), "names no cipher"),
    (("--tls-ciphersuites", "TLS_NO_SUCH_SUITE"), "names no TLS 1.3 ciphersuite"),
])
def test_a_config_that_cannot_make_a_context_says_why(certs, overrides, message):
    with pytest.raises(tls.TlsConfigError, match=message):
        tls.server_context(config(certs, *overrides))


def test_a_key_that_does_not_match_the_certificate_is_refused(certs):
    with pytest.raises(tls.TlsConfigError, match="Can't load the certificate"):
        tls.server_context(config(certs, "--tls-key-file", str(certs / "client.key")))


def test_ciphersuites_reach_openssl(certs):
    context = tls.server_context(config(certs, "--tls-ciphersuites",
                                        "TLS_CHACHA20_POLY1305_SHA256"))
    suites = [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.3"]
    assert suites == ["TLS_CHACHA20_POLY1305_SHA256"]


def test_gen_certs_never_overwrites(certs):
    with pytest.raises(FileExistsError):
        tls.generate_certificates(str(certs))


def handshake_without_certificate(server: ssl.SSLContext, certs: Path) -> None:
    """A client with no certificate against ``server``, in memory; raises the
    server's SSLError (the client's own handshake ends first under TLS 1.3)."""
    client = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    pipes = [ssl.MemoryBIO() for _ in range(4)]
    server_end = server.wrap_bio(pipes[0], pipes[1], server_side=True)
    client_end = client.wrap_bio(pipes[2], pipes[3], server_hostname="127.0.0.1")
    for _ in range(10):
        for end, outgoing, peer_incoming in ((client_end, pipes[3], pipes[0]),
                                             (server_end, pipes[1], pipes[2])):
            try:
                end.do_handshake()
            except ssl.SSLWantReadError:
                pass
            peer_incoming.write(outgoing.read())
    raise AssertionError("the handshake did not fail")


def test_failed_handshakes_are_counted_and_logged_once_per_interval(certs, caplog):
    now = [1_000]
    failures = tls.HandshakeFailures(7712, clock_ms=lambda: now[0])
    context = tls.server_context(config(certs), failures=failures)
    with caplog.at_level("WARNING", logger="disque"):
        for at in (1_000, 1_001, 1_000 + tls.HANDSHAKE_LOG_INTERVAL_MS - 1,
                   1_000 + tls.HANDSHAKE_LOG_INTERVAL_MS):
            now[0] = at
            with pytest.raises(ssl.SSLError, match="PEER_DID_NOT_RETURN_A_CERTIFICATE"):
                handshake_without_certificate(context, certs)
    assert failures.count == 4
    assert [r.getMessage() for r in caplog.records] == [
        "TLS handshake with a client on port 7712 failed: peer did not return a certificate",
        "TLS handshake with a client on port 7712 failed: peer did not return a certificate"
        " (2 more since the last report)"]

