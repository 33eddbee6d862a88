"""QLIMIT and GETJOB under a queue's delivery limit (docs/rate-limits.md),
on the node's injected clock: nothing here sleeps."""

from __future__ import annotations

import pytest

from disque.cluster import messages as m
from disque.context.clients import ClientState
from disque.context.tablelog import LIMIT_TABLE
from disque.state.host import Host
from tests.unit.helpers import Cmd, add_peer, advance, make_node

NIL_ARRAY = b"*-1\r\n"


def fill(cmd, queue: str = "q", count: int = 50) -> list[bytes]:
    return [cmd.addjob(queue, "b%d" % i) for i in range(count)]


def limit_of(cmd, queue: str = "q") -> dict:
    flat = cmd.ok("QLIMIT", queue)
    return dict(zip(flat[::2], flat[1::2]))


def test_qlimit_sets_reads_and_removes(cmd):
    assert limit_of(cmd) == {b"rate": b"0", b"burst": 0, b"tokens": 0}
    assert cmd.raw("QLIMIT", "q", "RATE", "5") == b"+OK\r\n"
    assert limit_of(cmd) == {b"rate": b"5", b"burst": 5, b"tokens": 5}
    assert cmd.raw("qlimit", "q", "rate", "2.5", "burst", "10") == b"+OK\r\n"
    assert limit_of(cmd)[b"rate"] == b"2.5" and limit_of(cmd)[b"burst"] == 10
    assert cmd.raw("QLIMIT", "q", "RATE", "0") == b"+OK\r\n"
    assert limit_of(cmd) == {b"rate": b"0", b"burst": 0, b"tokens": 0}
    assert cmd.raw("QLIMIT", "never-limited", "RATE", "0") == b"+OK\r\n"


@pytest.mark.parametrize("args, error", [
    (["RATE"], "ERR syntax error"), (["RATE", "5", "BURST"], "ERR syntax error"),
    (["SPEED", "5"], "ERR syntax error"),
    (["RATE", "-1"], "ERR RATE must be a number of jobs per second from 0.001 to 1000000, "
                     "with at most three decimals (0 removes the limit)"),
    (["RATE", "0.0001"], "ERR RATE must be a number of jobs per second from 0.001 to "
                         "1000000, with at most three decimals (0 removes the limit)"),
    (["RATE", "5", "BURST", "0"], "ERR BURST must be between 1 and 1000000"),
    (["RATE", "5", "BURST", "x"], "ERR BURST must be between 1 and 1000000"),
    (["BURST", "5"], "ERR BURST goes with RATE: QLIMIT <queue> RATE <n> BURST <n>"),
])
def test_qlimit_errors_change_nothing(cmd, args, error):
    assert cmd.error("QLIMIT", "q", *args) == error
    assert limit_of(cmd)[b"rate"] == b"0"
    assert cmd.error("QLIMIT") == "ERR wrong number of arguments for 'qlimit' command"


def test_getjob_count_gets_at_most_the_burst_then_the_rate(cmd, node):
    fill(cmd)
    cmd.ok("QLIMIT", "q", "RATE", "5")
    assert len(cmd.ok("GETJOB", "COUNT", "100", "FROM", "q")) == 5
    assert cmd.raw("GETJOB", "NOHANG", "COUNT", "100", "FROM", "q") == NIL_ARRAY
    node.state.clock.advance(200)
    assert len(cmd.ok("GETJOB", "NOHANG", "COUNT", "100", "FROM", "q")) == 1
    node.state.clock.advance(1000)
    assert len(cmd.ok("GETJOB", "NOHANG", "COUNT", "100", "FROM", "q")) == 5
    assert cmd.ok("QLEN", "q") == 50 - 11


def test_a_greedy_consumer_gets_rate_times_time_plus_burst(cmd, node):
    fill(cmd, count=800)
    cmd.ok("QLIMIT", "q", "RATE", "10", "BURST", "4")
    got = 0
    for _ in range(60 * 50):  # 60 virtual seconds, a GETJOB every 20 ms
        node.state.clock.advance(20)
        reply = cmd.ok("GETJOB", "NOHANG", "COUNT", "100", "FROM", "q")
        got += len(reply or [])
    assert 600 <= got <= 604


def test_a_waiting_consumer_is_served_when_the_next_token_is_due(cmd, node):
    fill(cmd, count=10)
    cmd.ok("QLIMIT", "q", "RATE", "2", "BURST", "1")
    assert len(cmd.ok("GETJOB", "FROM", "q")) == 1
    waiter = Cmd(node, ClientState(7, "127.0.0.1:50007"))
    assert waiter.raw("GETJOB", "TIMEOUT", "10000", "FROM", "q") is None  # blocked, not refused
    token_at = node.state.clock.now + 500
    assert node.next_timer() == token_at  # the server's timer fires then
    advance(node, 499)
    assert waiter.client.sent == []
    advance(node, 1)
    assert len(waiter.sent()) == 1 and len(waiter.sent()[0]) == 1
    assert waiter.client.blocked is None


def test_waiting_consumers_are_served_in_turn_one_token_each(cmd, node):
    fill(cmd, count=10)
    cmd.ok("QLIMIT", "q", "RATE", "1", "BURST", "1")
    cmd.ok("GETJOB", "FROM", "q")
    waiters = [Cmd(node, ClientState(10 + i, "127.0.0.1:%d" % (50010 + i))) for i in range(3)]
    for waiter in waiters:
        assert waiter.raw("GETJOB", "FROM", "q") is None
    served = []
    for second in range(1, 4):
        advance(node, 1000, step=10)
        served.append([len(w.client.sent) for w in waiters])
    assert served == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]


def test_a_waiting_consumer_whose_timeout_comes_first_gets_nil(cmd, node):
    fill(cmd, count=3)
    cmd.ok("QLIMIT", "q", "RATE", "1", "BURST", "1")
    cmd.ok("GETJOB", "FROM", "q")
    waiter = Cmd(node, ClientState(7, "127.0.0.1:50007"))
    assert waiter.raw("GETJOB", "TIMEOUT", "300", "FROM", "q") is None
    advance(node, 300, step=10)
    assert waiter.client.sent == [NIL_ARRAY]
    advance(node, 1000, step=10)
    assert cmd.ok("QLEN", "q") == 2  # nothing was taken for the departed consumer


def test_raising_or_removing_the_limit_serves_waiters_at_once(cmd, node):
    fill(cmd, count=5)
    cmd.ok("QLIMIT", "q", "RATE", "0.01", "BURST", "1")
    cmd.ok("GETJOB", "FROM", "q")
    waiter = Cmd(node, ClientState(7, "127.0.0.1:50007"))
    assert waiter.raw("GETJOB", "FROM", "q") is None
    cmd.ok("QLIMIT", "q", "RATE", "0")
    assert len(waiter.client.sent) == 1


def test_the_limit_outlives_the_queue_object(cmd, node):
    cmd.ok("QLIMIT", "q", "RATE", "1", "BURST", "1")
    job = cmd.addjob("q", "x")
    cmd.ok("GETJOB", "FROM", "q")
    cmd.ok("ACKJOB", job)
    node.state.clock.advance(600_000)
    node.cron()  # collects idle queues
    assert b"q" not in node.state.queues
    fill(cmd, count=5)
    assert len(cmd.ok("GETJOB", "COUNT", "5", "FROM", "q")) == 1
    cmd.ok("DEBUG", "FLUSHALL")
    assert limit_of(cmd)[b"rate"] == b"1"  # a setting, not data


def test_other_queues_of_the_same_getjob_are_not_held_back(cmd):
    fill(cmd, "slow", 10)
    fill(cmd, "fast", 10)
    cmd.ok("QLIMIT", "slow", "RATE", "1", "BURST", "2")
    got = cmd.ok("GETJOB", "COUNT", "10", "FROM", "slow", "fast")
    assert sorted(entry[0] for entry in got).count(b"slow") == 2
    assert len(got) == 10


def test_a_throttled_queue_with_jobs_asks_no_other_node_for_more():
    node = make_node()
    add_peer(node)
    cmd = Cmd(node)
    cmd.addjob("q", "a", "REPLICATE", "1")
    cmd.addjob("q", "b", "REPLICATE", "1")
    cmd.ok("QLIMIT", "q", "RATE", "0.01", "BURST", "1")
    cmd.ok("GETJOB", "FROM", "q")
    waiter = Cmd(node, ClientState(7, "127.0.0.1:50007"))
    assert waiter.raw("GETJOB", "FROM", "q") is None
    node.state.outbox.transport.clear()
    advance(node, 5000, step=100, cron=True)
    assert node.state.outbox.transport.of_type(m.NEEDJOBS) == []


class UnsavableHost(Host):
    """A host whose tables file cannot be written."""

    def __init__(self) -> None:
        self.saves = 0

    def flush_tables(self) -> str | None:
        self.saves += 1
        return "No space left on device"


def test_a_limit_that_cannot_be_saved_says_so_and_is_in_force():
    node = make_node()
    host = UnsavableHost()
    node.state.host = host
    cmd = Cmd(node)
    assert cmd.error("QLIMIT", "q", "RATE", "3") == (
        "ERR the limit is in force but the tables file could not be written (it is "
        "lost at a restart): No space left on device")
    assert host.saves == 1
    assert limit_of(cmd)[b"rate"] == b"3"
    cmd.ok("QLIMIT", "q")
    assert host.saves == 1  # reading saves nothing


def test_each_change_is_one_record_of_the_tables_log():
    node = make_node()
    log = node.state.table_log
    log.enabled = True
    cmd = Cmd(node)
    cmd.ok("QLIMIT", "q", "RATE", "2.5", "BURST", "4")
    cmd.ok("QLIMIT", "q")
    cmd.ok("QLIMIT", "q", "RATE", "0")
    assert log.take() == [(LIMIT_TABLE, b"q", [2500, 4]), (LIMIT_TABLE, b"q", None)]
    # What the records restore.
    cmd.ok("QLIMIT", "r", "RATE", "7")
    [(table, key, value)] = log.take()
    restored = make_node()
    assert restored.state.restore_table_record(table, key, value)
    assert limit_of(Cmd(restored), "r") == {b"rate": b"7", b"burst": 7, b"tokens": 7}
    assert not restored.state.restore_table_record(LIMIT_TABLE, b"r", [0, 7])
    assert not restored.state.restore_table_record(LIMIT_TABLE, b"r", [7])
