"""Tests for disque/spark/aoflog.py without Spark: the AOF source's reader
reads a file record for record as the server's loader does (the same
framing, checksums and decoding, disque/jobs/record_reader.py)."""

from __future__ import annotations

import logging

import pytest

from disque.jobs.journal import REASON_ACKED
from disque.jobs.job import QUEUED, Job
from disque.jobs.records import FILE_MARKER, deljob_record
from disque.spark.aoflog import AofFormatError, iter_commands, read_records
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
    names = [argv[0] for argv in iter_commands(path, chunk_size=7)]
    assert names == [b"LOADJOB", b"AOFFORMAT"] + [b"LOADJOB"] * 4 + [b"DELJOB"]
    (columns,) = read_records(path, with_body=True)
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
    with pytest.raises(AofFormatError, match="offset %d after record 2: checksum mismatch"
                       % (len(FILE_MARKER) + len(good))):
        list(iter_commands(path))


def test_a_torn_last_record_is_skipped_unless_refused(tmp_path, caplog):
    whole = loadjob_record(job(1), RECORD_MS)
    path = write(tmp_path / "a.aof", whole, whole[:-9])
    with caplog.at_level(logging.WARNING, logger="disque.spark"):
        assert len(list(iter_commands(path))) == 1
    assert "truncated record after record 1" in caplog.text
    with pytest.raises(AofFormatError, match="truncated record after record 1"):
        list(iter_commands(path, allow_truncated=False))
