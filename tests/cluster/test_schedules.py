"""Periodic jobs on a real 3-node cluster (docs/schedules.md): a schedule
set on one node is known to all and makes one job per tick; when the node
firing it is killed another takes over within about node-timeout, with no
tick lost or doubled; a restarted node keeps the schedule (nodes.conf).
Through redis-py and redis-cli."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.support.cluster import DEFAULT_NODE_TIMEOUT_MS
from tests.support.process import wait_until

pytestmark = pytest.mark.cluster

PREFIX = b"schedule:beat:"


def _entry(cluster, i: int, name: bytes = b"beat") -> dict | None:
    """Node ``i``'s SCHEDULE LIST entry for ``name``."""
    for entry in cluster.call(i, "SCHEDULE", "LIST"):
        fields = dict(zip(entry[0::2], entry[1::2]))
        if fields[b"name"] == name:
            return fields
    return None


def _ticks(cluster, nodes) -> dict[int, set[bytes]]:
    """Tick -> the IDs of the jobs made for it, as the given nodes hold them."""
    ticks: dict[int, set[bytes]] = {}
    for i in nodes:
        for job_id in cluster.jscan(i, "QUEUE", "beats"):
            reply = cluster.call(i, "SHOW", job_id)
            if reply is None:
                continue
            token = dict(zip(reply[0::2], reply[1::2]))[b"dedupid"]
            assert token.startswith(PREFIX), token
            ticks.setdefault(int(token[len(PREFIX):]), set()).add(job_id)
    return ticks


def _info_schedules(cluster, i: int) -> dict[str, int]:
    """Node ``i``'s INFO schedules fields (redis-py parses INFO's text)."""
    return {key: int(value) for key, value in cluster.call(i, "INFO", "schedules").items()}


def _check_once_each(ticks: dict[int, set[bytes]], first: int, last: int) -> None:
    missing = [t for t in range(first, last + 1, 1000) if t not in ticks]
    doubled = {t: ids for t, ids in ticks.items() if len(ids) > 1}
    assert not missing and not doubled, (missing, doubled)


def test_one_job_per_tick_takeover_and_restart(cluster_factory, redis_cli):
    cluster = cluster_factory(3)
    assert cluster.call(0, "SCHEDULE", "SET", "beat", "EVERY", 1, "beats", "ping",
                        "TTL", 600) == b"OK"
    # Known to every node through the bus.
    wait_until(lambda: all(_entry(cluster, i) is not None for i in range(3)), 10,
               message="the schedule on every node")
    first = _entry(cluster, 0)[b"next"]
    wait_until(lambda: (_entry(cluster, 1)[b"last"] or 0) >= first + 3000, 15,
               message="four ticks fired")
    firer = cluster.index_of(_entry(cluster, 0)[b"firedby"])
    survivors = [i for i in range(3) if i != firer]
    # Kill the firer half-way between two ticks.
    wait_until(lambda: 400 <= time.time() * 1000 % 1000 <= 600, 2, interval=0.01)
    last_before = _entry(cluster, survivors[0])[b"last"]
    cluster.kill(firer)
    killed_at = time.time()

    def taken_over():
        entry = _entry(cluster, survivors[0])
        return entry[b"firedby"] != cluster.ids[firer].encode() and entry
    timeout_s = DEFAULT_NODE_TIMEOUT_MS / 1000
    entry = wait_until(taken_over, timeout_s + 5, interval=0.05,
                       message="another node firing within about node-timeout")
    print("takeover: first tick by the new firer %.2f s after the kill"
          % (time.time() - killed_at))
    # The ticks during the gap were fired late, not lost.
    assert entry[b"last"] >= last_before + 1000
    wait_until(lambda: _entry(cluster, survivors[0])[b"last"] >= entry[b"last"] + 3000, 10)
    last = _entry(cluster, survivors[0])[b"last"]
    _check_once_each(_ticks(cluster, survivors), first, last)
    # INFO schedules: the new firer counts the ticks it fired (the late ones
    # and the four since), the other survivor none since the kill.
    new_firer = cluster.index_of(_entry(cluster, survivors[0])[b"firedby"])
    counts = _info_schedules(cluster, new_firer)
    assert counts["schedules"] == 1 and counts["schedule_ticks_fired"] >= 4, counts
    assert counts["schedule_ticks_refused"] == 0, counts

    # The killed node restarts from its nodes.conf: the schedule is there at
    # once, and it fires no tick the others fired meanwhile.
    cluster.restart(firer)
    out = subprocess.run([redis_cli, "-p", str(cluster.port(firer)), "SCHEDULE", "LIST"],
                         capture_output=True, text=True, timeout=10).stdout.split("\n")
    assert out[:8] == ["name", "beat", "spec", "EVERY 1", "queue", "beats", "options",
                       "TTL 600"], out
    cluster.wait_joined(20)
    wait_until(lambda: _entry(cluster, firer)[b"last"] >= last + 3000, 15,
               message="the restarted node up to date")
    last = min(_entry(cluster, i)[b"last"] for i in range(3))
    ticks = _ticks(cluster, range(3))
    _check_once_each({t: ids for t, ids in ticks.items() if t <= last}, first, last)
    assert cluster.call(firer, "SCHEDULE", "DEL", "beat") == 1
    wait_until(lambda: all(_entry(cluster, i) is None for i in range(3)), 10,
               message="the DEL on every node")


def test_cron_schedule_and_errors_through_redis_py(cluster_factory):
    cluster = cluster_factory(3)
    client = cluster.client(1)
    assert client.execute_command("SCHEDULE", "SET", "nightly", "CRON", "30 2 * * *",
                                  "reports", "build") == b"OK"
    entry = wait_until(lambda: _entry(cluster, 2, b"nightly"), 10)
    assert entry[b"spec"] == b"CRON 30 2 * * *" and entry[b"last"] is None
    assert entry[b"next"] % 86_400_000 == (2 * 60 + 30) * 60_000  # 02:30 UTC
    for args, text in [
            (("CRON", "30 2 * *"), "CRON expression needs five fields"),
            (("EVERY", "0"), "EVERY must be a number of seconds"),
    ]:
        with pytest.raises(Exception, match=text):
            client.execute_command("SCHEDULE", "SET", "bad", *args, "q", "b")


def test_a_table_larger_than_a_bus_frame_reaches_a_restarted_node_and_catches_up_once(
        cluster_factory):
    """Six schedules, five of them with 900 KB bodies, on nodes whose bus
    frames hold 2 MB (proto-max-bulk-len 1mb): the table travels one record
    per message. Two nodes go down (no majority: no tick fires), one of
    them losing its tables file; once they are back, the restarted node
    gets every schedule, and the ticks missed meanwhile are made once each."""
    cluster = cluster_factory(3, config="proto-max-bulk-len 1mb\n")
    body = b"x" * 900_000
    for k in range(5):
        assert cluster.call(0, "SCHEDULE", "SET", "big%d" % k, "EVERY", 86400, "bigq",
                            body) == b"OK"
    assert cluster.call(0, "SCHEDULE", "SET", "beat", "EVERY", 1, "beats", "ping",
                        "TTL", 600) == b"OK"
    wait_until(lambda: all(len(cluster.call(i, "SCHEDULE", "LIST")) == 6 for i in range(3)),
               15, message="the schedules on every node")
    first = _entry(cluster, 0)[b"next"]
    wait_until(lambda: (_entry(cluster, 0)[b"last"] or 0) >= first + 2000, 15,
               message="ticks fired")
    wait_until(lambda: 400 <= time.time() * 1000 % 1000 <= 600, 2, interval=0.01)
    cluster.kill(1)
    cluster.kill(2)
    tables = next(cluster.nodes[2].dir.glob("nodes*.tables"))
    tables.unlink()
    down_at = time.time()
    # Node 0 alone fires nothing: its last tick stays while the others are down.
    stopped = _entry(cluster, 0)[b"last"]
    wait_until(lambda: time.time() - down_at >= 5, 10, interval=0.1)
    assert _entry(cluster, 0)[b"last"] <= stopped + 1000
    cluster.restart_many([1, 2])
    cluster.wait_joined(20)
    wait_until(lambda: len(cluster.call(2, "SCHEDULE", "LIST")) == 6, 20,
               message="the whole table on the node that lost its file")
    assert all(len(_entry(cluster, 2, b"big%d" % k) or {}) for k in range(5))
    back = int(time.time() * 1000)
    wait_until(lambda: min((_entry(cluster, i)[b"last"] or 0) for i in range(3)) >= back + 3000,
               20, message="the ticks caught up on every node")
    last = min(_entry(cluster, i)[b"last"] for i in range(3))
    ticks = _ticks(cluster, range(3))
    _check_once_each({t: ids for t, ids in ticks.items() if t <= last}, first, last)
    for i in range(3):
        bus = cluster.info_section(i, "bus")
        assert bus["bus_messages_too_large"] == 0 and bus["bus_frames_too_large"] == 0, bus
