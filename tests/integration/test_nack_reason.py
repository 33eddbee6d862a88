"""NACK ... REASON through a real server process (docs/commands.md "Why a
job failed"): redis-py, redis-cli, the project's client, the AOF through a
SIGKILL and a rewrite, and a dead-letter move."""

from __future__ import annotations

import subprocess

from disque.client import DisqueClient
from tests.support.cluster import raw_command
from tests.support.process import wait_until

REASON = b"ValueError: bad row\r\n\x00\xff"  # any bytes: CR LF, NUL, not UTF-8


def show(client, job_id) -> dict:
    reply = client.execute_command("SHOW", job_id)
    assert reply is not None and len(reply) % 2 == 0, reply
    return {key.decode(): value for key, value in zip(reply[0::2], reply[1::2])}


def delivered(client, queue: str = "work") -> bytes:
    (entry,) = client.execute_command("GETJOB", "TIMEOUT", 5000, "FROM", queue)
    return entry[1]


def test_nack_reason_then_show(server):
    r = server.client()
    job_id = r.execute_command("ADDJOB", "work", "body", 0, "RETRY", 60)
    assert delivered(r) == job_id
    assert raw_command(server.port, "NACK", job_id, "REASON", REASON) == b":1\r\n"
    reply = raw_command(server.port, "SHOW", job_id)
    assert reply.endswith(b"$11\r\nnack-reason\r\n$%d\r\n%b\r\n" % (len(REASON), REASON))
    info = show(r, job_id)
    assert (info["state"], info["nacks"], info["nack-reason"]) == (b"queued", 1, REASON)
    # Refused beyond the bound, the job untouched; plain NACK and SHOW are Disque 1.0's.
    assert delivered(r) == job_id
    assert raw_command(server.port, "NACK", job_id, "reason", b"x" * 1025) == (
        b"-ERR NACK REASON must be 1 to 1024 bytes\r\n")
    assert show(r, job_id)["state"] == b"active"
    plain = r.execute_command("ADDJOB", "work", "plain", 0)
    assert delivered(r) == plain
    assert raw_command(server.port, "NACK", plain) == b":1\r\n"
    assert len(r.execute_command("SHOW", plain)) == 30


def test_nack_reason_through_redis_cli(server, redis_cli):
    def cli(*args) -> str:
        result = subprocess.run([redis_cli, "--no-raw", "-p", str(server.port), *args],
                                capture_output=True, text=True, timeout=20)
        assert result.stderr == "", result.stderr
        return result.stdout

    job_id = cli("ADDJOB", "cliwork", "body", "0").strip()
    assert cli("GETJOB", "FROM", "cliwork").splitlines()[1] == '   2) "%s"' % job_id
    assert cli("NACK", job_id, "REASON", "KeyError: 'id'\nline 2") == "(integer) 1\n"
    lines = cli("SHOW", job_id).splitlines()
    assert lines[-2:] == ['39) "nack-reason"', '40) "KeyError: \'id\'\\nline 2"']
    assert cli("NACK", job_id, "REASON", "x" * 1025) == (
        "(error) ERR NACK REASON must be 1 to 1024 bytes\n")


def test_the_reason_survives_a_sigkill_and_a_rewrite(server_factory):
    proc = server_factory("appendonly yes\n")
    r = proc.client()
    job_id = r.execute_command("ADDJOB", "work", "body", 0, "RETRY", 60)
    assert delivered(r) == job_id
    assert r.execute_command("NACK", job_id, "REASON", REASON) == 1
    proc.kill()
    proc.start()
    r = proc.client()
    info = show(r, job_id)
    assert (info["nacks"], info["nack-reason"]) == (1, REASON)
    assert raw_command(proc.port, "BGREWRITEAOF") == (
        b"+Background append only file rewriting started\r\n")
    wait_until(lambda: r.info("persistence")["aof_rewrite_in_progress"] == 0, 30,
               message="the rewrite to finish")
    assert r.info("persistence")["aof_last_bgrewrite_status"] == "ok"
    proc.kill()
    proc.start()
    assert show(proc.client(), job_id)["nack-reason"] == REASON


def test_the_dead_letter_keeps_the_reason_of_its_last_failure(server_factory):
    proc = server_factory("appendonly yes\n")
    r = proc.client()
    job_id = r.execute_command("ADDJOB", "work", "body", 0, "MAXDELIVER", 2)
    for reason in (b"first", b"TimeoutError: upstream"):
        assert delivered(r) == job_id
        assert r.execute_command("NACK", job_id, "REASON", reason) == 1
    info = show(r, job_id)
    assert (info["queue"], info["dead-reason"], info["nack-reason"]) == (
        b"work:dead", b"maxdeliver", b"TimeoutError: upstream")
    proc.kill()
    proc.start()
    info = show(proc.client(), job_id)
    assert (info["queue"], info["nack-reason"]) == (b"work:dead", b"TimeoutError: upstream")


def test_the_client_sends_the_reason(server):
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        assert client.supports_nack_reason()
        job_id = client.add("work", b"body", retry=60)
        (job,) = client.get_jobs("work", timeout_ms=5000)
        assert client.nack([job.id], delay=30, reason="RuntimeError: later") == 1
        info = client.show(job_id)
        assert info["nack-reason"] == b"RuntimeError: later" and info["state"] == "active"
