"""Access control on real servers (docs/security.md), through redis-py and
redis-cli: a consumer limited to ``@consume ~orders:*``, users that survive
CONFIG REWRITE and a restart, MONITOR and the log keeping passwords out,
DEBUG and CONFIG SET dir refused by default, and protected mode seen from
another network namespace (as root)."""

from __future__ import annotations

import hashlib
import socket
import subprocess

import pytest
import redis

from tests.support.cluster import _Reader, encode_command, raw_command
from tests.support.netns import namespace  # noqa: F401  (a fixture)
from tests.support.process import wait_until

TIMEOUT = 10.0
WORKER = "user worker on >worker-pw ~orders:* +@consume +@connection\n"


def cli(redis_cli: str, port: int, *args: str, host: str = "127.0.0.1",
        prefix: tuple[str, ...] = ()) -> str:
    """redis-cli's output (not a tty: replies as plain text)."""
    result = subprocess.run(list(prefix) + [redis_cli, "-h", host, "-p", str(port), *args],
                            capture_output=True, text=True, timeout=TIMEOUT)
    return result.stdout + result.stderr


def test_consumer_cannot_add_jobs_or_take_from_another_queue(server_factory, redis_cli):
    """A user limited to @consume ~orders:* takes and acknowledges jobs of
    its queues only: ADDJOB, another queue and another queue's job are
    refused, each refusal counted in INFO security."""
    proc = server_factory(WORKER)
    admin = proc.client()
    job_id = admin.execute_command("ADDJOB", "orders:eu", "o1", 0)
    other = admin.execute_command("ADDJOB", "payments", "p1", 0)
    worker = proc.client(username="worker", password="worker-pw")
    assert worker.execute_command("ACL", "WHOAMI") == b"worker"
    with pytest.raises(redis.ResponseError, match="^User worker has no permissions to run the "
                                                  "'addjob' command$"):
        worker.execute_command("ADDJOB", "orders:eu", "x", 0)
    with pytest.raises(redis.ResponseError, match="^User worker has no permissions to access "
                                                  "the queue 'payments'$"):
        worker.execute_command("GETJOB", "NOHANG", "FROM", "orders:eu", "payments")
    with pytest.raises(redis.ResponseError, match="queue of job"):
        worker.execute_command("WORKING", other)
    assert admin.execute_command("QLEN", "payments") == 1
    assert worker.execute_command("GETJOB", "FROM", "orders:eu") == [
        [b"orders:eu", job_id, b"o1"]]
    assert worker.execute_command("ACKJOB", job_id) == 1
    # The same through redis-cli's --user/--pass.
    login = ("--user", "worker", "--pass", "worker-pw", "--no-auth-warning")
    assert cli(redis_cli, proc.port, *login, "ADDJOB", "orders:eu", "x", "0") == (
        "NOPERM User worker has no permissions to run the 'addjob' command\n\n")
    assert cli(redis_cli, proc.port, *login, "GETJOB", "NOHANG", "FROM", "payments") == (
        "NOPERM User worker has no permissions to access the queue 'payments'\n\n")
    assert ("AUTH failed: WRONGPASS invalid username-password pair or user is disabled.\n"
            in cli(redis_cli, proc.port, "--user", "worker", "--pass", "wrong",
                   "--no-auth-warning", "PING"))
    security = admin.execute_command("INFO", "security")
    assert security["acl_access_denied_cmd"] == 2
    assert security["acl_access_denied_queue"] == 3
    assert security["acl_access_denied_auth"] == 1


def test_info_needs_monitoring_not_read(server_factory):
    """INFO reports the whole node: @read on some queues does not give it."""
    proc = server_factory("user reader on >reader-pw ~orders:* +@read +@connection\n"
                          "user metrics on >metrics-pw ~orders:* +@read +@connection "
                          "+@monitoring\n"
                          "user ops on >ops-pw ~* +@admin\n")
    reader = proc.client(username="reader", password="reader-pw")
    assert reader.execute_command("QLEN", "orders:eu") == 0
    with pytest.raises(redis.ResponseError) as denied:
        reader.execute_command("INFO")
    assert str(denied.value) == "User reader has no permissions to run the 'info' command"
    with pytest.raises(redis.exceptions.NoPermissionError):
        reader.execute_command("INFO", "security")
    metrics = proc.client(username="metrics", password="metrics-pw")
    assert "registered_jobs" in metrics.execute_command("INFO", "jobs")
    ops = proc.client(username="ops", password="ops-pw")
    assert "acl_access_denied_cmd" in ops.execute_command("INFO", "security")
    admin = proc.client()
    assert admin.execute_command("ACL", "CAT", "monitoring") == [b"info"]
    assert b"info" not in admin.execute_command("ACL", "CAT", "read")
    # ACL LIST names @admin alone: @monitoring is inside it.
    assert [line for line in admin.execute_command("ACL", "LIST")
            if line.startswith(b"user ops ")] == [b"user ops on #%s ~* -@all +@admin"
                                                  % hashlib.sha256(b"ops-pw").hexdigest().encode()]


def test_users_set_at_run_time_survive_rewrite_and_restart(server_factory):
    proc = server_factory("requirepass admin-pw\n")
    admin = proc.client(password="admin-pw")
    assert admin.execute_command("ACL", "SETUSER", "reader", "on", ">reader-pw", "~q*",
                                 "+@read") == b"OK"
    assert admin.execute_command("CONFIG", "REWRITE") == b"OK"
    text = proc.config_path.read_text()
    assert "reader-pw" not in text
    assert ("user reader on #%s ~q* -@all +@read" % hashlib.sha256(b"reader-pw").hexdigest()
            in text.splitlines())
    proc.restart()
    reader = proc.client(username="reader", password="reader-pw")
    assert reader.execute_command("QLEN", "q1") == 0
    with pytest.raises(redis.ResponseError, match="^User reader has no permissions to access"):
        reader.execute_command("QLEN", "other")
    with pytest.raises(redis.ResponseError, match="'addjob' command"):
        reader.execute_command("ADDJOB", "q1", "x", 0)
    assert proc.client(password="admin-pw").execute_command("ACL", "USERS") == [
        b"default", b"reader"]


def test_monitor_and_log_never_show_passwords(server_factory):
    proc = server_factory(WORKER + "requirepass admin-pw\n")
    with socket.create_connection(("127.0.0.1", proc.port), timeout=TIMEOUT) as watcher:
        watcher.sendall(encode_command("AUTH", "admin-pw") + encode_command("MONITOR"))
        reader = _Reader(watcher)
        assert reader.line() == b"+OK" and reader.line() == b"+OK"
        with socket.create_connection(("127.0.0.1", proc.port), timeout=TIMEOUT) as other:
            other.sendall(encode_command("AUTH", "guessed-pw")
                          + encode_command("AUTH", "worker", "worker-pw")
                          + encode_command("HELLO", "3", "AUTH", "worker", "worker-pw"))
            with proc.client(password="admin-pw") as admin:
                assert admin.execute_command("ACL", "SETUSER", "x", ">hidden-pw") == b"OK"
            other.sendall(encode_command("PING", "done"))
            lines = [reader.line()]
            while not lines[-1].endswith(b' "PING" "done"'):
                lines.append(reader.line())
    shown = b"\n".join(lines)
    for secret in (b"worker-pw", b"guessed-pw", b"hidden-pw", b"admin-pw"):
        assert secret not in shown
    assert any(line.endswith(b' "AUTH" "(redacted)"') for line in lines)
    assert any(line.endswith(b' "AUTH" "(redacted)" "(redacted)"') for line in lines)
    assert any(line.endswith(b' "HELLO" "3" "AUTH" "(redacted)" "(redacted)"') for line in lines)
    assert b"SETUSER" not in shown  # ACL is an admin command: never shown
    wait_until(lambda: "AUTH failed for user 'default'" in proc.log_path.read_text(),
               TIMEOUT, message="the failed AUTH logged")
    log = proc.log_path.read_text()
    for secret in ("worker-pw", "guessed-pw", "hidden-pw", "admin-pw"):
        assert secret not in log


def test_debug_and_protected_configs_refused_by_default(server_factory, tmp_path):
    # The test servers enable both (tests/support/process.py): the last line wins.
    proc = server_factory("enable-debug-command no\nenable-protected-configs no\n")
    assert raw_command(proc.port, "DEBUG", "FLUSHALL").startswith(
        b"-ERR DEBUG command not allowed.")
    assert raw_command(proc.port, "CONFIG", "SET", "dir", str(tmp_path)) == (
        b"-ERR CONFIG SET failed (possibly related to argument 'dir') - can't set protected "
        b"config\r\n")
    local = server_factory("enable-debug-command local\nenable-protected-configs local\n")
    assert raw_command(local.port, "DEBUG", "FLUSHALL") == b"+OK\r\n"  # loopback is local
    assert raw_command(local.port, "CONFIG", "SET", "dir", str(tmp_path)) == b"+OK\r\n"
    assert raw_command(local.port, "CONFIG", "GET", "enable-debug-command") == (
        b"*2\r\n$20\r\nenable-debug-command\r\n$5\r\nlocal\r\n")


def test_a_long_queue_name_does_not_stall_the_node(server_factory):
    """Glob matching is linear in the queue name: QLEN of "app:" + ":" * n + "x"
    against ``~app:*:*:jobs`` took the recursive matcher n * n steps (8.8 s at
    n = 16,000 compiled, this n is 4 times that) while every other client
    waited. The node answers it, and a PING sent meanwhile, within the poll."""
    proc = server_factory("user app on >app-pw ~app:*:*:jobs +@read +@connection\n")
    name = "app:" + ":" * 64_000
    attacker = socket.create_connection(("127.0.0.1", proc.port), timeout=0.05)
    bystander = socket.create_connection(("127.0.0.1", proc.port), timeout=0.05)
    attacker.sendall(encode_command("AUTH", "app", "app-pw") + encode_command("QLEN", name + "x")
                     + encode_command("QLEN", name + ":jobs"))
    bystander.sendall(encode_command("PING"))
    denied = ("-NOPERM User app has no permissions to access the queue '%sx'\r\n"
              % name).encode()
    wait_until(_receives(bystander, b"+PONG\r\n"), timeout=TIMEOUT, message="PING's reply")
    wait_until(_receives(attacker, b"+OK\r\n" + denied + b":0\r\n"), timeout=TIMEOUT,
               message="the QLEN replies")
    attacker.close()
    bystander.close()
    app = proc.client(username="app", password="app-pw")
    with pytest.raises(redis.exceptions.NoPermissionError):
        app.execute_command("QLEN", "app:" + ":" * 16_000 + "x")
    assert app.execute_command("QLEN", "app:eu:1:jobs") == 0


def _receives(sock: socket.socket, expected: bytes):
    """A poll: True once ``sock`` has received exactly ``expected`` (a read
    that times out is retried by wait_until)."""
    received = bytearray()

    def received_all() -> bool:
        if len(received) < len(expected):
            received.extend(sock.recv(1 << 20))
        assert received == expected[:len(received)], bytes(received[:200])
        return len(received) == len(expected)
    return received_all


# ------------------------------------------------------- protected mode

def test_protected_mode_from_another_host(server_factory, redis_cli, namespace):
    proc = server_factory("bind 127.0.0.1 %s\n" % namespace.host_ip)
    outside = namespace.prefix

    def remote(*args: str) -> str:
        return cli(redis_cli, proc.port, *args, host=namespace.host_ip, prefix=outside)

    denied = remote("PING")
    assert denied.startswith("DENIED Disque is running in protected mode"), denied
    assert "CONFIG SET protected-mode no" in denied
    assert proc.call("INFO", "security")["protected_mode_denied_connections"] == 1
    assert proc.call("PING") is True  # loopback is let in
    proc.call("CONFIG", "SET", "requirepass", "pw")
    assert remote("PING") == "NOAUTH Authentication required.\n\n"
    assert remote("-a", "pw", "--no-auth-warning", "PING") == "PONG\n"
    with redis.Redis(host="127.0.0.1", port=proc.port, password="pw") as admin:
        admin.execute_command("CONFIG", "SET", "requirepass", "")
        assert remote("PING").startswith("DENIED")
        admin.execute_command("CONFIG", "SET", "protected-mode", "no")
        assert remote("PING") == "PONG\n"
