"""The token bucket of a queue's delivery limit (disque/queues/ratelimit.py),
on integer times as the injected clock gives them, and its lines in the
cluster config file."""

from __future__ import annotations

import base64

import pytest

from disque.queues.ratelimit import (RateLimit, default_burst, format_rate, limit_from_record,
                                     limit_record, parse_conf, parse_rate)

T0 = 1_700_000_000_000


def take_all(limit: RateLimit, now: int) -> int:
    taken = 0
    while limit.take(now):
        taken += 1
        assert taken <= 10_000_000
    return taken


def test_a_new_bucket_is_full_and_refills_at_the_rate():
    limit = RateLimit(5000, 5, T0)  # 5 jobs/s, burst 5
    assert limit.tokens(T0) == 5
    assert take_all(limit, T0) == 5
    assert limit.next_token_at() == T0 + 200
    assert not limit.take(T0 + 199)
    assert limit.take(T0 + 200)
    assert not limit.take(T0 + 200)
    assert take_all(limit, T0 + 1200) == 5  # a second later: full again, not more
    assert take_all(limit, T0 + 3_600_000) == 5  # an hour idle: still the burst


def test_the_count_over_any_interval_is_rate_times_time_plus_burst():
    limit = RateLimit(7000, 3, T0)  # 7 jobs/s, burst 3
    taken = 0
    for ms in range(0, 60_001, 13):  # a greedy consumer polling every 13 ms for 60 s
        taken += take_all(limit, T0 + ms)
    assert 7 * 60 <= taken <= 7 * 60 + 3


def test_fractional_rates():
    limit = RateLimit(500, 1, T0)  # one job every 2 s
    assert take_all(limit, T0) == 1
    assert limit.next_token_at() == T0 + 2000
    assert take_all(limit, T0 + 1999) == 0
    assert take_all(limit, T0 + 2000) == 1
    slow = RateLimit(1, 1, T0)  # 0.001 jobs/s: one job every 1000 s
    assert take_all(slow, T0) == 1
    assert slow.next_token_at() == T0 + 1_000_000


def test_a_clock_going_back_earns_nothing_and_counts_from_then():
    limit = RateLimit(1000, 1, T0)
    assert limit.take(T0)
    assert not limit.take(T0 - 5000)
    assert not limit.take(T0 - 4001)
    assert limit.take(T0 - 4000)  # a second after the time the clock came back to


def test_changing_the_rate_keeps_what_was_earned_up_to_the_new_burst():
    limit = RateLimit(10_000, 10, T0)
    assert take_all(limit, T0) == 10
    limit.change(1000, 2, T0 + 500)  # 5 earned at the old rate, 2 kept
    assert limit.tokens(T0 + 500) == 2
    assert take_all(limit, T0 + 500) == 2
    assert limit.next_token_at() == T0 + 1500


@pytest.mark.parametrize("text, milli", [
    (b"5", 5000), (b"0", 0), (b"2.5", 2500), (b"0.001", 1), (b".5", 500), (b"1000000", 10 ** 9),
    (b"007", 7000), (b"1.250", 1250),
    (b"", None), (b".", None), (b"5.", None), (b"-1", None), (b"1.0001", None), (b"abc", None),
    (b"1e3", None), (b"1000000.001", None), (b" 5", None), (b"99999999999", None),
])
def test_parse_rate(text, milli):
    assert parse_rate(text) == milli


def test_format_rate_and_default_burst():
    assert [format_rate(r) for r in (5000, 2500, 1, 1250, 10 ** 9)] == [
        b"5", b"2.5", b"0.001", b"1.25", b"1000000"]
    assert [default_burst(r) for r in (5000, 2500, 1, 10 ** 9)] == [5, 3, 1, 1_000_000]


def test_limit_lines_of_an_older_nodes_conf_are_read_for_any_queue_name():
    text = "".join("vars queue-rate-limit %s %s\n" % (base64.b64encode(name).decode(), rest)
                   for name, rest in ((b"orders", "5 5"), (b"a b\r\n\x00\xff", "2.5 9")))
    nodes = "a1b2c3d4" + "0" * 32 + " 127.0.0.1:7711@17711 myself 0 0 connected\n"
    assert parse_conf(nodes + text) == [(b"orders", 5000, 5), (b"a b\r\n\x00\xff", 2500, 9)]
    assert parse_conf(nodes) == []


def test_a_limit_record_round_trips_and_a_bad_one_is_refused():
    limit = limit_from_record(limit_record(RateLimit(2500, 9, T0)), T0 + 5)
    assert (limit.rate_milli, limit.burst, limit.tokens(T0 + 5)) == (2500, 9, 9)
    for bad in ([0, 9], [2500, 0], [2500], [b"1", 9], "x", [10 ** 10, 9]):
        assert limit_from_record(bad, T0) is None


@pytest.mark.parametrize("line", [
    "vars queue-rate-limit b3JkZXJz 5", "vars queue-rate-limit !!! 5 5",
    "vars queue-rate-limit b3JkZXJz 0 5", "vars queue-rate-limit b3JkZXJz 5 0",
    "vars queue-rate-limit b3JkZXJz x 5", "vars queue-rate-limit  5 5",
    "vars queue-rate-limit b3JkZXJz 5 5 extra",
])
def test_a_damaged_limit_line_is_refused_with_its_number(line):
    with pytest.raises(ValueError, match="line 2$"):
        parse_conf("\n" + line + "\n")
