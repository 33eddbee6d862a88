"""Users' quotas through a real server process and redis-py
(docs/rate-limits.md "Quotas per user"): refusals, release on ACK, the
rules in the config file and through CONFIG REWRITE and a restart, and a
schedule's jobs counted against the user who set it."""

from __future__ import annotations

import pytest
import redis

from tests.support.process import wait_until

PRODUCER_RULES = ("on", ">pw", "~*", "+@produce", "+@consume", "+@connection")


def test_addjob_beyond_the_quota_is_refused_with_quota(server):
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", "shop", *PRODUCER_RULES, "quota-jobs=3",
                          "quota-bytes=1kb")
    shop = server.client(username="shop", password="pw")
    ids = [shop.execute_command("ADDJOB", "orders", "order %d" % i, 0) for i in range(3)]
    with pytest.raises(redis.ResponseError) as refused:
        shop.execute_command("ADDJOB", "orders", "order 3", 0)
    assert str(refused.value) == (
        "QUOTA User shop has 3 jobs pending on this node, its quota-jobs is 3")
    (_, job_id, _), = shop.execute_command("GETJOB", "FROM", "orders")
    assert job_id == ids[0]
    assert shop.execute_command("ACKJOB", job_id) == 1
    shop.execute_command("ADDJOB", "orders", "order 3", 0)
    admin.execute_command("ACL", "SETUSER", "big", *PRODUCER_RULES, "quota-bytes=1kb")
    big = server.client(username="big", password="pw")
    with pytest.raises(redis.ResponseError) as refused:
        big.execute_command("ADDJOB", "orders", "x" * 2048, 0)  # 2 KB alone is over 1 KB
    assert str(refused.value) == ("QUOTA User big has 0 bytes pending on this node, 2048 more "
                                  "would pass its quota-bytes of 1024")
    admin.execute_command("ADDJOB", "orders", "the default user has no quota", 0)
    assert admin.execute_command("QLEN", "orders") == 4
    assert admin.info("limits")["addjob_quota_refused"] == 2


def test_quotas_from_the_config_file_and_through_rewrite_and_restart(server_factory):
    proc = server_factory("user batch on >pw ~* +@produce +@connection quota-jobs=2\n")
    admin = proc.client()
    batch = proc.client(username="batch", password="pw")
    batch.execute_command("ADDJOB", "q", "1", 0)
    batch.execute_command("ADDJOB", "q", "2", 0)
    with pytest.raises(redis.ResponseError, match="^QUOTA "):
        batch.execute_command("ADDJOB", "q", "3", 0)
    admin.execute_command("ACL", "SETUSER", "batch", "quota-jobs=5", "quota-bytes=64mb")
    assert admin.execute_command("CONFIG", "REWRITE") == b"OK"
    line = next(line for line in proc.config_path.read_text().splitlines()
                if line.startswith("user batch "))
    assert line.endswith(" quota-jobs=5 quota-bytes=64mb")
    proc.restart()
    admin = proc.client()
    assert any(entry.endswith(b" quota-jobs=5 quota-bytes=64mb")
               for entry in admin.execute_command("ACL", "LIST"))
    batch = proc.client(username="batch", password="pw")
    for i in range(5):  # the count starts from zero at each start
        batch.execute_command("ADDJOB", "q", "after restart %d" % i, 0)
    with pytest.raises(redis.ResponseError, match="^QUOTA User batch has 5 jobs pending"):
        batch.execute_command("ADDJOB", "q", "6", 0)
    with pytest.raises(redis.ResponseError, match="A quota is one word: quota-jobs=<n>"):
        admin.execute_command("ACL", "SETUSER", "batch", "quota-jobs", "10")


def test_a_schedule_fires_as_its_owner_within_its_quota_and_goes_with_it(server):
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", "cron", "on", ">pw", "~*", "+@all", "quota-jobs=3")
    cron = server.client(username="cron", password="pw")
    assert cron.execute_command("SCHEDULE", "SET", "beat", "EVERY", 1, "ticks", "t") == b"OK"

    def over_quota() -> int:
        return admin.info("schedules")["schedule_ticks_over_quota"]
    # Three ticks make jobs that count against cron's quota; the next are
    # skipped (no job), not retried.
    wait_until(lambda: over_quota() >= 2, 15, message="ticks skipped at the quota")
    assert admin.execute_command("QLEN", "ticks") == 3
    info = admin.info("schedules")
    assert info["schedule_ticks_fired"] == 3
    assert info["schedule_ticks_refused"] == info["schedule_ticks_over_quota"]
    # ACL DELUSER deletes the user's schedules: nothing fires for it any more.
    assert admin.execute_command("ACL", "DELUSER", "cron") == 1
    assert admin.execute_command("SCHEDULE", "LIST") == []
