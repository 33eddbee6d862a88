"""Tests for disque/aof/check.py, ``disque-check-aof [--fix [--yes]] FILE``:
valid files pass, a truncated tail is reported and cut with --fix, damage
anywhere else (a bad checksum included) is reported with its offset and
cut there only with --fix and a confirmation."""

from __future__ import annotations

import msgpack
import pytest

from disque.aof.check import check, main
from disque.jobs.records import FILE_MARKER, deljob_record
from disque.jobs.journal import REASON_ACKED
from disque.jobs.job import Job
from tests.support.aof import loadjob_record, msgpack_loadjob_record

RECORD_MS = 1_700_000_000_000


def job(n: int) -> Job:
    j = Job(b"D-a1b2c3d4-%024d-05a1" % n, b"q", b"body\r\n%d" % n, 1,
            1_700_000_000_000_000_000 + n, 1_700_086_400, 0, 30)
    j.delivered = (b"a" * 40,)
    return j


def good_file() -> tuple[bytes, int]:
    """The format marker and three records; returns (data, offset of the last record)."""
    head = (FILE_MARKER + loadjob_record(job(1), RECORD_MS)
            + deljob_record(job(1), RECORD_MS, REASON_ACKED))
    return head + loadjob_record(job(2), RECORD_MS), len(head)


def run(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_valid_file(tmp_path, capsys):
    data, _ = good_file()
    path = tmp_path / "a.aof"
    path.write_bytes(data)
    assert check(data) == (len(data), None, False, 4, True)
    code, out = run(capsys, str(path))
    assert code == 0
    assert "AOF analyzed: size=%d, ok_up_to=%d, diff=0" % (len(data), len(data)) in out
    assert "AOF is valid" in out
    assert run(capsys, "--fix", str(path))[0] == 0 and path.read_bytes() == data


def test_a_file_an_earlier_version_began_is_valid():
    """msgpack payloads first, then the packed ones this version appends
    after its format marker."""
    data = msgpack_loadjob_record(job(1), RECORD_MS) + good_file()[0]
    assert check(data) == (len(data), None, False, 5, True)


def test_empty_file_is_valid(tmp_path, capsys):
    path = tmp_path / "a.aof"
    path.write_bytes(b"")
    assert run(capsys, str(path))[0] == 0


def test_truncated_tail_is_reported_and_fixed(tmp_path, capsys):
    data, last = good_file()
    path = tmp_path / "a.aof"
    cut = data[:last + 30]
    path.write_bytes(cut)
    assert check(cut)[:3] == (last, "unexpected end of file at offset %d (record 4)" % last, True)
    code, out = run(capsys, str(path))
    assert code == 1
    assert "ok_up_to=%d, diff=30" % last in out and "--fix" in out
    assert path.read_bytes() == cut  # not touched without --fix
    code, out = run(capsys, "--fix", str(path))
    assert code == 0 and "Successfully truncated AOF to %d bytes" % last in out
    assert path.read_bytes() == data[:last]
    assert run(capsys, str(path))[0] == 0


LEGACY = msgpack_loadjob_record(job(3), RECORD_MS)  # an earlier version's record


@pytest.mark.parametrize("damage, problem", [
    (lambda d, at: d[:at] + b"garbage" + d[at:], "bad format at offset {at} (record 4): expected"),
    (lambda d, at: d[:at] + b"*2\r\n$3\r\nSET\r\n$1\r\nx\r\n" + d[at:],
     "bad format at offset {at} (record 4): record without a checksum"),
    (lambda d, at: d[:at] + LEGACY + d[at:],
     "bad format at offset {at} (record 4): record without a checksum after the format marker"),
    (lambda d, at: d[:at + 40] + bytes([d[at + 40] ^ 1]) + d[at + 41:],
     "bad format at offset {at} (record 4): checksum mismatch"),
])
def test_damage_in_the_middle_is_cut_only_when_confirmed(tmp_path, capsys, damage, problem):
    data, last = good_file()
    path = tmp_path / "a.aof"
    bad = damage(data, last) + loadjob_record(job(4), RECORD_MS)
    path.write_bytes(bad)
    valid, message, truncated, records, checksummed = check(bad)
    assert (valid, truncated, records, checksummed) == (last, False, 3, True)
    assert problem.format(at=last) in message
    code, out = run(capsys, str(path))
    assert code == 1 and problem.format(at=last) in out
    assert "not at the end of the file" in out and "offset %d" % last in out
    code, out = run(capsys, "--fix", str(path))  # no terminal to confirm on
    assert code == 1 and "Not truncated" in out
    assert path.read_bytes() == bad
    code, out = run(capsys, "--fix", "--yes", str(path))
    assert code == 0 and "Successfully truncated AOF to %d bytes" % last in out
    assert path.read_bytes() == data[:last]


@pytest.mark.parametrize("damage, problem", [
    (lambda d, at: d[:at] + b"*2\r\n$3\r\nSET\r\n$1\r\nx\r\n" + d[at:],
     "bad format at offset {at} (record 2): unknown command 'SET'"),
    (lambda d, at: d[:at] + b"*3\r\n$7\r\nLOADJOB\r\n$3\r\n%s\r\n$1\r\n0\r\n"
     % msgpack.packb([1, 2]) + d[at:], "bad format at offset {at} (record 2): corrupted job: "),
])
def test_damage_in_a_file_without_marker(tmp_path, capsys, damage, problem):
    """An earlier version's file: records without checksums are read as before."""
    data = LEGACY + LEGACY
    bad = damage(data, len(LEGACY))
    result = check(bad)
    assert (result.valid, result.truncated) == (len(LEGACY), False)
    assert problem.format(at=len(LEGACY)) in result.problem
    assert not result.checksummed


def test_two_flipped_bytes_in_the_middle_are_named(tmp_path, capsys):
    """Two bytes of a job body flipped: the framing still holds, the
    payload still decodes, only the checksum tells."""
    records = [loadjob_record(job(n), RECORD_MS) for n in range(10)]
    data = FILE_MARKER + b"".join(records)
    at = len(FILE_MARKER) + sum(map(len, records[:5]))  # the sixth record
    body = data.index(b"body\r\n5", at)
    bad = bytearray(data)
    bad[body] ^= 0x20
    bad[body + 1] ^= 0x20
    path = tmp_path / "a.aof"
    path.write_bytes(bytes(bad))
    code, out = run(capsys, str(path))
    assert code == 1 and "AOF is valid" not in out
    assert "AOF problem: bad format at offset %d (record 7): checksum mismatch" % at in out
    assert "ok_up_to=%d" % at in out


def test_missing_file(tmp_path, capsys):
    assert main([str(tmp_path / "nope.aof")]) == 1
    assert "Cannot open file" in capsys.readouterr().err
