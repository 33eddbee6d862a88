"""Tests for disque/aof/check.py, ``disque-check-aof [--fix] FILE``: valid files
pass, a truncated tail is reported and cut with --fix, damage anywhere else
is reported with its offset and never "repaired"."""

from __future__ import annotations

import msgpack
import pytest

from disque.aof.check import check, main
from disque.aof.format import deljob_record
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
    """Three records; returns (data, offset of the last record)."""
    head = loadjob_record(job(1), RECORD_MS) + deljob_record(job(1), RECORD_MS, REASON_ACKED)
    return head + loadjob_record(job(2), RECORD_MS), len(head)


def run(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_valid_file(tmp_path, capsys):
    data, _ = good_file()
    path = tmp_path / "a.aof"
    path.write_bytes(data)
    assert check(data) == (len(data), None, False)
    code, out = run(capsys, str(path))
    assert code == 0
    assert "AOF analyzed: size=%d, ok_up_to=%d, diff=0" % (len(data), len(data)) in out
    assert "AOF is valid" in out
    assert run(capsys, "--fix", str(path))[0] == 0 and path.read_bytes() == data


def test_a_file_an_earlier_version_began_is_valid():
    """msgpack payloads first, then the packed ones this version appends."""
    data = msgpack_loadjob_record(job(1), RECORD_MS) + good_file()[0]
    assert check(data) == (len(data), None, False)


def test_empty_file_is_valid(tmp_path, capsys):
    path = tmp_path / "a.aof"
    path.write_bytes(b"")
    assert run(capsys, str(path))[0] == 0


def test_truncated_tail_is_reported_and_fixed(tmp_path, capsys):
    data, last = good_file()
    path = tmp_path / "a.aof"
    cut = data[:last + 30]
    path.write_bytes(cut)
    assert check(cut) == (last, "unexpected end of file", True)
    code, out = run(capsys, str(path))
    assert code == 1
    assert "ok_up_to=%d, diff=30" % last in out and "--fix" in out
    assert path.read_bytes() == cut  # not touched without --fix
    code, out = run(capsys, "--fix", str(path))
    assert code == 0 and "Successfully truncated AOF to %d bytes" % last in out
    assert path.read_bytes() == data[:last]
    assert run(capsys, str(path))[0] == 0


@pytest.mark.parametrize("damage, problem", [
    (lambda d, at: d[:at] + b"garbage" + d[at:], "bad format at offset {at}"),
    (lambda d, at: d[:at] + b"*2\r\n$3\r\nSET\r\n$1\r\nx\r\n" + d[at:],
     "unknown command b'SET' at offset {at}"),
    (lambda d, at: d[:at] + b"*3\r\n$7\r\nLOADJOB\r\n$3\r\n%s\r\n$1\r\n0\r\n"
     % msgpack.packb([1, 2]) + d[at:], "corrupted job at offset {at}"),
])
def test_damage_in_the_middle_is_never_fixed(tmp_path, capsys, damage, problem):
    data, last = good_file()
    path = tmp_path / "a.aof"
    bad = damage(data, last)
    path.write_bytes(bad)
    valid, message, truncated = check(bad)
    assert (valid, truncated) == (last, False)
    assert problem.format(at=last) in message
    for args in ((str(path),), ("--fix", str(path))):
        code, out = run(capsys, *args)
        assert code == 1 and problem.format(at=last) in out
        assert "not at the end of the file" in out
        assert path.read_bytes() == bad


def test_missing_file(tmp_path, capsys):
    assert main([str(tmp_path / "nope.aof")]) == 1
    assert "Cannot open file" in capsys.readouterr().err
