"""The extensions' job fields through a real server: every one
set by ADDJOB, shown by SHOW through redis-cli and redis-py, and kept by
the AOF across a SIGKILL, a rewrite and a controlled restart."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.test_aof import wait_rewrite_done

FIELDS = ("PRIORITY", "8", "MAXDELIVER", "4", "DEADLETTER", "graveyard", "BACKOFF", "1.5",
          "MAXRETRY", "90", "RETRY", "10", "DEDUPID", "order-17")
EXTENSION_KEYS = ("priority", "maxdeliver", "deadletter", "origin-queue", "dead-reason",
                  "backoff", "maxretry", "base-retry", "dedupid")


def extension_view(proc, job_id) -> dict:
    """SHOW's extension pairs (None where absent), queue, retry and body."""
    reply = proc.call("SHOW", job_id)
    assert reply is not None, job_id
    shown = {key.decode(): value for key, value in zip(reply[0::2], reply[1::2])}
    if not any(key in shown for key in EXTENSION_KEYS):
        assert len(reply) == 30  # a plain job: Disque 1.0's reply
    return {key: shown.get(key) for key in EXTENSION_KEYS + ("queue", "retry", "body")}


def test_redis_cli_adds_and_shows_every_field(server, redis_cli):
    def cli(*args: str) -> str:
        done = subprocess.run([redis_cli, "-p", str(server.port), *args], capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    job_id = cli("ADDJOB", "orders", "hello", "0", *FIELDS).strip()
    assert job_id.startswith("D-")
    assert cli("ADDJOB", "orders", "hello", "0", *FIELDS).strip() == job_id  # the DEDUPID
    lines = cli("SHOW", job_id).splitlines()
    pairs = dict(zip(lines[0::2], lines[1::2]))
    assert pairs["priority"] == "8" and pairs["maxdeliver"] == "4"
    assert pairs["deadletter"] == "graveyard" and pairs["dedupid"] == "order-17"
    assert pairs["backoff"] == "1.5" and pairs["maxretry"] == "90"
    assert cli("ADDJOB", "orders", "x", "0", "PRIORITY", "10").strip() == \
        "ERR PRIORITY must be between 0 and 9"
    assert cli("QLEN", "orders").strip() == "1"


@pytest.mark.parametrize("restart", ["sigkill", "rewrite-then-sigkill", "shutdown"])
def test_aof_keeps_every_field(server_factory, restart):
    proc = server_factory("appendonly yes\nappendfsync always\naof-enqueue-jobs-once yes\n")
    r = proc.client(protocol=2)
    full = r.execute_command("ADDJOB", "orders", "full", 0, *FIELDS)
    urgent = r.execute_command("ADDJOB", "orders", "urgent", 0, "PRIORITY", "9")
    plain = r.execute_command("ADDJOB", "orders", "plain", 0)
    before = {job_id: extension_view(proc, job_id) for job_id in (full, urgent, plain)}
    assert before[full]["priority"] == 8 and before[full]["dedupid"] == b"order-17"
    assert before[plain]["maxdeliver"] is None  # SHOW of a plain job: Disque 1.0's pairs
    if restart == "rewrite-then-sigkill":
        r.execute_command("BGREWRITEAOF")
        wait_rewrite_done(proc)
    if restart == "shutdown":
        proc.stop()
        proc.start()
    else:
        proc.kill()
        proc.start()
    after = {job_id: extension_view(proc, job_id) for job_id in before}
    assert after == before
    r = proc.client(protocol=2)
    # The token still names the job after the restart, and the queue order holds.
    assert r.execute_command("ADDJOB", "orders", "full", 0, *FIELDS) == full
    assert [entry[1] for entry in r.execute_command("QPEEK", "orders", 3)][0] == urgent
