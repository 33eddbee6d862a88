"""Queue delivery limits (QLIMIT) through real server processes
(docs/rate-limits.md): redis-py and redis-cli, consumers held to the rate,
waiting consumers served later, and the limit kept across a restart (in
the tables file beside nodes.conf, moved there from an older nodes.conf).

Counts are checked against the time each test measured around them (a
bound the server cannot exceed whatever the machine's load), never
against a wall-clock ceiling on how long something took."""

from __future__ import annotations

import base64
import subprocess
import threading
import time

import pytest
import redis

from tests.support.process import wait_until


def add_jobs(client, queue: str, count: int) -> None:
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        pipe.execute_command("ADDJOB", queue, "job%d" % i, 0)
    pipe.execute()


def limit_of(client, queue: str) -> dict:
    flat = client.execute_command("QLIMIT", queue)
    return {key.decode(): value for key, value in zip(flat[::2], flat[1::2])}


def test_getjob_count_right_after_setting_gets_at_most_the_burst(server):
    r = server.client()
    add_jobs(r, "api-calls", 200)
    assert r.execute_command("QLIMIT", "api-calls", "RATE", 5) == b"OK"
    got = r.execute_command("GETJOB", "COUNT", 100, "FROM", "api-calls")
    assert 1 <= len(got) <= 5
    assert r.execute_command("QLEN", "api-calls") == 200 - len(got)


def test_a_consumer_gets_at_most_the_rate_over_the_time_measured(server):
    r = server.client()
    add_jobs(r, "metered", 500)
    rate, burst = 20, 5
    r.execute_command("QLIMIT", "metered", "RATE", rate, "BURST", burst)
    got = 0
    started = time.monotonic()
    while got < 40:
        reply = r.execute_command("GETJOB", "TIMEOUT", 5000, "COUNT", 100, "FROM", "metered")
        assert reply is not None, "a waiting consumer was not served within its timeout"
        got += len(reply)
    elapsed = time.monotonic() - started
    # The bucket started full: no more than the burst plus what the time earned.
    assert got <= burst + rate * elapsed + 1, (got, elapsed)


def test_waiting_consumers_wait_and_are_served_later(server):
    r = server.client()
    add_jobs(r, "trickle", 10)
    r.execute_command("QLIMIT", "trickle", "RATE", 2, "BURST", 1)
    assert len(r.execute_command("GETJOB", "COUNT", 10, "FROM", "trickle")) == 1
    results: list = [None] * 3

    def consume(i: int) -> None:
        results[i] = server.client().execute_command("GETJOB", "TIMEOUT", 20000,
                                                     "FROM", "trickle")

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(3)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    elapsed = time.monotonic() - started
    assert all(reply is not None and len(reply) == 1 for reply in results), results
    # Three more jobs at 2 per second from an empty bucket take at least 1.5 s.
    assert elapsed >= 1.4, elapsed
    assert r.execute_command("QLEN", "trickle") == 6


def test_nohang_under_the_limit_gets_nothing_rather_than_waiting(server):
    r = server.client()
    add_jobs(r, "held", 5)
    r.execute_command("QLIMIT", "held", "RATE", "0.01", "BURST", 1)
    assert len(r.execute_command("GETJOB", "NOHANG", "COUNT", 5, "FROM", "held")) == 1
    assert r.execute_command("GETJOB", "NOHANG", "COUNT", 5, "FROM", "held") is None
    assert r.execute_command("GETJOB", "TIMEOUT", 100, "FROM", "held") is None


def test_the_limit_is_kept_across_a_restart(server):
    r = server.client()
    conf = next(server.dir.glob("nodes*.conf"))
    written = conf.stat().st_mtime_ns
    r.execute_command("QLIMIT", "kept", "RATE", "2.5", "BURST", 3)
    r.execute_command("QLIMIT", "dropped", "RATE", 9)
    r.execute_command("QLIMIT", "dropped", "RATE", 0)
    # One record per change in the tables file; nodes.conf is not rewritten.
    tables = conf.with_suffix(".tables").read_bytes()
    assert tables.startswith(b"DISQUE-TABLES 1\n") and tables.count(b"dropped") == 2
    assert conf.stat().st_mtime_ns == written and "queue-rate-limit" not in conf.read_text()
    server.restart()
    r = server.client()
    assert limit_of(r, "kept") == {"rate": b"2.5", "burst": 3, "tokens": 3}
    assert limit_of(r, "dropped")["rate"] == b"0"
    add_jobs(r, "kept", 20)
    assert len(r.execute_command("GETJOB", "COUNT", 20, "FROM", "kept")) <= 3


def test_qlimit_through_redis_cli(server, redis_cli):
    def cli(*args) -> str:
        result = subprocess.run([redis_cli, "--no-raw", "-p", str(server.port),
                                 *map(str, args)], capture_output=True, text=True, timeout=20)
        assert result.stderr == "", result.stderr
        return result.stdout

    assert cli("QLIMIT", "cliq", "RATE", "4") == "OK\n"
    assert cli("QLIMIT", "cliq") == (
        '1) "rate"\n2) "4"\n3) "burst"\n4) (integer) 4\n5) "tokens"\n6) (integer) 4\n')
    assert cli("QLIMIT", "cliq", "RATE", "-4") == (
        "(error) ERR RATE must be a number of jobs per second from 0.001 to 1000000, with at "
        "most three decimals (0 removes the limit)\n")
    assert cli("QLIMIT", "cliq", "RATE", "0") == "OK\n"


def test_qlimit_is_in_manage_and_checks_the_queue(server):
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", "ops", "on", ">pw", "~orders:*", "+@manage",
                          "+@connection")
    admin.execute_command("ACL", "SETUSER", "worker", "on", ">pw", "~orders:*", "+@consume",
                          "+@connection")
    ops = server.client(username="ops", password="pw")
    assert ops.execute_command("QLIMIT", "orders:eu", "RATE", 3) == b"OK"
    with pytest.raises(redis.ResponseError, match="no permissions to access the queue 'mail'"):
        ops.execute_command("QLIMIT", "mail", "RATE", 3)
    worker = server.client(username="worker", password="pw")
    with pytest.raises(redis.ResponseError, match="no permissions to run the 'qlimit' command"):
        worker.execute_command("QLIMIT", "orders:eu")


def test_limits_and_schedules_of_an_older_nodes_conf_move_to_the_tables_file(server):
    """A node upgraded from a version that kept them in nodes.conf keeps them."""
    conf = next(server.dir.glob("nodes*.conf"))
    server.stop()
    node_line = conf.read_text().splitlines()[0]
    node_id = node_line.split()[0]
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    conf.write_text(
        node_line + "\n"
        + "schedule %s 1700000000000 %s 0 3600 - %s %s - 0 -\n" % (
            b64(b"hourly"), node_id, b64(b"reports"), b64(b"build"))
        + "vars queue-rate-limit %s 2.5 3\n" % b64(b"reports"))
    conf.with_suffix(".tables").unlink(missing_ok=True)
    server.start()
    assert "Moved 1 schedules and 1 delivery limits from" in server.log_path.read_text()
    for _ in range(2):  # as moved, then as read back from the tables file
        r = server.client()
        assert limit_of(r, "reports") == {"rate": b"2.5", "burst": 3, "tokens": 3}
        [entry] = r.execute_command("SCHEDULE", "LIST")
        assert entry[:6] == [b"name", b"hourly", b"spec", b"EVERY 3600", b"queue", b"reports"]
        assert entry[-2:] == [b"owner", b"default"]
        text = conf.read_text()
        assert "schedule " not in text and "queue-rate-limit" not in text and node_id in text
        server.restart()


def test_limits_and_schedules_share_the_tables_file(server):
    r = server.client()
    r.execute_command("SCHEDULE", "SET", "nightly", "EVERY", 3600, "reports", "build")
    r.execute_command("QLIMIT", "reports", "RATE", 1)
    server.restart()
    r = server.client()
    assert limit_of(r, "reports")["rate"] == b"1"
    assert b"nightly" in repr(r.execute_command("SCHEDULE", "LIST")).encode()
