"""Tests for disque/state/restore.py's loop and the reader under it
(disque/jobs/record_reader.py): records read by a repeated shape frame
exactly as the strict parser frames them, and the loop applies every
record the file holds, whatever its spelling."""

from __future__ import annotations

import xxhash

from disque.aof.format import read_checked
from disque.jobs.journal import REASON_ACKED
from disque.jobs.record_reader import DELETION, JOB, MARKER, RecordReader
from disque.jobs.records import FILE_MARKER, deljob_record
from disque.state.restore import JobRestore
from tests.support.aof import loadjob_record, msgpack_loadjob_record
from tests.unit.helpers import Cmd, make_node


def summed(record: bytes) -> bytes:
    """``record`` (without its checksum) with the checksum appended."""
    head = record + b"$8\r\n"
    return head + xxhash.xxh3_64_digest(head) + b"\r\n"


def respelled(payload: bytes, stamp: bytes) -> bytes:
    """A checksummed LOADJOB with another record time length than the node writes."""
    return summed(b"*4\r\n$7\r\nLOADJOB\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"
                  % (len(payload), payload, len(stamp), stamp))


def test_the_reader_frames_as_the_strict_parser():
    source = make_node(seed=3)
    cmd = Cmd(source)
    ids = [cmd.addjob("q", "same size %d" % (i % 10), "RETRY", 3) for i in range(6)]
    records = [loadjob_record(source.state.jobs[j], source.state.now) for j in ids]
    payload = read_checked(records[0], 0, len(records[0]), False)[0][1]
    data = b"".join([FILE_MARKER, *records[:3], respelled(payload, b"17"), *records[3:],
                     deljob_record(source.state.jobs[ids[1]], source.state.now, REASON_ACKED),
                     deljob_record(source.state.jobs[ids[2]], source.state.now, REASON_ACKED)])
    reader, pos, kinds = RecordReader(), 0, []
    while pos < len(data):
        strict = read_checked(data, pos, len(data), reader.required)
        nxt = reader.read(data, pos, len(data))
        assert (reader.argv(data)[:len(strict[0])], nxt) == strict
        kinds.append(reader.kind)
        pos = nxt
    assert kinds == [MARKER] + [JOB] * 7 + [DELETION] * 2


def test_the_loop_applies_every_spelling_without_the_strict_parser():
    source = make_node(seed=3)
    cmd = Cmd(source)
    ids = [cmd.addjob("q", "job %d" % i, "RETRY", 3) for i in range(4)]
    first = loadjob_record(source.state.jobs[ids[0]], source.state.now)
    payload = read_checked(first, 0, len(first), False)[0][1]
    data = b"".join([msgpack_loadjob_record(source.state.jobs[ids[3]], source.state.now), FILE_MARKER,
                     first, respelled(payload, b"1"),
                     *(loadjob_record(source.state.jobs[j], source.state.now) for j in ids[1:3]),
                     deljob_record(source.state.jobs[ids[1]], source.state.now, REASON_ACKED)])
    node = make_node()
    node.state.read_clock()
    restore = JobRestore(node.state.lifecycle, node.state.jobs, node.state.runtime, node.state.membership.nodes, False)
    assert restore.load_written(data, 0, 100) == len(data)
    assert restore.records == 7 and restore.jobs_loaded == 4 and restore.reader.required
    assert sorted(node.state.jobs) == sorted([ids[0], ids[2], ids[3]])
