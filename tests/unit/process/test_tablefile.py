"""The tables file beside nodes.conf (process/tablefile.py): records
appended and read back (the last of each key), a record cut short by a
crash dropped, a damaged file refused, compaction in a thread that keeps
what was appended meanwhile, and a failed write retried."""

from __future__ import annotations

import os
import struct
import zlib

import pytest

from disque.context.tablelog import LIMIT_TABLE, SCHEDULE_TABLE, TICK_TABLE
from disque.process import tablefile
from disque.process.tablefile import MAGIC, TableFile, TablesFileError, frame, tables_path
from tests.support.process import wait_until


def test_the_path_follows_the_cluster_config_file():
    assert tables_path("nodes.conf") == "nodes.tables"
    assert tables_path("/var/lib/disque/nodes-7711.conf") == "/var/lib/disque/nodes-7711.tables"
    assert tables_path("cluster") == "cluster.tables"


def test_records_are_read_back_the_last_of_each_key_in_table_order(tmp_path):
    path = str(tmp_path / "nodes.tables")
    f = TableFile(path)
    assert f.load() == []
    assert not os.path.exists(path)  # nothing written, no file
    assert f.write([(TICK_TABLE, b"s", [7, b"n"]), (SCHEDULE_TABLE, b"s", [1]),
                    (LIMIT_TABLE, b"q", [1000, 1]), (LIMIT_TABLE, b"gone", [5, 5])]) is None
    assert f.write([(LIMIT_TABLE, b"q", [2000, 2]), (LIMIT_TABLE, b"gone", None)]) is None
    f.close()
    with open(path, "rb") as fh:
        assert fh.read().startswith(MAGIC)
    again = TableFile(path)
    assert again.load() == [(SCHEDULE_TABLE, b"s", [1]), (TICK_TABLE, b"s", [7, b"n"]),
                            (LIMIT_TABLE, b"q", [2000, 2])]
    assert again.live == sum(len(frame(*r)) for r in again.load())
    assert again.write([(LIMIT_TABLE, b"r", [3, 3])]) is None  # appends to the same file
    again.close()
    assert len(TableFile(path).load()) == 4


def test_a_record_cut_short_is_dropped_and_the_file_truncated(tmp_path):
    path = str(tmp_path / "nodes.tables")
    whole = MAGIC + frame(LIMIT_TABLE, b"q", [1000, 1])
    with open(path, "wb") as fh:
        fh.write(whole + frame(LIMIT_TABLE, b"r", [2000, 2])[:-3])
    f = TableFile(path)
    assert f.load() == [(LIMIT_TABLE, b"q", [1000, 1])]
    assert os.path.getsize(path) == len(whole)
    f.write([(LIMIT_TABLE, b"s", [3000, 3])])
    f.close()
    assert [key for _, key, _ in TableFile(path).load()] == [b"q", b"s"]


@pytest.mark.parametrize("content", [
    b"not a tables file\n",
    MAGIC + frame(LIMIT_TABLE, b"q", [1, 1])[:-1] + b"x",  # a bad checksum
    MAGIC + frame(b"no-such-table", b"q", [1, 1]),
    MAGIC + struct.pack("<II", 1, zlib.crc32(b"\xc1")) + b"\xc1",  # checked, not msgpack
])
def test_a_damaged_file_is_refused(tmp_path, content):
    path = tmp_path / "nodes.tables"
    path.write_bytes(content)
    with pytest.raises(TablesFileError, match="tables file"):
        TableFile(str(path)).load()


def test_compaction_keeps_the_live_records_and_those_written_meanwhile(tmp_path, monkeypatch):
    monkeypatch.setattr(tablefile, "COMPACT_MIN", 4096)
    path = str(tmp_path / "nodes.tables")
    f = TableFile(path)
    f.load()
    for round_ in range(20):  # 20 versions of 10 keys: 10 live records
        f.write([(LIMIT_TABLE, b"q%d" % k, [round_ + 1, k + 1]) for k in range(10)])
    assert f.size > 2 * f.live
    f.unsynced = False  # no fsync due: the next cron begins the compaction
    f.cron()
    assert f.compacting
    f.write([(LIMIT_TABLE, b"late", [7, 7]), (LIMIT_TABLE, b"q0", None)])
    wait_until(lambda: f.task.done(), 10)
    f.cron()
    assert not f.compacting
    assert os.path.getsize(path) == f.size < 2 * f.live + len(MAGIC)
    f.write([(LIMIT_TABLE, b"after", [8, 8])])
    f.close()
    found = {key: value for _, key, value in TableFile(path).load()}
    assert found == {**{b"q%d" % k: [20, k + 1] for k in range(1, 10)},
                     b"late": [7, 7], b"after": [8, 8]}
    assert not os.path.exists(path + ".tmp")


def test_a_failed_write_is_kept_and_retried(tmp_path, monkeypatch):
    path = str(tmp_path / "nodes.tables")
    f = TableFile(path)
    f.load()
    real_write = os.write
    failing = [True]

    def write(fd, data):
        if failing[0]:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(tablefile.os, "write", write)
    assert f.write([(LIMIT_TABLE, b"q", [1, 1])]) == "No space left on device"
    assert f.unwritten
    failing[0] = False
    f.cron()
    assert not f.unwritten and f.error is None
    f.close()
    assert TableFile(path).load() == [(LIMIT_TABLE, b"q", [1, 1])]


def test_a_crashed_compaction_leaves_a_file_the_next_start_removes(tmp_path):
    path = str(tmp_path / "nodes.tables")
    with open(path + ".tmp", "wb") as fh:
        fh.write(MAGIC)
    with open(path, "wb") as fh:
        fh.write(MAGIC + frame(LIMIT_TABLE, b"q", [1, 1]))
    assert TableFile(path).load() == [(LIMIT_TABLE, b"q", [1, 1])]
    assert not os.path.exists(path + ".tmp")


@pytest.mark.parametrize("content", [b"", MAGIC[:5]])
def test_a_file_a_crash_left_without_its_first_line_starts_over(tmp_path, content):
    path = tmp_path / "nodes.tables"
    path.write_bytes(content)
    f = TableFile(str(path))
    assert f.load() == []
    f.write([(LIMIT_TABLE, b"q", [1, 1])])
    f.close()
    assert TableFile(str(path)).load() == [(LIMIT_TABLE, b"q", [1, 1])]
