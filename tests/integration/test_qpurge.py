"""QPURGE through a real server process (docs/commands.md "Extensions"):
redis-py, redis-cli, the ACL, and the AOF across a restart."""

from __future__ import annotations

import subprocess

import pytest
import redis


def test_qpurge_deletes_queued_jobs_and_leaves_the_active_one(server):
    r = server.client()
    ids = [r.execute_command("ADDJOB", "thumbs", "img%d" % i, 0) for i in range(5)]
    r.execute_command("ADDJOB", "other", "x", 0)
    (_, active, _), = r.execute_command("GETJOB", "FROM", "thumbs")
    assert active == ids[0]
    assert r.execute_command("QPURGE", "thumbs") == 4
    assert r.execute_command("QLEN", "thumbs") == 0
    assert r.execute_command("QLEN", "other") == 1
    assert [r.execute_command("SHOW", job_id) for job_id in ids[1:]] == [None] * 4
    assert r.execute_command("ACKJOB", active) == 1  # the worker's job was left to it
    assert r.execute_command("QPURGE", "never-seen") == 0
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'qpurge'"):
        r.execute_command("QPURGE")


def test_qpurge_through_redis_cli(server, redis_cli):
    def cli(*args) -> str:
        result = subprocess.run([redis_cli, "--no-raw", "-p", str(server.port),
                                 *map(str, args)], capture_output=True, text=True, timeout=20)
        assert result.stderr == "", result.stderr
        return result.stdout

    for i in range(3):
        cli("ADDJOB", "cliq", "body%d" % i, "0")
    assert cli("QPURGE", "cliq") == "(integer) 3\n"
    assert cli("QLEN", "cliq") == "(integer) 0\n"
    assert cli("QPURGE", "cliq") == "(integer) 0\n"


def test_qpurge_obeys_the_acl_like_deljob(server):
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", "ops", "on", ">ops-pw", "~orders:*", "+@manage",
                          "+@connection")
    admin.execute_command("ACL", "SETUSER", "worker", "on", ">w-pw", "~orders:*", "+@consume",
                          "+@connection")
    admin.execute_command("ADDJOB", "orders:eu", "a", 0)
    admin.execute_command("ADDJOB", "mail", "b", 0)
    ops = server.client(username="ops", password="ops-pw")
    with pytest.raises(redis.ResponseError, match="no permissions to access the queue 'mail'"):
        ops.execute_command("QPURGE", "mail")
    assert ops.execute_command("QPURGE", "orders:eu") == 1
    worker = server.client(username="worker", password="w-pw")
    with pytest.raises(redis.ResponseError, match="no permissions to run the 'qpurge' command"):
        worker.execute_command("QPURGE", "orders:eu")
    assert admin.execute_command("QLEN", "mail") == 1


def test_purged_jobs_stay_gone_after_a_restart_from_the_aof(server_factory):
    proc = server_factory("appendonly yes\nappendfsync always\n")
    r = proc.client()
    gone = [r.execute_command("ADDJOB", "gone", "g%d" % i, 0) for i in range(4)]
    kept = r.execute_command("ADDJOB", "kept", "k", 0)
    assert r.execute_command("QPURGE", "gone") == 4
    proc.restart()
    r = proc.client()
    assert [r.execute_command("SHOW", job_id) for job_id in gone] == [None] * 4
    assert r.execute_command("SHOW", kept) is not None  # loaded (queued after its retry)
