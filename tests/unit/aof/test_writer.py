"""Tests for disque/aof/writer.py against a real temporary directory and the
test's event loop (spec: persistence.md §2-§4): buffering before replies,
fsync policies, write errors (MISCONF), enable/disable and rewrites whose
snapshot plus the records made meanwhile equal the live state."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading

import pytest

from disque.aof import writer as writer_module
from disque.jobs.records import FILE_MARKER
from disque.aof.loader import AofLoader
from disque.aof.writer import STATE_OFF, STATE_ON, STATE_WAIT_REWRITE, AofWriter
from disque.jobs.job import ACTIVE, QUEUED, Job
from disque.jobs.journal import NULL_JOURNAL
from tests.support.aof import file_records, msgpack_loadjob_record
from tests.unit.helpers import Cmd, make_node

LOG = logging.getLogger("test.aof.writer")
MISCONF = b"-MISCONF Errors writing to the AOF file: No space left on device\r\n"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the server runs in ``dir``; the writer uses relative names
    return tmp_path


@pytest.fixture
async def node_writer(workdir):
    node = make_node()
    writer = AofWriter(node.state, node.state.config, asyncio.get_running_loop(), LOG)
    yield node, writer
    writer.cancel_rewrite()
    if writer.fd >= 0:
        os.close(writer.fd)
    writer.fsync_pool.shutdown()


def records(path="disque.aof") -> list[list[bytes]]:
    """Every record of a file, which must parse completely."""
    return file_records(path)


def loaded_state(path="disque.aof") -> dict[bytes, tuple]:
    """What a freshly started node would hold after loading ``path``."""
    node = make_node(seed=99)
    loader = AofLoader(node.state, path, enqueue_once=True, truncate_allowed=False, logger=LOG)
    try:
        while not loader.run(1 << 30):
            pass
    finally:
        loader.close()
    return {j.id: (j.body, j.state) for j in node.state.jobs.values()}


def live_state(node) -> dict[bytes, tuple]:
    return {j.id: (j.body, j.state) for j in node.state.jobs.values() if j.state in (ACTIVE, QUEUED)}


def test_records_wait_in_the_buffer_until_flush(node_writer):
    node, writer = node_writer
    writer.open_existing()
    assert writer.state == STATE_ON and node.state.journal is writer
    cmd = Cmd(node)
    job_id = cmd.addjob("q", "hello", "RETRY", 1)
    assert writer.pending and os.path.getsize("disque.aof") == len(FILE_MARKER)
    writer.flush()
    assert not writer.pending
    assert [r[0] for r in records()] == [b"LOADJOB"]
    assert cmd.ok("ACKJOB", job_id) == 1
    writer.flush()
    logged = records()
    assert [r[0] for r in logged] == [b"LOADJOB", b"DELJOB"]
    assert logged[1][1] == job_id and logged[1][-1] == b"acked"
    assert writer.current_size == os.path.getsize("disque.aof")


def test_records_of_a_turn_follow_its_commands_in_order(node_writer):
    """LOADJOB records are built at flush time, for the whole turn: a job
    consumed, acked or deleted before that still gets its LOADJOB first,
    recorded in a state a load accepts, so the file replays to the live state."""
    node, writer = node_writer
    writer.open_existing()
    cmd = Cmd(node)
    acked = cmd.addjob("q", "acked in the same turn")
    taken = cmd.addjob("q", "taken in the same turn")
    deleted = cmd.addjob("q", "deleted in the same turn")
    kept = cmd.addjob("q", "kept")
    delayed = cmd.addjob("later", "delayed", "DELAY", 100)
    assert [j[1] for j in cmd.ok("GETJOB", "COUNT", 2, "FROM", "q")] == [acked, taken]
    assert cmd.ok("ACKJOB", acked) == 1
    assert cmd.ok("DELJOB", deleted) == 1
    assert writer.pending and os.path.getsize("disque.aof") == len(FILE_MARKER)
    writer.flush()
    logged = [(r[0], r[1] if r[0] == b"DELJOB" else None) for r in records()]
    assert logged == [(b"LOADJOB", None)] * 5 + [(b"DELJOB", acked), (b"DELJOB", deleted)]
    assert loaded_state() == live_state(node)
    assert set(loaded_state()) == {taken, kept, delayed}


async def test_jobs_created_before_a_rewrite_starts_are_recorded_once(node_writer):
    node, writer = node_writer
    writer.open_existing()
    before = Cmd(node).addjob("q", "before the rewrite")
    assert writer.start_rewrite()
    assert not writer.diff  # its record went to the buffer: the snapshot has the job
    await wait_rewrite(writer)
    assert [r[0] for r in records()] == [b"LOADJOB"] and before in loaded_state()


def test_info_counts_records_not_built_yet(node_writer):
    node, writer = node_writer
    writer.open_existing()
    Cmd(node).addjob("q", "x" * 100)
    assert dict(writer.info_fields())["aof_buffer_length"] > 100


def test_nothing_is_logged_while_off(node_writer):
    node, writer = node_writer
    Cmd(node).addjob("q", "x")
    assert node.state.journal is NULL_JOURNAL and not writer.pending and not os.path.exists("disque.aof")


@pytest.mark.parametrize("policy, fsyncs", [("always", 3), ("everysec", 0), ("no", 0)])
def test_fsync_on_flush_only_with_always(node_writer, monkeypatch, policy, fsyncs):
    node, writer = node_writer
    node.state.config.appendfsync = policy
    calls = []
    monkeypatch.setattr(writer_module.os, "fdatasync", lambda fd: calls.append(fd))
    writer.open_existing()
    cmd = Cmd(node)
    for i in range(3):
        cmd.addjob("q", "x%d" % i)
        writer.flush()
    writer.flush()  # nothing pending: no extra fsync
    assert calls == [writer.fd] * fsyncs


@pytest.mark.parametrize("policy", ["always", "everysec"])
async def test_between_steps_the_fsync_of_always_runs_off_the_loop(node_writer, monkeypatch,
                                                                   policy):
    node, writer = node_writer
    node.state.config.appendfsync = policy
    threads = []
    release = threading.Event()

    def fdatasync(fd):
        threads.append(threading.current_thread())
        release.wait(10)
    monkeypatch.setattr(writer_module.os, "fdatasync", fdatasync)
    writer.open_existing()
    Cmd(node).addjob("q", "x")
    done = asyncio.Event()
    writer.flush_then(done.set)
    assert not writer.pending and [r[0] for r in records()] == [b"LOADJOB"]  # written at once
    if policy == "always":
        await asyncio.sleep(0.01)
        assert not done.is_set()  # on disk only once the fsync thread is through
        release.set()
        await asyncio.wait_for(done.wait(), 10)
        assert threads and threads[0] is not threading.main_thread()
    else:
        assert done.is_set() and not threads
    done.clear()
    writer.flush_then(done.set)  # nothing pending: at once
    assert done.is_set()


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.mark.parametrize("policy, expected", [("everysec", 3), ("no", 0), ("always", 0)])
def test_background_fsync_at_most_once_a_second(node_writer, monkeypatch, policy, expected):
    node, writer = node_writer
    node.state.config.appendfsync = policy
    clock = FakeMonotonic()
    monkeypatch.setattr(writer_module, "time", clock)
    calls = []
    monkeypatch.setattr(writer_module.os, "fdatasync", lambda fd: calls.append(fd))
    writer.last_fsync = clock.now
    writer.open_existing()
    cmd = Cmd(node)
    # 4 s of cron ticks at 10 Hz, writes in the first 2.5 s: fsyncs at 1, 2 and 3 s.
    for step in range(40):
        if step < 25:
            cmd.addjob("q", "x%d" % step)
            writer.flush()
        clock.now += 0.1
        writer.cron()
        if writer.fsync_future is not None:
            writer.fsync_future.result()  # the worker thread ran it
    background = [fd for fd in calls if fd == writer.fd]
    if policy == "always":
        assert len(background) == 25  # in flush(), none from the cron
    else:
        assert len(background) == expected
        assert writer.fsync_pending_bytes == 0 or policy == "no"


def test_the_cron_writes_records_no_reply_carried_out(node_writer):
    node, writer = node_writer
    writer.open_existing()
    Cmd(node).addjob("q", "under CLIENT REPLY OFF, nothing else flushes it")
    writer.cron()
    assert not writer.pending and [r[0] for r in records()] == [b"LOADJOB"]


class FailingWrites:
    """os.write for the AOF descriptor that accepts ``budget`` bytes, then ENOSPC."""

    def __init__(self, fd: int, budget: int) -> None:
        self.fd = fd
        self.budget = budget
        self.real = os.write

    def __call__(self, fd, data):
        if fd != self.fd:
            return self.real(fd, data)
        if self.budget <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        part = bytes(data)[:self.budget]
        self.budget -= len(part)
        return self.real(fd, part)


def test_write_error_refuses_writes_and_ping_until_it_recovers(node_writer, monkeypatch):
    node, writer = node_writer
    writer.open_existing()
    cmd = Cmd(node)
    first = cmd.addjob("q", "first", "RETRY", 1)
    writer.flush()
    size = os.path.getsize("disque.aof")
    failing = FailingWrites(writer.fd, 50)  # the next write stops in the middle of a record
    monkeypatch.setattr(writer_module.os, "write", failing)
    second = cmd.addjob("q", "second", "RETRY", 1)
    writer.flush()
    assert node.state.aof_error == "No space left on device"
    assert os.path.getsize("disque.aof") == size + 50
    # spec §3: write commands and PING are refused, read-only ones still work.
    assert cmd.raw("PING") == MISCONF
    assert cmd.raw("ADDJOB", "q", "x", 0) == MISCONF
    assert cmd.raw("ACKJOB", first) == MISCONF
    assert cmd.ok("QLEN", "q") == 2
    assert dict(writer.info_fields())["aof_last_write_status"] == "err"
    # Retries happen from the cron at most once a second.
    node.state.runtime.now += 500
    writer.cron()
    assert node.state.aof_error is not None
    failing.budget = 1 << 30
    node.state.runtime.now += 1000
    writer.cron()
    assert node.state.aof_error is None and not writer.pending
    assert cmd.raw("PING") == b"+PONG\r\n"
    assert dict(writer.info_fields())["aof_last_write_status"] == "ok"
    # The file holds each record exactly once: the part written before the
    # error is not written again.
    assert [r[0] for r in records()] == [b"LOADJOB", b"LOADJOB"]
    assert set(loaded_state()) == {first, second}
    assert writer.current_size == os.path.getsize("disque.aof")


def test_write_error_with_appendfsync_always_exits(node_writer, monkeypatch):
    node, writer = node_writer
    node.state.config.appendfsync = "always"
    writer.open_existing()

    class Exited(Exception):
        pass

    def fake_exit(code):
        raise Exited(code)
    monkeypatch.setattr(writer_module.os, "write", FailingWrites(writer.fd, 0))
    monkeypatch.setattr(writer_module.os, "_exit", fake_exit)
    Cmd(node).addjob("q", "x")
    with pytest.raises(Exited) as info:
        writer.flush()
    assert info.value.args == (1,)


async def wait_rewrite(writer, between=None, limit: int = 100_000) -> int:
    """Run the loop until the rewrite task ends; ``between`` runs at every turn."""
    turns = 0
    task = writer.rewrite_task
    while not task.done():
        if between is not None:
            between(turns)
        writer.flush()
        await asyncio.sleep(0)
        turns += 1
        assert turns < limit
    await task
    return turns


def populate(node, count: int) -> list[bytes]:
    cmd = Cmd(node)
    ids = []
    for i in range(count):
        ids.append(cmd.addjob("q%d" % (i % 3), "job %d" % i, "RETRY", i % 3))
    for _ in range(count // 4):
        cmd.ok("GETJOB", "NOHANG", "FROM", "q1")  # some active, some queued
    return ids


async def test_rewrite_while_the_node_keeps_changing(node_writer, monkeypatch):
    node, writer = node_writer
    monkeypatch.setattr(writer_module, "REWRITE_SLICE_JOBS", 5)
    monkeypatch.setattr(writer_module, "REWRITE_SLICE_SECONDS", 0)  # one small slice per turn
    writer.open_existing()
    ids = populate(node, 300)
    writer.flush()
    cmd = Cmd(node)
    added = []

    def mutate(turn: int) -> None:
        added.append(cmd.addjob("new", "during %d" % turn, "RETRY", turn % 2))
        victim = ids[(turn * 7) % len(ids)]
        if victim in node.state.jobs:
            cmd.ok("ACKJOB", victim)
        if turn % 3 == 0:
            cmd.ok("GETJOB", "NOHANG", "FROM", "q0", "new")
        if turn % 5 == 0 and added[turn // 2] in node.state.jobs:
            cmd.ok("DELJOB", added[turn // 2])
    assert writer.start_rewrite()
    assert not writer.start_rewrite()  # one at a time
    turns = await wait_rewrite(writer, mutate)
    assert turns >= 300 // 5  # it really was interleaved with the changes
    assert writer.diff is None and writer.rewrite_task is None and writer.last_bgrewrite_ok
    assert not [p for p in os.listdir(".") if p.startswith("temp-rewriteaof")]
    assert writer.base_size == writer.current_size == os.path.getsize("disque.aof")
    # The new file replaced the old one and is the one appended to.
    assert os.fstat(writer.fd).st_ino == os.stat("disque.aof").st_ino
    assert set(loaded_state()) == set(live_state(node))
    for _ in range(5):
        mutate(len(added))
    writer.flush()
    assert set(loaded_state()) == set(live_state(node))
    # A rewrite keeps the current state of each job (queued stays queued).
    assert writer.start_rewrite()
    await wait_rewrite(writer)
    assert loaded_state() == live_state(node)


async def test_the_replaced_file_is_closed_off_the_event_loop(node_writer, monkeypatch):
    node, writer = node_writer
    writer.open_existing()
    populate(node, 20)
    writer.flush()
    old_fd = writer.fd
    closed_in: list[str] = []
    real_close = os.close

    def close(fd: int) -> None:
        if fd == old_fd:
            closed_in.append(threading.current_thread().name)
        real_close(fd)
    monkeypatch.setattr(writer_module.os, "close", close)
    assert writer.start_rewrite()
    await wait_rewrite(writer)
    writer.fsync_pool.submit(lambda: None).result()  # the pool ran what came before
    assert writer.fd != old_fd
    assert len(closed_in) == 1 and closed_in[0].startswith("aof-fsync")
    with pytest.raises(OSError):
        os.fstat(old_fd)


async def test_rewrite_snapshot_is_complete_even_if_a_slice_starts_late(node_writer,
                                                                         monkeypatch):
    # A slice whose deadline has already passed when it starts (the process
    # was descheduled) must still make progress, not end the scan.
    node, writer = node_writer
    monkeypatch.setattr(writer_module, "REWRITE_SLICE_SECONDS", -1)
    writer.open_existing()
    populate(node, 50)
    assert writer.start_rewrite()
    await wait_rewrite(writer)
    assert loaded_state() == live_state(node) and len(node.state.jobs) == 50


async def test_bgrewriteaof_with_appendonly_off_only_writes_the_file(node_writer, monkeypatch):
    node, writer = node_writer
    monkeypatch.setattr(writer_module, "REWRITE_SLICE_JOBS", 2)
    monkeypatch.setattr(writer_module, "REWRITE_SLICE_SECONDS", 0)
    populate(node, 20)
    assert writer.start_rewrite()

    def add_after_the_first_slice(turn: int) -> None:
        if turn == 2:  # spec §2: with appendonly off a running rewrite captures no changes
            Cmd(node).addjob("q", "not captured")
    await wait_rewrite(writer, add_after_the_first_slice)
    assert writer.state == STATE_OFF and node.state.journal is NULL_JOURNAL and writer.fd == -1
    assert len(records()) == 20
    Cmd(node).addjob("q", "still not logged")
    assert len(records()) == 20


async def test_enable_writes_the_current_state_then_appends(node_writer, monkeypatch):
    node, writer = node_writer
    monkeypatch.setattr(writer_module, "REWRITE_SLICE_JOBS", 3)
    monkeypatch.setattr(writer_module, "REWRITE_SLICE_SECONDS", 0)
    populate(node, 40)
    cmd = Cmd(node)
    assert writer.enable()
    assert writer.state == STATE_WAIT_REWRITE and node.state.journal is writer
    during = cmd.addjob("q", "during wait-rewrite")
    writer.flush()  # before a reply: the record is built, and only the rewrite's diff gets it
    assert not writer.pending and writer.diff
    await wait_rewrite(writer)
    assert writer.state == STATE_ON and writer.fd >= 0
    assert during in loaded_state()
    after = cmd.addjob("q", "after")
    writer.flush()
    assert loaded_state() == live_state(node) and after in node.state.jobs


async def test_disable_closes_the_file(node_writer):
    node, writer = node_writer
    writer.open_existing()
    Cmd(node).addjob("q", "x")
    fd = writer.fd
    writer.disable()
    assert writer.state == STATE_OFF and node.state.journal is NULL_JOURNAL and writer.fd == -1
    with pytest.raises(OSError):
        os.fstat(fd)
    assert len(records()) == 1  # flushed before closing
    Cmd(node).addjob("q", "y")
    assert len(records()) == 1
    assert dict(writer.info_fields())["aof_state"] == "off"
    assert "aof_current_size" not in dict(writer.info_fields())


async def test_disable_stops_a_running_rewrite(node_writer, monkeypatch):
    node, writer = node_writer
    monkeypatch.setattr(writer_module, "REWRITE_SLICE_JOBS", 2)
    monkeypatch.setattr(writer_module, "REWRITE_SLICE_SECONDS", 0)
    writer.open_existing()
    populate(node, 30)
    writer.flush()
    before = records()
    assert writer.start_rewrite()
    task = writer.rewrite_task
    for _ in range(3):
        await asyncio.sleep(0)
    assert any(p.startswith("temp-rewriteaof-bg-") for p in os.listdir("."))
    writer.disable()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not any(p.startswith("temp-rewriteaof") for p in os.listdir("."))
    assert records() == before


async def test_automatic_rewrite_on_growth(node_writer):
    node, writer = node_writer
    config = node.state.config
    config.auto_aof_rewrite_percentage = 100
    writer.open_existing()
    cmd = Cmd(node)
    ids = [cmd.addjob("q", "x" * 100) for _ in range(10)]
    writer.flush()
    size = writer.current_size
    config.auto_aof_rewrite_min_size = 3 * size
    writer.base_size = size
    for job_id in ids:
        cmd.ok("ACKJOB", job_id)  # the live data shrinks, the file grows
    writer.flush()
    writer.cron()
    assert writer.rewrite_task is None  # below min-size
    for _ in range(20):
        cmd.addjob("q", "y" * 100)
    writer.flush()
    assert writer.current_size >= 2 * size
    config.auto_aof_rewrite_percentage = 0
    writer.cron()
    assert writer.rewrite_task is None  # percentage 0 disables it
    config.auto_aof_rewrite_percentage = 100
    writer.cron()
    assert writer.rewrite_task is not None
    await wait_rewrite(writer)
    assert writer.base_size == writer.current_size == os.path.getsize("disque.aof")
    assert len(records()) == 20


def test_rewrite_now_is_synchronous_and_keeps_states(node_writer):
    node, writer = node_writer
    writer.open_existing()
    populate(node, 30)
    writer.flush()
    writer.rewrite_now()
    assert len(records()) == 30
    assert loaded_state() == live_state(node)
    assert not [p for p in os.listdir(".") if p.startswith("temp-rewriteaof")]


def test_info_fields(node_writer):
    node, writer = node_writer
    fields = dict(writer.info_fields())
    assert fields == {"aof_enabled": 0, "aof_state": "off", "aof_rewrite_in_progress": 0,
                      "aof_rewrite_scheduled": 0, "aof_last_rewrite_time_sec": -1,
                      "aof_current_rewrite_time_sec": -1, "aof_last_bgrewrite_status": "ok",
                      "aof_last_write_status": "ok"}
    writer.open_existing()
    Cmd(node).addjob("q", "x")
    fields = dict(writer.info_fields())
    assert fields["aof_enabled"] == 1 and fields["aof_state"] == "on"
    assert fields["aof_buffer_length"] == len(writer.buffer) > 0
    for key in ("aof_current_size", "aof_base_size", "aof_pending_rewrite",
                "aof_rewrite_buffer_length", "aof_pending_bio_fsync", "aof_delayed_fsync"):
        assert key in fields


def test_files_the_writer_starts_begin_with_the_format_marker(node_writer):
    node, writer = node_writer
    writer.open_existing()
    populate(node, 5)
    writer.flush()
    assert open("disque.aof", "rb").read().startswith(FILE_MARKER)
    writer.rewrite_now()
    data = open("disque.aof", "rb").read()
    assert data.startswith(FILE_MARKER) and data.count(FILE_MARKER) == 1
    assert len(records()) == 5


def test_a_file_of_an_earlier_version_gets_the_marker_before_new_records(node_writer):
    """From the marker on, its records' checksums are required; before it,
    the earlier version's records load as they are."""
    node, writer = node_writer
    old = msgpack_loadjob_record(Job(b"D-a1b2c3d4-%024d-05a1" % 1, b"q", b"old", 1,
                                     node.state.now * 1_000_000, node.state.now // 1000 + 3600, 0, 30),
                                 node.state.now)
    with open("disque.aof", "wb") as f:
        f.write(old)
    writer.open_existing(marked=False)
    populate(node, 3)
    writer.flush()
    data = open("disque.aof", "rb").read()
    assert data.startswith(old + FILE_MARKER)
    assert len(records()) == 4 and len(loaded_state()) == 4
    writer.sync_and_close()
    writer.open_existing(marked=True)  # the load saw the marker: not written again
    populate(node, 1)
    writer.flush()
    assert open("disque.aof", "rb").read().count(FILE_MARKER) == 1
