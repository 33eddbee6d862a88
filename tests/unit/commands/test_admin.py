"""Server commands and the pre-execution checks (spec: commands.md §0 and §4):
PING, AUTH/NOAUTH, QUIT, unknown commands, arity, OOM, MISCONF, LOADING,
TIME, INFO, CONFIG, CLIENT, DEBUG, SLOWLOG, LATENCY, COMMAND, MONITOR."""

from __future__ import annotations

import pytest

from disque.context.clients import ClientState
from tests.unit.helpers import START_MS, Cmd, add_peer, make_node

SYNTAX = b"-ERR syntax error\r\n"
NOAUTH = b"-NOAUTH Authentication required.\r\n"
OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"


def info_sections(text: bytes) -> list[str]:
    return [line[2:] for line in text.decode().split("\r\n") if line.startswith("# ")]


# ---------------------------------------------------------- pre-execution

def test_ping(cmd):
    assert cmd.raw("PING") == b"+PONG\r\n"
    assert cmd.raw("ping", "hello") == b"$5\r\nhello\r\n"
    assert cmd.raw("PING", "a", "b") == b"-ERR wrong number of arguments for 'ping' command\r\n"


def test_unknown_command_keeps_the_name_as_sent(cmd):
    assert cmd.raw("FOO") == b"-ERR unknown command 'FOO'\r\n"
    assert cmd.raw("foo", "bar") == b"-ERR unknown command 'foo'\r\n"
    assert cmd.raw("PINX") == b"-ERR unknown command 'PINX'\r\n"
    assert cmd.raw("a\r\nb") == b"-ERR unknown command 'a  b'\r\n"
    assert cmd.raw("x" * 300) == b"-ERR unknown command '" + b"x" * 128 + b"'\r\n"


def test_command_names_are_case_insensitive(cmd):
    assert cmd.raw("PiNg") == b"+PONG\r\n"
    assert cmd.raw("qLeN", "q") == b":0\r\n"


@pytest.mark.parametrize("args, name", [
    (["SHOW"], "show"), (["QLEN"], "qlen"), (["QLEN", "a", "b"], "qlen"), (["QPEEK", "q"], "qpeek"),
    (["WORKING"], "working"), (["AUTH"], "auth"), (["DEBUG"], "debug"), (["CONFIG"], "config"),
    (["TIME", "x"], "time"), (["MONITOR", "x"], "monitor"), (["BGREWRITEAOF", "x"], "bgrewriteaof"),
    (["LOADJOB"], "loadjob"), (["show"], "show"), (["PAUSE", "q"], "pause"), (["CLIENT"], "client"),
    (["SLOWLOG"], "slowlog"), (["LATENCY"], "latency"), (["CLUSTER"], "cluster"),
])
def test_arity_errors_use_the_lower_case_table_name(cmd, args, name):
    assert cmd.raw(*args) == b"-ERR wrong number of arguments for '%s' command\r\n" % name.encode()


def test_quit_replies_ok_and_closes(cmd):
    assert cmd.raw("QUIT", "with", "args") == b"+OK\r\n"
    assert cmd.client.close_after_reply


def test_auth_without_password(cmd):
    assert cmd.raw("AUTH", "x") == b"-ERR Client sent AUTH, but no password is set\r\n"


def test_auth_flow():
    node = make_node(requirepass="secret")
    cmd = Cmd(node)
    assert cmd.raw("PING") == NOAUTH
    assert cmd.raw("QUIT") == b"+OK\r\n"  # QUIT first
    assert cmd.raw("NOSUCH") == b"-ERR unknown command 'NOSUCH'\r\n"  # then unknown
    assert cmd.raw("SHOW") == b"-ERR wrong number of arguments for 'show' command\r\n"  # arity
    assert cmd.raw("HELLO") == NOAUTH
    assert cmd.raw("AUTH", "wrong") == b"-ERR invalid password\r\n"
    assert cmd.raw("AUTH", "secret") == b"+OK\r\n"
    assert cmd.raw("PING") == b"+PONG\r\n"
    other = Cmd(node, ClientState(2))
    assert other.raw("PING") == NOAUTH  # per connection
    assert cmd.raw("AUTH", "wrong") == b"-ERR invalid password\r\n"
    assert cmd.raw("PING") == NOAUTH  # a failed AUTH logs the connection out


def test_auth_rejects_overlong_passwords():
    password = "p" * 600
    node = make_node(requirepass=password)
    assert Cmd(node).raw("AUTH", password) == b"-ERR invalid password\r\n"


def test_oom_refuses_only_denyoom_commands():
    node = make_node(maxmemory=1)
    cmd = Cmd(node)
    assert cmd.raw("ADDJOB", "q", "b", "0") == OOM
    assert cmd.raw("ENQUEUE", b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001") == OOM
    assert cmd.raw("NACK") == OOM
    for args in (["PING"], ["QLEN", "q"], ["ACKJOB"], ["DEQUEUE"], ["INFO", "jobs"]):
        assert not cmd.raw(*args).startswith(b"-OOM")


def test_oom_clears_when_memory_is_raised(node):
    cmd = Cmd(node)
    node.state.config.maxmemory = 1
    node.state.update_memory_limits()
    assert cmd.raw("ADDJOB", "q", "b", "0") == OOM
    node.state.config.maxmemory = 1 << 30
    node.state.update_memory_limits()
    assert cmd.raw("ADDJOB", "q", "b", "0").startswith(b"+D-")


def test_misconf_after_a_failed_aof_write(node, cmd):
    node.state.aof_error = "No space left on device"
    misconf = b"-MISCONF Errors writing to the AOF file: No space left on device\r\n"
    assert cmd.raw("ADDJOB", "q", "b", "0") == misconf
    assert cmd.raw("ACKJOB") == misconf
    assert cmd.raw("PING") == misconf
    assert cmd.raw("QLEN", "q") == b":0\r\n"
    assert cmd.raw("INFO", "jobs").startswith(b"$")


def test_loading_allows_only_loading_commands(node, cmd):
    node.state.loading = True
    loading = b"-LOADING Disque is loading the dataset in memory\r\n"
    assert cmd.raw("ADDJOB", "q", "b", "0") == loading
    assert cmd.raw("QLEN", "q") == loading
    assert cmd.raw("PING") == loading
    assert cmd.raw("INFO", "jobs").startswith(b"$")
    assert cmd.raw("COMMAND", "COUNT").startswith(b":")
    assert cmd.raw("AUTH", "x") == b"-ERR Client sent AUTH, but no password is set\r\n"


# ------------------------------------------------------------------ TIME

def test_time(node, cmd):
    node.state.clock.advance(1234)
    seconds = str((START_MS + 1234) // 1000).encode()
    assert cmd.raw("TIME") == b"*2\r\n$10\r\n" + seconds + b"\r\n$6\r\n234000\r\n"


# ------------------------------------------------------------------ INFO

def test_info_single_sections_exact(cmd):
    assert cmd.raw("INFO", "jobs") == b"$27\r\n# Jobs\r\nregistered_jobs:0\r\n\r\n"
    assert cmd.raw("INFO", "queues") == b"$31\r\n# Queues\r\nregistered_queues:0\r\n\r\n"
    assert cmd.raw("INFO", "JoBs") == b"$27\r\n# Jobs\r\nregistered_jobs:0\r\n\r\n"


def test_info_default_and_all(cmd):
    default = ["Server", "Clients", "Memory", "Jobs", "Queues", "Persistence", "Stats", "CPU"]
    assert info_sections(cmd.ok("INFO")) == default
    assert info_sections(cmd.ok("INFO", "default")) == default
    assert info_sections(cmd.ok("INFO", "all")) == default + ["Commandstats"]
    assert info_sections(cmd.ok("INFO", "commandstats")) == ["Commandstats"]
    text = cmd.ok("INFO").decode()
    assert "\r\n\r\n# Clients\r\n" in text  # sections separated by an empty line
    for key in ("registered_jobs", "registered_queues", "tcp_port", "used_memory",
                "blocked_clients", "total_commands_processed", "disque_version"):
        assert "\r\n%s:" % key in text


def test_info_unknown_section_and_syntax(cmd):
    assert cmd.raw("INFO", "nosuch") == b"$0\r\n\r\n"
    assert cmd.raw("INFO", "jobs", "queues") == SYNTAX


def test_info_counts(node, cmd):
    cmd.addjob("q", "a")
    cmd.addjob("q2", "b")
    cmd.ok("GETJOB", "NOHANG", "FROM", "empty")
    assert cmd.ok("INFO", "jobs") == b"# Jobs\r\nregistered_jobs:2\r\n"
    assert cmd.ok("INFO", "queues") == b"# Queues\r\nregistered_queues:3\r\n"
    assert b"tcp_port:7711\r\n" in cmd.ok("INFO", "server")
    assert b"hz:10\r\n" in cmd.ok("INFO", "server")


def test_info_commandstats_and_resetstat(cmd):
    cmd.ok("PING")
    cmd.ok("PING")
    cmd.ok("QLEN", "q")
    text = cmd.ok("INFO", "commandstats")
    assert b"cmdstat_ping:calls=2,usec=0,usec_per_call=0.00\r\n" in text
    assert b"cmdstat_qlen:calls=1," in text
    assert b"cmdstat_show" not in text
    assert cmd.raw("CONFIG", "RESETSTAT") == b"+OK\r\n"
    # Only the RESETSTAT call itself, counted once it finished.
    assert cmd.ok("INFO", "commandstats") == (
        b"# Commandstats\r\ncmdstat_config:calls=1,usec=0,usec_per_call=0.00\r\n")


def test_info_memory(node, cmd):
    used = int(cmd.ok("INFO", "memory").split(b"used_memory:")[1].split(b"\r\n")[0])
    assert used == node.state.used_memory
    cmd.addjob("q", "x" * 1000)
    text = cmd.ok("INFO", "memory")
    assert b"used_memory:%d\r\n" % node.state.used_memory in text
    assert b"used_memory_peak:%d\r\n" % node.state.used_memory in text
    assert b"used_memory_human:" in text


def test_blocked_clients_field(node, cmd):
    Cmd(node, ClientState(3)).raw("GETJOB", "FROM", "q")
    assert b"blocked_clients:1\r\n" in cmd.ok("INFO", "clients")


# ---------------------------------------------------------------- CONFIG

def test_config_get(cmd):
    assert cmd.raw("CONFIG", "GET", "cluster-node-timeout") == (
        b"*2\r\n$20\r\ncluster-node-timeout\r\n$5\r\n15000\r\n")
    assert cmd.raw("CONFIG", "GET", "maxmemory") == (
        b"*2\r\n$9\r\nmaxmemory\r\n$10\r\n1073741824\r\n")
    assert cmd.raw("CONFIG", "GET", "nosuch*") == b"*0\r\n"
    assert len(cmd.ok("CONFIG", "GET", "*")) > 20


def test_config_get_pattern_is_bounded(cmd):
    assert cmd.ok("CONFIG", "GET", "*" * 1022 + "hz") == [b"hz", b"10"]
    assert cmd.raw("CONFIG", "GET", "*" * 1023 + "hz") == (
        b"-ERR CONFIG GET pattern may be at most 1024 bytes\r\n")


def test_config_set(node, cmd):
    assert cmd.raw("CONFIG", "SET", "cluster-node-timeout", "5000") == b"+OK\r\n"
    assert cmd.ok("CONFIG", "GET", "cluster-node-timeout") == [b"cluster-node-timeout", b"5000"]
    assert cmd.raw("CONFIG", "SET", "nosuchparam", "1") == (
        b"-ERR Unsupported CONFIG parameter: nosuchparam\r\n")
    assert cmd.raw("CONFIG", "SET", "cluster-node-timeout", "abc") == (
        b"-ERR Invalid argument 'abc' for CONFIG SET 'cluster-node-timeout'\r\n")


@pytest.mark.parametrize("args, reply", [
    (["GET"], b"-ERR Wrong number of arguments for CONFIG GET\r\n"),
    (["GET", "a", "b"], b"-ERR Wrong number of arguments for CONFIG GET\r\n"),
    (["SET", "a"], b"-ERR Wrong number of arguments for CONFIG SET\r\n"),
    (["RESETSTAT", "x"], b"-ERR Wrong number of arguments for CONFIG RESETSTAT\r\n"),
    (["rewrite", "x"], b"-ERR Wrong number of arguments for CONFIG REWRITE\r\n"),
    (["FOO"], b"-ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE\r\n"),
    (["REWRITE"], b"-ERR The server is running without a config file\r\n"),
])
def test_config_errors(cmd, args, reply):
    assert cmd.raw("CONFIG", *args) == reply


# ---------------------------------------------------------------- CLIENT

def test_client_name(cmd):
    assert cmd.raw("CLIENT", "GETNAME") == b"$-1\r\n"
    assert cmd.raw("CLIENT", "SETNAME", "worker-1") == b"+OK\r\n"
    assert cmd.raw("CLIENT", "GETNAME") == b"$8\r\nworker-1\r\n"
    bad = b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    assert cmd.raw("CLIENT", "SETNAME", "a b") == bad
    assert cmd.raw("CLIENT", "SETNAME", "a\nb") == bad
    assert cmd.raw("CLIENT", "SETNAME", "") == b"+OK\r\n"
    assert cmd.raw("CLIENT", "GETNAME") == b"$-1\r\n"


def test_client_kill_and_other_subcommands(cmd):
    assert cmd.raw("CLIENT", "LIST").startswith(b"$")
    assert cmd.raw("CLIENT", "KILL", "1.2.3.4:5") == b"-ERR No such client\r\n"
    assert cmd.raw("CLIENT", "KILL", "ADDR", "1.2.3.4:5", "SKIPME", "no") == b":0\r\n"
    assert cmd.raw("CLIENT", "KILL", "ID", "5") == b":0\r\n"
    assert cmd.raw("CLIENT", "KILL", "TYPE", "pubsub") == b"-ERR Unknown client type 'pubsub'\r\n"
    assert cmd.raw("CLIENT", "KILL", "TYPE", "NORMAL") == b":0\r\n"
    assert cmd.raw("CLIENT", "KILL", "ID", "x") == SYNTAX
    assert cmd.raw("CLIENT", "KILL", "SKIPME", "maybe") == SYNTAX
    assert cmd.raw("CLIENT", "KILL", "ID", "1", "ADDR") == SYNTAX
    assert cmd.raw("CLIENT", "KILL", "ID") == b"-ERR No such client\r\n"  # old ip:port form
    assert cmd.raw("CLIENT", "REPLY", "ON") == b"+OK\r\n"
    syntax = (b"-ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | "
              b"SETNAME connection-name)\r\n")
    assert cmd.raw("CLIENT", "FOO") == syntax
    assert cmd.raw("CLIENT", "GETNAME", "x") == syntax


# ----------------------------------------------------------------- DEBUG

def test_debug_flushall(node, cmd):
    cmd.addjob("q", "a")
    cmd.ok("PAUSE", "p", "all")
    waiting = Cmd(node, ClientState(3))
    assert waiting.raw("GETJOB", "FROM", "w") is None
    assert cmd.raw("DEBUG", "FLUSHALL") == b"+OK\r\n"
    assert waiting.client.sent == [b"*-1\r\n"]
    assert not node.state.jobs and not node.state.queues
    assert cmd.ok("INFO", "jobs") == b"# Jobs\r\nregistered_jobs:0\r\n"
    assert cmd.ok("QSCAN", "BUSYLOOP") == [b"0", []]
    assert cmd.ok("JSCAN", "BUSYLOOP") == [b"0", []]


def test_debug_flushall_fails_waiting_producers(node, cmd):
    add_peer(node)
    producer = Cmd(node, ClientState(3))
    assert producer.raw("ADDJOB", "q", "b", "0") is None
    cmd.ok("DEBUG", "FLUSHALL")
    assert producer.client.sent == [
        b"-NOREPL job removed (expired?) before the requested replication level was achieved\r\n"]
    assert not node.state.blocked.clients


def test_debug_flushall_keeps_ctime_increasing(node, cmd):
    first = cmd.show(cmd.addjob("q", "a"))["ctime"]
    cmd.ok("DEBUG", "FLUSHALL")
    assert cmd.show(cmd.addjob("q", "a"))["ctime"] == first + 1


@pytest.mark.parametrize("args, reply", [
    (["ERROR", "MYERR some text"], b"-MYERR some text\r\n"),
    (["error", "a\r\nb"], b"-a  b\r\n"),
    (["NOSUCH"], b"-ERR Unknown DEBUG subcommand or wrong number of arguments for 'NOSUCH'\r\n"),
    (["FLUSHALL", "x"],
     b"-ERR Unknown DEBUG subcommand or wrong number of arguments for 'FLUSHALL'\r\n"),
])
def test_debug_subcommands(cmd, args, reply):
    assert cmd.raw("DEBUG", *args) == reply


# --------------------------------------------------------------- SLOWLOG

def test_slowlog(node, cmd):
    assert cmd.raw("SLOWLOG", "LEN") == b":0\r\n"
    assert cmd.raw("SLOWLOG", "GET") == b"*0\r\n"
    node.state.stats.slowlog_threshold_us = 0  # log everything
    cmd.ok("PING", "first")
    cmd.ok("QLEN", "q")
    assert cmd.raw("SLOWLOG", "LEN") == b":2\r\n"  # a command is logged once it finished
    entries = cmd.ok("SLOWLOG", "GET")
    assert [e[3] for e in entries] == [[b"SLOWLOG", b"LEN"], [b"QLEN", b"q"], [b"PING", b"first"]]
    assert [e[0] for e in entries] == [2, 1, 0]
    assert entries[0][1] == START_MS // 1000 and entries[0][2] == 0
    assert len(cmd.ok("SLOWLOG", "GET", 1)) == 1
    assert len(cmd.ok("SLOWLOG", "GET", -1)) == 5
    assert cmd.raw("SLOWLOG", "GET", "x") == b"-ERR value is not an integer or out of range\r\n"
    assert cmd.raw("SLOWLOG", "RESET") == b"+OK\r\n"
    assert cmd.ok("SLOWLOG", "LEN") == 1  # just the RESET, logged after it ran


def test_slowlog_trims_arguments(node, cmd):
    node.state.stats.slowlog_threshold_us = 0
    cmd.raw("PING", "x" * 200)
    cmd.raw("ACKJOB", *(["badid"] * 40))
    entries = cmd.ok("SLOWLOG", "GET", 2)
    acks, ping = entries
    assert ping[3] == [b"PING", b"x" * 128 + b"... (72 more bytes)"]
    assert len(acks[3]) == 32 and acks[3][-1] == b"... (10 more arguments)"


def test_slowlog_negative_threshold_disables(node, cmd):
    node.state.stats.slowlog_threshold_us = -1
    cmd.ok("PING")
    assert cmd.ok("SLOWLOG", "LEN") == 0


def test_slowlog_errors(cmd):
    err = b"-ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.\r\n"
    assert cmd.raw("SLOWLOG", "FOO") == err
    assert cmd.raw("SLOWLOG", "LEN", "x") == err
    assert cmd.raw("SLOWLOG", "GET", "1", "2") == err


# --------------------------------------------------------------- LATENCY

def test_latency_without_samples(cmd):
    assert cmd.raw("LATENCY", "LATEST") == b"*0\r\n"
    assert cmd.raw("LATENCY", "HISTORY", "command") == b"*0\r\n"
    assert cmd.raw("LATENCY", "RESET") == b":0\r\n"
    assert cmd.raw("LATENCY", "GRAPH", "command") == (
        b"-ERR No samples available for event 'command'\r\n")
    assert cmd.ok("LATENCY", "DOCTOR").startswith(b"Dave, no latency spike")
    assert cmd.raw("LATENCY", "FOO") == SYNTAX


def test_latency_samples_from_slow_commands(node, cmd):
    ticks = iter(range(0, 10 ** 12, 5_000_000))  # every command takes 5 ms
    node.perf_ns = lambda: next(ticks)
    node.state.stats.latency_threshold_ms = 1
    cmd.ok("PING")  # fast
    cmd.ok("QPEEK", "q", 1)  # not fast
    latest = {e[0]: e[1:] for e in cmd.ok("LATENCY", "LATEST")}
    now_s = START_MS // 1000
    assert latest == {b"fast-command": [now_s, 5, 5], b"command": [now_s, 5, 5]}
    assert cmd.ok("LATENCY", "HISTORY", "command") == [[now_s, 5]]
    assert cmd.ok("LATENCY", "GRAPH", "command").startswith(b"command - high 5 ms")
    assert b"command" in cmd.ok("LATENCY", "DOCTOR")
    assert cmd.ok("LATENCY", "RESET", "command", "nosuch") == 1
    # That RESET was itself a slow "command": two events again.
    assert cmd.ok("LATENCY", "RESET") == 2


# --------------------------------------------------------------- COMMAND

def test_command(node, cmd):
    count = cmd.ok("COMMAND", "COUNT")
    table = cmd.ok("COMMAND")
    assert len(table) == count >= 30
    by_name = {entry[0]: entry for entry in table}
    assert by_name[b"addjob"] == [b"addjob", -4, [b"write", b"denyoom", b"fast"], 0, 0, 0]
    assert by_name[b"show"][1:3] == [2, [b"readonly", b"fast"]]
    assert by_name[b"info"][2] == [b"readonly", b"loading"]
    assert by_name[b"command"][1] == 0
    assert b"+write\r\n+denyoom\r\n+fast\r\n" in cmd.raw("COMMAND", "INFO", "addjob")  # statuses
    assert cmd.ok("COMMAND", "INFO", "ADDJOB", "nosuch") == [by_name[b"addjob"], None]
    assert cmd.raw("COMMAND", "FOO") == b"-ERR Unknown subcommand or wrong number of arguments.\r\n"
    assert cmd.raw("COMMAND", "COUNT", "x") == (
        b"-ERR Unknown subcommand or wrong number of arguments.\r\n")


def test_command_table_matches_the_spec(cmd):
    spec = {
        b"auth": (2, "r l F"), b"ping": (-1, "r F"), b"info": (-1, "r l"),
        b"shutdown": (-1, "a r l"), b"monitor": (1, "a r"), b"debug": (-2, "a"),
        b"config": (-2, "a r"), b"cluster": (-2, "a r"), b"client": (-2, "a r"),
        b"slowlog": (-2, "r"), b"time": (1, "r F"), b"command": (0, "r l"),
        b"latency": (-2, "a r l"), b"addjob": (-4, "w m F"), b"getjob": (-2, "w F"),
        b"ackjob": (-1, "w F"), b"fastack": (-1, "w F"), b"deljob": (-1, "w F"),
        b"show": (2, "r F"), b"loadjob": (2, "w"), b"bgrewriteaof": (1, "a r"),
        b"qlen": (2, "r F"), b"qpeek": (3, "r"), b"qstat": (2, "r F"), b"qscan": (-1, "r"),
        b"jscan": (-1, "r"), b"enqueue": (-1, "m w F"), b"nack": (-1, "m w F"),
        b"dequeue": (-1, "w F"), b"working": (2, "w F"), b"pause": (-3, "r F"),
    }
    words = {"w": b"write", "r": b"readonly", "m": b"denyoom", "a": b"admin", "l": b"loading",
             "F": b"fast"}
    order = [b"write", b"readonly", b"denyoom", b"admin", b"random", b"loading",
             b"skip_monitor", b"fast"]
    table = {entry[0]: entry for entry in cmd.ok("COMMAND")}
    for name, (arity, flags) in spec.items():
        expected = sorted((words[f] for f in flags.split()), key=order.index)
        assert table[name][1:3] == [arity, expected], name


def test_loadjob_from_a_client(cmd):
    assert cmd.raw("LOADJOB", "x") == (
        b"-ERR LOADJOB is a special command only processed from AOF\r\n")


# --------------------------------------------------------------- MONITOR

def test_monitor_streams_commands(node, cmd):
    watcher = Cmd(node, ClientState(9, "127.0.0.1:9"))
    assert watcher.raw("MONITOR") == b"+OK\r\n"
    node.state.clock.advance(1)
    cmd.raw("ADDJOB", "q", 'a "b"\n', "0")
    cmd.raw("CONFIG", "GET", "x")  # admin commands are not shown
    seconds = (START_MS + 1) // 1000
    assert watcher.client.sent == [
        b'+%d.001000 [127.0.0.1:50000] "ADDJOB" "q" "a \\"b\\"\\n" "0"\r\n' % seconds]


# CLIENT PAUSE, DEBUG SLEEP / LOADAOF / RESTART, SHUTDOWN and BGREWRITEAOF act
# on the process: tests/integration runs them on a real one (the stand-in
# Host of these tests only has canned answers).

def test_shutdown_syntax(cmd):
    assert cmd.raw("SHUTDOWN", "NOSAVE") == SYNTAX
    assert cmd.raw("SHUTDOWN", "a", "b") == SYNTAX
