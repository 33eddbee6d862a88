"""The append-only file with real disque-server processes (spec: persistence.md,
commands.md SHUTDOWN / BGREWRITEAOF / DEBUG LOADAOF / INFO Persistence,
config.md appendonly and friends).

A node with ``appendonly yes`` that is killed with SIGKILL at any moment must
come back with every job it acknowledged to a client; rewrites, controlled
restarts and damaged files are exercised against the same promise. Every
wait is a bounded poll; every process is stopped by the fixtures.
"""

from __future__ import annotations

import os
import resource
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import hiredis
import pytest
import redis

from disque.jobs.records import FILE_MARKER
from disque.jobs.job import QUEUED, Job
from tests.support.aof import decode_payload, file_records, first_record, loadjob_record, read_all
from tests.support.cluster import encode_command, parse_show, raw_command
from tests.support.process import REPO, DisqueProcess, wait_until

AOF = "disque.aof"
JITTER_MS = 250
MISCONF_EFBIG = b"-MISCONF Errors writing to the AOF file: File too large\r\n"
CHECK_AOF = [sys.executable, "-m", "disque.aof.check"]


# ------------------------------------------------------------------ helpers

def pipeline(port: int, commands: list[tuple], timeout: float = 60.0) -> list:
    """Send ``commands`` in one write; their decoded replies (errors as values)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(b"".join(encode_command(*c) for c in commands))
        reader = hiredis.Reader()
        replies: list = []
        while len(replies) < len(commands):
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed after %d replies" % len(replies))
            reader.feed(chunk)
            while (reply := reader.gets()) is not False:
                replies.append(reply)
    return replies


def add_jobs(proc: DisqueProcess, count: int, queue: str = "bulk", *options,
             batch: int = 5000) -> list[bytes]:
    """Pipelined ADDJOBs; their IDs."""
    ids: list[bytes] = []
    for start in range(0, count, batch):
        replies = pipeline(proc.port, [("ADDJOB", queue, "bulk job %d" % i, 0, *options)
                                       for i in range(start, min(count, start + batch))])
        assert all(isinstance(r, bytes) for r in replies), replies[:3]
        ids.extend(replies)
    return ids


def info(proc: DisqueProcess, section: str = "persistence") -> dict[str, str]:
    """INFO as text fields."""
    text = raw_command(proc.port, "INFO", section)
    fields = {}
    for line in text.split(b"\r\n")[1:]:
        key, sep, value = line.decode().partition(":")
        if sep:
            fields[key] = value
    return fields


def show(proc: DisqueProcess, job_id) -> dict | None:
    """SHOW as a dict (None for an unknown job)."""
    return parse_show(proc.call("SHOW", job_id))


def job_ids(proc: DisqueProcess, *states: str) -> set[bytes]:
    """IDs of the jobs the node holds (JSCAN, optionally only in ``states``)."""
    ids: set[bytes] = set()
    cursor = b"0"
    filters = [arg for state in states for arg in ("STATE", state)]
    with redis.Redis(host="127.0.0.1", port=proc.port, socket_timeout=60, protocol=2) as client:
        while True:
            cursor, batch = client.execute_command("JSCAN", cursor, "COUNT", 10_000, *filters)
            ids.update(batch)
            if cursor == b"0":
                return ids


def aof_records(path: Path) -> list[list[bytes]]:
    """Every record of an AOF, which must parse to its end."""
    return file_records(path)


def record_offsets(path: Path) -> list[int]:
    """Start offset of every record, plus the file size."""
    data = path.read_bytes()
    return [offset for offset, _, _ in read_all(data)] + [len(data)]


def loadjob_time(records: list[list[bytes]], job_id: bytes) -> bytes:
    """Record time of the LOADJOB of ``job_id``."""
    return next(argv[2] for argv in records
                if argv[0] == b"LOADJOB" and decode_payload(argv[1])[0].id == job_id)


def crash_and_restart(proc: DisqueProcess) -> None:
    """SIGKILL, then start again in the same directory."""
    proc.kill()
    proc.start()


def wait_rewrite_done(proc: DisqueProcess, timeout: float = 60.0,
                      seen: list | None = None) -> dict[str, str]:
    """Poll INFO until no rewrite runs; ``seen`` collects the INFOs taken meanwhile."""
    def done():
        fields = info(proc)
        if seen is not None:
            seen.append(fields)
        return fields if fields["aof_rewrite_in_progress"] == "0" else None
    fields = wait_until(done, timeout, interval=0.01, message="the AOF rewrite to finish")
    assert fields["aof_last_bgrewrite_status"] == "ok"
    return fields


def start_failing(proc: DisqueProcess, timeout: float = 20.0) -> str:
    """Start a node that must refuse to start; its exit status is 1. Returns stderr."""
    proc.start(wait=False)
    assert proc.wait_exit(timeout) == 1
    return (proc.dir / "stderr.log").read_text()


def check_aof(*args) -> subprocess.CompletedProcess:
    """``disque-check-aof`` as a subprocess."""
    return subprocess.run(CHECK_AOF + [str(a) for a in args], capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)


class Load(threading.Thread):
    """A client that adds jobs and acknowledges half of them until stopped;
    it remembers exactly which jobs the server confirmed."""

    def __init__(self, port: int, queue: str) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.queue = queue
        self.live: set[bytes] = set()
        self.rounds = 0
        self.error: BaseException | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=30,
                             protocol=2) as client:
                while not self.halt.is_set():
                    pipe = client.pipeline(transaction=False)
                    for i in range(10):
                        pipe.execute_command("ADDJOB", self.queue, "r%d-%d" % (self.rounds, i),
                                             0, "RETRY", 5 + i % 2)
                    ids = pipe.execute()
                    self.live.update(ids)
                    gone = ids[::2]
                    assert client.execute_command("ACKJOB", *gone[:3]) == 3
                    assert client.execute_command("DELJOB", *gone[3:]) == 2
                    self.live.difference_update(gone)
                    self.rounds += 1
        except BaseException as exc:  # reported by the test
            self.error = exc

    def stop(self) -> set[bytes]:
        self.halt.set()
        self.join(30)
        assert not self.is_alive()
        if self.error is not None:
            raise self.error
        return self.live


# -------------------------------------------------------- crash and restart

@pytest.mark.parametrize("fsync", ["always", "everysec", "no"])
def test_sigkill_brings_back_every_logged_job(server_factory, fsync):
    proc = server_factory("appendonly yes\nappendfsync %s\nappendfilename jobs.aof\n" % fsync)
    r = proc.client(protocol=2)
    expiring = r.execute_command("ADDJOB", "gone", "expires", 0, "TTL", 1, "RETRY", 1)
    jobs = {
        "plain": r.execute_command("ADDJOB", "q1", "plain", 0, "RETRY", 1),
        "binary": r.execute_command("ADDJOB", "q1", b"\x00*3\r\n$7\r\n\xff", 0, "RETRY", 7,
                                    "TTL", 3600),
        "delayed": r.execute_command("ADDJOB", "q2", "delayed", 0, "DELAY", 4, "RETRY", 2),
        "once": r.execute_command("ADDJOB", "q3", "at-most-once", 0, "RETRY", 0),
        "taken": r.execute_command("ADDJOB", "q4", "taken", 0, "RETRY", 30),
        "nacked": r.execute_command("ADDJOB", "q5", "nacked", 0, "RETRY", 30),
    }
    gone = {
        "acked": r.execute_command("ADDJOB", "q6", "acked", 0),
        "fastacked": r.execute_command("ADDJOB", "q6", "fastacked", 0),
        "deleted": r.execute_command("ADDJOB", "q6", "deleted", 0),
        "expired": expiring,
    }
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q4")[0][1] == jobs["taken"]
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q5")[0][1] == jobs["nacked"]
    assert r.execute_command("NACK", jobs["nacked"]) == 1
    assert r.execute_command("ACKJOB", gone["acked"]) == 1
    assert r.execute_command("FASTACK", gone["fastacked"]) == 1
    assert r.execute_command("DELJOB", gone["deleted"]) == 1
    wait_until(lambda: r.execute_command("SHOW", expiring) is None, 10, interval=0.05,
               message="the TTL 1 job to expire")
    before = {name: show(proc, job_id) for name, job_id in jobs.items()}
    assert before["nacked"]["nacks"] == 1
    fields = info(proc)
    for key in ("loading", "aof_enabled", "aof_state", "aof_rewrite_in_progress",
                "aof_rewrite_scheduled", "aof_last_rewrite_time_sec",
                "aof_current_rewrite_time_sec", "aof_last_bgrewrite_status",
                "aof_last_write_status", "aof_current_size", "aof_base_size",
                "aof_pending_rewrite", "aof_buffer_length", "aof_rewrite_buffer_length",
                "aof_pending_bio_fsync", "aof_delayed_fsync"):
        assert key in fields, key
    assert (fields["aof_enabled"], fields["aof_state"]) == ("1", "on")
    assert fields["aof_last_write_status"] == "ok"
    path = proc.dir / "jobs.aof"
    assert int(fields["aof_current_size"]) == path.stat().st_size
    assert not (proc.dir / AOF).exists()
    records = aof_records(path)
    reasons = {argv[1]: argv[6] for argv in records if argv[0] == b"DELJOB"}
    assert reasons == {gone["acked"]: b"acked", gone["fastacked"]: b"acked",
                       gone["deleted"]: b"deleted", expiring: b"expired"}
    now_ms = time.time() * 1000
    for argv in records:  # every record carries the wall-clock time it was written
        assert abs(int(argv[2]) - now_ms) < 60_000, argv
    acked = next(argv for argv in records if argv[0] == b"DELJOB" and argv[1] == gone["acked"])
    assert acked[3:] == [b"q6", b"0", b"0", b"acked"]  # queue, nacks, additional deliveries
    stored = {}  # job id -> (job, stored as queued?) of its LOADJOB (docs/aof-format.md)
    for argv in records:
        if argv[0] == b"LOADJOB":
            job, queued = decode_payload(argv[1])
            stored[job.id] = job, queued
    plain, queued = stored[jobs["plain"]]
    assert (plain.queue, plain.body, plain.repl, plain.retry, queued) == (b"q1", b"plain", 1, 1, True)
    assert abs(plain.ctime // 1_000_000 - int(loadjob_time(records, jobs["plain"]))) < 1000
    delayed, queued = stored[jobs["delayed"]]
    assert (delayed.delay, queued) == (4, False)  # stored as active

    crash_and_restart(proc)
    assert info(proc)["aof_state"] == "on"
    for name, job_id in gone.items():
        assert proc.call("SHOW", job_id) is None, name
    for name, job_id in jobs.items():
        after, old = show(proc, job_id), before[name]
        assert after["state"] == "active", name  # spec §5: never queued by a normal restart
        for key in ("id", "queue", "repl", "ctime", "delay", "retry", "nodes-delivered", "body"):
            assert after[key] == old[key], (name, key)
        # spec §2: counter changes are not logged; the record has them as at ADDJOB.
        assert (after["nacks"], after["additional-deliveries"]) == (0, 0), name
        assert old["ttl"] - 3 <= after["ttl"] <= old["ttl"]
        if old["retry"]:  # spec §5 step 4: now + (delay + retry) s ± jitter
            expected = (old["delay"] + old["retry"]) * 1000
            assert expected - JITTER_MS - 5000 <= after["next-requeue-within"] \
                <= expected + JITTER_MS, name
        else:
            assert after["next-requeue-within"] is None, name
    assert all(proc.call("QLEN", "q%d" % i) == 0 for i in range(1, 6))
    # The retry timer really is armed again: the RETRY 1 job is re-queued.
    wait_until(lambda: proc.call("QLEN", "q1") >= 1, 5, interval=0.05,
               message="the RETRY 1 job re-queued after the restart")
    assert show(proc, jobs["once"])["state"] == "active"


BURST = 50_000  # ADDJOBs the server is killed in the middle of
KILL_AFTER_BURST_REPLIES = 500


def _send_until_closed(sock: socket.socket, data: bytes) -> None:
    """Send ``data``; the server being killed midway ends it early."""
    try:
        sock.sendall(data)
    except OSError:
        pass


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_every_confirmed_addjob_survives_sigkill_mid_stream(server_factory, fsync):
    proc = server_factory("appendonly yes\nappendfsync %s\n" % fsync)
    confirmed: list[bytes] = []
    reader = hiredis.Reader()
    sent = 0
    kill_after = 3000
    with socket.create_connection(("127.0.0.1", proc.port), timeout=30) as sock:
        while len(confirmed) < kill_after:
            if sent - len(confirmed) < 400:
                sock.sendall(b"".join(encode_command("ADDJOB", "stream", "job %d" % (sent + i),
                                                     0, "RETRY", 60) for i in range(50)))
                sent += 50
            if select.select([sock], [], [], 5)[0]:
                chunk = sock.recv(1 << 16)
                assert chunk, "server closed the connection"
                reader.feed(chunk)
                while (reply := reader.gets()) is not False:
                    assert isinstance(reply, bytes), reply
                    confirmed.append(reply)
        # A last burst the server needs a while to get through, sent from a
        # thread: it is killed once some of the burst is confirmed, so that
        # requests are in flight and replies on the way whatever the speeds.
        burst = b"".join(encode_command("ADDJOB", "stream", "burst %d" % i, 0)
                         for i in range(BURST))
        sender = threading.Thread(target=_send_until_closed, args=(sock, burst))
        before = len(confirmed)
        sender.start()
        while len(confirmed) < before + KILL_AFTER_BURST_REPLIES:
            assert select.select([sock], [], [], 30)[0], "no reply to the burst"
            chunk = sock.recv(1 << 16)
            assert chunk, "server closed the connection"
            reader.feed(chunk)
            while (reply := reader.gets()) is not False:
                confirmed.append(reply)
        proc.kill()
        sent += BURST
        in_flight = sent - len(confirmed)
        while True:  # replies the kernel delivered before the process died count too
            try:
                chunk = sock.recv(1 << 16)
            except ConnectionResetError:
                break
            if not chunk:
                break
            reader.feed(chunk)
            while (reply := reader.gets()) is not False:
                confirmed.append(reply)
    sender.join(30)
    assert in_flight > 0 and len(confirmed) < sent
    proc.start()
    jobs = job_ids(proc)
    missing = set(confirmed) - jobs
    assert not missing, "%d confirmed jobs lost, e.g. %r" % (len(missing), sorted(missing)[:3])
    assert len(jobs) <= sent and not job_ids(proc, "queued")


def test_one_pipeline_creating_taking_and_flushing_jobs_replays_in_order(server_factory):
    """The LOADJOBs of a loop turn are built when the turn's records are
    written: records of jobs taken or deleted in the same pipeline still come
    before their DELJOBs, in a state a restart accepts."""
    proc = server_factory("appendonly yes\n")
    replies = pipeline(proc.port, [("ADDJOB", "q", "taken", 0), ("ADDJOB", "q", "queued", 0),
                                   ("GETJOB", "NOHANG", "FROM", "q"),
                                   ("ADDJOB", "q", "delayed", 0, "DELAY", 60),
                                   ("DEBUG", "FLUSHALL"), ("ADDJOB", "q", "kept", 0)])
    taken, queued, got, delayed, flushed, kept = replies
    assert got[0][1] == taken and flushed == b"OK"
    records = aof_records(proc.dir / AOF)
    assert [(argv[0], argv[1] if argv[0] == b"DELJOB" else None) for argv in records] == \
        [(b"LOADJOB", None)] * 3 + [(b"DELJOB", job_id) for job_id in (taken, queued, delayed)] \
        + [(b"LOADJOB", None)]
    stored = [decode_payload(argv[1]) for argv in records if argv[0] == b"LOADJOB"]
    assert [(job.id, queued_state) for job, queued_state in stored] == \
        [(taken, False), (queued, True), (delayed, False), (kept, True)]
    crash_and_restart(proc)
    assert job_ids(proc) == {kept}


def test_records_of_a_client_without_replies_reach_the_file(server_factory):
    """No reply leaves for CLIENT REPLY OFF, so no reply writes its records:
    the cron does, and a SIGKILL a second later keeps the job."""
    proc = server_factory("appendonly yes\n")
    with socket.create_connection(("127.0.0.1", proc.port), timeout=10) as sock:
        sock.sendall(b"CLIENT REPLY OFF\r\n" + encode_command("ADDJOB", "q", "silent", 0))
        wait_until(lambda: (proc.dir / AOF).stat().st_size > len(FILE_MARKER), 5, interval=0.05,
                   message="the LOADJOB record of a client without replies")
        crash_and_restart(proc)
    assert [show(proc, job_id)["body"] for job_id in job_ids(proc)] == [b"silent"]


# ------------------------------------------------------------------ rewrites

def test_bgrewriteaof_under_load_then_sigkill(server_factory):
    proc = server_factory("appendonly yes\n")
    # Enough jobs that the rewrite spans many loop turns and INFO polls: the
    # compiled core builds about five million records a second.
    base = set(add_jobs(proc, 300_000, "base", "RETRY", 30))
    loads = [Load(proc.port, "load%d" % i) for i in range(2)]
    for load in loads:
        load.start()
    wait_until(lambda: all(load.rounds >= 5 for load in loads), 10, message="load running")
    assert raw_command(proc.port, "BGREWRITEAOF") == (
        b"+Background append only file rewriting started\r\n")
    seen: list[dict] = []
    wait_rewrite_done(proc, seen=seen)
    rounds = sum(load.rounds for load in loads)
    wait_until(lambda: sum(load.rounds for load in loads) >= rounds + 10, 10,
               message="load after the rewrite")
    live = base.union(*(load.stop() for load in loads))
    # The node answered INFO while the rewrite ran, and changes made meanwhile
    # went to the rewrite buffer.
    running = [f for f in seen if f["aof_rewrite_in_progress"] == "1"]
    assert running, "no INFO was answered during the rewrite"
    assert max(int(f["aof_rewrite_buffer_length"]) for f in running) > 0
    fields = info(proc)
    assert fields["aof_last_rewrite_time_sec"] != "-1"
    assert int(fields["aof_current_size"]) == (proc.dir / AOF).stat().st_size
    assert not list(proc.dir.glob("temp-rewriteaof-*"))
    crash_and_restart(proc)
    assert job_ids(proc) == live  # no loss, no resurrection
    assert not job_ids(proc, "queued")


def test_automatic_rewrite_under_load_then_sigkill(server_factory):
    proc = server_factory("appendonly yes\n")
    base = set(add_jobs(proc, 5000, "base", "RETRY", 30))
    size = (proc.dir / AOF).stat().st_size
    assert proc.call("CONFIG", "SET", "auto-aof-rewrite-min-size", str(size + 100_000)) == b"OK"
    assert proc.call("CONFIG", "SET", "auto-aof-rewrite-percentage", "20") == b"OK"
    load = Load(proc.port, "auto")
    load.start()

    def rewritten() -> bool:
        log = proc.log_path.read_text()
        return log.count("Starting automatic rewriting") >= 2 and \
            log.count("Background AOF rewrite terminated with success") >= 2
    wait_until(rewritten, 60, interval=0.1, message="two automatic rewrites")
    live = base | load.stop()
    wait_rewrite_done(proc)
    fields = info(proc)
    assert int(fields["aof_base_size"]) >= size
    assert int(fields["aof_current_size"]) == (proc.dir / AOF).stat().st_size
    crash_and_restart(proc)
    assert job_ids(proc) == live


def test_bgrewriteaof_with_appendonly_off_and_while_one_runs(server_factory):
    proc = server_factory()
    ids = add_jobs(proc, 3000, "q", "RETRY", 9)
    assert proc.raw(encode_command("BGREWRITEAOF") * 2, expect=110) == (
        b"+Background append only file rewriting started\r\n"
        b"-ERR Background append only file rewriting already in progress\r\n")
    wait_rewrite_done(proc)
    fields = info(proc)
    assert (fields["aof_enabled"], fields["aof_state"]) == ("0", "off")
    assert "aof_current_size" not in fields
    records = aof_records(proc.dir / AOF)
    assert {argv[0] for argv in records} == {b"LOADJOB"} and len(records) == len(ids)
    proc.call("ADDJOB", "q", "not logged", 0)
    assert len(aof_records(proc.dir / AOF)) == len(ids)


def test_config_set_appendonly_at_runtime(server_factory):
    proc = server_factory()
    ids = set(add_jobs(proc, 3000, "q", "RETRY", 9))
    taken = proc.call("GETJOB", "NOHANG", "FROM", "q")[0][1]
    replies = pipeline(proc.port, [("CONFIG", "SET", "appendonly", "yes"),
                                   ("INFO", "persistence"),
                                   ("ADDJOB", "q", "during wait-rewrite", 0),
                                   ("ACKJOB", taken)])
    assert replies[0] == b"OK"
    assert b"aof_state:wait-rewrite\r\n" in replies[1]
    ids.add(replies[2])
    ids.discard(taken)
    wait_until(lambda: info(proc)["aof_state"] == "on", 30, interval=0.05,
               message="aof_state:on")
    assert info(proc)["aof_enabled"] == "1"
    logged = {decode_payload(argv[1])[0].id for argv in aof_records(proc.dir / AOF)
              if argv[0] == b"LOADJOB"}
    assert logged == ids  # the snapshot, the ADDJOB made meanwhile, not the ACKed job
    ids.add(proc.call("ADDJOB", "q", "after", 0))
    assert proc.call("CONFIG", "REWRITE") == b"OK"
    assert "appendonly yes" in proc.config_path.read_text()
    crash_and_restart(proc)
    assert job_ids(proc) == ids

    assert proc.call("CONFIG", "SET", "appendonly", "no") == b"OK"
    fields = info(proc)
    assert (fields["aof_enabled"], fields["aof_state"]) == ("0", "off")
    path = proc.dir / AOF
    fd_dir = Path("/proc/%d/fd" % proc.proc.pid)

    def open_to(target: Path) -> list[str]:
        links = []
        for fd in fd_dir.iterdir():
            try:
                links.append(os.readlink(fd))
            except FileNotFoundError:
                continue  # closed while listed (a replaced AOF goes in the fsync thread)
        return [link for link in links if link == str(target)]

    assert not open_to(path)
    size = path.stat().st_size
    ids.add(proc.call("ADDJOB", "q", "not logged", 0))
    dropped = sorted(ids)[:100]
    assert proc.call("ACKJOB", *dropped) == 100
    ids.difference_update(dropped)
    assert path.stat().st_size == size
    assert proc.call("CONFIG", "GET", "appendonly") == {b"appendonly": b"no"}
    # Enabled again: a fresh file from the current state replaces the stale one.
    assert proc.call("CONFIG", "SET", "appendonly", "yes") == b"OK"
    wait_until(lambda: info(proc)["aof_state"] == "on", 30, interval=0.05,
               message="aof_state:on again")
    crash_and_restart(proc)
    assert job_ids(proc) == ids


def test_shutdown_is_refused_while_the_initial_aof_is_written(server_factory):
    proc = server_factory()
    add_jobs(proc, 3000, "q")
    replies = pipeline(proc.port, [("CONFIG", "SET", "appendonly", "yes"), ("SHUTDOWN",)])
    assert replies[0] == b"OK"
    assert str(replies[1]) == "ERR Errors trying to SHUTDOWN. Check logs."
    assert "Writing initial AOF, can't exit." in proc.log_path.read_text()
    wait_until(lambda: info(proc)["aof_state"] == "on", 30, interval=0.05,
               message="aof_state:on")
    assert proc.raw(encode_command("SHUTDOWN"), until_close=True) == b"<EOF>"
    assert proc.proc.wait(10) == 0


# --------------------------------------------------------- damaged files

def stopped_node_with_jobs(server_factory, count: int = 5) -> tuple[DisqueProcess, list[bytes]]:
    """A node that logged ``count`` jobs and was then stopped cleanly."""
    proc = server_factory("appendonly yes\n")
    ids = [proc.call("ADDJOB", "q", "job %d" % i, 0, "RETRY", 5) for i in range(count)]
    assert proc.stop() == 0
    return proc, ids


def set_config(proc: DisqueProcess, line: str) -> None:
    with open(proc.config_path, "a") as f:
        f.write(line + "\n")


def test_truncated_tail_is_cut_with_aof_load_truncated_yes(server_factory):
    proc, ids = stopped_node_with_jobs(server_factory)
    path = proc.dir / AOF
    offsets = record_offsets(path)
    last = offsets[-2]
    os.truncate(path, last + (offsets[-1] - last) // 2)
    proc.start()
    assert job_ids(proc) == set(ids[:-1])
    assert path.stat().st_size == last
    assert "truncating it at offset %d" % last in proc.log_path.read_text()
    assert info(proc)["aof_current_size"] == str(last)
    new = proc.call("ADDJOB", "q", "after", 0)  # appended right after the cut
    crash_and_restart(proc)
    assert job_ids(proc) == set(ids[:-1]) | {new}


def test_truncated_tail_refused_then_fixed_with_check_aof(server_factory):
    proc, ids = stopped_node_with_jobs(server_factory)
    set_config(proc, "aof-load-truncated no")
    path = proc.dir / AOF
    offsets = record_offsets(path)
    last = offsets[-2]
    os.truncate(path, last + 10)
    message = ("Unexpected end of file reading the append only file at offset %d" % last)
    assert message in start_failing(proc)
    assert message in proc.log_path.read_text()
    assert path.stat().st_size == last + 10  # refused, and nothing touched

    done = check_aof(path)
    assert done.returncode == 1 and "unexpected end of file" in done.stdout
    assert "ok_up_to=%d" % last in done.stdout
    done = check_aof("--fix", path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Successfully truncated AOF to %d bytes" % last in done.stdout
    assert path.stat().st_size == last
    assert check_aof(path).returncode == 0
    console = Path(sys.executable).parent / "disque-check-aof"
    assert subprocess.run([str(console), str(path)], capture_output=True, text=True,
                          timeout=60).stdout.endswith("AOF is valid\n")
    proc.start()
    assert job_ids(proc) == set(ids[:-1])


def _garbage(data: bytes, at: int) -> tuple[bytes, int]:
    return data[:at] + b"\x00garbage\r\n" + data[at:], at


def _bad_payload(data: bytes, at: int) -> tuple[bytes, int]:
    argv, size = first_record(data[at:])
    end = at + size
    payload = b"\xc1" * len(argv[1])  # same length, neither payload form
    return data[:at] + data[at:end].replace(argv[1], payload) + data[end:], at


def _unknown_command(data: bytes, at: int) -> tuple[bytes, int]:
    return data[:at] + b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n" + data[at:], at


def _flipped_bytes(data: bytes, at: int) -> tuple[bytes, int]:
    """Two bytes of a job body flipped: before checksums, this file loaded."""
    body = data.index(b"job ", at)
    return data[:body] + b"JO" + data[body + 2:], at


@pytest.mark.parametrize("damage, message, checker", [
    (_garbage, "Bad file format reading the append only file at offset %d (record 3): "
     "expected '*'", "bad format"),
    (_bad_payload, "Bad file format reading the append only file at offset %d (record 3): "
     "checksum mismatch", "checksum mismatch"),
    (_flipped_bytes, "Bad file format reading the append only file at offset %d (record 3): "
     "checksum mismatch", "checksum mismatch"),
    (_unknown_command, "Bad file format reading the append only file at offset %d (record 3): "
     "record without a checksum", "record without a checksum"),
])
def test_corruption_in_the_middle_refuses_to_start(server_factory, damage, message, checker):
    proc, ids = stopped_node_with_jobs(server_factory)
    path = proc.dir / AOF
    at = record_offsets(path)[2]
    data, offset = damage(path.read_bytes(), at)
    path.write_bytes(data)
    assert message % offset in start_failing(proc)  # even with aof-load-truncated yes
    assert path.read_bytes() == data
    for args in ((path,), ("--fix", path)):  # --fix asks first: there is no one to answer
        done = check_aof(*args)
        assert done.returncode == 1 and checker in done.stdout
        assert "at offset %d (record 3)" % offset in done.stdout
    assert path.read_bytes() == data
    done = check_aof("--fix", "--yes", path)
    assert done.returncode == 0 and "truncated AOF to %d bytes" % offset in done.stdout
    proc.start()
    assert job_ids(proc) == set(ids[:1])  # the records before the damage


MARKER = b"*2\r\n$9\r\nAOFFORMAT\r\n$1\r\n2\r\n"


@pytest.mark.parametrize("damaged, found", [
    # Three fields claimed: the damage shows where the third runs into the
    # next record, past the marker's end.
    (b"*3\r\n$9\r\nAOFFORMAT\r\n$1\r\n2\r\n", len(MARKER)),
    (b"*2\r\n$9\r\nAOFFORMAT\r\n$1\r\n7\r\n", 0),
    (b"*2\r\n$9\r\nAOFFORMAT\r\n$X\r\n2\r\n", 19),
])
def test_damaged_format_marker_is_reported_where_fix_would_cut_and_not_emptied(
        server_factory, damaged, found):
    proc, ids = stopped_node_with_jobs(server_factory)
    path = proc.dir / AOF
    data = path.read_bytes()
    assert data.startswith(MARKER) and len(damaged) == len(MARKER)
    data = damaged + data[len(MARKER):]
    path.write_bytes(data)
    done = check_aof(path)
    assert done.returncode == 1
    assert "AOF analyzed: size=%d, ok_up_to=0, diff=%d\n" % (len(data), len(data)) in done.stdout
    # One offset for the bad record and the cut; the byte found further in
    # is named as such.
    assert "AOF problem: bad format at offset 0" in done.stdout
    assert (", the damage found at offset %d)" % found in done.stdout) == (found != 0)
    assert "truncates the file at offset" not in done.stdout
    assert "--fix would keep nothing" in done.stdout
    for args in (("--fix", path), ("--fix", "--yes", path)):
        done = check_aof(*args)
        assert done.returncode == 1, done.stdout
        assert ("Not truncated: the damage is in the first record, so truncating would drop "
                "every record of the file (%d bytes)" % len(data)) in done.stdout
        assert "Successfully truncated" not in done.stdout
    assert path.read_bytes() == data
    # Repaired by hand, every job is there again.
    path.write_bytes(MARKER + data[len(MARKER):])
    assert check_aof(path).returncode == 0
    proc.start()
    assert job_ids(proc) == set(ids)


def test_enqueue_jobs_once_without_a_file_refuses_to_start(server_factory):
    proc = server_factory()
    assert proc.stop() == 0
    set_config(proc, "aof-enqueue-jobs-once yes")
    assert "does not exist" in start_failing(proc)


# ----------------------------------------------------- controlled restart

@pytest.mark.parametrize("appendonly", ["yes", "no"])
def test_controlled_restart_restores_queued_and_active_jobs(server_factory, appendonly):
    proc = server_factory("appendonly %s\n" % appendonly)
    r = proc.client(protocol=2)
    queued = r.execute_command("ADDJOB", "q", "queued", 0, "RETRY", 60)
    once = r.execute_command("ADDJOB", "q0", "queued at-most-once", 0, "RETRY", 0)
    active = r.execute_command("ADDJOB", "qa", "active", 0, "RETRY", 60)
    nacked = r.execute_command("ADDJOB", "qn", "nacked twice", 0, "RETRY", 60)
    delayed = r.execute_command("ADDJOB", "qd", "delayed", 0, "DELAY", 60, "RETRY", 60)
    acked = r.execute_command("ADDJOB", "q", "acked", 0)
    for _ in range(2):
        assert r.execute_command("GETJOB", "NOHANG", "FROM", "qn")[0][1] == nacked
        assert r.execute_command("NACK", nacked) == 1
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "qa")[0][1] == active
    assert r.execute_command("ACKJOB", acked) == 1
    ids = {"queued": queued, "once": once, "active": active, "nacked": nacked,
           "delayed": delayed}
    before = {name: show(proc, job_id) for name, job_id in ids.items()}
    assert {n: s["state"] for n, s in before.items()} == {
        "queued": "queued", "once": "queued", "active": "active", "nacked": "queued",
        "delayed": "active"}
    assert before["nacked"]["nacks"] == 2

    assert r.execute_command("CONFIG", "SET", "aof-enqueue-jobs-once", "yes") == b"OK"
    assert r.execute_command("CONFIG", "REWRITE") == b"OK"
    assert proc.raw(encode_command("SHUTDOWN", "REWRITE-AOF"), until_close=True) == b"<EOF>"
    assert proc.proc.wait(10) == 0
    records = aof_records(proc.dir / AOF)
    assert len(records) == 5 and {argv[0] for argv in records} == {b"LOADJOB"}

    proc.start()
    r = proc.client(protocol=2)
    after = {name: show(proc, job_id) for name, job_id in ids.items()}
    for name in ids:
        assert after[name]["state"] == before[name]["state"], name
        for key in ("queue", "body", "retry", "delay", "nacks", "ctime"):
            assert after[name][key] == before[name][key], (name, key)
        # spec §6: a job that had been queued before is re-queued through the
        # normal primitive, which counts one more additional delivery.
        bump = 1 if before[name]["state"] == "queued" else 0
        assert after[name]["additional-deliveries"] == \
            before[name]["additional-deliveries"] + bump, name
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q0") == [
        [b"q0", once, b"queued at-most-once"]]
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "q", "qn") == [[b"q", queued, b"queued"]]
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "qn") == [
        [b"qn", nacked, b"nacked twice"]]
    assert r.execute_command("QLEN", "qa") == 0 and r.execute_command("QLEN", "qd") == 0
    assert r.execute_command("SHOW", acked) is None
    # The option turned itself off, in memory and in the config file.
    assert r.execute_command("CONFIG", "GET", "aof-enqueue-jobs-once") == [
        b"aof-enqueue-jobs-once", b"no"]
    config = proc.config_path.read_text()
    assert "aof-enqueue-jobs-once no" in config and "aof-enqueue-jobs-once yes" not in config
    assert info(proc)["aof_state"] == ("on" if appendonly == "yes" else "off")
    if appendonly == "yes":
        crash_and_restart(proc)  # a normal restart again: nothing is queued
        assert len(job_ids(proc, "active")) == 5 and not job_ids(proc, "queued")


# ------------------------------------------------------------- DEBUG LOADAOF

def test_debug_loadaof_reloads_without_logging_the_flush(server_factory):
    proc = server_factory("appendonly yes\n")
    ids = [proc.call("ADDJOB", "q", "job %d" % i, 0, "RETRY", 5) for i in range(10)]
    assert proc.call("ACKJOB", ids[0]) == 1
    path = proc.dir / AOF
    data = path.read_bytes()
    assert proc.call("DEBUG", "LOADAOF") == b"OK"
    assert path.read_bytes() == data  # no DELJOB for the flushed jobs
    assert job_ids(proc) == job_ids(proc, "active") == set(ids[1:])
    crash_and_restart(proc)
    assert job_ids(proc) == set(ids[1:])


# ------------------------------------------------------------------ loading

def synthetic_aof(path: Path, count: int, node_id: bytes) -> set[bytes]:
    """An AOF of ``count`` LOADJOB records written directly (much faster than ADDJOBs)."""
    now_ms = int(time.time() * 1000)
    ids = set()
    with open(path, "wb") as f:
        out = bytearray()
        for i in range(count):
            job = Job(b"D-%s-%024d-05a1" % (node_id[:8], i), b"big", b"job %d" % i, 1,
                      (now_ms + i // 1000) * 1_000_000 + i % 1000, now_ms // 1000 + 3600, 0, 60)
            job.delivered = (node_id,)
            job.state = QUEUED
            out += loadjob_record(job, now_ms)
            ids.add(job.id)
        f.write(out)
    return ids


def test_clients_get_loading_while_a_large_aof_loads(server_factory):
    proc = server_factory("appendonly yes\n")
    node_id = proc.call("CLUSTER", "MYID")
    assert proc.stop() == 0
    path = proc.dir / AOF
    ids = synthetic_aof(path, 150_000, node_id)
    size = path.stat().st_size
    proc.start(wait=False)
    samples: list[tuple[dict, object]] = []

    def connected():
        assert proc.proc.poll() is None, proc.tail_log()
        return socket.create_connection(("127.0.0.1", proc.port), timeout=60)
    sock = wait_until(connected, 20, interval=0.005, message="the listener")
    with sock:
        reader = hiredis.Reader()

        def ask(*command):
            sock.sendall(encode_command(*command))
            while (reply := reader.gets()) is False:
                chunk = sock.recv(1 << 16)
                assert chunk, "connection closed"
                reader.feed(chunk)
            return reply
        while True:
            text = ask("INFO", "persistence").decode()
            fields = dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)
            if fields["loading"] == "0":
                break
            ping = ask("PING")  # a status arrives as bytes, an error as ReplyError
            samples.append((fields, ping.decode() if isinstance(ping, bytes) else str(ping)))
    proc.wait_ready()
    assert samples, "the load was never observed"
    for fields, ping in samples:
        assert fields["loading_total_bytes"] == str(size)
        assert 0 <= int(fields["loading_loaded_bytes"]) <= size
        for key in ("loading_start_time", "loading_loaded_perc", "loading_eta_seconds"):
            assert key in fields
        assert ping in ("LOADING Disque is loading the dataset in memory", "PONG")
    assert samples[0][1] == "LOADING Disque is loading the dataset in memory"
    assert job_ids(proc) == ids and not job_ids(proc, "queued")


# ---------------------------------------------------------- write errors

def limit_file_size(proc: DisqueProcess, soft: int) -> None:
    """RLIMIT_FSIZE of the server: writes past ``soft`` bytes fail with EFBIG
    (CPython ignores SIGXFSZ), a reliable way to make the AOF write fail."""
    resource.prlimit(proc.proc.pid, resource.RLIMIT_FSIZE, (soft, resource.RLIM_INFINITY))


def test_write_error_gives_misconf_until_writes_succeed(server_factory):
    proc = server_factory("appendonly yes\n")
    ids = [proc.call("ADDJOB", "q", b"x" * 2000, 0, "RETRY", 5) for _ in range(100)]
    path = proc.dir / AOF
    size = path.stat().st_size
    assert size > 2 * proc.log_path.stat().st_size  # the log can still be written
    limit_file_size(proc, size + 100)
    stuck = proc.call("ADDJOB", "q", b"y" * 1000, 0, "RETRY", 5)  # its record is cut short
    assert path.stat().st_size == size + 100
    assert raw_command(proc.port, "PING") == MISCONF_EFBIG
    assert raw_command(proc.port, "ADDJOB", "q", "z", 0) == MISCONF_EFBIG
    assert raw_command(proc.port, "ACKJOB", ids[0]) == MISCONF_EFBIG
    assert proc.call("QLEN", "q") == 101  # read-only commands still work
    assert info(proc)["aof_last_write_status"] == "err"
    assert "Error writing to the AOF file: File too large" in proc.log_path.read_text()

    limit_file_size(proc, resource.RLIM_INFINITY)
    wait_until(lambda: raw_command(proc.port, "PING") == b"+PONG\r\n", 5, interval=0.05,
               message="writes to succeed again")
    assert info(proc)["aof_last_write_status"] == "ok"
    assert check_aof(path).returncode == 0  # the cut record was completed, not repeated
    last = proc.call("ADDJOB", "q", "after", 0)
    crash_and_restart(proc)
    assert job_ids(proc) == set(ids) | {stuck, last}


def test_write_error_with_appendfsync_always_exits(server_factory):
    proc = server_factory("appendonly yes\nappendfsync always\n")
    ids = [proc.call("ADDJOB", "q", b"x" * 2000, 0) for _ in range(20)]
    limit_file_size(proc, (proc.dir / AOF).stat().st_size + 100)
    never_confirmed = encode_command("ADDJOB", "q", b"y" * 1000, 0)
    assert proc.raw(never_confirmed, timeout=10, until_close=True) == b"<EOF>"
    assert proc.wait_exit(10) == 1
    assert "Can't write the AOF with appendfsync always" in proc.log_path.read_text()
    proc.start()  # the cut record is the truncated tail
    assert job_ids(proc) == set(ids)
