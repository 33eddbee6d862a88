"""TLS for the client port and the cluster bus: SSL contexts from the config,
and the development certificates of ``disque-server --gen-certs``.

The directives are Redis' (docs/security.md "TLS"). ``server_context``
serves the TLS client port (and the bus listener under ``tls-cluster``);
``client_context`` is what a node presents when it opens a bus link. Both
verify peers against ``tls-ca-cert-file`` / ``tls-ca-cert-dir``.

asyncio and uvloop close a connection whose handshake failed without a
word to the application, so the client port's context makes SSL objects
that report such a failure (``HandshakeFailures``): a client without the
certificate ``tls-auth-clients yes`` asks for is counted and logged.

Python's ``ssl`` has no call for TLS 1.3 ciphersuites, so
``tls-ciphersuites`` reaches OpenSSL's ``SSL_CTX_set_ciphersuites``
through ctypes on the context's own ``SSL_CTX`` (checked to be the right
object before it is used).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
import sys
import time
from typing import TYPE_CHECKING, Callable

from disque.context.log import LogThrottle, logger

if TYPE_CHECKING:
    import ctypes

    from disque.config import Config

# tls-protocols' names (disque.config.table.TLS_PROTOCOLS) to ssl's versions.
PROTOCOL_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
DEFAULT_PROTOCOLS = "TLSv1.2 TLSv1.3"  # Redis' default when tls-protocols is not set
AUTH_CLIENTS_MODES = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL,
                      "no": ssl.CERT_NONE}

# --gen-certs: the files written, and how long they are valid.
CA_CERT_FILE = "ca.crt"
CA_KEY_FILE = "ca.key"
NODE_CERT_FILE = "node.crt"
NODE_KEY_FILE = "node.key"
CLIENT_CERT_FILE = "client.crt"
CLIENT_KEY_FILE = "client.key"
CERT_DAYS = 365 * 2
KEY_BITS = 2048


# A failed handshake on the client port is logged at most this often (each
# one is counted): a client retrying without its certificate, or a scan,
# cannot fill the log.
HANDSHAKE_LOG_INTERVAL_MS = 10_000
HANDSHAKE_FAILED_LOG = "TLS handshake with a client on port %d failed: %s%s"
HELD_BACK_NOTE = " (%d more since the last report)"


class TlsConfigError(Exception):
    """The TLS directives cannot make a context; the message says which and why."""


def monotonic_ms() -> int:
    """The monotonic clock in milliseconds."""
    return time.monotonic_ns() // 1_000_000


def handshake_error_text(error: ssl.SSLError) -> str:
    """OpenSSL's reason in words (``peer did not return a certificate``)."""
    if error.reason:
        return error.reason.lower().replace("_", " ")
    return str(error)


class HandshakeFailures:
    """The failed TLS handshakes of a listener: counted (INFO security
    ``tls_client_handshake_failures``) and logged, at most once per
    HANDSHAKE_LOG_INTERVAL_MS with the number held back since the last line."""

    __slots__ = ("port", "count", "_log", "_clock_ms")

    def __init__(self, port: int, clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self.port = port
        self.count = 0
        self._log = LogThrottle(HANDSHAKE_LOG_INTERVAL_MS)
        self._clock_ms = clock_ms

    def failed(self, error: ssl.SSLError) -> None:
        """Count one failed handshake; log it unless one was logged lately."""
        self.count += 1
        held = self._log.admit(self._clock_ms())
        if held >= 0:
            logger.warning(HANDSHAKE_FAILED_LOG, self.port, handshake_error_text(error),
                           HELD_BACK_NOTE % held if held else "")


class ReportingSSLObject(ssl.SSLObject):
    """An SSLObject whose failed handshake is reported to its context's
    HandshakeFailures before the event loop drops the connection."""

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise  # the handshake goes on when more bytes arrive
        except ssl.SSLError as exc:
            context = self.context
            if isinstance(context, ReportingContext):
                context.failures.failed(exc)
            raise


class ReportingContext(ssl.SSLContext):
    """A server context whose connections report failed handshakes to ``failures``."""

    sslobject_class = ReportingSSLObject
    failures: HandshakeFailures


def _reporting_context(failures: HandshakeFailures) -> ReportingContext:
    context = ReportingContext(ssl.PROTOCOL_TLS_SERVER)
    context.failures = failures
    return context


def server_context(config: Config, auth_clients: str | None = None,
                   failures: HandshakeFailures | None = None) -> ssl.SSLContext:
    """The context of a TLS listener: tls-cert-file/tls-key-file presented,
    client certificates asked for as ``auth_clients`` says (yes, optional,
    no; tls-auth-clients when None), the protocols and ciphers configured,
    failed handshakes reported to ``failures`` when given. Raises TlsConfigError."""
    mode = AUTH_CLIENTS_MODES[auth_clients or config.tls_auth_clients]
    context = (ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER) if failures is None
               else _reporting_context(failures))
    _load_own_certificate(context, config)
    if mode != ssl.CERT_NONE:
        if not (config.tls_ca_cert_file or config.tls_ca_cert_dir):
            raise TlsConfigError("tls-auth-clients needs tls-ca-cert-file or tls-ca-cert-dir to "
                                 "verify client certificates (or set tls-auth-clients no)")
        _load_ca(context, config)
    context.verify_mode = mode
    if config.tls_prefer_server_ciphers:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    _apply_protocols_and_ciphers(context, config)
    return context


def client_context(config: Config, check_hostname: bool = False) -> ssl.SSLContext:
    """The context of an outgoing TLS connection (a bus link): the node's
    certificate presented, the peer's verified against the CA. Hostnames
    are not checked unless asked (peers are dialled by the IP they gossip,
    as Redis' cluster bus does); the CA is what is trusted. Raises
    TlsConfigError."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = check_hostname
    if not (config.tls_ca_cert_file or config.tls_ca_cert_dir):
        raise TlsConfigError("TLS connections need tls-ca-cert-file or tls-ca-cert-dir to "
                             "verify the peer")
    _load_ca(context, config)
    _load_own_certificate(context, config)
    context.verify_mode = ssl.CERT_REQUIRED
    _apply_protocols_and_ciphers(context, config)
    return context


def _load_own_certificate(context: ssl.SSLContext, config: Config) -> None:
    if not config.tls_cert_file or not config.tls_key_file:
        raise TlsConfigError("TLS needs tls-cert-file and tls-key-file")
    try:
        context.load_cert_chain(config.tls_cert_file, config.tls_key_file,
                                password=config.tls_key_file_pass or None)
    except OSError as exc:
        raise TlsConfigError("Can't load the certificate %s or its key %s: %s" % (
            config.tls_cert_file, config.tls_key_file, exc.strerror or exc)) from None
    except ssl.SSLError as exc:
        raise TlsConfigError("Can't load the certificate %s with the key %s: %s" % (
            config.tls_cert_file, config.tls_key_file, exc.reason or exc)) from None


def _load_ca(context: ssl.SSLContext, config: Config) -> None:
    try:
        context.load_verify_locations(cafile=config.tls_ca_cert_file or None,
                                      capath=config.tls_ca_cert_dir or None)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError("Can't load the CA certificates (tls-ca-cert-file %r, "
                             "tls-ca-cert-dir %r): %s" % (
                                 config.tls_ca_cert_file, config.tls_ca_cert_dir,
                                 getattr(exc, "strerror", None) or exc)) from None


def _apply_protocols_and_ciphers(context: ssl.SSLContext, config: Config) -> None:
    versions = sorted(PROTOCOL_VERSIONS[name]
                      for name in (config.tls_protocols or DEFAULT_PROTOCOLS).split())
    try:
        # The listed versions' range: OpenSSL takes a minimum and a maximum.
        context.minimum_version = versions[0]
        context.maximum_version = versions[-1]
    except ValueError as exc:
        raise TlsConfigError("tls-protocols %r: %s" % (config.tls_protocols, exc)) from None
    if config.tls_ciphers:
        try:
            context.set_ciphers(config.tls_ciphers)
        except ssl.SSLError:
            raise TlsConfigError("tls-ciphers %r names no cipher this OpenSSL knows"
                                 % config.tls_ciphers) from None
    if config.tls_ciphersuites:
        set_ciphersuites(context, config.tls_ciphersuites)


def set_ciphersuites(context: ssl.SSLContext, suites: str) -> None:
    """TLS 1.3 ciphersuites (``TLS_AES_256_GCM_SHA384:...``) on ``context``.

    ``ssl`` has no such call: OpenSSL's is reached through ctypes, on the
    ``SSL_CTX`` pointer that follows the object header of CPython's
    ``SSLContext``. The pointer is trusted only if OpenSSL reports for it
    the options ``context`` reports. Raises TlsConfigError.
    """
    import ctypes  # only tls-ciphersuites needs it
    libssl = _libssl()
    if libssl is None or sys.implementation.name != "cpython":
        raise TlsConfigError("tls-ciphersuites is not supported with this Python's ssl module")
    libssl.SSL_CTX_get_options.restype = ctypes.c_uint64
    libssl.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
    libssl.SSL_CTX_set_ciphersuites.restype = ctypes.c_int
    libssl.SSL_CTX_set_ciphersuites.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    header = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
    ssl_ctx = ctypes.c_void_p.from_address(id(context) + header).value
    if not ssl_ctx or libssl.SSL_CTX_get_options(ssl_ctx) != int(context.options):
        raise TlsConfigError("tls-ciphersuites is not supported with this Python's ssl module")
    if libssl.SSL_CTX_set_ciphersuites(ssl_ctx, suites.encode()) != 1:
        raise TlsConfigError("tls-ciphersuites %r names no TLS 1.3 ciphersuite this OpenSSL "
                             "knows" % suites)


def _libssl() -> ctypes.CDLL | None:
    """The libssl the ssl module is linked with (already mapped into the process)."""
    import ctypes
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libssl" in line and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(library, "SSL_CTX_set_ciphersuites"):
            return library
    return None


# ------------------------------------------------------------ --gen-certs

def generate_certificates(directory: str, hostnames: list[str] | None = None) -> list[str]:
    """Write a CA, a node certificate (server and client use; SAN 127.0.0.1,
    ::1, localhost, the hostname and ``hostnames``) and a client certificate
    into ``directory``, for development and tests; return the paths written.
    Existing files are not overwritten (FileExistsError)."""
    # Imported here: only --gen-certs needs cryptography.
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    os.makedirs(directory, exist_ok=True)
    names = [CA_CERT_FILE, CA_KEY_FILE, NODE_CERT_FILE, NODE_KEY_FILE, CLIENT_CERT_FILE,
             CLIENT_KEY_FILE]
    paths = [os.path.join(directory, name) for name in names]
    for path in paths:
        if os.path.exists(path):
            raise FileExistsError("%s exists: --gen-certs writes into an empty place" % path)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=CERT_DAYS)

    def new_key() -> rsa.RSAPrivateKey:
        return rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)

    def named(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Disque development"),
                          x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    ca_key = new_key()
    ca_name = named("Disque development CA")
    ca_cert = (x509.CertificateBuilder()
               .subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                            crl_sign=True, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                              critical=False)
               .sign(ca_key, hashes.SHA256()))

    def issued(common_name: str, usages: list[x509.ObjectIdentifier],
               san: list[x509.GeneralName] | None) -> tuple[x509.Certificate, rsa.RSAPrivateKey]:
        key = new_key()
        builder = (x509.CertificateBuilder()
                   .subject_name(named(common_name)).issuer_name(ca_name)
                   .public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True,
                                                key_cert_sign=False, crl_sign=False,
                                                content_commitment=False, data_encipherment=False,
                                                key_agreement=False, encipher_only=False,
                                                decipher_only=False), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                       ca_key.public_key()), critical=False))
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    dns = ["localhost", socket.gethostname()] + list(hostnames or [])
    ips = ["127.0.0.1", "::1"]
    san: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    for name in dict.fromkeys(dns):
        try:
            san.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            san.append(x509.DNSName(name))
    node_cert, node_key = issued("disque node", [ExtendedKeyUsageOID.SERVER_AUTH,
                                                 ExtendedKeyUsageOID.CLIENT_AUTH], san)
    client_cert, client_key = issued("disque client", [ExtendedKeyUsageOID.CLIENT_AUTH], None)

    def cert_pem(cert: x509.Certificate) -> bytes:
        return cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(key: rsa.RSAPrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption())

    contents = [cert_pem(ca_cert), key_pem(ca_key), cert_pem(node_cert), key_pem(node_key),
                cert_pem(client_cert), key_pem(client_key)]
    for path, data in zip(paths, contents):
        secret = path.endswith(".key")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if secret else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    return paths
