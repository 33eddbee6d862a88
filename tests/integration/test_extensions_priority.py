"""Priorities with real disque-server processes, through redis-py and the
real ``redis-cli --no-raw`` (docs/priorities.md): PRIORITY 9 jobs are served
before older PRIORITY 5 ones, QPEEK and QSTAT show it, and the priorities and
the order survive AOF restarts (DEBUG RESTART, SIGKILL after a rewrite, and
the queued reload of ``SHUTDOWN REWRITE-AOF`` + ``aof-enqueue-jobs-once``).
Every wait is a bounded poll.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.support.cluster import encode_command
from tests.support.process import DisqueProcess, wait_until


def add(proc_or_client, body: str, priority: int | None, *options) -> bytes:
    extra = ("PRIORITY", priority) if priority is not None else ()
    return proc_or_client.execute_command("ADDJOB", "q", body, 0, *options, *extra)


def fields(flat: list) -> dict:
    return {key.decode(): value for key, value in zip(flat[0::2], flat[1::2])}


def peek_ids(client, count: int = 100) -> list[bytes]:
    return [entry[1] for entry in client.execute_command("QPEEK", "q", count)]


def fill(client) -> tuple[list[bytes], list[bytes]]:
    """Jobs added in this order: four without PRIORITY, two PRIORITY 9, one
    PRIORITY 0, one PRIORITY 5. Returns (ids in creation order, serving order)."""
    ids = [add(client, "n%d" % k, None, "RETRY", 1) for k in range(4)]
    ids += [add(client, "u%d" % k, 9, "RETRY", 1) for k in range(2)]
    ids += [add(client, "low", 0, "RETRY", 1), add(client, "five", 5, "RETRY", 1)]
    return ids, [ids[4], ids[5], ids[0], ids[1], ids[2], ids[3], ids[7], ids[6]]


PRIORITIES = [9, 2, 5, 5, 0, 1]  # QSTAT's field for ``fill``


# ------------------------------------------------------------------ redis-py

def test_priority_9_is_served_before_older_jobs(server):
    r = server.client(protocol=2)
    ids, order = fill(r)
    assert peek_ids(r) == order
    assert [e[1] for e in r.execute_command("QPEEK", "q", -3)] == order[::-1][:3]
    stats = fields(r.execute_command("QSTAT", "q"))
    assert stats["len"] == 8 and stats["priorities"] == PRIORITIES
    show = fields(r.execute_command("SHOW", ids[4]))
    assert show["priority"] == 9
    assert "priority" not in fields(r.execute_command("SHOW", ids[0]))  # 1.0's 30 elements
    got = r.execute_command("GETJOB", "COUNT", 3, "FROM", "q")
    assert [e[1] for e in got] == order[:3]
    assert [e[1] for e in r.execute_command("GETJOB", "COUNT", 10, "FROM", "q")] == order[3:]
    assert r.execute_command("ACKJOB", *ids) == 8
    assert len(r.execute_command("QSTAT", "q")) == 20  # no priorities left: 1.0's reply


def test_a_blocked_consumer_gets_the_urgent_job_of_a_pipeline(server):
    """A consumer waits; one pipeline adds a PRIORITY 5 job and then a
    PRIORITY 9 one: the first is served at once, the second stays queued
    ahead of later PRIORITY 5 jobs."""
    r = server.client(protocol=2)
    waiter = server.client(protocol=2)
    add(r, "warm", None)
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q") is not None
    pipe = r.pipeline(transaction=False)
    for body, priority in (("a", None), ("b", 9), ("c", None)):
        pipe.execute_command("ADDJOB", "q", body, 0,
                             *(("PRIORITY", priority) if priority else ()))
    a, b, c = pipe.execute()
    assert peek_ids(r) == [b, a, c]
    assert [e[1] for e in waiter.execute_command("GETJOB", "TIMEOUT", 5000, "FROM", "q")] == [b]


def test_producers_that_never_give_priority_see_1_0_replies(server):
    """The bytes a Disque 1.0 client sees: 3-element QPEEK entries, 20-element
    QSTAT, 30-element SHOW, even when other producers use PRIORITY on other queues."""
    server.call("ADDJOB", "urgent", "x", 0, "PRIORITY", 9)
    job_id = server.call("ADDJOB", "q", "body", 0)
    assert server.raw(encode_command("QPEEK", "q", 10)) == (
        b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n" + job_id + b"\r\n$4\r\nbody\r\n")
    assert len(server.call("QSTAT", "q")) == 20
    assert len(server.call("SHOW", job_id)) == 30
    assert server.raw(encode_command("COMMAND", "INFO", "qpeek")).startswith(
        b"*1\r\n*6\r\n$5\r\nqpeek\r\n:3\r\n")
    assert fields(server.call("QSTAT", "urgent"))["priorities"] == [9, 1]


def test_qpeek_withpriority(server):
    r = server.client(protocol=2)
    ids, order = fill(r)
    entries = r.execute_command("QPEEK", "q", 3, "WITHPRIORITY")
    assert entries == [[b"q", order[0], b"u0", b"priority", 9],
                       [b"q", order[1], b"u1", b"priority", 9],
                       [b"q", order[2], b"n0", b"priority", 5]]
    assert r.execute_command("QPEEK", "q", -1, "WITHPRIORITY") == [
        [b"q", ids[6], b"low", b"priority", 0]]


# ------------------------------------------------------------------ redis-cli

@pytest.fixture
def cli(server, redis_cli):
    def run(*args) -> str:
        result = subprocess.run([redis_cli, "--no-raw", "-p", str(server.port),
                                 *[str(a) for a in args]],
                                capture_output=True, text=True, timeout=20)
        assert result.stderr == "", result.stderr
        return result.stdout
    return run


def test_redis_cli_priority_order_and_qstat(cli):
    old = [cli("ADDJOB", "q", "old%d" % k, 0).strip() for k in range(2)]
    urgent = cli("ADDJOB", "q", "urgent", 0, "PRIORITY", 9).strip()
    low = cli("ADDJOB", "q", "low", 0, "PRIORITY", 0).strip()
    assert cli("QPEEK", "q", 1) == '1) 1) "q"\n   2) "%s"\n   3) "urgent"\n' % urgent
    qstat = cli("QSTAT", "q")
    assert qstat.startswith(' 1) "name"\n 2) "q"\n 3) "len"\n 4) (integer) 4\n')
    assert qstat.endswith(
        '19) "pause"\n20) "none"\n21) "priorities"\n'
        '22) 1) (integer) 9\n    2) (integer) 1\n    3) (integer) 5\n    4) (integer) 2\n'
        '    5) (integer) 0\n    6) (integer) 1\n'), qstat
    assert cli("SHOW", urgent).endswith('31) "priority"\n32) (integer) 9\n')
    assert cli("GETJOB", "COUNT", 4, "FROM", "q") == "".join(
        '%d) 1) "q"\n   2) "%s"\n   3) "%s"\n' % (n, job_id, body)
        for n, (job_id, body) in enumerate(
            [(urgent, "urgent"), (old[0], "old0"), (old[1], "old1"), (low, "low")], 1))
    assert cli("ADDJOB", "q", "x", 0, "PRIORITY", 10) == \
        "(error) ERR PRIORITY must be between 0 and 9\n"


def test_redis_cli_qpeek_withpriority(cli):
    urgent = cli("ADDJOB", "q", "urgent", 0, "PRIORITY", 7).strip()
    assert cli("QPEEK", "q", 1, "WITHPRIORITY") == (
        '1) 1) "q"\n   2) "%s"\n   3) "urgent"\n   4) "priority"\n   5) (integer) 7\n' % urgent)


# ------------------------------------------------------------------- AOF

def debug_restart(proc: DisqueProcess) -> None:
    pid = proc.proc.pid
    run_id = proc.call("INFO", "server")
    assert proc.raw(encode_command("DEBUG", "RESTART"), timeout=10, until_close=True) == b"<EOF>"
    proc.wait_ready()
    assert proc.proc.pid == pid
    wait_until(lambda: proc.call("INFO", "server").get("run_id") != run_id.get("run_id"),
               message="a new run_id after DEBUG RESTART")


def sigkill_after_rewrite(proc: DisqueProcess) -> None:
    assert proc.call("BGREWRITEAOF") is not None
    wait_until(lambda: proc.call("INFO", "persistence")["aof_rewrite_in_progress"] == 0,
               message="the AOF rewrite to finish")
    proc.kill()
    proc.start()


@pytest.mark.parametrize("restart", [debug_restart, sigkill_after_rewrite],
                         ids=["debug-restart", "sigkill-after-rewrite"])
def test_aof_restart_keeps_priorities_and_order(server_factory, restart):
    """Jobs come back active (persistence.md §5) with their priorities; their
    RETRY 1 requeues put them back in priority order."""
    proc = server_factory("appendonly yes\n")
    r = proc.client(protocol=2)
    ids, order = fill(r)
    restart(proc)
    r = proc.client(protocol=2)
    for job_id, priority in zip(ids, [5, 5, 5, 5, 9, 9, 0, 5]):
        show = fields(r.execute_command("SHOW", job_id))
        assert show.get("priority", 5) == priority, (job_id, show)
        assert len(show) == (15 if priority == 5 else 16)
    wait_until(lambda: r.execute_command("QLEN", "q") == 8, timeout=15,
               message="the requeue of the 8 reloaded jobs")
    assert peek_ids(r) == order
    assert fields(r.execute_command("QSTAT", "q"))["priorities"] == PRIORITIES
    assert [e[1] for e in r.execute_command("GETJOB", "COUNT", 8, "FROM", "q")] == order


def test_queued_reload_keeps_the_order(server_factory):
    """SHUTDOWN REWRITE-AOF with aof-enqueue-jobs-once: the jobs are queued
    again as the file is loaded, highest priority first."""
    proc = server_factory("appendonly yes\n")
    r = proc.client(protocol=2)
    ids = [add(r, "n%d" % k, p, "RETRY", 300)
           for k, p in enumerate([None, 3, 9, None, 8, 9, 0])]
    order = [ids[2], ids[5], ids[4], ids[0], ids[3], ids[1], ids[6]]
    assert peek_ids(r) == order
    assert r.execute_command("CONFIG", "SET", "aof-enqueue-jobs-once", "yes") == b"OK"
    assert r.execute_command("CONFIG", "REWRITE") == b"OK"
    assert proc.raw(encode_command("SHUTDOWN", "REWRITE-AOF"), timeout=10,
                    until_close=True) == b"<EOF>"
    assert proc.wait_exit(10) == 0
    proc.start()
    r = proc.client(protocol=2)
    assert peek_ids(r) == order
    assert fields(r.execute_command("QSTAT", "q"))["priorities"] == [9, 2, 8, 1, 5, 2, 3, 1,
                                                                     0, 1]
    assert [e[1] for e in r.execute_command("GETJOB", "COUNT", 10, "FROM", "q")] == order
