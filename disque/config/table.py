"""The directive table (spec: config.md §2) and the parsers of its one-off directives."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

from typing import TYPE_CHECKING, Final

from disque.config.directive import (
    Directive,
    boolean,
    choice,
    integer,
    memory,
    single_argument,
    string,
)
from disque.config.errors import InvalidValue
from disque.config.users import DEFAULT_USER, User
from disque.config.messages import (
    APPENDFILENAME_PATH,
    INVALID_BACKLOG,
    INVALID_BUS_PORT,
    INVALID_DASHBOARD_HOST,
    INVALID_DATABASES,
    INVALID_FACILITY,
    INVALID_DEDUP_WINDOW,
    INVALID_ENABLE_OPTION,
    INVALID_FSYNC,
    INVALID_KEEPALIVE,
    INVALID_LOGLEVEL,
    INVALID_MAXDELIVER,
    INVALID_MAXCLIENTS,
    INVALID_MAXMEMORY_CLIENTS,
    INVALID_METRICS_MAX_QUEUES,
    INVALID_METRICS_PORT,
    INVALID_POLICY,
    INVALID_PORT,
    INVALID_SAMPLES,
    INVALID_SOCKET_PERM,
    INVALID_SUPERVISED,
    INVALID_TIMEOUT,
    INVALID_GETJOB_MAX_QUEUES,
    INVALID_REQUEST_TIMEOUT,
    INVALID_TLS_AUTH_CLIENTS,
    INVALID_TLS_PORT,
    INVALID_TLS_PROTOCOLS,
    UNAUTH_BUFFER_LIMIT_TOO_SMALL,
    QUERY_BUFFER_LIMIT_TOO_SMALL,
    MAXMEMORY_NOT_POSITIVE,
    NEGATIVE_LATENCY,
    NEGATIVE_MIN_SIZE,
    NEGATIVE_PERCENTAGE,
    NEGATIVE_SLOWLOG_LEN,
    NEGATIVE_SOFT_SECONDS,
    NODE_TIMEOUT_TOO_SMALL,
    NOT_INTEGER,
    NOT_MEMORY,
    PASSWORD_TOO_LONG,
    PROTO_MAX_BULK_LEN_TOO_SMALL,
    SCHEDULE_MAX_BODY_TOO_SMALL,
    TOO_MANY_BIND,
    UNKNOWN_CLIENT_CLASS,
)
from disque.config.values import (
    GB,
    INT_MAX,
    KB,
    LLONG_MIN,
    MB,
    ascii_lower,
    encode,
    file_int,
    format_memory,
    memory_value,
    octal_text,
    quoted_if_set,
    strict_int,
)

if TYPE_CHECKING:
    from disque.config.fields import Settings

MIN_HZ: Final = 1
MAX_HZ: Final = 500
MAX_BIND_ADDRESSES: Final = 16
AUTHPASS_MAX_LEN: Final = 512
KEEPALIVE_YES_SECONDS: Final = 300  # what CONFIG SET tcp-keepalive yes means (compatibility)
_OCTAL: Final = re.compile(r"[0-7]+")
MAX_DASHBOARD_HOSTS: Final = 64
# A DNS name, an IPv4 or IPv6 address (with or without brackets), or * (any).
_HOST_NAME: Final = re.compile(r"\*|[a-z0-9_.-]{1,253}|\[?[0-9a-f:.]{2,45}\]?")


def _check_basename(text: str) -> None:
    if "/" in text or "\\" in text:
        raise InvalidValue(APPENDFILENAME_PATH)


def _check_password(text: str) -> None:
    if len(encode(text)) > AUTHPASS_MAX_LEN:
        raise InvalidValue(PASSWORD_TOO_LONG)


def _parse_bind(args: list[str]) -> list[str]:
    if len(args) > MAX_BIND_ADDRESSES:
        raise InvalidValue(TOO_MANY_BIND)
    return list(args)


def _write_bind(addresses: list[str]) -> str | None:
    return " ".join(addresses) if addresses else None


def _parse_dashboard_hosts(args: list[str]) -> list[str]:
    """Names the dashboard answers to (``Host``), lower-case; ``*`` any."""
    hosts = [ascii_lower(arg) for arg in args if arg]
    if len(hosts) > MAX_DASHBOARD_HOSTS or not all(_HOST_NAME.fullmatch(h) for h in hosts):
        raise InvalidValue(INVALID_DASHBOARD_HOST)
    return hosts


def _set_dashboard_hosts(text: str) -> list[str]:
    return _parse_dashboard_hosts(text.split())


def _parse_socket_perm(args: list[str]) -> int:
    if not _OCTAL.fullmatch(args[0]) or int(args[0], 8) > 0o777:
        raise InvalidValue(INVALID_SOCKET_PERM)
    return int(args[0], 8)


def _clamp_hz(value: int) -> int:
    return min(max(value, MIN_HZ), MAX_HZ)


def _parse_hz(args: list[str]) -> int:
    return _clamp_hz(file_int(args[0]))


def _set_hz(text: str) -> int:
    value = strict_int(text)
    if value < 0:
        raise InvalidValue()
    return _clamp_hz(value)


def _client_limit(words: list[str], parse_seconds: Callable[[str], int]) -> tuple[int, int, int]:
    """Validate one "<class> <hard> <soft> <soft-seconds>" group; sizes take memory units."""
    klass, hard, soft, seconds = words
    if ascii_lower(klass) != "normal":
        raise InvalidValue(UNKNOWN_CLIENT_CLASS)
    hard_bytes, soft_bytes = memory_value(hard), memory_value(soft)
    if hard_bytes < 0 or soft_bytes < 0:
        raise InvalidValue(NOT_MEMORY)
    soft_seconds = parse_seconds(seconds)
    if soft_seconds < 0:
        raise InvalidValue(NEGATIVE_SOFT_SECONDS)
    return hard_bytes, soft_bytes, soft_seconds


def _parse_client_limit(args: list[str]) -> tuple[int, int, int]:
    return _client_limit(args, file_int)


def _set_client_limit(text: str) -> tuple[int, int, int]:
    # Several groups may be given in one string, as in Redis; all are validated
    # before any is accepted, and only the "normal" class exists.
    words = text.split()
    if not words or len(words) % 4:
        raise InvalidValue()
    limits = [_client_limit(words[i:i + 4], strict_int) for i in range(0, len(words), 4)]
    return limits[-1]


def _parse_monitor_limit(args: list[str]) -> tuple[int, int, int]:
    return _client_limit(["normal", *args], file_int)


def _set_monitor_limit(text: str) -> tuple[int, int, int]:
    words = text.split()
    if len(words) != 3:
        raise InvalidValue()
    return _client_limit(["normal", *words], strict_int)


def _show_monitor_limit(value: tuple[int, int, int]) -> str:
    return "{} {} {}".format(*value)


def _write_monitor_limit(value: tuple[int, int, int]) -> str:
    hard, soft, seconds = value
    return f"{format_memory(hard)} {format_memory(soft)} {seconds}"


def _show_client_limit(value: tuple[int, int, int]) -> str:
    return "normal {} {} {}".format(*value)


def _write_client_limit(value: tuple[int, int, int]) -> str:
    hard, soft, seconds = value
    return f"normal {format_memory(hard)} {format_memory(soft)} {seconds}"


def _client_memory(text: str) -> tuple[int, int]:
    """maxmemory-clients: bytes (with units), or ``<n>%`` of maxmemory, as
    ``(bytes, percent)``; 0 turns the limit off."""
    try:
        if text.endswith("%"):
            percent = strict_int(text[:-1])
            if 0 <= percent <= 100:
                return 0, percent
        else:
            value = memory_value(text)
            if value >= 0:
                return value, 0
    except InvalidValue:
        pass
    raise InvalidValue(INVALID_MAXMEMORY_CLIENTS)


def _parse_client_memory(args: list[str]) -> tuple[int, int]:
    return _client_memory(args[0])


def _show_client_memory(value: tuple[int, int]) -> str:
    amount, percent = value
    return "%d%%" % percent if percent else str(amount)


def _write_client_memory(value: tuple[int, int]) -> str:
    amount, percent = value
    return "%d%%" % percent if percent else format_memory(amount)


# tls-protocols' words (Redis' spelling, matched without case) in order of age.
TLS_PROTOCOLS: Final = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")


def _parse_tls_protocols(args: list[str]) -> str:
    """One or more protocol names, in one quoted argument or several."""
    known = {ascii_lower(name): name for name in TLS_PROTOCOLS}
    words = " ".join(args).split()
    if not words or any(ascii_lower(word) not in known for word in words):
        raise InvalidValue(INVALID_TLS_PROTOCOLS)
    return " ".join(known[ascii_lower(word)] for word in words)


ENABLE_CHOICES: Final = ("no", "local", "yes")


def _write_users(config: Settings) -> list[str]:
    """One ``user`` line per user; the default user only when changed. None
    with an aclfile: the users are its (Redis)."""
    if config.aclfile:
        return []
    untouched = User.default().describe()
    return [user.describe() for user in config.users.values()
            if user.name != DEFAULT_USER or user.describe() != untouched]


# MAXDELIVER's limit (maxdeliver-default's, and ADDJOB's option): a job's
# delivery counters are 16-bit.
MAX_DELIVERIES: Final = 65535
MAX_DEDUP_WINDOW: Final = 30 * 86400
# Per-queue metric series are bounded (docs/metrics.md): at most this many queues.
MAX_METRICS_QUEUES: Final = 100_000

# Order is CONFIG GET's order.
DIRECTIVE_TABLE: Final[tuple[Directive, ...]] = (
           integer("port", 7711, "FGR", INVALID_PORT, high=65535),
           Directive("bind", [], "FGR", _parse_bind, nargs=(1, sys.maxsize), show=" ".join,
                     write=_write_bind, write_always=True),
           integer("tcp-backlog", 511, "FGR", INVALID_BACKLOG),
           string("unixsocket", "", "FGR", optional=True),
           Directive("unixsocketperm", 0, "FGR", _parse_socket_perm, show=octal_text, write=octal_text),
           integer("timeout", 0, "FSGR", INVALID_TIMEOUT),
           # CONFIG SET also takes yes/no, as the C server treated it as a boolean (decision 10).
           integer("tcp-keepalive", 0, "FSGR", INVALID_KEEPALIVE, high=INT_MAX,
                    set_words={"yes": KEEPALIVE_YES_SECONDS, "no": 0}),
           boolean("daemonize", False, "FGR"),
           string("pidfile", "/var/run/disque.pid", "FGR"),
           choice("supervised", "no", "FSGR", ("no", "systemd", "auto"), INVALID_SUPERVISED),
           choice("loglevel", "notice", "FSGR", ("debug", "verbose", "notice", "warning"),
                   INVALID_LOGLEVEL),
           string("logfile", "", "FGR"),
           boolean("syslog-enabled", False, "FR"),
           string("syslog-ident", "disque", "FR"),
           choice("syslog-facility", "local0", "FGR", ("user",) + tuple(f"local{i}" for i in range(8)),
                   INVALID_FACILITY),
           Directive("dir", None, "FSGR", single_argument, parse_set=str, write=quoted_if_set,
                     write_always=True, applied=True),
           integer("databases", 16, "FG", INVALID_DATABASES, low=1),
           Directive("include", None, "F", single_argument, applied=True),
           integer("maxclients", 10000, "FSGR", INVALID_MAXCLIENTS, low=1),
           memory("maxmemory", GB, "FSGR", MAXMEMORY_NOT_POSITIVE, low=1, set_low=0),
           choice("maxmemory-policy", "acks", "FSGR", ("acks", "noeviction"), INVALID_POLICY),
           integer("maxmemory-samples", 5, "FSGR", INVALID_SAMPLES, low=1),
           boolean("activerehashing", True, "FSGR"),
           Directive("hz", 10, "FSGR", _parse_hz, parse_set=_set_hz),
           boolean("appendonly", False, "FSGR"),
           string("appendfilename", "disque.aof", "FR", check=_check_basename),
           choice("appendfsync", "everysec", "FSGR", ("always", "everysec", "no"), INVALID_FSYNC),
           boolean("no-appendfsync-on-rewrite", False, "FGR"),
           integer("auto-aof-rewrite-percentage", 100, "FSGR", NEGATIVE_PERCENTAGE),
           memory("auto-aof-rewrite-min-size", 64 * MB, "FSGR", NEGATIVE_MIN_SIZE, low=0,
                   set_units=False),
           boolean("aof-rewrite-incremental-fsync", True, "FSGR"),
           boolean("aof-load-truncated", True, "FSGR"),
           boolean("aof-enqueue-jobs-once", False, "FSGR"),
           string("requirepass", "", "FSGR", check=_check_password, optional=True),
           Directive("rename-command", None, "F", tuple, nargs=(2, 2), applied=True),
           string("cluster-config-file", "nodes.conf", "FR"),
           integer("cluster-node-timeout", 15000, "FSGR", NODE_TIMEOUT_TOO_SMALL, low=1, set_low=0),
           integer("cluster-bus-port", 0, "FGR", INVALID_BUS_PORT, high=65535),
           # A negative threshold (slow log off) is accepted from the file only.
           integer("slowlog-log-slower-than", 10000, "FSGR", NOT_INTEGER, low=LLONG_MIN, set_low=0),
           integer("slowlog-max-len", 128, "FSGR", NEGATIVE_SLOWLOG_LEN),
           integer("latency-monitor-threshold", 0, "FSGR", NEGATIVE_LATENCY),
           Directive("client-output-buffer-limit", (0, 0, 0), "FSGR", _parse_client_limit,
                     nargs=(4, 4), parse_set=_set_client_limit, show=_show_client_limit,
                     write=_write_client_limit),
           integer("watchdog-period", 0, "SG", NOT_INTEGER),
           memory("proto-max-bulk-len", 512 * MB, "FSGR", PROTO_MAX_BULK_LEN_TOO_SMALL, low=MB),
           # Extensions (docs/commands.md): after the original's directives, so
           # its CONFIG GET order is kept.
           integer("maxdeliver-default", 0, "FSGR", INVALID_MAXDELIVER, high=MAX_DELIVERIES),
           integer("dedup-window", 300, "FSGR", INVALID_DEDUP_WINDOW, high=MAX_DEDUP_WINDOW),
           memory("schedule-max-body", MB, "FSGR", SCHEDULE_MAX_BODY_TOO_SMALL, low=KB),
           # The HTTP listener (/metrics, the dashboard) opens at startup only.
           integer("metrics-port", 0, "FGR", INVALID_METRICS_PORT, high=65535),
           integer("metrics-max-queues", 100, "FSGR", INVALID_METRICS_MAX_QUEUES,
                   high=MAX_METRICS_QUEUES),
           # Host names the dashboard answers to besides its own (docs/dashboard.md).
           Directive("dashboard-hosts", [], "FSGR", _parse_dashboard_hosts,
                     nargs=(1, sys.maxsize), parse_set=_set_dashboard_hosts, show=" ".join,
                     write=_write_bind),
           # TLS (docs/security.md), with Redis' names: read at startup.
           integer("tls-port", 0, "FGR", INVALID_TLS_PORT, high=65535),
           string("tls-cert-file", "", "FGR", optional=True),
           string("tls-key-file", "", "FGR", optional=True),
           string("tls-key-file-pass", "", "FR", optional=True),  # a secret: not in CONFIG GET
           string("tls-ca-cert-file", "", "FGR", optional=True),
           string("tls-ca-cert-dir", "", "FGR", optional=True),
           choice("tls-auth-clients", "yes", "FGR", ("yes", "no", "optional"),
                  INVALID_TLS_AUTH_CLIENTS),
           boolean("tls-cluster", False, "FGR"),
           Directive("tls-protocols", "", "FGR", _parse_tls_protocols, nargs=(1, sys.maxsize),
                     write=quoted_if_set, write_always=True),
           string("tls-ciphers", "", "FGR", optional=True),
           string("tls-ciphersuites", "", "FGR", optional=True),
           boolean("tls-prefer-server-ciphers", False, "FGR"),
           # Client limits (docs/security.md "Limits").
           memory("client-query-buffer-limit", GB, "FSGR", QUERY_BUFFER_LIMIT_TOO_SMALL, low=MB),
           memory("unauthenticated-query-buffer-limit", 16 * KB, "FSGR",
                  UNAUTH_BUFFER_LIMIT_TOO_SMALL, low=KB),
           # Replies waiting for their clients, in total: 100% of maxmemory, so
           # that a reply of the largest job the node may hold always fits.
           Directive("maxmemory-clients", (0, 100), "FSGR", _parse_client_memory,
                     parse_set=_client_memory, show=_show_client_memory,
                     write=_write_client_memory),
           integer("getjob-max-queues", 1024, "FSGR", INVALID_GETJOB_MAX_QUEUES, low=1),
           integer("client-request-timeout", 30, "FSGR", INVALID_REQUEST_TIMEOUT),
           # Access control (docs/security.md): Redis 7's names and defaults.
           boolean("protected-mode", True, "FSGR"),
           choice("enable-debug-command", "no", "FGR", ENABLE_CHOICES, INVALID_ENABLE_OPTION),
           choice("enable-protected-configs", "no", "FGR", ENABLE_CHOICES, INVALID_ENABLE_OPTION),
           Directive("user", None, "FR", list, nargs=(1, sys.maxsize), applied=True,
                     write_lines=_write_users),
           # Where the users are kept as Redis' ACL SAVE writes them; read at
           # startup only, and never with ``user`` lines (Redis' rule).
           string("aclfile", "", "FGR", optional=True),
           # The cluster bus's shared secret (docs/security.md "Cluster bus"):
           # secrets are never shown by CONFIG GET.
           string("cluster-secret", "", "FSR", optional=True),
           string("cluster-secret-old", "", "FSR", optional=True),
           string("cluster-secret-file", "", "FSGR", optional=True),
           # MONITOR clients: besides the normal class's limits (64mb: the cap they always had).
           Directive("monitor-output-buffer-limit", (64 * MB, 0, 0), "FSGR", _parse_monitor_limit,
                     nargs=(3, 3), parse_set=_set_monitor_limit, show=_show_monitor_limit,
                     write=_write_monitor_limit),
       )

DIRECTIVES: Final[dict[str, Directive]] = {d.name: d for d in DIRECTIVE_TABLE}
GETTABLE: Final = tuple(d for d in DIRECTIVE_TABLE if "G" in d.flags)      # CONFIG GET shows these
REWRITTEN: Final = tuple(d for d in DIRECTIVE_TABLE if "R" in d.flags)     # CONFIG REWRITE writes these
