"""Client limits through a real server (docs/security.md "Limits"): each one
closes only the offending connection, or refuses the command, and is
counted in INFO limits while the node goes on serving others.
"""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.process import wait_until

EXPECTED_LOG = r"Closing client|closed for overcoming of output buffer limits"


def limits(node) -> dict[str, int]:
    return node.call("INFO", "limits")  # redis-py parses INFO into a dict


def connect(node) -> socket.socket:
    return socket.create_connection(("127.0.0.1", node.port), timeout=10)


def read_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection (bounded)."""
    sock.settimeout(timeout)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return out + b"<RST>"
        if not chunk:
            return out
        out += chunk
    raise AssertionError("connection still open after %.0f s: %r" % (timeout, out[-200:]))


def send_ignoring_reset(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server closed it meanwhile: what the test waits for


@pytest.mark.expect_log(EXPECTED_LOG)
def test_query_buffer_limit_closes_a_client_sending_a_huge_request(server_factory):
    node = server_factory("client-query-buffer-limit 1mb\n")
    with connect(node) as sock:
        # A bulk argument announced at 5 MB, sent up to 1.5 MB.
        send_ignoring_reset(sock, b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$5000000\r\n"
                            + b"x" * (1536 * 1024))
        reply = read_until_closed(sock)
    assert reply.startswith(b"-ERR client-query-buffer-limit reached"), reply[:200]
    # Many small arguments count too (the arguments taken so far are held).
    with connect(node) as sock:
        send_ignoring_reset(sock, b"*100000\r\n" + b"$10\r\n0123456789\r\n" * 40000)
        assert read_until_closed(sock).startswith(b"-ERR client-query-buffer-limit reached")
    assert limits(node)["client_query_buffer_limit_closed"] == 2
    # Below the limit a large request goes through, and the node serves on.
    body = b"y" * (512 * 1024)
    assert node.call("ADDJOB", "q", body, 0).startswith(b"D-")
    assert node.call("QLEN", "q") == 1


@pytest.mark.expect_log(EXPECTED_LOG)
def test_unauthenticated_client_may_buffer_only_a_little(server_factory):
    node = server_factory("requirepass s3cret\nunauthenticated-query-buffer-limit 4kb\n")
    with connect(node) as sock:
        send_ignoring_reset(sock, b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$450000000\r\n"
                            + b"x" * 64 * 1024)
        reply = read_until_closed(sock)
    assert reply.startswith(b"-NOAUTH Authentication required before sending more than 4096"), \
        reply[:200]
    # After AUTH (even in the same write) the usual limit applies.
    with connect(node) as sock:
        body = b"z" * (256 * 1024)
        sock.sendall(b"AUTH s3cret\r\n*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$%d\r\n%s\r\n$1\r\n0\r\n"
                     % (len(body), body))
        sock.settimeout(10)
        reply = b""
        while reply.count(b"\r\n") < 2:
            reply += sock.recv(4096)
        assert reply.startswith(b"+OK\r\n+D-"), reply
    with node.client(password="s3cret") as client:
        assert client.execute_command("QLEN", "q") == 1
        info = client.execute_command("INFO", "limits")
    assert info["unauthenticated_buffer_limit_closed"] == 1


def test_getjob_may_name_at_most_getjob_max_queues(server):
    client = server.client()
    names = ["q%d" % i for i in range(1025)]
    with pytest.raises(Exception, match=r"GETJOB names 1025 queues, more than "
                                        r"getjob-max-queues \(1024\)"):
        client.execute_command("GETJOB", "NOHANG", "FROM", *names)
    assert client.execute_command("GETJOB", "NOHANG", "FROM", *names[:1024]) is None
    client.execute_command("CONFIG", "SET", "getjob-max-queues", "3")
    client.execute_command("ADDJOB", "q2", "job", 0)
    assert client.execute_command("GETJOB", "NOHANG", "FROM", "q0", "q1", "q2")[0][0] == b"q2"
    with pytest.raises(Exception, match="GETJOB names 4 queues"):
        client.execute_command("GETJOB", "FROM", "q0", "q1", "q2", "q3")
    assert limits(server)["getjob_max_queues_refused"] == 2


@pytest.mark.expect_log(EXPECTED_LOG)
def test_request_timeout_closes_a_stalled_request_not_a_slow_one(server_factory):
    node = server_factory("client-request-timeout 1\n")
    stalled = connect(node)
    slow = connect(node)
    idle = connect(node)  # no partial request: an idle client is not concerned
    try:
        stalled.sendall(b"*2\r\n$4\r\nQLEN\r\n$5\r\nhel")
        slow.sendall(b"*2\r\n$4\r\nQLEN\r\n$12\r\n")
        started = time.monotonic()
        for byte in b"hello world!":  # one byte every 0.3 s, for longer than the timeout
            slow.sendall(bytes([byte]))
            time.sleep(0.3)
        slow.sendall(b"\r\n")
        slow.settimeout(10)
        assert slow.recv(64) == b":0\r\n"
        assert time.monotonic() - started > 2  # the slow request outlived the timeout
        assert read_until_closed(stalled) == b""
        idle.sendall(b"PING\r\n")
        idle.settimeout(10)
        assert idle.recv(64) == b"+PONG\r\n"
        assert limits(node)["client_request_timeout_closed"] == 1
    finally:
        for sock in (stalled, slow, idle):
            sock.close()


def test_maxclients_refuses_the_connection_over_the_limit(server_factory):
    node = server_factory("maxclients 2\n")
    first, second = connect(node), connect(node)
    try:
        for sock in (first, second):
            sock.sendall(b"PING\r\n")
            assert sock.recv(64) == b"+PONG\r\n"
        with connect(node) as third:
            assert read_until_closed(third) == b"-ERR max number of clients reached\r\n"
        first.close()
        wait_until(lambda: limits(node)["maxclients_rejected_connections"] == 1,
                   message="the refusal counted")
    finally:
        first.close()
        second.close()


@pytest.mark.expect_log(EXPECTED_LOG)
def test_output_buffer_limit_closes_a_client_that_does_not_read(server_factory):
    node = server_factory("client-output-buffer-limit normal 1mb 0 0\n")
    body = b"b" * (100 * 1024)
    for _ in range(20):
        node.call("ADDJOB", "big", body, 0)
    with connect(node) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        # 2 MB per reply, 100 of them, never read.
        send_ignoring_reset(sock, b"QPEEK big 20\r\n" * 100)
        wait_until(lambda: limits(node)["output_buffer_limit_closed_normal"] == 1,
                   message="the client closed by its output limit")
    assert node.call("QLEN", "big") == 20


def flood_until_monitor_closed(node, monitor: socket.socket):
    """Make ``monitor`` (a raw socket that reads nothing more) MONITOR, then
    send 2 MB batches of commands until the node closes it for its output
    limit; return the client that sent them."""
    monitor.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    monitor.sendall(b"MONITOR\r\n")
    monitor.settimeout(10)
    assert monitor.recv(5) == b"+OK\r\n"
    body = "m" * (100 * 1024)
    client = node.client()

    def closed_after_more_commands() -> bool:
        pipe = client.pipeline(transaction=False)
        for _ in range(20):
            pipe.execute_command("QLEN", body)
        pipe.execute()
        return limits(node)["output_buffer_limit_closed_monitor"] == 1
    wait_until(closed_after_more_commands, message="the MONITOR closed by its output limit")
    return client


@pytest.mark.expect_log(EXPECTED_LOG)
def test_output_buffer_limit_closes_a_monitor_that_does_not_read(server_factory):
    node = server_factory("client-output-buffer-limit normal 1mb 0 0\n")
    with connect(node) as monitor:
        client = flood_until_monitor_closed(node, monitor)
        assert client.execute_command("PING")


@pytest.mark.expect_log(EXPECTED_LOG)
def test_monitor_output_buffer_limit_applies_to_monitors_only(server_factory):
    node = server_factory("monitor-output-buffer-limit 1mb 0 0\n")
    assert node.call("CONFIG", "GET", "monitor-output-buffer-limit") == {
        b"monitor-output-buffer-limit": b"1048576 0 0"}
    with connect(node) as monitor:
        client = flood_until_monitor_closed(node, monitor)
        # A normal client has no limit here: 20 MB of unread replies keep it open.
        for _ in range(10):
            node.call("ADDJOB", "big", b"b" * (100 * 1024), 0)
        with connect(node) as reader:
            reader.sendall(b"QPEEK big 10\r\n" * 20)
            expected = 20 * (10 * (100 * 1024))
            got = 0
            reader.settimeout(10)
            while got < expected:
                chunk = reader.recv(1 << 20)
                assert chunk, "the normal client was closed"
                got += len(chunk)
        assert limits(node)["output_buffer_limit_closed_normal"] == 0


@pytest.mark.expect_log(EXPECTED_LOG)
def test_query_buffer_limit_counts_what_a_blocked_client_sends_ahead(server_factory):
    node = server_factory("client-query-buffer-limit 1mb\n")
    with connect(node) as sock:
        sock.sendall(b"GETJOB FROM nothing-here\r\n")
        wait_until(lambda: node.call("INFO", "clients")["blocked_clients"] == 1,
                   message="the GETJOB blocked")
        # Complete commands, queued behind the blocked GETJOB: 1.5 MB of them.
        body = b"a" * (64 * 1024)
        command = b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$%d\r\n%s\r\n$1\r\n0\r\n" % (len(body), body)
        send_ignoring_reset(sock, command * 24)
        assert read_until_closed(sock).startswith(b"-ERR client-query-buffer-limit reached")
    assert limits(node)["client_query_buffer_limit_closed"] == 1
    assert node.call("QLEN", "q") == 0  # none of them ran
