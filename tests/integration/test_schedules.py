"""SCHEDULE on a real server process, through redis-py and redis-cli
(docs/schedules.md): the body's bound, CRON macros and time zones, random
fields refused, who may replace a schedule, and the schedules kept across a
restart in the tables file (nodes.conf left alone). The cluster-wide
behaviour is tested in tests/cluster/test_schedules.py."""

from __future__ import annotations

import subprocess
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
import redis


def entries(client) -> dict[bytes, dict[bytes, object]]:
    return {e[1]: dict(zip(e[0::2], e[1::2])) for e in client.execute_command("SCHEDULE", "LIST")}


def test_the_body_is_bounded_by_schedule_max_body(server):
    r = server.client()
    assert r.execute_command("CONFIG", "SET", "schedule-max-body", "1kb") == b"OK"
    assert r.execute_command("SCHEDULE", "SET", "s", "EVERY", 60, "q", "x" * 1024) == b"OK"
    with pytest.raises(redis.ResponseError) as refused:
        r.execute_command("SCHEDULE", "SET", "s", "EVERY", 60, "q", "x" * 1025)
    assert str(refused.value) == (
        "the schedule's body is 1025 bytes, more than schedule-max-body (1024)")
    assert r.config_get("schedule-max-body") == {"schedule-max-body": "1024"}


def test_macros_time_zones_and_random_fields(server, redis_cli):
    r = server.client()
    assert r.execute_command("SCHEDULE", "SET", "daily", "CRON", "@daily", "q", "b") == b"OK"
    assert r.execute_command("SCHEDULE", "SET", "paris", "CRON", "TZ=Europe/Paris 30 2 * * *",
                             "q", "b") == b"OK"
    listed = entries(r)
    assert listed[b"daily"][b"spec"] == b"CRON @daily"
    assert listed[b"daily"][b"next"] % 86_400_000 == 0  # midnight UTC
    assert listed[b"paris"][b"spec"] == b"CRON TZ=Europe/Paris 30 2 * * *"
    tick = datetime.fromtimestamp(listed[b"paris"][b"next"] / 1000, ZoneInfo("Europe/Paris"))
    assert (tick.hour, tick.minute) in ((2, 30), (3, 0))  # 03:00 on a spring-forward day
    for expr, text in [("R R * * *", "R and H fields are not allowed"),
                       ("H * * * *", "R and H fields are not allowed"),
                       ("TZ=Nowhere/Atlantis @hourly", "unknown time zone 'Nowhere/Atlantis'"),
                       ("@reboot", "unknown CRON macro '@reboot'")]:
        result = subprocess.run([redis_cli, "-p", str(server.port), "SCHEDULE", "SET", "bad",
                                 "CRON", expr, "q", "b"], capture_output=True, text=True,
                                timeout=20)
        assert result.stdout.startswith("ERR ") and text in result.stdout, result.stdout
    assert b"bad" not in entries(r)


def test_replacing_a_schedule_needs_the_right_to_delete_it(server):
    admin = server.client()
    admin.execute_command("SCHEDULE", "SET", "nightly", "EVERY", 86400, "payments", "pay")
    admin.execute_command("ACL", "SETUSER", "p", "on", ">pw", "~orders:*", "+@connection",
                          "+schedule|set")
    producer = server.client(username="p", password="pw")
    with pytest.raises(redis.ResponseError, match="no permissions to replace the schedule "
                                                  "'nightly'"):
        producer.execute_command("SCHEDULE", "SET", "nightly", "EVERY", 60, "orders:x", "b")
    admin.execute_command("ACL", "SETUSER", "p", "+schedule|del")
    with pytest.raises(redis.ResponseError, match="access the queue 'payments'"):
        producer.execute_command("SCHEDULE", "SET", "nightly", "EVERY", 60, "orders:x", "b")
    assert entries(admin)[b"nightly"][b"queue"] == b"payments"


def test_schedules_are_kept_across_a_restart_without_rewriting_nodes_conf(server):
    r = server.client()
    conf = next(server.dir.glob("nodes*.conf"))
    written = conf.stat().st_mtime_ns
    for k in range(50):
        r.execute_command("SCHEDULE", "SET", "s%d" % k, "EVERY", 3600, "q", "body %d" % k)
    r.execute_command("SCHEDULE", "DEL", "s0")
    assert conf.stat().st_mtime_ns == written
    assert conf.with_suffix(".tables").read_bytes().count(b"body ") == 50
    server.restart()
    r = server.client()
    listed = entries(r)
    assert sorted(listed) == sorted(b"s%d" % k for k in range(1, 50))
    assert listed[b"s7"][b"owner"] == b"default"
