"""Data source options, looked up case-insensitively.

Spark hands options over as a case-insensitive mapping, but ``dict(options)``
lower-cases every key, so ``d["maxJobsPerTrigger"]`` silently misses and a
default wins (spark-notes pitfall 1). Everything here goes through
``Options``, which lower-cases both sides of every lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from disque.client import ConnectionSecurity, DisqueClient, addjob_options, parse_nodes

DEFAULT_NODES = "127.0.0.1:7711"
MAX_ADDJOBS_ROWS = 10_000  # the node's limit of jobs per ADDJOBS


class OptionError(ValueError):
    """An option has a value the connector cannot use."""


class Options:
    """A case-insensitive, typed view of a data source's string options."""

    def __init__(self, options: Mapping[str, Any] | None) -> None:
        self._values = {str(k).lower(): v for k, v in (options or {}).items()}

    def get(self, name: str, default: str | None = None) -> str | None:
        """The raw string value, or ``default`` when absent or empty."""
        value = self._values.get(name.lower())
        if value is None or str(value).strip() == "":
            return default
        return str(value).strip()

    def int(self, name: str, default: int | None = None, minimum: int | None = None) -> int | None:
        """An integer option; ``OptionError`` names the option when it is not one."""
        value = self.get(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise OptionError("option %r must be an integer, got %r" % (name, value)) from None
        if minimum is not None and number < minimum:
            raise OptionError("option %r must be >= %d, got %d" % (name, minimum, number))
        return number

    def float(self, name: str, default: float | None = None) -> float | None:
        """A float option."""
        value = self.get(name)
        if value is None:
            return default
        try:
            return float(value)
        except ValueError:
            raise OptionError("option %r must be a number, got %r" % (name, value)) from None

    def bool(self, name: str, default: bool = False) -> bool:
        """``true/false``, ``yes/no``, ``1/0``, ``on/off``."""
        value = self.get(name)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in ("true", "yes", "1", "on"):
            return True
        if lowered in ("false", "no", "0", "off"):
            return False
        raise OptionError("option %r must be true or false, got %r" % (name, value))

    def list(self, name: str) -> list[str]:
        """A comma-separated list, blanks dropped."""
        value = self.get(name)
        return [part.strip() for part in value.split(",") if part.strip()] if value else []


@dataclass(frozen=True)
class ConnectionOptions:
    """How to reach the cluster (picklable: shipped to executors)."""

    nodes: str = DEFAULT_NODES
    security: ConnectionSecurity = ConnectionSecurity()
    socket_timeout: float = 30.0

    @classmethod
    def parse(cls, options: Options, min_socket_timeout: float = 0.0) -> "ConnectionOptions":
        nodes = options.get("nodes", DEFAULT_NODES)
        try:
            parse_nodes(nodes)
        except ValueError as exc:
            raise OptionError("option 'nodes' must be host:port[,host:port...]: %s" % exc) from None
        timeout = max(options.float("socketTimeout", 30.0), min_socket_timeout)
        cert, key = options.get("tlsCertFile"), options.get("tlsKeyFile")
        if (cert is None) != (key is None):
            raise OptionError("options 'tlsCertFile' and 'tlsKeyFile' go together")
        user, password = options.get("user"), options.get("password")
        if user is not None and password is None:
            raise OptionError("option 'user' needs option 'password'")
        security = ConnectionSecurity(
            tls=options.bool("tls"), tls_ca_cert_file=options.get("tlsCaCertFile"),
            tls_cert_file=cert, tls_key_file=key, tls_insecure=options.bool("tlsInsecure"),
            user=user, password=password)
        return cls(nodes, security, timeout)

    @property
    def password(self) -> str | None:
        """The AUTH password, if any."""
        return self.security.password

    def client(self, nodes: str | Sequence[tuple[str, int]] | None = None,
               **kwargs: Any) -> DisqueClient:
        """A new client, to ``nodes`` (default: the ``nodes`` option); it connects on
        first use."""
        return DisqueClient(self.nodes if nodes is None else nodes, security=self.security,
                            socket_timeout=self.socket_timeout, **kwargs)


@dataclass(frozen=True)
class AddJobOptions:
    """The ADDJOB options a writer applies to every row."""

    queue: str | None = None
    timeout_ms: int = 10_000
    replicate: int | None = None
    delay: int | None = None
    retry: int | None = None
    ttl: int | None = None
    maxlen: int | None = None
    async_: bool = False
    batch_size: int = 1000  # rows per ADDJOBS (the node takes at most 10,000)
    dedup: bool = True  # a DEDUPID per row (docs/dedup.md)

    @classmethod
    def parse(cls, options: Options) -> "AddJobOptions":
        return cls(queue=options.get("queue"),
                   timeout_ms=options.int("timeout", 10_000, minimum=0),
                   replicate=options.int("replicate", minimum=1),
                   delay=options.int("delay", minimum=0),
                   retry=options.int("retry", minimum=0),
                   ttl=options.int("ttl", minimum=1),
                   maxlen=options.int("maxlen", minimum=1),
                   async_=options.bool("async"),
                   batch_size=min(options.int("batchSize", 1000, minimum=1),
                                  MAX_ADDJOBS_ROWS),
                   dedup=options.bool("dedup", True))

    def pending_wait(self) -> float:
        """How long a job answered -PENDING is asked again, in seconds: its DEDUPID's
        first ADDJOB waits for replicas at most its timeout, then creates it or fails."""
        return self.timeout_ms / 1000 + 5.0

    def keywords(self) -> dict[str, Any]:
        """The options as ``DisqueClient.add_many``'s keywords."""
        return {"timeout_ms": self.timeout_ms, "replicate": self.replicate, "delay": self.delay,
                "retry": self.retry, "ttl": self.ttl, "maxlen": self.maxlen,
                "async_": self.async_}

    def tail(self) -> tuple:
        """The words after ``ADDJOBS queue``: the timeout, then the options."""
        return (self.timeout_ms,) + addjob_options(
            replicate=self.replicate, delay=self.delay, retry=self.retry, ttl=self.ttl,
            maxlen=self.maxlen, async_=self.async_)
