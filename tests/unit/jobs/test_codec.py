"""Tests for disque/jobs/codec.py: bus and storage serialisation of jobs
(spec: jobs-and-ids.md §10)."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disque.jobs.codec import MAX_ETIME, BadJobPayload, from_bus, from_storage, to_bus
from tests.support.aof import stored_fields
from disque.jobs.job import ACKED, ACTIVE, BCAST_QUEUED, BCAST_WILLQUEUE, DELIVERED, QUEUED, Job

JOB_ID = b"D-a1b2c3d4-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"
A = b"a" * 40
B = b"b" * 40
C = b"c" * 40
NOW_MS = 1_700_000_000_500


def sample_job(**fields) -> Job:
    job = Job(JOB_ID, b"queue", b"body\x00\r\n", 3, 1_700_000_000_000_000_007, 1_700_000_100,
              5, 60)
    job.nacks = 2
    job.adeliv = 4
    job.delivered = (A, B)
    job.flags = BCAST_QUEUED | BCAST_WILLQUEUE | DELIVERED
    job.state = QUEUED
    job.qtime = 123
    job.gc_retry = 3
    for name, value in fields.items():
        setattr(job, name, value)
    return job


def packed(payload):
    """What crosses the wire / the disk: a msgpack round trip."""
    return msgpack.unpackb(msgpack.packb(payload, use_bin_type=True), raw=False)


def test_bus_round_trip():
    job = sample_job()
    payload = packed(to_bus(job, NOW_MS))
    later = NOW_MS + 250_000  # the receiver's clock may differ: TTL is relative
    copy = from_bus(payload, later, {A: None, B: None})
    assert copy.id == job.id and copy.queue == job.queue and copy.body == job.body
    assert (copy.repl, copy.ctime, copy.delay, copy.retry) == (3, job.ctime, 5, 60)
    assert (copy.nacks, copy.adeliv) == (2, 4)
    assert copy.delivered == (A, B)
    assert copy.state == ACTIVE
    assert not copy.flags & DELIVERED  # DELIVERED is local
    assert copy.flags & BCAST_QUEUED
    remaining = job.etime - NOW_MS // 1000 + 1
    assert copy.etime == later // 1000 + remaining
    assert copy.qtime == 0 and copy.gc_retry == 0 and copy.confirmed is None


def test_bus_ttl_is_at_least_one_second():
    job = sample_job(etime=NOW_MS // 1000 - 100)  # already expired here
    assert to_bus(job, NOW_MS)[5] == 1


def test_unknown_nodes_are_dropped_and_duplicates_merged():
    job = sample_job(delivered=(A, B, C))
    payload = to_bus(job, NOW_MS)
    payload[11] = [A, B, C, A, 7]
    copy = from_bus(payload, NOW_MS, {A: None, C: None})
    assert copy.delivered == (A, C)
    assert from_bus(payload, NOW_MS, None).delivered == (A, B, C)


def test_storage_round_trip():
    job = sample_job()
    payload = packed(stored_fields(job))
    copy, was_queued = from_storage(payload, {A: None, B: None})
    assert was_queued is True
    assert copy.etime == job.etime  # absolute in the AOF
    assert copy.flags == job.flags & 0x7  # local flags kept
    assert copy.state == ACTIVE
    assert (copy.nacks, copy.adeliv, copy.delivered) == (2, 4, (A, B))
    job.state = ACTIVE
    assert from_storage(stored_fields(job), None)[1] is False


def test_storage_refuses_other_states():
    for state in (ACKED, 0, 9, None):
        payload = list(stored_fields(sample_job()))
        payload[12] = state
        with pytest.raises(BadJobPayload):
            from_storage(payload, None)
    with pytest.raises(BadJobPayload):
        from_storage(stored_fields(sample_job())[:12], None)


def test_counters_wrap_at_16_bits():
    payload = to_bus(sample_job(nacks=70000, adeliv=65536), NOW_MS)
    copy = from_bus(payload, NOW_MS, None)
    assert (copy.nacks, copy.adeliv) == (70000 & 0xFFFF, 0)


def _bad_payloads():
    good = to_bus(sample_job(), NOW_MS)

    def with_field(i, value):
        p = list(good)
        p[i] = value
        return p

    return [
        None, 5, b"job", {}, [], good[:11],
        with_field(0, b"not-a-valid-id"), with_field(0, "D-a1b2c3d4-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"),
        with_field(1, None), with_field(1, "queue"), with_field(2, None), with_field(2, 5),
        with_field(3, 0), with_field(3, 65536), with_field(3, -1), with_field(3, "3"),
        with_field(4, -5), with_field(5, 1.5), with_field(6, -1), with_field(7, None),
        with_field(8, -1), with_field(9, b"1"), with_field(10, -1), with_field(11, b"nodes"),
        with_field(11, None), with_field(4, True and 1.0),
    ]


@pytest.mark.parametrize("payload", _bad_payloads())
def test_bad_payloads_rejected(payload):
    with pytest.raises(BadJobPayload):
        from_bus(payload, NOW_MS, None)
    with pytest.raises(BadJobPayload):
        from_storage(payload, None)


_value = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 64, 2 ** 64) | st.binary(max_size=45)
    | st.text(max_size=5) | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=13), max_leaves=30)


@settings(max_examples=60, deadline=None)
@given(_value)
def test_arbitrary_payloads_decode_or_raise_bad_payload(payload):
    for decode in (lambda p: from_bus(p, NOW_MS, None), lambda p: from_storage(p, None)):
        try:
            job = decode(payload)
        except BadJobPayload:
            continue
        if isinstance(job, tuple):
            job = job[0]
        assert len(job.id) == 40 and 1 <= job.repl <= 65535


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=100), st.binary(max_size=30), st.integers(1, 65535),
       st.integers(0, 2 ** 62), st.integers(0, 10 ** 6), st.integers(0, 10 ** 6),
       st.lists(st.sampled_from([A, B, C]), max_size=3, unique=True))
def test_round_trip_property(body, queue, repl, ctime, delay, retry, delivered):
    job = Job(JOB_ID, queue, body, repl, ctime, NOW_MS // 1000 + 3600, delay, retry)
    job.delivered = tuple(delivered)
    copy = from_bus(packed(to_bus(job, NOW_MS)), NOW_MS, None)
    assert (copy.queue, copy.body, copy.repl, copy.ctime, copy.delay, copy.retry) == (
        queue, body, repl, ctime, delay, retry)
    assert copy.delivered == tuple(delivered)
    assert copy.etime == job.etime + 1
    stored, _ = from_storage(packed(stored_fields(job)), None)
    assert stored.etime == job.etime


def test_a_huge_remaining_ttl_from_a_peer_stays_a_64_bit_expire_time():
    """msgpack lets a peer send 2**64 - 1 seconds; the AOF stores etime in 64 bits."""
    payload = to_bus(sample_job(), NOW_MS)
    payload[5] = 2**64 - 1
    assert from_bus(packed(payload), NOW_MS, None).etime == MAX_ETIME == 2**63 - 1
