"""Dead letters, QREDRIVE and NACK ... DELAY through real server processes
(docs/dead-letters.md), with redis-py, redis-cli and a 3-node cluster."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from tests.cluster.conftest import cluster_factory  # noqa: F401  (a fixture used below)
from tests.support.process import wait_until


def show(client, job_id) -> dict:
    """SHOW as a dict, extension pairs included."""
    reply = client.execute_command("SHOW", job_id)
    assert reply is not None and len(reply) % 2 == 0 and len(reply) > 30, reply
    return {key.decode(): value for key, value in zip(reply[0::2], reply[1::2])}


def test_a_failing_job_lands_in_the_dead_letter_queue_and_comes_back(server):
    r = server.client()
    job_id = r.execute_command("ADDJOB", "work", "poison body", 0, "MAXDELIVER", 3, "RETRY", 30)
    for attempt in range(3):
        assert r.execute_command("QLEN", "work") == 1, attempt
        got = r.execute_command("GETJOB", "TIMEOUT", 1000, "FROM", "work")
        assert got == [[b"work", job_id, b"poison body"]]
        assert r.execute_command("NACK", job_id) == 1
    assert r.execute_command("QLEN", "work") == 0
    assert r.execute_command("QLEN", "work:dead") == 1
    info = show(r, job_id)
    assert (info["queue"], info["state"], info["origin-queue"], info["dead-reason"]) == (
        b"work:dead", b"queued", b"work", b"maxdeliver")
    got = r.execute_command("GETJOB", "WITHCOUNTERS", "FROM", "work:dead")
    assert got == [[b"work:dead", job_id, b"poison body", b"nacks", 3,
                    b"additional-deliveries", 0]]
    assert r.execute_command("NACK", job_id) == 1  # a dead letter stays one
    assert r.execute_command("QLEN", "work:dead") == 1
    assert r.execute_command("QREDRIVE", "work:dead") == 1
    assert r.execute_command("QLEN", "work:dead") == 0
    info = show(r, job_id)
    assert (info["queue"], info["origin-queue"], info["nacks"], info["retry"]) == (
        b"work", None, 0, 30)
    assert r.execute_command("GETJOB", "FROM", "work") == [[b"work", job_id, b"poison body"]]
    assert r.execute_command("ACKJOB", job_id) == 1


def test_the_same_through_redis_cli(server, redis_cli):
    def cli(*args) -> str:
        result = subprocess.run([redis_cli, "--no-raw", "-p", str(server.port),
                                 *map(str, args)], capture_output=True, text=True, timeout=20)
        assert result.stderr == "", result.stderr
        return result.stdout

    added = cli("ADDJOB", "cliwork", "body", "0", "MAXDELIVER", "2", "DEADLETTER", "clidead")
    assert re.fullmatch(r"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-05a1\n", added), added
    job_id = added.strip()
    for _ in range(2):
        assert cli("GETJOB", "FROM", "cliwork") == (
            '1) 1) "cliwork"\n   2) "%s"\n   3) "body"\n' % job_id)
        assert cli("NACK", job_id) == "(integer) 1\n"
    assert cli("QLEN", "cliwork") == "(integer) 0\n"
    assert cli("QLEN", "clidead") == "(integer) 1\n"
    assert cli("QREDRIVE", "clidead", "COUNT", "0") == (
        "(error) ERR COUNT must be a number greater than zero\n")
    assert cli("QREDRIVE", "clidead", "NOW") == "(error) ERR syntax error\n"
    assert cli("QREDRIVE", "clidead", "COUNT", "5") == "(integer) 1\n"
    assert cli("QLEN", "cliwork") == "(integer) 1\n"
    assert cli("GETJOB", "WITHCOUNTERS", "FROM", "cliwork") == (
        '1) 1) "cliwork"\n   2) "%s"\n   3) "body"\n   4) "nacks"\n   5) (integer) 0\n'
        '   6) "additional-deliveries"\n   7) (integer) 0\n' % job_id)
    assert cli("NACK", job_id, "DELAY", "-1") == (
        "(error) ERR DELAY time must be a non negative number\n")
    assert cli("NACK", job_id, "DELAY", "0") == "(integer) 1\n"
    assert cli("ACKJOB", job_id) == "(integer) 1\n"


def test_nack_delay_2_requeues_after_about_2_seconds(server):
    r = server.client()
    job_id = r.execute_command("ADDJOB", "later", "b", 0, "RETRY", 60)
    assert r.execute_command("GETJOB", "FROM", "later") == [[b"later", job_id, b"b"]]
    sent = time.monotonic()
    assert r.execute_command("NACK", job_id, "DELAY", 2) == 1
    queued_after = None
    while time.monotonic() - sent < 6:  # bounded poll
        if r.execute_command("QLEN", "later") == 1:
            queued_after = time.monotonic() - sent
            break
        time.sleep(0.02)
    assert queued_after is not None, "not requeued within 6 s"
    assert 1.95 <= queued_after <= 4.0, queued_after  # never before the delay
    info = r.execute_command("GETJOB", "WITHCOUNTERS", "FROM", "later")
    assert info == [[b"later", job_id, b"b", b"nacks", 1, b"additional-deliveries", 0]]


@pytest.mark.cluster
def test_a_dead_letter_is_in_the_dead_queue_on_every_holder(cluster_factory):  # noqa: F811
    cluster = cluster_factory(3)
    job_id = cluster.call(0, "ADDJOB", "cq", "body", 5000, "REPLICATE", 3, "RETRY", 60,
                          "MAXDELIVER", 2)
    assert sorted(cluster.wait_holders(job_id, 3)) == [0, 1, 2]
    for _ in range(2):
        assert cluster.call(0, "GETJOB", "TIMEOUT", 5000, "FROM", "cq") == [[b"cq", job_id,
                                                                             b"body"]]
        assert cluster.call(0, "NACK", job_id) == 1

    def moved_everywhere() -> bool:
        return all(show(cluster.client(i), job_id)["queue"] == b"cq:dead" for i in range(3))
    wait_until(moved_everywhere, 10, interval=0.05, message="the move reaches every holder")
    for i in range(3):
        info = show(cluster.client(i), job_id)
        assert (info["origin-queue"], info["dead-reason"]) == (b"cq", b"maxdeliver"), i
        assert info["state"] == (b"queued" if i == 0 else b"active"), i
        assert cluster.call(i, "QLEN", "cq") == 0, i
        assert cluster.call(i, "QLEN", "cq:dead") == (1 if i == 0 else 0), i
    # And back: every copy follows the redrive.
    assert cluster.call(0, "QREDRIVE", "cq:dead") == 1
    wait_until(lambda: all(show(cluster.client(i), job_id)["queue"] == b"cq" for i in range(3)),
               10, interval=0.05, message="the redrive reaches every holder")
    assert [cluster.call(i, "QLEN", "cq") for i in range(3)] == [1, 0, 0]
    assert cluster.call(1, "GETJOB", "TIMEOUT", 5000, "FROM", "cq") == [[b"cq", job_id, b"body"]]
    assert cluster.call(1, "ACKJOB", job_id) == 1
    wait_until(lambda: not cluster.holders(job_id), 10, interval=0.05,
               message="the ACK removes every copy")
