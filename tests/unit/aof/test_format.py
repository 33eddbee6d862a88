"""Tests for disque/aof/format.py: LOADJOB / DELJOB records as documented in
docs/aof-format.md (spec: persistence.md §1), and ``read_record``'s verdicts:
a record cut short is ``Truncated`` at the record's start, bytes that cannot
be a record are an ``AofFormatError`` at the offending byte."""

from __future__ import annotations

import struct

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from disque.jobs.journal import REASON_ACKED, REASON_EXPIRED
from disque.aof.format import (AofFormatError, Truncated, format_marker, load_job, read_checked,
                               read_record)
from disque.jobs.records import FILE_MARKER, append_loadjobs, deljob_record
from disque.jobs.codec import BadJobPayload
from disque.jobs.job import ACTIVE, BCAST_QUEUED, DELIVERED, QUEUED, Job
from tests.support.aof import loadjob_record, msgpack_loadjob_record, msgpack_payload

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
    """The records' fields, checksums checked and left out."""
    records, pos = [], 0
    while pos < len(data):
        argv, pos = read_checked(data, pos, len(data), False)
        records.append(argv)
    return records


def test_loadjob_record_layout_and_payload():
    """The payload layout of docs/aof-format.md, byte for byte."""
    job = sample_job()
    record = loadjob_record(job, RECORD_MS)
    payload = (struct.pack("<BBBHQQQQQQIIH", 1, QUEUED, BCAST_QUEUED | DELIVERED, 2, job.ctime,
                           1_700_003_600, 7, 30, 3, 258, 7, len(job.body), 2)
               + JOB_ID + b"que\r\nue" + job.body + NODE_A + NODE_B)
    summed = (b"*4\r\n$7\r\nLOADJOB\r\n$%d\r\n%s\r\n$13\r\n1700000000123\r\n$8\r\n"
              % (len(payload), payload))
    assert record == summed + xxhash.xxh3_64_digest(summed) + b"\r\n"
    argv, end = read_record(record, 0, len(record))
    assert end == len(record)
    assert argv == [b"LOADJOB", payload, b"1700000000123", xxhash.xxh3_64_digest(summed)]
    assert read_checked(record, 0, len(record), True) == (argv[:3], end)


def assert_same_stored_job(copy, job):
    assert (copy.id, copy.queue, copy.body) == (job.id, job.queue, job.body)
    assert (copy.repl, copy.ctime, copy.etime, copy.delay, copy.retry) == (
        job.repl, job.ctime, job.etime, job.delay, job.retry)
    assert (copy.nacks, copy.adeliv, copy.flags, copy.delivered) == (
        job.nacks, job.adeliv, job.flags, job.delivered)
    assert copy.qtime == 0  # qtime is recomputed at load time, never stored


@pytest.mark.parametrize("make", [loadjob_record, msgpack_loadjob_record])
def test_loadjob_round_trip_keeps_every_stored_field(make):
    """Records of this version and the msgpack ones of earlier versions."""
    job = sample_job()
    argv = parse_all(make(job, RECORD_MS))[0]
    copy, was_queued = load_job(argv[1], None)
    assert was_queued
    assert_same_stored_job(copy, job)


@given(st.binary(max_size=300), st.binary(max_size=100), st.integers(1, 65535),
       st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1),
       st.integers(0, 2**64 - 1), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF),
       st.integers(0, 7), st.lists(st.sampled_from([NODE_A, NODE_B, b"c" * 40]), max_size=3,
                                   unique=True), st.sampled_from([ACTIVE, QUEUED]))
def test_every_storable_job_round_trips(body, queue, repl, ctime, etime, delay, retry, nacks,
                                        adeliv, flags, delivered, state):
    job = Job(JOB_ID, queue, body, repl, ctime, etime, delay, retry)
    job.nacks, job.adeliv, job.flags, job.delivered, job.state = (
        nacks, adeliv, flags, tuple(delivered), state)
    argv = parse_all(loadjob_record(job, RECORD_MS))[0]
    copy, was_queued = load_job(argv[1], None)
    assert was_queued == (state == QUEUED)
    assert_same_stored_job(copy, job)


_STORED = st.fixed_dictionaries({
    "etime": st.sampled_from([1_700_003_600, 2**63 - 1]), "delay": st.sampled_from([0, 7]),
    "retry": st.sampled_from([0, 300]), "nacks": st.sampled_from([0, 5]),
    "body": st.sampled_from([b"", b"x" * 64]),
    "holders": st.sampled_from([(), (NODE_A,), (NODE_A, NODE_B)]),
    "repl": st.sampled_from([1, 3]), "flags": st.sampled_from([0, DELIVERED]),
    "state": st.sampled_from([ACTIVE, QUEUED]), "priority": st.sampled_from([5, 9])})


@given(st.lists(_STORED, min_size=1, max_size=12))
def test_a_run_of_records_keeps_each_jobs_own_fields(jobs_fields):
    """``append_loadjobs`` packs the fields a run of jobs shares once per
    change: every job of a run whose fields alternate still loads as itself."""
    jobs = []
    for n, fields in enumerate(jobs_fields):
        job = Job(JOB_ID[:-4] + b"%04d" % n, b"q", fields["body"], fields["repl"],
                  1_700_000_000_000_000_000 + n, fields["etime"], fields["delay"],
                  fields["retry"])
        job.nacks, job.delivered = fields["nacks"], fields["holders"]
        job.flags, job.state, job.priority = fields["flags"], fields["state"], fields["priority"]
        jobs.append(job)
    out = bytearray()
    append_loadjobs(out, jobs, RECORD_MS)
    records = parse_all(bytes(out))
    assert len(records) == len(jobs)
    for argv, job in zip(records, jobs):
        copy, queued = load_job(argv[1], None)
        assert queued == (job.state == QUEUED)
        assert copy.priority == job.priority
        assert_same_stored_job(copy, job)


@pytest.mark.parametrize("damage", [
    lambda p: p[:50],  # shorter than the fixed part
    lambda p: p[:-1],  # one byte of a node ID missing
    lambda p: p + b"x",  # a byte too many
    lambda p: p[:56] + b"\xff" + p[57:],  # a queue length beyond the payload
    lambda p: p[:1] + b"\x03" + p[2:],  # state acked, never stored
    lambda p: p[:3] + b"\x00\x00" + p[5:],  # replication factor 0
    lambda p: p[:63] + b"X" + p[64:],  # not a job ID
    lambda p: b"\xc1" + p[1:],  # neither form (0xc1 is never used by msgpack)
    lambda p: msgpack_payload(sample_job())[:-3],  # a msgpack array cut short
])
def test_damaged_payloads_are_bad_job_payloads(damage):
    payload = parse_all(loadjob_record(sample_job(), RECORD_MS))[0][1]
    with pytest.raises(BadJobPayload):
        load_job(damage(payload), None)


def test_deljob_record_layout():
    job = sample_job()
    record = deljob_record(job, RECORD_MS, REASON_ACKED)
    summed = (b"*8\r\n$6\r\nDELJOB\r\n$40\r\n" + JOB_ID + b"\r\n$13\r\n1700000000123\r\n"
              b"$7\r\nque\r\nue\r\n$1\r\n3\r\n$3\r\n258\r\n$5\r\nacked\r\n$8\r\n")
    assert record == summed + xxhash.xxh3_64_digest(summed) + b"\r\n"
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
        with pytest.raises(Truncated):
            read_checked(data, len(head), cut, True)
    # The record before it is intact whatever the cut.
    assert read_checked(data, 0, len(head) + 1, True) == (parse_all(head)[0], len(head))


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


@given(st.binary(max_size=400), st.integers(0, 400))
def test_any_bytes_load_or_are_a_bad_job_payload(data, at):
    """A damaged payload never raises anything the loader does not turn into
    "Corrupted job at offset N": neither form, either form cut or spliced."""
    packed = parse_all(loadjob_record(sample_job(), RECORD_MS))[0][1]
    legacy = msgpack_payload(sample_job())
    for payload in (data, packed[:at] + data, b"\x01" + data, legacy[:at] + data):
        try:
            load_job(payload, None)
        except BadJobPayload:
            pass


# ------------------------------------------------------------- checksums

def test_every_flipped_byte_of_a_record_is_caught():
    """Anywhere in a LOADJOB or a DELJOB: an AofFormatError (the checksum,
    or the framing it broke) or Truncated, never the record accepted."""
    job = sample_job()
    for record in (loadjob_record(job, RECORD_MS), deljob_record(job, RECORD_MS, REASON_ACKED)):
        for at in range(len(record)):
            bad = bytearray(record)
            bad[at] ^= 0x04
            try:
                argv, _ = read_checked(bytes(bad), 0, len(bad), True)
            except (AofFormatError, Truncated):
                continue
            raise AssertionError("byte %d flipped, record accepted: %r" % (at, argv))


def test_checksum_verdicts_name_the_record_start():
    job = sample_job()
    good = deljob_record(job, RECORD_MS, REASON_ACKED)
    record = loadjob_record(job, RECORD_MS)
    bad = record[:-5] + b"x" + record[-4:]
    with pytest.raises(AofFormatError) as caught:
        read_checked(good + bad, len(good), len(good) + len(bad), False)
    assert (caught.value.offset, caught.value.reason) == (len(good), "checksum mismatch")
    short = record[:-14] + b"$7\r\n1234567\r\n"
    with pytest.raises(AofFormatError, match="bad checksum field"):
        read_checked(short, 0, len(short), False)


def test_records_without_checksums_are_damage_only_after_the_marker():
    legacy = msgpack_loadjob_record(sample_job(), RECORD_MS)
    assert read_checked(legacy, 0, len(legacy), False)[1] == len(legacy)
    with pytest.raises(AofFormatError, match="record without a checksum after the format"):
        read_checked(legacy, 0, len(legacy), True)
    argv, end = read_checked(FILE_MARKER, 0, len(FILE_MARKER), True)
    assert end == len(FILE_MARKER) and format_marker(argv, 0)
    assert not format_marker(parse_all(legacy)[0], 0)
    with pytest.raises(AofFormatError, match="unsupported AOF format"):
        format_marker([b"AOFFORMAT", b"3"], 0)
