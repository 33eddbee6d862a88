"""ADDJOB ... DEDUPID against a real server (docs/dedup.md): through redis-cli,
within and after the window, and across an AOF restart."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.test_aof import info, pipeline, wait_rewrite_done
from tests.support.process import wait_until


@pytest.fixture
def cli(server, redis_cli):
    """One redis-cli command against ``server``; its stdout, stripped."""
    def run(*args: str) -> str:
        done = subprocess.run([redis_cli, "-p", str(server.port), *args], capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return done.stdout.strip()
    return run


def test_redis_cli_gets_the_same_id_twice(server, cli):
    first = cli("ADDJOB", "orders", "hello", "0", "DEDUPID", "order-17")
    assert first.startswith("D-")
    assert cli("ADDJOB", "orders", "hello again", "0", "DEDUPID", "order-17") == first
    assert cli("ADDJOB", "orders", "hello", "0", "RETRY", "5", "DEDUPID", "order-17") == first
    assert cli("QLEN", "orders") == "1"
    assert cli("ADDJOB", "invoices", "hello", "0", "DEDUPID", "order-17") != first
    assert cli("ADDJOB", "orders", "x", "0", "DEDUPID", "y" * 257) == (
        "ERR DEDUPID must be 1 to 256 bytes")
    # The token keeps naming the job once it is consumed and acknowledged.
    taken = cli("GETJOB", "NOHANG", "FROM", "orders").splitlines()
    assert taken[1] == first
    assert cli("ACKJOB", first) == "1"
    assert cli("ADDJOB", "orders", "hello", "0", "DEDUPID", "order-17") == first
    assert cli("QLEN", "orders") == "0"


def test_a_short_window_ends(server, cli):
    assert cli("CONFIG", "SET", "dedup-window", "1") == "OK"
    first = cli("ADDJOB", "q", "b", "0", "DEDUPID", "t")
    # Within the second the token answers; after it, the same ADDJOB makes a new job.
    later = wait_until(lambda: (lambda got: got if got != first else None)(
        cli("ADDJOB", "q", "b", "0", "DEDUPID", "t")), timeout=10, interval=0.1,
        message="the 1 s window to end")
    assert later.startswith("D-") and cli("QLEN", "q") == "2"
    assert cli("CONFIG", "SET", "dedup-window", "0") == "OK"
    assert cli("ADDJOB", "q", "b", "0", "DEDUPID", "u") != cli("ADDJOB", "q", "b", "0",
                                                                 "DEDUPID", "u")


JOBS = 3000


@pytest.mark.parametrize("restart", ["sigkill", "shutdown"])
def test_tokens_survive_an_aof_restart(server_factory, restart):
    proc = server_factory("appendonly yes\nappendfsync always\n")
    commands = [("ADDJOB", "q%d" % (i % 3), "body %d" % i, 0, "DEDUPID", "tok-%d" % i)
                for i in range(JOBS)]
    ids = pipeline(proc.port, commands)
    assert len(set(ids)) == JOBS and all(i.startswith(b"D-") for i in ids)
    r = proc.client(protocol=2)
    acked = ids[7]
    assert r.execute_command("ACKJOB", acked) == 1
    wait_until(lambda: r.execute_command("SHOW", acked) is None, timeout=10,
               message="the acked job to be collected")
    if restart == "shutdown":
        proc.stop()
    else:
        proc.kill()
    proc.start()
    again = pipeline(proc.port, commands)
    assert again == ids  # every token, acked job's included, names its first job
    r = proc.client(protocol=2)
    assert info(proc, "jobs")["registered_jobs"] == str(JOBS - 1)  # nothing created
    assert r.execute_command("SHOW", ids[5])[r.execute_command("SHOW", ids[5]).index(
        b"dedupid") + 1] == b"tok-5"


def test_a_rewrite_forgets_the_tokens_of_acked_jobs(server_factory):
    """What the AOF keeps is jobs: after a rewrite, a restart knows the tokens
    of the jobs still held, not those of jobs acknowledged before it."""
    proc = server_factory("appendonly yes\nappendfsync always\n")
    r = proc.client(protocol=2)
    kept = r.execute_command("ADDJOB", "q", "kept", 0, "DEDUPID", "kept")
    acked = r.execute_command("ADDJOB", "q", "acked", 0, "DEDUPID", "acked")
    assert r.execute_command("FASTACK", acked) == 1
    r.execute_command("BGREWRITEAOF")
    wait_rewrite_done(proc)
    proc.kill()
    proc.start()
    r = proc.client(protocol=2)
    assert r.execute_command("ADDJOB", "q", "kept", 0, "DEDUPID", "kept") == kept
    assert r.execute_command("ADDJOB", "q", "acked", 0, "DEDUPID", "acked") != acked
