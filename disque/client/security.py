"""How a client proves itself and checks the node: TLS and the ACL user.

One ``ConnectionSecurity`` serves ``DisqueClient``, ``disque-worker`` (flags
and environment variables of the same names) and the Spark connector (its
``tls...``, ``user`` and ``password`` options), so the three read alike:

| field | flag | environment | Spark option |
|---|---|---|---|
| ``tls`` | ``--tls`` | ``DISQUE_TLS`` | ``tls`` |
| ``tls_ca_cert_file`` | ``--tls-ca-cert-file`` | ``DISQUE_TLS_CA_CERT_FILE`` | ``tlsCaCertFile`` |
| ``tls_cert_file`` | ``--tls-cert-file`` | ``DISQUE_TLS_CERT_FILE`` | ``tlsCertFile`` |
| ``tls_key_file`` | ``--tls-key-file`` | ``DISQUE_TLS_KEY_FILE`` | ``tlsKeyFile`` |
| ``tls_insecure`` | ``--tls-insecure`` | ``DISQUE_TLS_INSECURE`` | ``tlsInsecure`` |
| ``user`` | ``--user`` | ``DISQUE_USER`` | ``user`` |
| ``password`` | ``--password`` | ``DISQUE_PASSWORD`` | ``password`` |

Verification is on unless ``tls_insecure`` says otherwise: the node's
certificate must chain to the CA file (the system's CAs without one) and
name the host dialled, as redis-py checks it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Mapping

TLS_ENV = "DISQUE_TLS"
TLS_CA_CERT_FILE_ENV = "DISQUE_TLS_CA_CERT_FILE"
TLS_CERT_FILE_ENV = "DISQUE_TLS_CERT_FILE"
TLS_KEY_FILE_ENV = "DISQUE_TLS_KEY_FILE"
TLS_INSECURE_ENV = "DISQUE_TLS_INSECURE"
USER_ENV = "DISQUE_USER"
PASSWORD_ENV = "DISQUE_PASSWORD"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def parse_flag(name: str, value: str) -> bool:
    """``yes/no``, ``true/false``, ``1/0``, ``on/off``; a ``ValueError`` naming ``name``."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("%s must be true or false, got %r" % (name, value))


@dataclass(frozen=True)
class ConnectionSecurity:
    """TLS and credentials for connections to nodes (picklable, password kept out of repr)."""

    tls: bool = False
    tls_ca_cert_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_insecure: bool = False  # no check of the node's certificate nor of its name
    user: str | None = None     # with password: AUTH <user> <password> (an ACL user)
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("a client certificate needs both tls_cert_file and tls_key_file")
        if self.user is not None and self.password is None:
            raise ValueError("user %r needs a password" % self.user)

    @property
    def uses_tls(self) -> bool:
        """Whether connections are TLS: ``tls``, or any TLS file named (a CA or a client
        certificate means nothing on a plain connection, so naming one asks for TLS)."""
        return bool(self.tls or self.tls_ca_cert_file or self.tls_cert_file or self.tls_insecure)

    def connection_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``redis.Connection``/``redis.SSLConnection`` for this."""
        kwargs: dict[str, Any] = {"username": self.user, "password": self.password}
        if self.uses_tls:
            kwargs.update(ssl_ca_certs=self.tls_ca_cert_file, ssl_certfile=self.tls_cert_file,
                          ssl_keyfile=self.tls_key_file,
                          ssl_cert_reqs="none" if self.tls_insecure else "required",
                          ssl_check_hostname=not self.tls_insecure)
        return kwargs

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "ConnectionSecurity":
        """From the ``DISQUE_TLS...``, ``DISQUE_USER`` and ``DISQUE_PASSWORD`` variables."""
        return cls(tls=parse_flag(TLS_ENV, environ.get(TLS_ENV, "")),
                   tls_ca_cert_file=environ.get(TLS_CA_CERT_FILE_ENV) or None,
                   tls_cert_file=environ.get(TLS_CERT_FILE_ENV) or None,
                   tls_key_file=environ.get(TLS_KEY_FILE_ENV) or None,
                   tls_insecure=parse_flag(TLS_INSECURE_ENV, environ.get(TLS_INSECURE_ENV, "")),
                   user=environ.get(USER_ENV) or None,
                   password=environ.get(PASSWORD_ENV) or None)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The flags; each defaults to its environment variable (``from_args`` merges them)."""
        group = parser.add_argument_group(
            "TLS and credentials", "each flag defaults to the environment variable named; "
            "prefer $%s to --password, which other users of the machine can see" % PASSWORD_ENV)
        group.add_argument("--tls", action="store_true", default=None,
                           help="connect over TLS ($%s)" % TLS_ENV)
        group.add_argument("--tls-ca-cert-file", metavar="FILE",
                           help="CA the node's certificate must chain to; the system's CAs "
                                "without it (implies --tls; $%s)" % TLS_CA_CERT_FILE_ENV)
        group.add_argument("--tls-cert-file", metavar="FILE",
                           help="client certificate, for tls-auth-clients (implies --tls; $%s)"
                                % TLS_CERT_FILE_ENV)
        group.add_argument("--tls-key-file", metavar="FILE",
                           help="the client certificate's key ($%s)" % TLS_KEY_FILE_ENV)
        group.add_argument("--tls-insecure", action="store_true", default=None,
                           help="do not verify the node's certificate nor its name "
                                "(implies --tls; $%s)" % TLS_INSECURE_ENV)
        group.add_argument("--user", help="ACL user to AUTH as, with the password ($%s)"
                                          % USER_ENV)
        group.add_argument("--password", help="AUTH password ($%s)" % PASSWORD_ENV)

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str]
                  ) -> "ConnectionSecurity":
        """The flags of ``add_arguments``, each falling back to its environment variable."""
        env = cls.from_env(environ)

        def pick(name: str) -> Any:
            value = getattr(args, name)
            return getattr(env, name) if value is None else value

        return cls(tls=pick("tls"), tls_ca_cert_file=pick("tls_ca_cert_file"),
                   tls_cert_file=pick("tls_cert_file"), tls_key_file=pick("tls_key_file"),
                   tls_insecure=pick("tls_insecure"), user=pick("user"),
                   password=pick("password"))
