"""Tests for disque/state/restore.py's loop over the file's reader
(disque/jobs/record_reader.py): records read by a repeated shape frame
exactly as a record read afresh, the loop applies every record the file
holds, whatever its spelling, a slice at a time, and stops at damage with
the records before it applied."""

from __future__ import annotations

import pytest
import xxhash

from disque.jobs.journal import REASON_ACKED
from disque.jobs.record_reader import DELETION, JOB, MARKER, AofFormatError
from disque.jobs.records import FILE_MARKER, deljob_record
from disque.state.restore import JobRestore
from tests.support.aof import first_record, loadjob_record, msgpack_loadjob_record, read_all
from tests.unit.helpers import Cmd, make_node


def summed(record: bytes) -> bytes:
    """``record`` (without its checksum) with the checksum appended."""
    head = record + b"$8\r\n"
    return head + xxhash.xxh3_64_digest(head) + b"\r\n"


def respelled(payload: bytes, stamp: bytes) -> bytes:
    """A checksummed LOADJOB with another record time length than the node writes."""
    return summed(b"*4\r\n$7\r\nLOADJOB\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"
                  % (len(payload), payload, len(stamp), stamp))


def restore_into(node) -> JobRestore:
    state = node.state
    state.read_clock()
    return JobRestore(state.lifecycle, state.jobs, state.runtime, state.membership.nodes, False)


def test_records_of_a_repeated_shape_read_as_records_read_afresh():
    source = make_node(seed=3)
    cmd = Cmd(source)
    ids = [cmd.addjob("q", "same size %d" % (i % 10), "RETRY", 3) for i in range(6)]
    records = [loadjob_record(source.state.jobs[j], source.state.now) for j in ids]
    payload = first_record(records[0])[0][1]
    records[3:3] = [respelled(payload, b"17")]
    records += [deljob_record(source.state.jobs[j], source.state.now, REASON_ACKED) for j in ids[1:3]]
    read = read_all(FILE_MARKER + b"".join(records))
    assert [kind for _, kind, _ in read] == [MARKER] + [JOB] * 7 + [DELETION] * 2
    at = len(FILE_MARKER)
    for (offset, _, argv), record in zip(read[1:], records):
        assert (offset, argv) == (at, first_record(record)[0])
        at += len(record)


def test_the_loop_applies_every_spelling():
    source = make_node(seed=3)
    cmd = Cmd(source)
    ids = [cmd.addjob("q", "job %d" % i, "RETRY", 3) for i in range(4)]
    first = loadjob_record(source.state.jobs[ids[0]], source.state.now)
    data = b"".join([msgpack_loadjob_record(source.state.jobs[ids[3]], source.state.now), FILE_MARKER,
                     first, respelled(first_record(first)[0][1], b"1"),
                     *(loadjob_record(source.state.jobs[j], source.state.now) for j in ids[1:3]),
                     deljob_record(source.state.jobs[ids[1]], source.state.now, REASON_ACKED)])
    node = make_node()
    restore = restore_into(node)
    restore.reader.feed(data)
    assert restore.load(100) == 7
    assert restore.reader.position == len(data) and restore.reader.records == 7
    assert restore.jobs_loaded == 4 and restore.reader.required
    assert sorted(node.state.jobs) == sorted([ids[0], ids[2], ids[3]])


def test_the_loop_applies_a_budget_at_a_time_and_stops_at_damage():
    source = make_node(seed=3)
    cmd = Cmd(source)
    ids = [cmd.addjob("q", "job %d" % i, "RETRY", 3) for i in range(5)]
    records = [FILE_MARKER, *(loadjob_record(source.state.jobs[j], source.state.now) for j in ids)]
    bad = bytearray(records[4])
    bad[bad.index(b"job 3")] ^= 0x20
    node = make_node()
    restore = restore_into(node)
    restore.reader.feed(b"".join(records[:4]) + bytes(bad) + records[5])
    assert [restore.load(2), restore.load(2)] == [2, 2]
    with pytest.raises(AofFormatError) as info:
        restore.load(2)
    assert (info.value.record, info.value.reason) == (5, "checksum mismatch")
    assert info.value.record_offset == len(b"".join(records[:4]))
    assert sorted(node.state.jobs) == sorted(ids[:3]) and restore.jobs_loaded == 3
