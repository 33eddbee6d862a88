"""Robustness: one server process takes random and malformed input.

spec: commands.md §0 (protocol conventions, protocol errors close the
connection). Every example opens a connection, sends its bytes, half-closes
and reads until the server closes: what came back must be a sequence of
complete, well-formed RESP2 replies. After each example a fresh control
connection must still get +PONG and the process must be alive.

Hypothesis draws its examples from the run's seed (tests/support/seeds.py):
a failure shows ``DISQUE_TEST_SEED=<n>``, which replays the whole run, and
the ``@reproduce_failure`` blob of the shrunk example.
"""

from __future__ import annotations

import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from tests.support.process import DisqueProcess
from tests.support.seeds import run_seed
from tests.support.teardown import fail_on

pytestmark = pytest.mark.seeded

READ_TIMEOUT = 10.0
MAX_USED_MEMORY = 64 * 1024 * 1024
SETTINGS = settings(max_examples=250, deadline=None, derandomize=False, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SEEDED = hypothesis_seed(run_seed())

# Requests that would stop the server or starve the checks, not robustness bugs.
NEVER_SENT = {b"shutdown"}
UNSAFE_SUBCOMMANDS = {
    b"debug": {b"sleep", b"restart", b"crash-and-recover", b"segfault", b"oom", b"assert",
               b"loadaof"},
    b"client": {b"pause"},
    # MEET could join this node to a cluster another test is running on the host
    b"cluster": {b"meet"},
}
# CONFIG SET of these would lock the control connection out (or slow everything).
UNSAFE_CONFIG = {b"maxclients", b"requirepass", b"timeout", b"dir", b"appendonly",
                 b"client-output-buffer-limit", b"maxmemory", b"hz", b"appendfsync",
                 b"watchdog-period", b"proto-max-bulk-len"}

KEYWORDS = [b"FROM", b"COUNT", b"TIMEOUT", b"NOHANG", b"WITHCOUNTERS", b"REPLICATE", b"DELAY",
            b"RETRY", b"TTL", b"MAXLEN", b"ASYNC", b"BUSYLOOP", b"MINLEN", b"IMPORTRATE",
            b"QUEUE", b"STATE", b"REPLY", b"all", b"id", b"queued", b"active", b"acked",
            b"wait-repl", b"in", b"out", b"none", b"state", b"bcast", b"GET", b"SET", b"LIST",
            b"KILL", b"ID", b"TYPE", b"SKIPME", b"ADDR", b"SETNAME", b"GETNAME", b"INFO",
            b"COUNT", b"RESET", b"LEN", b"LATEST", b"HISTORY", b"GRAPH", b"DOCTOR", b"NODES",
            b"MYID", b"FORGET", b"LEAVING", b"yes", b"no", b"SAVECONFIG", b"RESETSTAT",
            b"REWRITE", b"FLUSHALL", b"ERROR", b"q", b"queue", b"*", b"normal", b"command",
            b"REWRITE-AOF", b"HARD", b"SOFT", b"loglevel", b"slowlog-max-len"]

integers_as_text = st.one_of(
    st.integers(-5, 100),
    st.integers(-(2 ** 70), 2 ** 70),
    st.sampled_from([2 ** 63 - 1, 2 ** 63, -(2 ** 63), -(2 ** 63) - 1, 2 ** 64, 65535, 65536]),
).map(lambda n: str(n).encode())
job_ids = st.one_of(
    st.binary(min_size=24, max_size=24, ).map(lambda b: b"D-00000000-" + b + b"-05a1"),
    st.from_regex(rb"\AD-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}\Z"),
    st.binary(max_size=45).map(lambda b: b"D-" + b),
)
arguments = st.one_of(
    st.sampled_from(KEYWORDS),
    st.sampled_from(KEYWORDS).map(bytes.lower),
    integers_as_text,
    st.just(b""),
    job_ids,
    st.binary(max_size=40),
    st.text(max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.integers(1000, 300_000).map(lambda n: b"L" * n),  # very long
    st.sampled_from([b"1.5", b"-0", b"+1", b" 1", b"1 ", b"0x10", b"1e3", b"nan", b"\x00",
                     b"\r\n", b"\"", b"'", b"\\"]),
)


def encode_request(argv: list[bytes]) -> bytes:
    """RESP multibulk."""
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


def make_safe(argv: list[bytes]) -> list[bytes]:
    """Replace the few requests that are unsafe to send (see the sets above)."""
    name = argv[0].lower()
    if len(argv) > 1:
        sub = argv[1].lower()
        if sub in UNSAFE_SUBCOMMANDS.get(name, ()):
            argv = [argv[0], b"INFO" if name == b"cluster" else b"LIST"]
        if name == b"config" and sub == b"set" and (len(argv) < 3
                                                   or argv[2].lower() in UNSAFE_CONFIG):
            argv = [argv[0], b"GET"] + argv[2:3]
        if name == b"client" and sub == b"reply":
            argv = [argv[0], b"REPLY", b"ON"]
    return argv


# ------------------------------------------------------------------ RESP

class Incomplete(Exception):
    """The bytes end inside a reply."""


def parse_reply(buf: bytes, pos: int) -> int:
    """Check one RESP2 reply strictly; return where it ends."""
    eol = buf.find(b"\r\n", pos)
    if eol < 0:
        raise Incomplete
    kind, line = buf[pos:pos + 1], buf[pos + 1:eol]
    pos = eol + 2
    if kind in (b"+", b"-"):
        assert b"\r" not in line and b"\n" not in line, line
        return pos
    if kind == b":":
        assert line == str(int(line)).encode(), line
        return pos
    if kind in (b"$", b"*"):
        count = int(line)
        assert line == str(count).encode() and count >= -1, line
        if kind == b"$":
            if count >= 0:
                if len(buf) < pos + count + 2:
                    raise Incomplete
                assert buf[pos + count:pos + count + 2] == b"\r\n", "bulk not terminated"
                pos += count + 2
            return pos
        for _ in range(max(count, 0)):
            pos = parse_reply(buf, pos)
        return pos
    raise AssertionError("not a reply type: %r at %d" % (kind, pos))


def check_replies(data: bytes) -> list[bytes]:
    """``data`` must be complete, well-formed replies; return them."""
    replies = []
    pos = 0
    while pos < len(data):
        try:
            end = parse_reply(data, pos)
        except Incomplete:
            raise AssertionError("incomplete reply before the close: %r" % data[pos:pos + 200])
        replies.append(data[pos:end])
        pos = end
    return replies


# -------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """The one server every example of this module talks to."""
    proc = DisqueProcess(tmp_path_factory.mktemp("fuzz") / "node")
    proc.shared = True
    proc.start()
    yield proc
    fail_on(proc.verify())


@pytest.fixture(scope="module")
def command_names(node) -> list[bytes]:
    """Every command of the COMMAND table except the ones never sent."""
    with socket.create_connection(("127.0.0.1", node.port), timeout=READ_TIMEOUT) as sock:
        sock.sendall(encode_request([b"COMMAND"]))
        data = b""
        while True:
            data += sock.recv(65536)
            try:
                if parse_reply(data, 0) == len(data):
                    break
            except Incomplete:
                continue
    names = [name for name in _bulk_names(data) if name not in NEVER_SENT]
    assert b"addjob" in names and b"getjob" in names
    return names + [b"quit", b"nosuchcommand"]


def _bulk_names(command_reply: bytes) -> list[bytes]:
    # each entry is *6 then $len name: the first bulk after every "*6\r\n"
    names = []
    for chunk in command_reply.split(b"*6\r\n$")[1:]:
        size, _, rest = chunk.partition(b"\r\n")
        names.append(rest[:int(size)])
    return names


def exchange(node: DisqueProcess, data: bytes) -> bytes:
    """Send ``data``, half-close, return everything until the server closes."""
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=READ_TIMEOUT)
    out = b""
    try:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # closed by the server while we were still sending (protocol error)
        while True:
            try:
                chunk = sock.recv(1 << 20)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
    except socket.timeout:
        raise AssertionError("the server neither answered nor closed within %ss (got %r)\n%s"
                             % (READ_TIMEOUT, out[:200], node.tail_log())) from None
    finally:
        sock.close()
    return out


def check_server(node: DisqueProcess) -> None:
    """The process is alive and a new client is served; keep the dataset small."""
    assert node.proc.poll() is None, node.tail_log()
    with socket.create_connection(("127.0.0.1", node.port), timeout=READ_TIMEOUT) as sock:
        sock.sendall(b"PING\r\nINFO memory\r\n")
        data = b""
        while data.count(b"\r\n") < 3 or not data.endswith(b"\r\n\r\n"):
            chunk = sock.recv(65536)
            assert chunk, "control connection closed: %r" % data
            data += chunk
        assert data.startswith(b"+PONG\r\n"), data
        used = int(data.split(b"used_memory:")[1].split(b"\r\n")[0])
        if used > MAX_USED_MEMORY:
            sock.sendall(b"DEBUG FLUSHALL\r\n")
            assert sock.recv(64) == b"+OK\r\n"


def run_example(node: DisqueProcess, data: bytes) -> list[bytes]:
    """One example: well-formed replies, and the server still serves others."""
    replies = check_replies(exchange(node, data))
    check_server(node)
    return replies


# ----------------------------------------------------------------- tests

@SEEDED
@SETTINGS
@given(data=st.binary(max_size=300))
def test_random_bytes(node, data):
    replies = run_example(node, data)
    for reply in replies[:-1]:
        assert not reply.startswith(b"-ERR Protocol error"), "kept reading after %r" % reply


@st.composite
def requests(draw, names):
    name = draw(st.sampled_from(names))
    name = draw(st.sampled_from([name, name.upper(), name.capitalize()]))
    argv = [name] + draw(st.lists(arguments, max_size=8))
    return make_safe(argv)


@SEEDED
@SETTINGS
@given(data=st.data())
def test_random_requests_for_every_command(node, command_names, data):
    argvs = data.draw(st.lists(requests(command_names), min_size=1, max_size=4))
    replies = run_example(node, b"".join(encode_request(argv) for argv in argvs))
    closes = any(argv[0].lower() == b"quit" for argv in argvs)
    if not closes:
        # every request is answered (MONITOR, CLIENT KILL of itself and a
        # blocking GETJOB may end the exchange early)
        special = {b"monitor", b"client", b"getjob"}
        if not any(argv[0].lower() in special for argv in argvs):
            assert len(replies) == len(argvs), (argvs, replies)


NASTY_ARGUMENTS = [
    [],
    [b""],
    [b"", b"", b""],
    [b"-1", b"-1", b"-1"],
    [b"99999999999999999999", b"9223372036854775808", b"-9223372036854775809"],
    [b"\x00\xff\r\n", b"\"'\\"],
    [b"FROM"],
    [b"GET", b"*"],
    [b"x" * 100_000, b"0"],
    [b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001"] * 3,
    [b"COUNT", b"0", b"TIMEOUT", b"-5", b"FROM"],
    [b"state"] * 40,
]


def test_every_command_with_nasty_arguments(node, command_names):
    """Each command of the table, each fixed battery of bad arguments: one
    well-formed reply per request (the connection is half-closed after the
    request, so a blocking command may end without one)."""
    for name in command_names:
        for args in NASTY_ARGUMENTS:
            argv = make_safe([name] + args)
            replies = run_example(node, encode_request(argv))
            if name not in (b"getjob", b"monitor", b"client"):
                assert len(replies) == 1, (argv[:4], replies)


malformed_headers = st.one_of(
    st.tuples(st.sampled_from([b"*", b"$"]),
              st.one_of(integers_as_text, st.binary(max_size=12)),
              st.sampled_from([b"\r\n", b"\n", b"", b"\r"])).map(b"".join),
    st.builds(lambda n, size, body: b"*%d\r\n$%d\r\n%s\r\n" % (n, size, body),
              st.integers(-3, 2 ** 31), st.integers(-3, 2 ** 20), st.binary(max_size=30)),
    st.builds(lambda n: b"*%d\r\n" % n, st.integers(2 ** 20 - 2, 2 ** 62)),
    st.builds(lambda n: b"*1\r\n$%d\r\n" % n, st.integers(2 ** 29 - 2, 2 ** 62)),
)


@SEEDED
@SETTINGS
@given(prefix=st.lists(st.sampled_from([b"PING\r\n", b"*1\r\n$4\r\nPING\r\n", b"\r\n"]),
                       max_size=3),
       junk=st.lists(malformed_headers, min_size=1, max_size=3),
       suffix=st.sampled_from([b"", b"PING\r\n", b"*1\r\n$4\r\nPING\r\n"]))
def test_malformed_multibulk(node, prefix, junk, suffix):
    replies = run_example(node, b"".join(prefix) + b"".join(junk) + suffix)
    pings = sum(1 for p in prefix if p != b"\r\n")
    assert replies[:pings] == [b"+PONG\r\n"] * pings
    errors = [r for r in replies if r.startswith(b"-ERR Protocol error")]
    assert len(errors) <= 1
    if errors:
        assert replies[-1] == errors[0]  # nothing is answered after a protocol error


@SEEDED
@settings(max_examples=25, deadline=None, print_blob=True)
@given(size=st.integers(64 * 1024 - 10, 200 * 1024), inline=st.booleans())
def test_oversized_lines(node, size, inline):
    """An unterminated line past the 64 KB limit gets its protocol error, then
    the close; one below it, half-closed, only the close."""
    body = b"P" * size if inline else b"*1\r\n$" + b"9" * size
    replies = run_example(node, body)
    error = (b"-ERR Protocol error: too big inline request\r\n" if inline
             else b"-ERR Protocol error: too big bulk count string\r\n")
    assert replies in ([], [error]), replies
    if size > 64 * 1024:
        assert replies == [error]
