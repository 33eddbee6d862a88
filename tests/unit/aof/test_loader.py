"""Tests for disque/aof/loader.py: what a node holds after loading an AOF
(spec: persistence.md §5 and §6), driven by a fake clock, no processes."""

from __future__ import annotations

import logging

import msgpack
import pytest

from disque.aof import loader as loader_module
from disque.aof.check import check
from disque.aof.loader import AofLoader, AofLoadError
from disque.jobs.journal import REASON_ACKED
from disque.jobs.records import FILE_MARKER, deljob_record
from disque.jobs.job import ACTIVE, BCAST_QUEUED, BCAST_WILLQUEUE, DELIVERED, QUEUED
from disque.queues.skiplist import SkipList
from tests.support.aof import first_record, loadjob_record, msgpack_loadjob_record, stored_fields
from tests.unit.helpers import PEER_ID, START_MS, Cmd, add_peer, advance, make_node

LOG = logging.getLogger("test.aof.loader")
JITTER_MS = 250
UNKNOWN_NODE = b"9" * 40


@pytest.fixture
def source():
    """The node whose jobs are written to the file."""
    return make_node(seed=7)


def write(path, *records: bytes) -> bytes:
    data = b"".join(records)
    path.write_bytes(data)
    return data


def load(node, path, enqueue_once: bool = False, truncate_allowed: bool = True,
         slice_records: int = 1 << 30) -> AofLoader:
    loader = AofLoader(node.state, str(path), enqueue_once=enqueue_once,
                       truncate_allowed=truncate_allowed, logger=LOG)
    try:
        node.state.read_clock()
        while not loader.run(slice_records):
            pass
    finally:
        loader.close()
    return loader


def record(source, job_id: bytes) -> bytes:
    return loadjob_record(source.state.jobs[job_id], source.state.now)


def test_a_file_an_earlier_version_began_loads_whole(source, tmp_path):
    """Its LOADJOB payloads are msgpack arrays; this version appends packed ones."""
    cmd = Cmd(source)
    old = [cmd.addjob("q", "old %d" % i, "RETRY", 3) for i in range(3)]
    new = cmd.addjob("q", "new", "RETRY", 3)
    write(tmp_path / "a.aof", *(msgpack_loadjob_record(source.state.jobs[j], source.state.now) for j in old),
          deljob_record(source.state.jobs[old[1]], source.state.now, REASON_ACKED), record(source, new))
    node = make_node()
    assert load(node, tmp_path / "a.aof").jobs_loaded == 4
    assert sorted(node.state.jobs) == sorted((old[0], old[2], new))
    assert [node.state.jobs[j].body for j in (old[0], old[2], new)] == [b"old 0", b"old 2", b"new"]


def test_jobs_come_back_active_with_qtime_rearmed(source, tmp_path):
    cmd = Cmd(source)
    plain = cmd.addjob("q", "plain", "RETRY", 3)
    delayed = cmd.addjob("q", "later", "DELAY", 5, "RETRY", 2)
    once = cmd.addjob("q", "at-most-once", "RETRY", 0)
    write(tmp_path / "a.aof", *(record(source, j) for j in (plain, delayed, once)))
    assert source.state.jobs[plain].state == QUEUED

    node = make_node(now=START_MS + 60_000)  # restarted a minute later
    loader = load(node, tmp_path / "a.aof")
    assert loader.jobs_loaded == 3 and loader.records == 3 and loader.truncated_at is None
    now = node.state.now
    for job_id, wait_s in ((plain, 3), (delayed, 5 + 2)):  # the delay counts again (§5 step 4)
        job = node.state.jobs[job_id]
        assert job.state == ACTIVE
        assert abs(job.qtime - (now + wait_s * 1000)) <= JITTER_MS
        assert job.flags & BCAST_WILLQUEUE
    assert node.state.jobs[once].state == ACTIVE and node.state.jobs[once].qtime == 0
    assert node.state.queues.get(b"q") is None or len(node.state.queues[b"q"].jobs) == 0

    advance(node, 3000 + JITTER_MS, step=50)
    assert node.state.jobs[plain].state == QUEUED
    assert node.state.jobs[delayed].state == ACTIVE
    advance(node, 4000, step=50)
    assert node.state.jobs[delayed].state == QUEUED
    advance(node, 600_000, step=10_000)
    assert node.state.jobs[once].state == ACTIVE  # at-most-once: never queued again


def test_every_stored_field_survives(source, tmp_path):
    cmd = Cmd(source)
    add_peer(source)
    job_id = cmd.addjob("fq", b"\x00body\r\n", "RETRY", 9, "TTL", 3600, "ASYNC", "REPLICATE", 2)
    job = source.state.jobs[job_id]
    job.nacks, job.adeliv = 4, 2
    job.delivered = (source.state.id, PEER_ID, UNKNOWN_NODE)
    write(tmp_path / "a.aof", record(source, job_id))

    node = make_node(now=START_MS + 1000)
    add_peer(node)
    load(node, tmp_path / "a.aof")
    copy = node.state.jobs[job_id]
    assert (copy.queue, copy.body, copy.repl, copy.retry, copy.delay) == (
        b"fq", b"\x00body\r\n", 2, 9, 0)
    assert (copy.ctime, copy.etime) == (job.ctime, job.etime)
    assert (copy.nacks, copy.adeliv) == (4, 2)
    # spec §5: IDs of nodes no longer known are dropped.
    assert set(copy.delivered) == {node.state.id, PEER_ID}
    assert Cmd(node).show(job_id)["ttl"] == 3600 - 1


def test_expired_jobs_are_dropped(source, tmp_path):
    cmd = Cmd(source)
    short = cmd.addjob("q", "short", "TTL", 10, "RETRY", 1)
    long = cmd.addjob("q", "long", "TTL", 100, "RETRY", 1)
    write(tmp_path / "a.aof", record(source, short), record(source, long))
    node = make_node(now=START_MS + 10_000)  # etime == now: expired
    loader = load(node, tmp_path / "a.aof")
    assert set(node.state.jobs) == {long} and loader.jobs_loaded == 1


def test_duplicate_ids_keep_the_first_record(source, tmp_path):
    cmd = Cmd(source)
    job_id = cmd.addjob("q", "first", "RETRY", 1)
    first = record(source, job_id)
    source.state.jobs[job_id].body = b"second"
    write(tmp_path / "a.aof", first, record(source, job_id))
    node = make_node()
    loader = load(node, tmp_path / "a.aof")
    assert node.state.jobs[job_id].body == b"first"
    assert loader.records == 2 and loader.jobs_loaded == 1 and len(node.state.jobs) == 1


def test_deljob_records_remove_jobs(source, tmp_path):
    cmd = Cmd(source)
    acked, bare, kept = (cmd.addjob("q", name, "RETRY", 1) for name in ("a", "b", "c"))
    bare_deljob = b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + bare + b"\r\n"
    write(tmp_path / "a.aof", record(source, acked), record(source, bare), record(source, kept),
          deljob_record(source.state.jobs[acked], source.state.now, REASON_ACKED), bare_deljob,
          b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + b"D-00000000-" + b"x" * 24 + b"-05a1\r\n")
    node = make_node()
    loader = load(node, tmp_path / "a.aof")
    assert set(node.state.jobs) == {kept} and loader.records == 6


def test_a_job_deleted_then_logged_again_is_back(source, tmp_path):
    # A rewrite's snapshot may follow a DELJOB in the diff order; a later
    # LOADJOB of the same id (never produced by the server) is loaded again.
    job_id = Cmd(source).addjob("q", "x", "RETRY", 1)
    job = source.state.jobs[job_id]
    write(tmp_path / "a.aof", record(source, job_id),
          deljob_record(job, source.state.now, REASON_ACKED), record(source, job_id))
    node = make_node()
    load(node, tmp_path / "a.aof")
    assert set(node.state.jobs) == {job_id}


def test_enqueue_once_restores_queued_jobs_including_retry_0(source, tmp_path):
    cmd = Cmd(source)
    queued = cmd.addjob("q", "queued", "RETRY", 5)
    once = cmd.addjob("q0", "queued at-most-once", "RETRY", 0)
    taken = cmd.addjob("qa", "delivered", "RETRY", 5)
    nacked = cmd.addjob("qn", "nacked", "RETRY", 5)
    delayed = cmd.addjob("qd", "delayed", "DELAY", 30, "RETRY", 5)
    assert cmd.ok("GETJOB", "NOHANG", "FROM", "qa")[0][1] == taken
    assert cmd.ok("GETJOB", "NOHANG", "FROM", "qn")[0][1] == nacked
    assert cmd.ok("NACK", nacked) == 1
    states = {j: source.state.jobs[j].state for j in source.state.jobs}
    counters = {j: (source.state.jobs[j].nacks, source.state.jobs[j].adeliv) for j in source.state.jobs}
    assert states == {queued: QUEUED, once: QUEUED, taken: ACTIVE, nacked: QUEUED,
                      delayed: ACTIVE}
    write(tmp_path / "a.aof", *(record(source, j) for j in source.state.jobs))

    node = make_node(now=START_MS + 5_000)
    load(node, tmp_path / "a.aof", enqueue_once=True)
    assert {j: node.state.jobs[j].state for j in node.state.jobs} == states
    node_cmd = Cmd(node)
    assert node_cmd.ok("GETJOB", "NOHANG", "FROM", "q0") == [[b"q0", once, b"queued at-most-once"]]
    assert node.state.jobs[once].flags & DELIVERED
    assert node_cmd.ok("QLEN", "q") == 1 and node_cmd.ok("QLEN", "qn") == 1
    for job_id, job in node.state.jobs.items():
        nacks, adeliv = counters[job_id]
        assert job.nacks == nacks, job_id
        # spec §6: re-queued through the normal primitive, which counts an
        # additional delivery for a job that had been queued before.
        bumped = states[job_id] == QUEUED and source.state.jobs[job_id].flags & BCAST_QUEUED
        assert job.adeliv == adeliv + (1 if bumped else 0), job_id
    # A queued retry>0 job keeps its retry timer: it is re-queued after a delivery.
    job = node.state.jobs[queued]
    assert job.qtime and abs(job.qtime - (node.state.now + 5000)) <= JITTER_MS


def test_without_enqueue_once_queued_jobs_are_only_active(source, tmp_path):
    cmd = Cmd(source)
    ids = [cmd.addjob("q", "x", "RETRY", r) for r in (0, 1)]
    write(tmp_path / "a.aof", *(record(source, j) for j in ids))
    node = make_node()
    load(node, tmp_path / "a.aof")
    assert all(node.state.jobs[j].state == ACTIVE for j in ids)
    assert Cmd(node).ok("QLEN", "q") == 0


def test_unknown_command_is_fatal_with_its_offset(source, tmp_path):
    job_id = Cmd(source).addjob("q", "x", "RETRY", 1)
    good = record(source, job_id)
    write(tmp_path / "a.aof", good, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", good)
    with pytest.raises(AofLoadError, match="^Bad file format reading the append only file at "
                                           r"offset %d \(record 2\): unknown command 'SET'$"
                                           % len(good)):
        load(make_node(), tmp_path / "a.aof")
    # Commands need their arguments too.
    write(tmp_path / "b.aof", good, b"*1\r\n$7\r\nLOADJOB\r\n")
    with pytest.raises(AofLoadError, match=r"at offset %d \(record 2\): wrong number of "
                                           "arguments for 'LOADJOB'$" % len(good)):
        load(make_node(), tmp_path / "b.aof")


@pytest.mark.parametrize("payload", [
    b"\xc1",  # never used by msgpack
    msgpack.packb([1, 2, 3]),
    msgpack.packb("just a string"),
])
def test_corrupt_job_payload_is_fatal_with_its_offset(source, tmp_path, payload):
    job_id = Cmd(source).addjob("q", "x", "RETRY", 1)
    good = record(source, job_id)
    bad = b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n%s\r\n$1\r\n0\r\n" % (len(payload), payload)
    write(tmp_path / "a.aof", good, good, bad, good)
    with pytest.raises(AofLoadError, match="Bad file format reading the append only file at "
                                           r"offset %d \(record 3\): corrupted job: "
                                           % (2 * len(good))):
        load(make_node(), tmp_path / "a.aof")


@pytest.mark.parametrize("legacy", [False, True])
def test_bad_stored_state_is_corruption(source, tmp_path, legacy):
    job_id = Cmd(source).addjob("q", "x", "RETRY", 1)
    if legacy:
        fields = stored_fields(source.state.jobs[job_id])
        fields[12] = 3  # acked is never stored
        payload = msgpack.packb(fields, use_bin_type=True)
    else:
        good = record(source, job_id)
        payload = first_record(good)[0][1]
        payload = payload[:1] + b"\x03" + payload[2:]  # the state byte
    write(tmp_path / "a.aof", b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n%s\r\n$1\r\n0\r\n"
          % (len(payload), payload))
    with pytest.raises(AofLoadError, match=r"at offset 0 \(record 1\): corrupted job: "
                                           "bad stored state"):
        load(make_node(), tmp_path / "a.aof")


def test_garbage_in_the_middle_is_fatal_with_its_offset(source, tmp_path):
    cmd = Cmd(source)
    records = [record(source, cmd.addjob("q", "x%d" % i, "RETRY", 1)) for i in range(3)]
    data = write(tmp_path / "a.aof", records[0], records[1][:4] + b"\xff" + records[1][5:],
                 records[2])
    offset = len(records[0]) + 4  # where the first bulk's '$' should be
    assert data[offset:offset + 1] == b"\xff"
    with pytest.raises(AofLoadError, match="Bad file format reading the append only file at "
                                           r"offset %d \(record 2, the damage found at offset "
                                           r"%d\): expected '\$'" % (len(records[0]), offset)):
        load(make_node(), tmp_path / "a.aof")


def test_truncated_tail_is_cut_when_allowed(source, tmp_path, caplog):
    cmd = Cmd(source)
    records = [record(source, cmd.addjob("q", "x%d" % i, "RETRY", 1)) for i in range(3)]
    whole = b"".join(records[:2])
    path = tmp_path / "a.aof"
    write(path, whole, records[2][:-5])
    node = make_node()
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        loader = load(node, path)
    assert loader.truncated_at == len(whole)
    assert path.read_bytes() == whole
    assert len(node.state.jobs) == 2
    assert "truncating it at offset %d" % len(whole) in caplog.text


def test_truncated_tail_is_fatal_when_not_allowed(source, tmp_path):
    cmd = Cmd(source)
    records = [record(source, cmd.addjob("q", "x%d" % i, "RETRY", 1)) for i in range(2)]
    path = tmp_path / "a.aof"
    data = write(path, records[0], records[1][:len(records[1]) // 2])
    with pytest.raises(AofLoadError, match="Unexpected end of file reading the append only file "
                                           "at offset %d" % len(records[0])):
        load(make_node(), path, truncate_allowed=False)
    assert path.read_bytes() == data  # nothing touched


def test_loading_in_slices_and_across_read_chunks(source, tmp_path, monkeypatch):
    cmd = Cmd(source)
    ids = [cmd.addjob("q", b"body %d\r\n" % i * (i % 7), "RETRY", 1) for i in range(50)]
    data = b"".join(record(source, j) for j in ids) + deljob_record(
        source.state.jobs[ids[10]], source.state.now, REASON_ACKED)
    write(tmp_path / "a.aof", data)
    monkeypatch.setattr(loader_module, "READ_CHUNK", 37)  # records span many reads
    node = make_node()
    loader = AofLoader(node.state, str(tmp_path / "a.aof"), enqueue_once=False, truncate_allowed=False,
                       logger=LOG)
    slices = 0
    try:
        while not loader.run(7):
            slices += 1
            assert 0 < loader.loaded_bytes < len(data)
    finally:
        loader.close()
    assert slices == 51 // 7
    assert loader.loaded_bytes == len(data) == loader.total_bytes
    assert set(node.state.jobs) == set(ids) - {ids[10]}
    assert all(node.state.jobs[j].body == source.state.jobs[j].body for j in node.state.jobs)
    assert len(node.state.jobs[ids[13]].body) == 6 * len(b"body 13\r\n")


def test_empty_file_loads_nothing(tmp_path):
    write(tmp_path / "a.aof")
    node = make_node()
    loader = load(node, tmp_path / "a.aof", truncate_allowed=False)
    assert loader.records == 0 and not node.state.jobs


# The reader frames a record that repeats the last one's shape by the
# remembered offsets, and any other afresh: records of another spelling
# than the node writes must leave the node in the same state.

def respelled(record: bytes) -> bytes:
    """The same record spelled otherwise: a LOADJOB with a 1-digit record
    time (and no checksum, as earlier versions wrote it), a DELJOB with its
    ID only."""
    if record.startswith(b"*8\r\n$6\r\nDELJOB\r\n"):
        return b"*2\r\n$6\r\nDELJOB\r\n$40\r\n%b\r\n" % record[21:61]
    assert record.startswith(b"*4\r\n") and record[-36:-29] == b"\r\n$13\r\n"
    return b"*3" + record[2:-36] + b"\r\n$1\r\n0\r\n"


def varied_jobs(source) -> list[bytes]:
    """Jobs that exercise every decision of a load: retry 0 and not, delays,
    local flags, counters, holders known and unknown, several queues."""
    cmd = Cmd(source)
    ids = []
    for i in range(40):
        options = ["RETRY", i % 4, "TTL", 3600 + i]
        if i % 5 == 0:
            options += ["DELAY", 3]
        ids.append(cmd.addjob("q%d" % (i % 3), b"body %d\r\n" % i * (i % 4), *options))
    for i, job_id in enumerate(ids):
        job = source.state.jobs[job_id]
        job.nacks, job.adeliv, job.repl = i % 3, i % 2, 1 + i % 2
        if i % 6 == 0:
            job.adeliv += 0x10000  # stored as 64 bits, held as 16
        if i % 8 == 5:
            job.flags |= 0x18  # not local flags: dropped
        if i % 7 == 1:
            job.delivered = (source.state.id, PEER_ID)
        elif i % 7 == 2:
            job.delivered = (UNKNOWN_NODE,)
        elif i % 7 == 3:
            job.delivered = (PEER_ID, UNKNOWN_NODE, PEER_ID)
        elif i % 7 == 4:
            job.delivered = ()
    assert cmd.ok("GETJOB", "NOHANG", "COUNT", 5, "FROM", "q1")  # some active, DELIVERED
    return ids


def node_state(node) -> dict:
    """Everything a load sets, job by job, queue by queue."""
    jobs = {job_id: (job.queue, job.body, job.state, job.repl, job.ctime, job.etime, job.delay,
                     job.retry, job.nacks, job.adeliv, job.delivered, job.qtime, job.flags,
                     job.awakeme)
            for job_id, job in node.state.jobs.items()}
    queues = {name: [job.id for job in queue.jobs.iter_from_head()]
              for name, queue in node.state.queues.items()}
    return {"jobs": jobs, "queues": queues, "memory": node.state.memory.used,
            "timers": len(node.state.timers)}


@pytest.mark.parametrize("enqueue_once", [False, True])
def test_written_records_load_as_respelled_ones_do(source, tmp_path, enqueue_once):
    ids = varied_jobs(source)
    records = [record(source, j) for j in ids]
    expired = Cmd(source).addjob("q0", "expired", "TTL", 1)
    records.insert(7, record(source, expired))
    records.insert(20, records[3])  # a duplicate: the first record wins
    deleted = [ids[4], ids[12]]
    for at, job_id in zip((30, 9), deleted):
        records.insert(at, deljob_record(source.state.jobs[job_id], source.state.now, REASON_ACKED))
    written = write(tmp_path / "written.aof", *records)
    other = write(tmp_path / "other.aof", *(respelled(r) for r in records))
    assert len(other) < len(written)
    states = []
    for path in (tmp_path / "written.aof", tmp_path / "other.aof"):
        node = make_node(seed=11, now=START_MS + 2_000)
        add_peer(node)
        loader = load(node, path, enqueue_once=enqueue_once)
        assert (loader.records, loader.jobs_loaded) == (len(records), len(ids))
        states.append(node_state(node))
    assert states[0] == states[1]
    assert expired not in states[0]["jobs"] and deleted[0] not in states[0]["jobs"]
    assert deleted[1] in states[0]["jobs"]  # its LOADJOB came after the DELJOB
    if enqueue_once:
        assert sum(map(len, states[0]["queues"].values())) > 20


def test_loaded_jobs_have_the_timer_the_lifecycle_would_set(source, tmp_path):
    ids = varied_jobs(source)
    write(tmp_path / "a.aof", *(record(source, j) for j in ids))
    node = make_node(now=START_MS + 1_000)
    load(node, tmp_path / "a.aof")
    armed = {job_id: job.awakeme for job_id, job in node.state.jobs.items()}
    assert all(armed.values())
    for job in node.state.jobs.values():
        node.state.lifecycle.schedule_job(job)
    assert {job_id: job.awakeme for job_id, job in node.state.jobs.items()} == armed


def test_jobs_of_a_queue_share_its_name(source, tmp_path):
    cmd = Cmd(source)
    ids = [cmd.addjob("a-queue-name", "x%d" % i, "RETRY", 1) for i in range(3)]
    write(tmp_path / "a.aof", *(record(source, j) for j in ids))
    node = make_node()
    load(node, tmp_path / "a.aof")
    first, *others = (node.state.jobs[j].queue for j in ids)
    assert first == b"a-queue-name" and all(name is first for name in others)


def test_enqueue_once_queues_in_ctime_order_whatever_the_file_order(source, tmp_path,
                                                                     monkeypatch):
    """Each job goes after its queue's tail: no skiplist search, even for a
    file that lists the jobs newest first."""
    cmd = Cmd(source)
    ids = [cmd.addjob("q%d" % (i % 2), "x%d" % i, "RETRY", 5) for i in range(30)]
    deleted = ids[9]
    records = [record(source, j) for j in reversed(ids)]
    records.append(deljob_record(source.state.jobs[deleted], source.state.now, REASON_ACKED))
    write(tmp_path / "a.aof", *records)
    node = make_node(now=START_MS + 1_000)

    def no_search(*args):
        raise AssertionError("a restored job was inserted before its queue's tail")

    monkeypatch.setattr(SkipList, "_predecessors", no_search)
    load(node, tmp_path / "a.aof", enqueue_once=True, slice_records=4)
    monkeypatch.undo()
    for name, parity in ((b"q0", 0), (b"q1", 1)):
        expected = [j for i, j in enumerate(ids) if i % 2 == parity and j != deleted]
        assert [job.id for job in node.state.queues[name].jobs.iter_from_head()] == expected
        assert [job.id for job in node.state.queues[name].jobs.iter_from_tail()] == expected[::-1]
    assert deleted not in node.state.jobs


@pytest.mark.parametrize("damage", ["state", "length", "id", "repl"])
def test_a_damaged_packed_payload_is_fatal_with_its_offset(source, tmp_path, damage):
    job_id = Cmd(source).addjob("q", "x", "RETRY", 1)
    good = record(source, job_id)
    payload = first_record(good)[0][1]
    if damage == "state":
        payload = payload[:1] + b"\x03" + payload[2:]
    elif damage == "length":
        payload = payload + b"\x00"
    elif damage == "id":
        payload = payload[:63] + b"X" + payload[64:]
    else:
        payload = payload[:3] + b"\x00\x00" + payload[5:]
    bad = b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n%s\r\n$13\r\n1700000000000\r\n" % (
        len(payload), payload)
    write(tmp_path / "a.aof", good, bad, good)
    with pytest.raises(AofLoadError, match=r"at offset %d \(record 2\): corrupted job: "
                       % len(good)):
        load(make_node(), tmp_path / "a.aof")


def test_a_deljob_is_framed_by_its_lengths(source, tmp_path):
    """A queue name holding what looks like the next fields is skipped by length."""
    cmd = Cmd(source)
    tricky, plain = cmd.addjob("q\r\n$5\r\nacked\r\n", "x"), cmd.addjob("q", "y")
    write(tmp_path / "a.aof", record(source, tricky), record(source, plain),
          deljob_record(source.state.jobs[tricky], source.state.now, REASON_ACKED),
          deljob_record(source.state.jobs[plain], source.state.now, REASON_ACKED))
    node = make_node()
    assert load(node, tmp_path / "a.aof").records == 4
    assert not node.state.jobs


@pytest.mark.parametrize("field", [b"$5\r\nacked", b"$40\r\nD-"])
def test_a_damaged_deljob_is_fatal_where_disque_check_aof_names_it(source, tmp_path, field):
    job_id = Cmd(source).addjob("q", "x", "RETRY", 1)
    good = record(source, job_id)
    deljob = deljob_record(source.state.jobs[job_id], source.state.now, REASON_ACKED)
    data = write(tmp_path / "a.aof", good,
                 deljob.replace(field, field.replace(b"$", b"$1", 1)), good)
    verdict = check(data)
    assert verdict.valid == len(good)
    where = verdict.problem.removeprefix("bad format ")
    assert where.startswith("at offset %d (record 2, the damage found at offset " % len(good))
    with pytest.raises(AofLoadError) as refused:
        load(make_node(), tmp_path / "a.aof")
    assert str(refused.value) == "Bad file format reading the append only file " + where


# ------------------------------------------------------------- checksums

def flip_two(data: bytes, at: int) -> bytes:
    """Two bytes flipped at ``at``: framing and payload still parse."""
    bad = bytearray(data)
    bad[at] ^= 0x20
    bad[at + 1] ^= 0x20
    return bytes(bad)


@pytest.mark.parametrize("kind", ["loadjob", "deljob"])
def test_two_flipped_bytes_in_the_middle_are_caught_with_their_offset(source, tmp_path, kind):
    """Before checksums such a file loaded, with the job's body (or the
    DELJOB's reason) silently changed."""
    cmd = Cmd(source)
    ids = [cmd.addjob("q", "body %d" % i, "RETRY", 3) for i in range(10)]
    records = [record(source, j) for j in ids]
    records.insert(6, deljob_record(source.state.jobs[ids[2]], source.state.now, REASON_ACKED))
    data = FILE_MARKER + b"".join(records)
    at = len(FILE_MARKER) + sum(map(len, records[:5 if kind == "loadjob" else 6]))
    target = data.index(b"body 5" if kind == "loadjob" else b"acked", at)
    write(tmp_path / "a.aof", flip_two(data, target))
    number = 1 + len(records[:5 if kind == "loadjob" else 6]) + 1
    with pytest.raises(AofLoadError, match="Bad file format reading the append only file at "
                                           r"offset %d \(record %d\): checksum mismatch$"
                                           % (at, number)):
        load(make_node(), tmp_path / "a.aof", slice_records=3)


def test_a_record_without_checksum_after_the_marker_is_fatal(source, tmp_path):
    ids = [Cmd(source).addjob("q", "x", "RETRY", 1) for _ in range(3)]
    legacy = msgpack_loadjob_record(source.state.jobs[ids[1]], source.state.now)
    first = record(source, ids[0])
    write(tmp_path / "a.aof", legacy, FILE_MARKER, first, legacy, record(source, ids[2]))
    with pytest.raises(AofLoadError, match=r"offset %d \(record 4\): record without a checksum"
                       % (len(legacy) + len(FILE_MARKER) + len(first))):
        load(make_node(), tmp_path / "a.aof")


def test_a_marked_file_loads_and_says_so(source, tmp_path):
    ids = [Cmd(source).addjob("q", "x", "RETRY", 1) for _ in range(3)]
    write(tmp_path / "a.aof", msgpack_loadjob_record(source.state.jobs[ids[0]], source.state.now),
          FILE_MARKER, *(record(source, j) for j in ids[1:]))
    node = make_node()
    loader = load(node, tmp_path / "a.aof")
    assert loader.checksums_required and set(node.state.jobs) == set(ids)


def test_every_flipped_byte_of_a_record_stops_the_load(source, tmp_path):
    """Whichever byte of a checksummed record
    changed, the load stops (at that record, or at the end of the file
    when its framing now runs past it)."""
    cmd = Cmd(source)
    ids = [cmd.addjob("q", "body %d" % i, "RETRY", 3) for i in range(3)]
    records = [record(source, j) for j in ids]
    records.insert(2, deljob_record(source.state.jobs[ids[0]], source.state.now, REASON_ACKED))
    head = FILE_MARKER + records[0]
    for middle in (records[1], records[2]):
        tail = b"".join(records[records.index(middle) + 1:])
        for at in range(len(middle)):
            bad = bytearray(middle)
            bad[at] ^= 0x01
            write(tmp_path / "a.aof", head, bytes(bad), tail)
            with pytest.raises(AofLoadError):
                load(make_node(), tmp_path / "a.aof", truncate_allowed=False)
