"""Tests for disque/aof/format.py: LOADJOB / DELJOB records as documented in
docs/aof-format.md (spec: persistence.md §1), and ``read_record``'s verdicts:
a record cut short is ``Truncated`` at the record's start, bytes that cannot
be a record are an ``AofFormatError`` at the offending byte."""

from __future__ import annotations

import msgpack
import pytest

from disque.aof.format import (REASON_ACKED, REASON_EXPIRED, AofFormatError, Truncated,
                               deljob_record, read_record)
from disque.jobs.codec import from_storage
from disque.jobs.job import BCAST_QUEUED, DELIVERED, QUEUED, Job
from tests.support.aof import loadjob_record

JOB_ID = b"D-a1b2c3d4-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"
NODE_A = b"a" * 40
NODE_B = b"b" * 40
RECORD_MS = 1_700_000_000_123


def sample_job(body: bytes = b"bo\r\ndy\x00*3\r\n$7") -> Job:
    job = Job(JOB_ID, b"que\r\nue", body, 2, 1_700_000_000_000_000_042, 1_700_003_600, 7, 30)
    job.nacks = 3
    job.adeliv = 258
    job.flags = BCAST_QUEUED | DELIVERED
    job.delivered = (NODE_A, NODE_B)
    job.state = QUEUED
    job.qtime = 99  # not stored
    return job


def parse_all(data: bytes) -> list[list[bytes]]:
    records, pos = [], 0
    while pos < len(data):
        argv, pos = read_record(data, pos, len(data))
        records.append(argv)
    return records


def test_loadjob_record_layout_and_payload():
    job = sample_job()
    record = loadjob_record(job, RECORD_MS)
    payload = msgpack.packb([JOB_ID, b"que\r\nue", job.body, 2, job.ctime, 1_700_003_600, 7, 30,
                             3, 258, BCAST_QUEUED | DELIVERED, [NODE_A, NODE_B], QUEUED],
                            use_bin_type=True)
    assert record == (b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n%s\r\n$13\r\n1700000000123\r\n"
                      % (len(payload), payload))
    argv, end = read_record(record, 0, len(record))
    assert end == len(record)
    assert argv == [b"LOADJOB", payload, b"1700000000123"]


def test_loadjob_round_trip_keeps_every_stored_field():
    job = sample_job()
    argv = parse_all(loadjob_record(job, RECORD_MS))[0]
    copy, was_queued = from_storage(msgpack.unpackb(argv[1], raw=False), None)
    assert was_queued
    assert (copy.id, copy.queue, copy.body) == (job.id, job.queue, job.body)
    assert (copy.repl, copy.ctime, copy.etime, copy.delay, copy.retry) == (
        2, job.ctime, 1_700_003_600, 7, 30)
    assert (copy.nacks, copy.adeliv, copy.flags, copy.delivered) == (
        3, 258, BCAST_QUEUED | DELIVERED, (NODE_A, NODE_B))
    assert copy.qtime == 0  # qtime is recomputed at load time, never stored


def test_deljob_record_layout():
    job = sample_job()
    record = deljob_record(job, RECORD_MS, REASON_ACKED)
    assert record == (b"*7\r\n$6\r\nDELJOB\r\n$40\r\n" + JOB_ID + b"\r\n$13\r\n1700000000123\r\n"
                      b"$7\r\nque\r\nue\r\n$1\r\n3\r\n$3\r\n258\r\n$5\r\nacked\r\n")
    assert parse_all(record) == [[b"DELJOB", JOB_ID, b"1700000000123", b"que\r\nue", b"3",
                                  b"258", b"acked"]]


def test_records_parse_back_to_back_by_bulk_length():
    job = sample_job(body=b"\r\n" * 50)
    data = (loadjob_record(job, RECORD_MS) + deljob_record(job, RECORD_MS + 1, REASON_EXPIRED)
            + b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + JOB_ID + b"\r\n")
    names = [argv[0] for argv in parse_all(data)]
    assert names == [b"LOADJOB", b"DELJOB", b"DELJOB"]


@pytest.mark.parametrize("make", [
    lambda: loadjob_record(sample_job(), RECORD_MS),
    lambda: deljob_record(sample_job(), RECORD_MS, REASON_ACKED),
])
def test_every_cut_of_the_last_record_is_truncated_at_its_start(make):
    head = deljob_record(sample_job(), RECORD_MS, REASON_ACKED)
    record = make()
    data = head + record
    for cut in range(len(head) + 1, len(data)):
        with pytest.raises(Truncated) as info:
            read_record(data, len(head), cut)
        assert info.value.offset == len(head), cut
    # The record before it is intact whatever the cut.
    assert read_record(data, 0, len(head) + 1) == (parse_all(head)[0], len(head))


@pytest.mark.parametrize("damage, offset, reason", [
    (lambda r: b"x" + r[1:], 0, "expected '*'"),
    (lambda r: b"*a\r\n" + r[4:], 0, "invalid length"),
    (lambda r: b"*0\r\n" + r[4:], 0, "invalid number of arguments 0"),
    (lambda r: b"*99\r\n" + r[4:], 0, "invalid number of arguments 99"),
    (lambda r: r[:4] + b"#" + r[5:], 4, "expected '$'"),
    (lambda r: r[:4] + b"$-1\r\n" + r[8:], 4, "invalid length"),
    (lambda r: r[:4] + b"$6\r\nLOADJOB" + r[15:], 14, "bulk not terminated by CRLF"),
])
def test_malformed_bytes_are_format_errors_at_the_bad_byte(damage, offset, reason):
    prefix = deljob_record(sample_job(), RECORD_MS, REASON_ACKED)
    data = prefix + damage(loadjob_record(sample_job(), RECORD_MS))
    with pytest.raises(AofFormatError) as info:
        read_record(data, len(prefix), len(data))
    assert info.value.offset == len(prefix) + offset
    assert reason in info.value.reason
    assert "at offset %d" % (len(prefix) + offset) in str(info.value)


def test_read_record_accepts_bytes_and_a_bytearray():
    record = loadjob_record(sample_job(), RECORD_MS)
    for buf in (bytearray(record), record):
        argv, end = read_record(buf, 0, len(record))
        assert end == len(record) and argv[0] == b"LOADJOB"
        assert all(type(a) is bytes for a in argv)
