"""Tests for disque/spark/aoflog.py without Spark: the AOF source's reader
reads a file record for record as the server's loader does (the same
reader, disque/jobs/record_reader.py, and its AofFormatError)."""

from __future__ import annotations

import logging

import pytest

from disque.jobs.journal import REASON_ACKED
from disque.jobs.job import QUEUED, Job
from disque.jobs.records import FILE_MARKER, deljob_record
from disque.jobs.record_reader import AofFormatError
from disque.spark.aoflog import read_records
from tests.support.aof import loadjob_record, msgpack_loadjob_record

RECORD_MS = 1_700_000_000_123


def job(n: int, body: bytes = b"body\r\n*3\r\n") -> Job:
    made = Job(b"D-a1b2c3d4-%024d-05a1" % n, b"q%d" % (n % 2), body, 1,
               1_700_000_000_000_000_000 + n, 1_700_003_600, 0, 30)
    made.delivered = (b"a" * 40,)
    made.state = QUEUED
    return made


def write(path, *records: bytes) -> str:
    path.write_bytes(b"".join(records))
    return str(path)


def test_records_of_every_form_read_across_chunks(tmp_path):
    """Chunks far smaller than a record: each is framed by its lengths."""
    jobs = [job(n) for n in range(5)]
    path = write(tmp_path / "a.aof", msgpack_loadjob_record(jobs[0], RECORD_MS), FILE_MARKER,
                 *(loadjob_record(j, RECORD_MS) for j in jobs[1:]),
                 deljob_record(jobs[2], RECORD_MS + 5, REASON_ACKED))
    (columns,) = read_records(path, with_body=True, chunk_size=7)
    assert columns["record"] == ["LOADJOB"] * 5 + ["DELJOB"]
    assert columns["id"][:5] == [j.id.decode() for j in jobs]
    assert columns["body"][:5] == [j.body for j in jobs]
    assert columns["state"][:5] == ["queued"] * 5
    assert columns["time"] == [RECORD_MS] * 5 + [RECORD_MS + 5]
    assert (columns["reason"][5], columns["queue"][5]) == ("acked", "q0")


def test_a_checksum_mismatch_is_refused_with_the_loaders_offset(tmp_path):
    good = loadjob_record(job(1), RECORD_MS)
    bad = bytearray(loadjob_record(job(2), RECORD_MS))
    bad[bad.index(b"body")] ^= 0x20
    path = write(tmp_path / "a.aof", FILE_MARKER, good, bytes(bad))
    with pytest.raises(AofFormatError) as info:
        list(read_records(path))
    assert str(info.value) == "%s: bad format at offset %d (record 3): checksum mismatch" % (
        path, len(FILE_MARKER) + len(good))


def test_a_torn_last_record_is_skipped_unless_refused(tmp_path, caplog):
    whole = loadjob_record(job(1), RECORD_MS)
    path = write(tmp_path / "a.aof", whole, whole[:-9])
    message = "%s: unexpected end of file at offset %d (record 2)" % (path, len(whole))
    with caplog.at_level(logging.WARNING, logger="disque.spark"):
        (columns,) = read_records(path)
    assert len(columns["record"]) == 1 and message + ", skipped" in caplog.text
    with pytest.raises(AofFormatError) as info:
        list(read_records(path, allow_truncated=False))
    assert str(info.value) == message and info.value.truncated


def test_a_bad_number_in_a_deljob_is_named_at_its_record(tmp_path):
    """Before checksums a DELJOB's fields were only framed: a count that is
    no number is damage of that record."""
    whole = loadjob_record(job(1), RECORD_MS)
    bad = b"*7\r\n$6\r\nDELJOB\r\n$40\r\n%b\r\n$13\r\n%d\r\n$2\r\nq1\r\n$1\r\nx\r\n" \
          b"$1\r\n0\r\n$5\r\nacked\r\n" % (job(1).id, RECORD_MS)
    path = write(tmp_path / "a.aof", whole, bad)
    with pytest.raises(AofFormatError) as info:
        list(read_records(path))
    assert (info.value.record, info.value.record_offset) == (2, len(whole))
    assert info.value.reason == "not a number: b'x'"
