"""Server commands: PING, AUTH, TIME, COMMAND, CLIENT, CONFIG, SHUTDOWN,
DEBUG, SLOWLOG, LATENCY, BGREWRITEAOF (spec: commands.md §4)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from disque.protocol import errors
from disque.state.command import Command, unique_commands
from disque.commands.access import DEBUG_NOT_ALLOWED, allowed_from
from disque.commands.acl import authenticate
from disque.commands.args import parse_float, parse_int
from disque.config import ConfigSetError
from disque.config.globmatch import MAX_PATTERN_LEN
from disque.config.runtime import settable
from disque.protocol.resp import (EMPTY_ARRAY, NIL, OK, PONG, Status, bulk, encode, encode_map,
                                  error, integer)

if TYPE_CHECKING:
    from disque.context.clients import ClientState
    from disque.state.nodestate import NodeState
    from disque.context.stats import Stats

# AUTH user password: a word beyond Disque 1.0's arity, which COMMAND keeps showing.
MAX_ARGS: Final = {"auth": 3}
# CONFIG SET of these is refused unless enable-protected-configs allows it
# (tests/unit/test_acl.py checks that every settable path is listed).
PROTECTED_CONFIGS: Final = frozenset(("dir", "pidfile", "logfile", "unixsocket", "appendfilename",
                                      "cluster-config-file", "cluster-secret-file",
                                      "tls-cert-file", "tls-key-file", "tls-ca-cert-file",
                                      "tls-ca-cert-dir"))
DEFAULT_SLOWLOG_GET: Final = 10

CLIENT_SYNTAX: Final = error("ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | "
                             "SETNAME connection-name)")
CLIENT_BAD_NAME: Final = error("ERR Client names cannot contain spaces, newlines or special characters.")
NO_SUCH_CLIENT: Final = error("ERR No such client")
COMMAND_SYNTAX: Final = error("ERR Unknown subcommand or wrong number of arguments.")
CONFIG_SUBCOMMANDS: Final = error("ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE")
CONFIG_PATTERN_TOO_LONG: Final = error("ERR CONFIG GET pattern may be at most %d bytes"
                                       % MAX_PATTERN_LEN)
SHUTDOWN_FAILED: Final = error("ERR Errors trying to SHUTDOWN. Check logs.")
SLOWLOG_SYNTAX: Final = error("ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.")
RESTART_FAILED: Final = error("ERR failed to restart the server. Check server logs.")
LOADAOF_FAILED: Final = error("ERR Error loading the AOF file. Check server logs.")


def ping(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """PING [message]."""
    if len(argv) == 1:
        return PONG
    if len(argv) == 2:
        return bulk(argv[1])
    return errors.wrong_arity("ping")


def auth(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """AUTH password (the default user, as Disque 1.0) | AUTH user password."""
    if len(argv) == 2:
        return authenticate(node, client, None, argv[1])
    return authenticate(node, client, argv[1], argv[2])


def time_(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """TIME: [unix seconds, microseconds] as bulk strings."""
    us = node.host.time_us(node.runtime.now)
    return encode([str(us // 1_000_000).encode(), str(us % 1_000_000).encode()])


def _command_entry(cmd: Command) -> list[object]:
    return [cmd.lname, cmd.arity, [Status(w) for w in cmd.flag_words()], 0, 0, 0]


def command(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """COMMAND [INFO name... | COUNT]."""
    commands = unique_commands(node.commands)
    if len(argv) == 1:
        return encode([_command_entry(c) for c in commands])
    sub = argv[1].upper()
    if sub == b"COUNT" and len(argv) == 2:
        return integer(len(commands))
    if sub == b"INFO":
        entries = []
        for name in argv[2:]:
            cmd = node.commands.get(name.lower())
            entries.append(_command_entry(cmd) if cmd is not None else None)
        return encode(entries)
    return COMMAND_SYNTAX


# ---------------------------------------------------------------- CLIENT

def valid_client_name(name: bytes) -> bool:
    """A name CLIENT SETNAME and HELLO SETNAME accept: printable ASCII, no spaces."""
    return all(33 <= c <= 126 for c in name)


def _client_kill(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    if len(argv) == 3:
        killed = node.host.kill_clients(client, addr=argv[2].decode("latin-1"), skip_caller=False)
        return OK if killed else NO_SUCH_CLIENT
    addr = None
    client_id = None
    skip = True
    args = argv[2:]
    if len(args) % 2:
        return errors.SYNTAX
    for i in range(0, len(args), 2):
        opt, value = args[i].upper(), args[i + 1]
        if opt == b"ID":
            client_id = parse_int(value)
            if client_id is None:
                return errors.SYNTAX
        elif opt == b"TYPE":
            if value.lower() != b"normal":
                return error("ERR Unknown client type '%s'" % value.decode("latin-1"))
        elif opt == b"ADDR":
            addr = value.decode("latin-1")
        elif opt == b"SKIPME":
            lowered = value.lower()
            if lowered not in (b"yes", b"no"):
                return errors.SYNTAX
            skip = lowered == b"yes"
        else:
            return errors.SYNTAX
    return integer(node.host.kill_clients(client, addr=addr, client_id=client_id,
                                          skip_caller=skip))


def client_cmd(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes | None:
    """CLIENT LIST | KILL | SETNAME | GETNAME | ID | PAUSE | REPLY."""
    sub = argv[1].upper()
    n = len(argv)
    if sub == b"LIST" and n == 2:
        return bulk(node.host.client_list(node.now))
    if sub == b"KILL" and n >= 3:
        return _client_kill(node, client, argv)
    if sub == b"SETNAME" and n == 3:
        if not valid_client_name(argv[2]):
            return CLIENT_BAD_NAME
        client.name = argv[2]
        return OK
    if sub == b"GETNAME" and n == 2:
        return bulk(client.name) if client.name else NIL
    if sub == b"SETINFO" and n == 4:
        # Modern client libraries announce themselves; accepted and ignored.
        if argv[2].upper() in (b"LIB-NAME", b"LIB-VER"):
            return OK
        return errors.SYNTAX
    if sub == b"ID" and n == 2:
        return integer(client.id)
    if sub == b"PAUSE" and n == 3:
        ms = parse_int(argv[2])
        if ms is None or ms < 0:
            return error("ERR timeout is not an integer or out of range")
        node.host.pause_clients(ms)
        return OK
    if sub == b"REPLY" and n == 3:
        mode = argv[2].upper()
        if mode == b"ON":
            client.reply_mode = 0
            return OK
        if mode in (b"OFF", b"SKIP"):
            client.reply_mode = 1 if mode == b"OFF" else 2
            return b""
        return errors.SYNTAX
    return CLIENT_SYNTAX


# ---------------------------------------------------------------- CONFIG

def config_cmd(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """CONFIG GET | SET | RESETSTAT | REWRITE."""
    sub = argv[1].upper()
    arity = {b"GET": 3, b"SET": 4, b"RESETSTAT": 2, b"REWRITE": 2}.get(sub)
    if arity is None:
        return CONFIG_SUBCOMMANDS
    if len(argv) != arity:
        return error("ERR Wrong number of arguments for CONFIG %s" % sub.decode())
    try:
        if sub == b"GET":
            if len(argv[2]) > MAX_PATTERN_LEN:
                return CONFIG_PATTERN_TOO_LONG
            found = node.config.get(argv[2])
            if client.protocol == 3:  # a map, as Redis 7 answers a RESP3 client
                return encode_map(list(zip(found[::2], found[1::2])))
            return encode(found)
        if sub == b"SET":
            # A parameter read at startup only says so before it is found protected (Redis 7).
            settable(argv[2])
            if (argv[2].decode("latin-1").lower() in PROTECTED_CONFIGS
                    and not allowed_from(node.config.enable_protected_configs, client)):
                return error("ERR CONFIG SET failed (possibly related to argument '%s') - can't "
                             "set protected config" % argv[2].decode("utf-8", "backslashreplace"))
            node.config.set(argv[2], argv[3])
        elif sub == b"RESETSTAT":
            node.reset_stats()
        else:
            node.config.rewrite()
    except ConfigSetError as exc:
        return error(str(exc))
    return OK


# -------------------------------------------------------------- SHUTDOWN

def shutdown(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes | None:
    """SHUTDOWN [REWRITE-AOF]: no reply on success, the process exits."""
    if len(argv) > 2 or (len(argv) == 2 and argv[1].upper() != b"REWRITE-AOF"):
        return errors.SYNTAX
    if node.host.shutdown(len(argv) == 2 and not node.loading):
        client.close_after_reply = True
        return b""
    return SHUTDOWN_FAILED


def bgrewriteaof(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """BGREWRITEAOF."""
    return node.host.bgrewriteaof()


# ----------------------------------------------------------------- DEBUG

def _debug_unknown(sub: bytes) -> bytes:
    return error("ERR Unknown DEBUG subcommand or wrong number of arguments for '%s'"
                 % sub.decode("latin-1"))


def debug(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """DEBUG FLUSHALL | SLEEP | LOADAOF | ERROR | RESTART | CRASH-AND-RECOVER, when
    enable-debug-command allows it for this client."""
    if not allowed_from(node.config.enable_debug_command, client):
        return DEBUG_NOT_ALLOWED
    sub = argv[1].upper()
    n = len(argv)
    if sub == b"FLUSHALL" and n == 2:
        node.flush_all()
        return OK
    if sub == b"SLEEP" and n == 3:
        seconds = parse_float(argv[2])
        if seconds is None or seconds < 0:
            return error("ERR value is not a valid float")
        node.host.debug_sleep(seconds)
        return OK
    if sub == b"LOADAOF" and n == 2:
        return OK if node.host.debug_reload_aof() else LOADAOF_FAILED
    if sub == b"ERROR" and n == 3:
        return b"-" + argv[2].replace(b"\r", b" ").replace(b"\n", b" ") + b"\r\n"
    if sub in (b"RESTART", b"CRASH-AND-RECOVER") and n in (2, 3):
        delay = parse_int(argv[2]) if n == 3 else 0
        if delay is None or delay < 0:
            return errors.NOT_INTEGER
        if node.host.debug_restart(delay, graceful=sub == b"RESTART"):
            return OK
        return RESTART_FAILED
    return _debug_unknown(argv[1])


# --------------------------------------------------------------- SLOWLOG

def slowlog(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """SLOWLOG GET [n] | LEN | RESET."""
    sub = argv[1].upper()
    stats = node.stats
    if sub == b"RESET" and len(argv) == 2:
        stats.slowlog.clear()
        return OK
    if sub == b"LEN" and len(argv) == 2:
        return integer(len(stats.slowlog))
    if sub == b"GET" and len(argv) in (2, 3):
        count: int | None
        count = DEFAULT_SLOWLOG_GET
        if len(argv) == 3:
            count = parse_int(argv[2])
            if count is None:
                return errors.NOT_INTEGER
        entries = list(stats.slowlog)
        if count >= 0:
            entries = entries[:count]
        return encode([[e.id, e.time, e.duration, list(e.argv)] for e in entries])
    return SLOWLOG_SYNTAX


# --------------------------------------------------------------- LATENCY

def latency(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """LATENCY LATEST | HISTORY | RESET | GRAPH | DOCTOR."""
    sub = argv[1].upper()
    stats = node.stats
    if sub == b"LATEST" and len(argv) == 2:
        return encode([[event.encode(), samples[-1][0], samples[-1][1],
                        stats.latency_max.get(event, 0)]
                       for event, samples in stats.latency.items() if samples])
    if sub == b"HISTORY" and len(argv) == 3:
        samples = stats.latency.get(argv[2].decode("latin-1"))
        if not samples:
            return EMPTY_ARRAY
        return encode([[t, ms] for t, ms in samples])
    if sub == b"RESET":
        events = [a.decode("latin-1") for a in argv[2:]] or list(stats.latency)
        reset = 0
        for event in events:
            if stats.latency.pop(event, None) is not None:
                stats.latency_max.pop(event, None)
                reset += 1
        return integer(reset)
    if sub == b"GRAPH" and len(argv) == 3:
        event = argv[2].decode("latin-1")
        samples = stats.latency.get(event)
        if not samples:
            return error("ERR No samples available for event '%s'" % event)
        return bulk(_latency_graph(event, samples).encode())
    if sub == b"DOCTOR" and len(argv) == 2:
        return bulk(_latency_doctor(stats).encode())
    return errors.SYNTAX


def _latency_graph(event: str, samples: Iterable[tuple[int, int]]) -> str:
    peak = max(ms for _, ms in samples) or 1
    lines = ["%s - high %d ms, low %d ms" % (event, peak, min(ms for _, ms in samples))]
    for when, ms in samples:
        bar = "#" * max(1, round(40 * ms / peak))
        lines.append("%10d %6d ms %s" % (when, ms, bar))
    return "\n".join(lines) + "\n"


def _latency_doctor(stats: Stats) -> str:
    if not stats.latency:
        return ("Dave, no latency spike was observed during the lifetime of this Disque "
                "instance, not in the slightest bit. I honestly think you ought to sleep "
                "tonight.\n")
    lines = ["Latency events observed (threshold %d ms):" % stats.latency_threshold_ms]
    for event, samples in stats.latency.items():
        avg = sum(ms for _, ms in samples) / len(samples)
        lines.append("- %s: %d samples, average %.1f ms, worst %d ms."
                     % (event, len(samples), avg, stats.latency_max.get(event, 0)))
    return "\n".join(lines) + "\n"


TABLE: Final = (
           ("auth", 2, "rlF", auth),
           ("ping", -1, "rF", ping),
           ("shutdown", -1, "arl", shutdown),
           ("debug", -2, "a", debug),
           ("config", -2, "ar", config_cmd),
           ("client", -2, "ar", client_cmd),
           ("slowlog", -2, "r", slowlog),
           ("time", 1, "rF", time_),
           ("command", 0, "rl", command),
           ("latency", -2, "arl", latency),
           ("bgrewriteaof", 1, "ar", bgrewriteaof),
       )
