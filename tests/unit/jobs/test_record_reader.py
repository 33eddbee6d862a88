"""Tests for disque/jobs/record_reader.py: LOADJOB / DELJOB records as
documented in docs/aof-format.md (spec: persistence.md §1) read back, fed
whole or in chunks of any size, and the reader's verdicts: an
``AofFormatError`` naming the damaged record's offset and number and the
byte found wrong, ``truncated`` when the file ends inside a record."""

from __future__ import annotations

import struct

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from disque.jobs.journal import REASON_ACKED, REASON_EXPIRED
from disque.jobs.job import ACTIVE, BCAST_QUEUED, DELIVERED, QUEUED, Job
from disque.jobs.record_reader import (DELETION, END, JOB, MARKER, AofFormatError,
                                       RecordReader)
from disque.jobs.records import FILE_MARKER, append_loadjobs, deljob_record
from tests.support.aof import (decode_payload, first_record, loadjob_record,
                               msgpack_loadjob_record, msgpack_payload, read_all)

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
    return [argv for _, _, argv in read_all(data)]


def damage_in(data: bytes) -> AofFormatError:
    """The verdict on ``data``, read to its end."""
    reader = RecordReader(data)
    with pytest.raises(AofFormatError) as info:
        while reader.next() != END:
            pass
        reader.finish()
    return info.value


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
    assert first_record(record) == ([b"LOADJOB", payload, b"1700000000123"], len(record))


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
    copy, was_queued = decode_payload(argv[1])
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
    copy, was_queued = decode_payload(argv[1])
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
        copy, queued = decode_payload(argv[1])
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
def test_damaged_payloads_are_corrupted_jobs(damage):
    payload = parse_all(loadjob_record(sample_job(), RECORD_MS))[0][1]
    with pytest.raises(AofFormatError, match="corrupted job: "):
        decode_payload(damage(payload))


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
        reader = RecordReader(data[:cut])
        assert reader.next() == DELETION and reader.argv() == parse_all(head)[0]
        assert reader.next() == END and reader.position == len(head)
        with pytest.raises(AofFormatError) as info:
            reader.finish()
        error = info.value
        assert error.truncated, cut
        assert (error.record_offset, error.offset, error.record) == (len(head), len(head), 2)
        assert str(error) == "unexpected end of file at offset %d (record 2)" % len(head)


@pytest.mark.parametrize("damage, offset, reason", [
    (lambda r: b"x" + r[1:], 0, "expected '*'"),
    (lambda r: b"*a\r\n" + r[4:], 0, "invalid length"),
    (lambda r: b"*0\r\n" + r[4:], 0, "invalid number of arguments 0"),
    (lambda r: b"*99\r\n" + r[4:], 0, "invalid number of arguments 99"),
    (lambda r: r[:4] + b"#" + r[5:], 4, "expected '$'"),
    (lambda r: r[:4] + b"$-1\r\n" + r[8:], 4, "invalid length"),
    (lambda r: r[:4] + b"$6\r\nLOADJOB" + r[15:], 14, "bulk not terminated by CRLF"),
])
def test_malformed_bytes_are_named_at_the_record_and_the_bad_byte(damage, offset, reason):
    prefix = deljob_record(sample_job(), RECORD_MS, REASON_ACKED)
    error = damage_in(prefix + damage(loadjob_record(sample_job(), RECORD_MS)))
    assert (error.record_offset, error.offset, error.record) == (
        len(prefix), len(prefix) + offset, 2)
    assert reason in error.reason and not error.truncated
    found = "" if offset == 0 else ", the damage found at offset %d" % (len(prefix) + offset)
    assert str(error) == "bad format at offset %d (record 2%s): %s" % (
        len(prefix), found, error.reason)


def test_records_and_damage_read_alike_in_chunks_of_every_size():
    """A record runs across feeds; offsets are the file's, not the chunk's."""
    job = sample_job(body=b"\r\n" * 20)
    records = [FILE_MARKER, loadjob_record(job, RECORD_MS),
               deljob_record(job, RECORD_MS, REASON_ACKED), loadjob_record(job, RECORD_MS + 1)]
    data = b"".join(records)
    whole = read_all(data)
    assert [offset for offset, _, _ in whole] == [sum(map(len, records[:n])) for n in range(4)]
    assert [kind for _, kind, _ in whole] == [MARKER, JOB, DELETION, JOB]
    bad = bytearray(data)
    bad[len(data) - 20] ^= 1  # in the last record's checksummed bytes
    for size in range(1, len(data) + 1):
        for source, last in ((data, None), (bytes(bad), "checksum mismatch")):
            reader, read = RecordReader(), []
            try:
                for at in range(0, len(source), size):
                    reader.feed(source[at:at + size])
                    while (kind := reader.next()) != END:
                        read.append((reader.offset, kind, reader.argv()))
                reader.finish()
            except AofFormatError as exc:
                assert (exc.reason, exc.record_offset, exc.record) == (
                    last, len(data) - len(records[-1]), 4), size
            else:
                assert last is None, size
            assert read == (whole if last is None else whole[:3]), size


def test_commands_no_aof_holds_are_damage():
    deljob = deljob_record(sample_job(), RECORD_MS, REASON_ACKED)
    error = damage_in(deljob + b"*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n")
    assert (error.reason, error.record_offset, error.record) == (
        "unknown command 'SET'", len(deljob), 2)
    assert damage_in(b"*1\r\n$7\r\nLOADJOB\r\n").reason == (
        "wrong number of arguments for 'LOADJOB'")
    # Control bytes are escaped: the reason goes into a log line.
    assert damage_in(b"*1\r\n$4\r\n\x00\xff\r\n\r\n").reason == (
        "unknown command '\\x00\\xff\\r\\n'")


def test_a_payload_that_does_not_decode_is_named_at_its_record():
    bare = b"*2\r\n$6\r\nDELJOB\r\n$40\r\n%b\r\n" % JOB_ID  # the original server's form
    bad = b"*3\r\n$7\r\nLOADJOB\r\n$110\r\n%b\r\n$1\r\n0\r\n" % (b"\xc1" * 110)
    reader = RecordReader(bare + bad, name="a.aof")
    assert reader.next() == DELETION and reader.deleted_id() == JOB_ID
    assert reader.next() == JOB
    with pytest.raises(AofFormatError) as info:
        reader.job(None)
    error = info.value
    assert (error.record_offset, error.offset, error.record) == (len(bare), len(bare), 2)
    assert error.reason.startswith("corrupted job: not a job payload")
    assert str(error).startswith("a.aof: bad format at offset %d (record 2): corrupted job: "
                                 % len(bare))


@given(st.binary(max_size=400), st.integers(0, 400))
def test_any_bytes_load_or_are_a_corrupted_job(data, at):
    """A damaged payload never raises anything but the reader's "corrupted
    job": neither form, either form cut or spliced."""
    packed = parse_all(loadjob_record(sample_job(), RECORD_MS))[0][1]
    legacy = msgpack_payload(sample_job())
    for payload in (data, packed[:at] + data, b"\x01" + data, legacy[:at] + data):
        try:
            decode_payload(payload)
        except AofFormatError as exc:
            assert exc.reason.startswith("corrupted job: "), exc


# ------------------------------------------------------------- checksums

def test_every_flipped_byte_of_a_record_is_caught():
    """Anywhere in a LOADJOB or a DELJOB after the format marker: an
    AofFormatError (the checksum, or the framing it broke, or the file
    ending inside it), never the record accepted."""
    job = sample_job()
    for record in (loadjob_record(job, RECORD_MS), deljob_record(job, RECORD_MS, REASON_ACKED)):
        for at in range(len(record)):
            bad = bytearray(record)
            bad[at] ^= 0x04
            reader = RecordReader(FILE_MARKER + bytes(bad))
            assert reader.next() == MARKER
            try:
                kind = reader.next()
                reader.finish()
            except AofFormatError:
                continue
            raise AssertionError("byte %d flipped, record accepted: %r" % (at, kind))


def test_checksum_verdicts_name_the_record_start():
    job = sample_job()
    good = deljob_record(job, RECORD_MS, REASON_ACKED)
    record = loadjob_record(job, RECORD_MS)
    error = damage_in(good + record[:-5] + b"x" + record[-4:])
    assert (error.offset, error.record_offset, error.record, error.reason) == (
        len(good), len(good), 2, "checksum mismatch")
    assert damage_in(record[:-14] + b"$7\r\n1234567\r\n").reason == "bad checksum field"


def test_a_checksum_field_of_another_length_is_refused_however_often_read():
    """Its first 8 bytes the right checksum, one more after them: refused,
    and again when read again by the shape it taught the reader (which
    compares a repeated record's checksum field whole)."""
    payload = parse_all(loadjob_record(sample_job(), RECORD_MS))[0][1]
    head = b"*4\r\n$7\r\nLOADJOB\r\n$%d\r\n%b\r\n$1\r\n0\r\n$9\r\n" % (len(payload), payload)
    reader = RecordReader(head + xxhash.xxh3_64_digest(head) + b"x\r\n")
    for _ in range(2):
        with pytest.raises(AofFormatError, match="bad checksum field"):
            reader.next()


def test_records_without_checksums_are_damage_only_after_the_marker():
    legacy = msgpack_loadjob_record(sample_job(), RECORD_MS)
    assert [kind for _, kind, _ in read_all(legacy + FILE_MARKER)] == [JOB, MARKER]
    error = damage_in(FILE_MARKER + legacy)
    assert (error.reason, error.record_offset, error.record) == (
        "record without a checksum after the format marker", len(FILE_MARKER), 2)
    assert damage_in(b"*2\r\n$9\r\nAOFFORMAT\r\n$1\r\n1\r\n").reason == (
        "unsupported AOF format b'1'")
