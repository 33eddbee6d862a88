"""Job headers and ADDJOBS against a real server (docs/commands.md "Job
headers", "Bulk add"): through redis-py, redis-cli and DisqueClient, and
across AOF restarts and a rewrite."""

from __future__ import annotations

import subprocess

import pytest
import redis

from disque.client import DisqueClient, ResponseError
from tests.support.process import wait_until

TRACEPARENT = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _show(r, job_id: bytes) -> dict:
    reply = r.execute_command("SHOW", job_id)
    return dict(zip(reply[0::2], reply[1::2]))


def test_headers_through_redis_py(server):
    r = server.client(protocol=2)
    job_id = r.execute_command("ADDJOB", "q", "body", 0, "HEADER", "traceparent", TRACEPARENT,
                               "HEADER", "tenant", "acme")
    plain = r.execute_command("ADDJOB", "q", "plain", 0)
    assert _show(r, job_id)[b"headers"] == [b"traceparent", TRACEPARENT, b"tenant", b"acme"]
    assert len(r.execute_command("SHOW", plain)) == 30
    entries = r.execute_command("GETJOB", "COUNT", 2, "WITHHEADERS", "FROM", "q")
    assert entries == [[b"q", job_id, b"body", b"headers",
                        [b"traceparent", TRACEPARENT, b"tenant", b"acme"]],
                       [b"q", plain, b"plain", b"headers", []]]
    with pytest.raises(redis.ResponseError, match="HEADER name given twice"):
        r.execute_command("ADDJOB", "q", "b", 0, "HEADER", "a", "1", "HEADER", "a", "2")


@pytest.mark.parametrize("restart", ["sigkill", "rewrite"])
def test_headers_survive_an_aof_restart(server_factory, restart):
    proc = server_factory("appendonly yes\nappendfsync always\n")
    r = proc.client(protocol=2)
    with_headers = [r.execute_command("ADDJOB", "q", "b%d" % i, 0, "HEADER", "n", "v%d" % i,
                                      "HEADER", "traceparent", TRACEPARENT) for i in range(50)]
    bulk = r.execute_command("ADDJOBS", "q", 0, "HEADER", "from", "addjobs", "DEDUPIDS",
                             "t1", "x", "t2", "y")
    plain = r.execute_command("ADDJOB", "q", "plain", 0)
    if restart == "rewrite":
        r.execute_command("BGREWRITEAOF")
        wait_until(lambda: proc.client().info("persistence")["aof_rewrite_in_progress"] == 0,
                   message="the rewrite to end")
    proc.kill()
    proc.start()
    r = proc.client(protocol=2)
    assert _show(r, with_headers[7])[b"headers"] == [b"n", b"v7", b"traceparent", TRACEPARENT]
    assert _show(r, bulk[1])[b"headers"] == [b"from", b"addjobs"]
    assert _show(r, bulk[1])[b"dedupid"] == b"t2"
    assert len(r.execute_command("SHOW", plain)) == 30
    assert r.execute_command("ADDJOBS", "q", 0, "DEDUPIDS", "t1", "again") == bulk[:1]
    assert int(proc.client().info("jobs")["registered_jobs"]) == 53


def test_addjobs_through_redis_py(server):
    r = server.client(protocol=2)
    ids = r.execute_command("ADDJOBS", "q", 0, "RETRY", 30, "MAXLEN", 3, "BODIES", "a", "b",
                            "c", "d")
    assert [isinstance(i, bytes) and i.startswith(b"D-") for i in ids] == [True] * 3 + [False]
    assert isinstance(ids[3], redis.ResponseError) and str(ids[3]).startswith("MAXLEN")
    assert r.execute_command("QLEN", "q") == 3
    assert _show(r, ids[0])[b"retry"] == 30
    with pytest.raises(redis.ResponseError, match="gives each job its own DEDUPID"):
        r.execute_command("ADDJOBS", "q", 0, "DEDUPID", "t", "BODIES", "a")
    assert r.execute_command("QLEN", "q") == 3


def test_addjobs_through_redis_cli(server, redis_cli):
    done = subprocess.run([redis_cli, "-p", str(server.port), "ADDJOBS", "q", "0", "DEDUPIDS",
                           "order-1", "a", "order-2", "b", "order-1", "c"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.split()
    assert len(lines) == 3 and lines[0] == lines[2] != lines[1] and lines[1].startswith("D-")


def test_addjobs_acl_is_addjobs(server):
    r = server.client(protocol=2)
    r.execute_command("ACL", "SETUSER", "producer", "on", ">pw", "~orders:*", "+@produce")
    producer = server.client(protocol=2, username="producer", password="pw")
    assert len(producer.execute_command("ADDJOBS", "orders:1", 0, "BODIES", "a", "b")) == 2
    with pytest.raises(redis.ResponseError, match="no permissions to access the queue 'mail'"):
        producer.execute_command("ADDJOBS", "mail", 0, "BODIES", "a")


# ------------------------------------------------------------ the client

def test_client_headers_and_add_many(server):
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        job_id = client.add("q", b"one", headers={"tenant": "acme", b"k": b"\x00v"})
        assert client.show(job_id)["headers"] == {"tenant": b"acme", "k": b"\x00v"}
        bodies = [b"job %d" % i for i in range(2500)]
        ids = client.add_many("q", bodies, retry=60, headers={"batch": "1"}, chunk_size=1000)
        assert len(set(ids)) == 2500 and all(i.startswith("D-") for i in ids)
        jobs = client.get_jobs("q", count=3000, nohang=True, withheaders=True)
        assert [j.body for j in jobs] == [b"one"] + bodies
        assert jobs[0].headers == {"tenant": b"acme", "k": b"\x00v"}
        assert {tuple(j.headers.items()) for j in jobs[1:]} == {(("batch", b"1"),)}
        plain = client.get_jobs("q", nohang=True)
        assert plain == []


def test_add_many_with_dedupids_is_idempotent(server):
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        bodies = [b"row %d" % i for i in range(1200)]
        tokens = ["row-%d" % i for i in range(1200)]
        first = client.add_many("q", bodies, dedupids=tokens, chunk_size=500)
        again = client.add_many("q", bodies, dedupids=tokens, chunk_size=300)
        assert first == again and len(set(first)) == 1200
        assert client.qlen("q") == 1200
        with pytest.raises(ValueError, match="dedupids"):
            client.add_many("q", bodies, dedupids=tokens[:3])


def test_add_many_reports_each_refused_job(server):
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        replies = client.add_many("q", [b"a", b"b", b"c"], maxlen=2)
        assert [isinstance(r, ResponseError) for r in replies] == [False, False, True]
        client.execute("PAUSE", "q", "in")
        replies = client.add_many("q", [b"d"] * 3)
        assert all(str(r).startswith("PAUSED") for r in replies)
        # An error in the options refuses every job of the command.
        replies = client.add_many("other", [b"d"] * 3, retry=-1)
        assert [str(r) for r in replies] == ["RETRY time must be a non negative number"] * 3
