"""One real disque-server process, driven through redis-py and raw sockets.

spec: commands.md (blocking, job and queue commands, admin commands),
jobs-and-ids.md (timers: retry, delay, TTL; ordering; memory), config.md
(CONFIG SET/GET/REWRITE). Every condition that depends on time is awaited
with a bounded poll.
"""

from __future__ import annotations

import re
import signal
import socket
import threading
import time

import hiredis
import pytest
import redis

from tests.support.process import DisqueProcess, wait_until

NOAUTH = b"-NOAUTH Authentication required.\r\n"
OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
BLOCK_TIMEOUT = 10.0


# ------------------------------------------------------------------ helpers

class Conn:
    """A raw client: send RESP requests, read replies (hiredis) or bytes."""

    def __init__(self, port: int, timeout: float = BLOCK_TIMEOUT) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.reader = hiredis.Reader()

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def send(self, *args) -> None:
        """Send one multibulk request (str/int/bytes arguments)."""
        self.sendall(encode_request(args))

    def sendall(self, data: bytes) -> None:
        """Send raw bytes."""
        self.sock.sendall(data)

    def read(self):
        """The next reply (errors come back as hiredis.ReplyError values)."""
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("connection closed by the server")
            self.reader.feed(data)

    def call(self, *args):
        """Send a request and read its reply."""
        self.send(*args)
        return self.read()

    def raw_reply(self, *args, size: int = 65536) -> bytes:
        """Send a request and return the bytes that come back first."""
        self.send(*args)
        return self.sock.recv(size)

    def is_closed(self) -> bool:
        """True once the server closed the connection (without consuming data)."""
        try:
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except ConnectionResetError:
            return True

    def wait_closed(self, timeout: float = BLOCK_TIMEOUT) -> bytes:
        """Read until the server closes the connection; return what came."""
        self.sock.settimeout(timeout)
        out = b""
        while True:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return out
            if not data:
                return out
            out += data


def encode_request(args) -> bytes:
    """RESP multibulk encoding of ``args``."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, int):
            arg = str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


@pytest.fixture
def conns(server):
    """Factory of raw connections to ``server``, closed at teardown."""
    opened: list[Conn] = []

    def connect(timeout: float = BLOCK_TIMEOUT) -> Conn:
        conn = Conn(server.port, timeout)
        opened.append(conn)
        return conn
    yield connect
    for conn in opened:
        conn.close()


def plain(client: redis.Redis) -> redis.Redis:
    """Drop redis-py's reply post-processing (INFO to dict, OK to True...)."""
    client.response_callbacks.clear()
    return client


@pytest.fixture
def r(server) -> redis.Redis:
    """A redis-py client for ``server`` that returns replies as they are."""
    return plain(server.client())


def info(client: redis.Redis, section: str = "all") -> dict[str, str]:
    """INFO parsed into key -> value text."""
    text = client.execute_command("INFO", section)
    fields = {}
    for line in text.decode().split("\r\n"):
        if line and not line.startswith("#"):
            key, _, value = line.partition(":")
            fields[key] = value
    return fields


def start_protected(node) -> None:
    """Start a node whose config sets requirepass (its PING answers -NOAUTH,
    which DisqueProcess.wait_ready does not take as ready)."""
    node.start(wait=False)

    def answers() -> bool:
        assert node.proc.poll() is None, node.tail_log()
        with socket.create_connection(("127.0.0.1", node.port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64) == NOAUTH
    wait_until(answers, message="protected node to answer")


def blocked_clients(client: redis.Redis) -> int:
    """INFO blocked_clients."""
    return int(info(client, "clients")["blocked_clients"])


def show(client: redis.Redis, job_id: bytes) -> dict | None:
    """SHOW as a dict (None for an unknown job)."""
    reply = client.execute_command("SHOW", job_id)
    if reply is None:
        return None
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}


def addjob(client: redis.Redis, queue: str, body, *options) -> bytes:
    """ADDJOB with timeout 0."""
    return client.execute_command("ADDJOB", queue, body, 0, *options)


# ----------------------------------------------------------- blocking GETJOB

def test_blocked_getjob_is_woken_by_addjob_from_another_client(r, conns):
    consumer = conns()
    consumer.send("GETJOB", "FROM", "wq")
    wait_until(lambda: blocked_clients(r) == 1, message="GETJOB to block")
    assert r.execute_command("QSTAT", "wq")[9] == 1  # blocked
    job_id = addjob(r, "wq", "hello")
    assert consumer.read() == [[b"wq", job_id, b"hello"]]
    assert blocked_clients(r) == 0
    assert show(r, job_id)["state"] == b"active"
    assert r.execute_command("QLEN", "wq") == 0


def test_blocked_clients_are_served_fifo_one_job_each(r, conns):
    consumers = []
    for n in range(3):
        consumer = conns()
        consumer.send("GETJOB", "COUNT", 10, "WITHCOUNTERS", "FROM", "other", "fq")
        wait_until(lambda: blocked_clients(r) == n + 1, message="consumer %d to block" % n)
        consumers.append(consumer)
    # four jobs in one pipeline: each one wakes the consumer waiting longest
    pipe = r.pipeline(transaction=False)
    for body in ("first", "second", "third", "fourth"):
        pipe.execute_command("ADDJOB", "fq", body, 0)
    ids = pipe.execute()
    for consumer, job_id, body in zip(consumers, ids, (b"first", b"second", b"third")):
        assert consumer.read() == [[b"fq", job_id, body, b"nacks", 0,
                                    b"additional-deliveries", 0]]
    assert r.execute_command("QLEN", "fq") == 1  # COUNT 10 still yields one job each
    assert blocked_clients(r) == 0


def test_a_long_pipeline_of_addjobs_keeps_order_and_answers_each_command(r):
    # Plain ADDJOBs in a pipeline run as a batch (Node.call_run); the ones the
    # batch cannot take are answered in their place by the normal path.
    pipe = r.pipeline(transaction=False)
    for i in range(2000):
        if i == 700:
            pipe.execute_command("ADDJOB", "lp", "job %d" % i, 0, "RETRY", 7)
        elif i == 1400:
            pipe.execute_command("ADDJOB", "lp", "job %d" % i, "soon")
        else:
            pipe.execute_command("ADDJOB", "lp", "job %d" % i, 0)
    pipe.execute_command("QLEN", "lp")
    replies = pipe.execute(raise_on_error=False)
    assert isinstance(replies[1400], redis.ResponseError)
    ids = [reply for i, reply in enumerate(replies[:2000]) if i != 1400]
    assert all(job_id.startswith(b"D-") for job_id in ids) and len(set(ids)) == 1999
    assert replies[2000] == 1999
    peeked = r.execute_command("QPEEK", "lp", 1999)
    assert [job[1] for job in peeked] == ids
    assert [job[2] for job in peeked] == [b"job %d" % i for i in range(2000) if i != 1400]
    assert show(r, ids[700])["retry"] == 7
    assert info(r, "commandstats")["cmdstat_addjob"].startswith("calls=2000,")


def test_getjob_timeout_replies_null_once_the_timeout_passed(conns):
    conn = conns()  # its socket timeout bounds the wait
    started = time.monotonic()
    assert conn.raw_reply("GETJOB", "TIMEOUT", 300, "FROM", "empty") == b"*-1\r\n"
    elapsed = time.monotonic() - started
    assert elapsed >= 0.29, elapsed


def test_pipelined_commands_of_a_blocked_client_wait_for_the_unblock(r, conns):
    consumer = conns()
    consumer.sendall(encode_request(["GETJOB", "FROM", "pq"])
                     + encode_request(["ADDJOB", "marker", "m", 0])
                     + encode_request(["QLEN", "pq"])
                     + b"PING\r\n")
    wait_until(lambda: blocked_clients(r) == 1, message="GETJOB to block")
    # the ADDJOB pipelined after the blocked GETJOB has not run
    assert r.execute_command("QLEN", "marker") == 0
    assert r.execute_command("CLIENT", "LIST").count(b"flags=b") == 1
    job_id = addjob(r, "pq", "payload")
    assert consumer.read() == [[b"pq", job_id, b"payload"]]
    assert consumer.read().startswith(b"D-")
    assert consumer.read() == 0
    assert consumer.read() == b"PONG"
    assert r.execute_command("QLEN", "marker") == 1


def test_debug_flushall_unblocks_getjob_clients_with_null(r, conns):
    first, second = conns(), conns()
    first.send("GETJOB", "FROM", "a", "b")
    second.send("GETJOB", "TIMEOUT", 60000, "FROM", "b")
    wait_until(lambda: blocked_clients(r) == 2, message="two blocked clients")
    addjob(r, "c", "x")
    r.execute_command("PAUSE", "d", "all")
    assert r.execute_command("DEBUG", "FLUSHALL") == b"OK"
    assert first.sock.recv(64) == b"*-1\r\n"
    assert second.sock.recv(64) == b"*-1\r\n"
    fields = info(r)
    assert fields["registered_jobs"] == "0"
    assert fields["registered_queues"] == "0"  # paused queues too
    assert fields["blocked_clients"] == "0"
    assert first.call("PING") == b"PONG"


def test_client_disconnecting_while_blocked_is_forgotten(r, conns):
    consumer = conns()
    consumer.send("GETJOB", "FROM", "gone")
    wait_until(lambda: blocked_clients(r) == 1, message="GETJOB to block")
    consumer.close()
    wait_until(lambda: blocked_clients(r) == 0, message="blocked client to be dropped")
    job_id = addjob(r, "gone", "kept")
    assert r.execute_command("QLEN", "gone") == 1
    assert show(r, job_id)["state"] == b"queued"


# --------------------------------------------------------- timers of a job

def test_retry_requeues_a_delivered_job(r):
    job_id = addjob(r, "rq", "work", "RETRY", 1)
    assert show(r, job_id)["retry"] == 1
    assert r.execute_command("GETJOB", "FROM", "rq") == [[b"rq", job_id, b"work"]]
    assert show(r, job_id)["state"] == b"active"
    wait_until(lambda: show(r, job_id)["state"] == b"queued", timeout=5,
               message="requeue after RETRY 1")
    job = show(r, job_id)
    assert job["additional-deliveries"] == 1
    assert job["nacks"] == 0
    assert r.execute_command("GETJOB", "WITHCOUNTERS", "FROM", "rq") == [
        [b"rq", job_id, b"work", b"nacks", 0, b"additional-deliveries", 1]]
    assert r.execute_command("ACKJOB", job_id) == 1
    assert show(r, job_id) is None


def test_retry_zero_job_is_delivered_at_most_once(r):
    job_id = addjob(r, "once", "x", "RETRY", 0, "TTL", 10)
    job = show(r, job_id)
    assert job["retry"] == 0 and job["next-requeue-within"] is None
    assert job_id.endswith(b"-0000")
    assert r.execute_command("GETJOB", "FROM", "once") == [[b"once", job_id, b"x"]]
    assert r.execute_command("NACK", job_id) == 0
    assert r.execute_command("ENQUEUE", job_id) == 0
    assert r.execute_command("WORKING", job_id) == 0
    assert show(r, job_id)["state"] == b"active"


def test_ttl_expiry_deletes_queued_and_active_jobs(r):
    started = time.monotonic()
    queued = addjob(r, "tq", "a", "TTL", 1)
    active = addjob(r, "tq", "b", "TTL", 2)
    assert r.execute_command("GETJOB", "COUNT", 1, "FROM", "tq")[0][1] == queued
    r.execute_command("NACK", queued)
    assert r.execute_command("GETJOB", "FROM", "tq")[0][1] == queued
    assert show(r, active)["state"] == b"queued"
    assert show(r, active)["ttl"] <= 2
    wait_until(lambda: show(r, queued) is None, timeout=5, message="TTL 1 expiry")
    wait_until(lambda: show(r, active) is None, timeout=5, message="TTL 2 expiry")
    assert r.execute_command("QLEN", "tq") == 0
    assert time.monotonic() - started >= 1.0
    assert info(r)["registered_jobs"] == "0"


def test_delay_queues_the_job_later_and_before_its_ttl(r):
    started = time.monotonic()
    job_id = addjob(r, "dq", "later", "DELAY", 1, "TTL", 2)
    job = show(r, job_id)
    assert job["state"] == b"active" and job["delay"] == 1
    assert 0 < job["next-requeue-within"] <= 1000
    assert r.execute_command("QLEN", "dq") == 0
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "dq") is None
    got = r.execute_command("GETJOB", "TIMEOUT", 5000, "FROM", "dq")
    assert got == [[b"dq", job_id, b"later"]]
    assert time.monotonic() - started >= 0.95
    # then the TTL still expires it
    wait_until(lambda: show(r, job_id) is None, timeout=5, message="TTL 2 expiry")


def test_delay_must_be_below_ttl(r):
    with pytest.raises(redis.ResponseError, match="DELAY is greater than TTL"):
        addjob(r, "dq", "x", "DELAY", 2, "TTL", 2)
    assert addjob(r, "dq", "x", "DELAY", 1, "TTL", 2).endswith(b"-0001")


# ------------------------------------------- NACK / ENQUEUE / DEQUEUE / WORKING

def test_nack_puts_the_job_back_first_and_counts(r):
    first = addjob(r, "nq", "first")
    second = addjob(r, "nq", "second")
    assert r.execute_command("GETJOB", "FROM", "nq")[0][1] == first
    assert r.execute_command("NACK", first, first) == 1  # the second time it is queued
    assert show(r, first)["nacks"] == 1
    assert [job[1] for job in r.execute_command("QPEEK", "nq", 10)] == [first, second]
    assert r.execute_command("NACK", second) == 0  # queued, not active
    with pytest.raises(redis.ResponseError, match="BADID"):
        r.execute_command("NACK", first, "bad")
    assert r.execute_command("QLEN", "nq") == 2


def test_enqueue_and_dequeue_move_jobs_between_states(r):
    job_id = addjob(r, "eq", "x")
    assert r.execute_command("ENQUEUE", job_id) == 0  # already queued
    assert r.execute_command("DEQUEUE", job_id) == 1
    assert show(r, job_id)["state"] == b"active"
    assert r.execute_command("DEQUEUE", job_id) == 0
    assert r.execute_command("QLEN", "eq") == 0
    stats = r.execute_command("QSTAT", "eq")
    assert stats[stats.index(b"jobs-out") + 1] == 0  # DEQUEUE is not a delivery
    assert r.execute_command("ENQUEUE", job_id) == 1
    job = show(r, job_id)
    assert job["state"] == b"queued"
    assert job["additional-deliveries"] == 1  # not the first queueing by this node
    assert job["nacks"] == 0
    assert r.execute_command("ENQUEUE") == 0
    assert r.execute_command("DEQUEUE") == 0


def test_working_postpones_the_requeue_and_dequeues(r):
    job_id = addjob(r, "wk", "x", "RETRY", 30)
    assert show(r, job_id)["state"] == b"queued"
    assert r.execute_command("WORKING", job_id) == 30
    job = show(r, job_id)
    assert job["state"] == b"active"
    assert 29_000 <= job["next-requeue-within"] <= 30_250
    assert r.execute_command("QLEN", "wk") == 0
    with pytest.raises(redis.ResponseError, match="^NOJOB Job not known"):
        r.execute_command("WORKING", "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001")


def test_working_after_half_the_ttl_is_too_late(r):
    job_id = addjob(r, "late", "x", "TTL", 2, "RETRY", 1)
    assert r.execute_command("WORKING", job_id) == 1

    def too_late() -> bool:
        try:
            r.execute_command("WORKING", job_id)
        except redis.ResponseError as exc:
            assert str(exc) == ("TOOLATE Half of job TTL already elapsed, you are no longer "
                                "allowed to postpone the next delivery.")
            return True
        return False
    wait_until(too_late, timeout=3, message="TOOLATE")
    assert show(r, job_id) is not None  # still before its expiry


def test_hundred_jobs_come_back_in_insertion_order(r):
    pipe = r.pipeline(transaction=False)
    for n in range(100):
        pipe.execute_command("ADDJOB", "order", "job-%d" % n, 0, "REPLICATE", 1, "RETRY", 0)
    ids = pipe.execute()
    assert len(set(ids)) == 100
    ctimes = [show(r, job_id)["ctime"] for job_id in ids]
    assert ctimes == sorted(ctimes) and len(set(ctimes)) == 100
    got = r.execute_command("GETJOB", "COUNT", 60, "FROM", "order")
    for n in range(40):
        got += r.execute_command("GETJOB", "FROM", "order")
    assert [job[1] for job in got] == ids
    assert [job[2] for job in got] == [b"job-%d" % n for n in range(100)]


def test_getjob_round_robins_over_queues(r):
    a1, a2 = addjob(r, "ra", "a1"), addjob(r, "ra", "a2")
    b1 = addjob(r, "rb", "b1")
    got = r.execute_command("GETJOB", "COUNT", 3, "FROM", "ra", "rb")
    assert [job[1] for job in got] == [a1, b1, a2]


def test_ackjob_and_fastack_and_deljob(r):
    ids = [addjob(r, "ack", str(n)) for n in range(3)]
    assert r.execute_command("ACKJOB", ids[0], ids[0]) == 1
    assert show(r, ids[0]) is None
    assert r.execute_command("FASTACK", ids[1], "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001") == 1
    assert r.execute_command("DELJOB", ids[2], ids[2]) == 1
    assert r.execute_command("QLEN", "ack") == 0
    assert info(r)["registered_jobs"] == "0"


# ------------------------------------------------------------------- PAUSE

def test_pause_in_refuses_addjob_but_not_nack_or_enqueue(r):
    job_id = addjob(r, "pz", "x")
    assert r.execute_command("GETJOB", "FROM", "pz")[0][1] == job_id
    assert r.execute_command("PAUSE", "pz", "in") == b"in"
    with pytest.raises(redis.ResponseError, match="^PAUSED Queue paused in input, try later$"):
        addjob(r, "pz", "y")
    assert r.execute_command("NACK", job_id) == 1
    assert r.execute_command("QLEN", "pz") == 1
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "pz")[0][1] == job_id
    assert r.execute_command("ENQUEUE", job_id) == 1
    assert r.execute_command("PAUSE", "pz", "state") == b"in"
    assert r.execute_command("PAUSE", "pz", "in", "out") == b"all"
    assert r.execute_command("PAUSE", "pz", "out", "none") == b"none"
    assert addjob(r, "pz", "y").startswith(b"D-")


def test_pause_out_blocks_consumers_until_cleared(r, conns):
    assert r.execute_command("PAUSE", "po", "out") == b"out"
    job_id = addjob(r, "po", "x")  # input still open
    assert r.execute_command("QLEN", "po") == 1
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "po") is None
    consumer = conns()
    consumer.send("GETJOB", "FROM", "po")
    wait_until(lambda: blocked_clients(r) == 1, message="GETJOB on a paused-out queue")
    stats = r.execute_command("QSTAT", "po")
    assert stats[stats.index(b"pause") + 1] == b"out"
    assert stats[stats.index(b"blocked") + 1] == 1
    assert r.execute_command("PAUSE", "po", "all") == b"all"
    assert blocked_clients(r) == 1
    assert r.execute_command("PAUSE", "po", "in") == b"in"  # output pause cleared
    assert consumer.read() == [[b"po", job_id, b"x"]]
    assert r.execute_command("PAUSE", "po", "none") == b"none"


def test_pause_state_of_unknown_queue_does_not_create_it(r):
    assert r.execute_command("PAUSE", "nq1", "state") == b"none"
    assert r.execute_command("PAUSE", "nq1", "none") == b"none"
    assert r.execute_command("QSTAT", "nq1") is None
    assert r.execute_command("PAUSE", "nq1", "in") == b"in"
    assert r.execute_command("QSTAT", "nq1") is not None
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("PAUSE", "nq1", "out", "sideways")
    assert r.execute_command("PAUSE", "nq1", "state") == b"in"  # unchanged


# ------------------------------------------------------------ QSTAT / scans

def test_qstat_fields(r, conns):
    for n in range(3):
        addjob(r, "qs", str(n))
    r.execute_command("GETJOB", "COUNT", 2, "FROM", "qs")
    r.execute_command("GETJOB", "NOHANG", "FROM", "qs")
    consumer = conns()
    consumer.send("GETJOB", "FROM", "qs")
    wait_until(lambda: blocked_clients(r) == 1, message="GETJOB to block")
    stats = r.execute_command("QSTAT", "qs")
    assert stats[0::2] == [b"name", b"len", b"age", b"idle", b"blocked", b"import-from",
                           b"import-rate", b"jobs-in", b"jobs-out", b"pause"]
    fields = dict(zip(stats[0::2], stats[1::2]))
    assert fields[b"name"] == b"qs"
    assert fields[b"len"] == 0
    assert 0 <= fields[b"age"] <= 2 and 0 <= fields[b"idle"] <= 2
    assert fields[b"blocked"] == 1
    assert fields[b"import-from"] == [] and fields[b"import-rate"] == 0
    assert fields[b"jobs-in"] == 3 and fields[b"jobs-out"] == 3
    assert fields[b"pause"] == b"none"
    # GETJOB on a missing queue creates it (even NOHANG)
    assert r.execute_command("QSTAT", "fresh") is None
    r.execute_command("GETJOB", "NOHANG", "FROM", "fresh")
    assert r.execute_command("QSTAT", "fresh")[3] == 0


def _scan_all(r: redis.Redis, command: str, during) -> tuple[set, int]:
    """Iterate a scan with COUNT 10, calling ``during`` between calls."""
    cursor = b"0"
    seen: set = set()
    calls = 0
    while True:
        reply = r.execute_command(command, cursor, "COUNT", 10)
        cursor, elements = reply
        assert isinstance(cursor, bytes) and cursor.isdigit()
        seen.update(elements)
        calls += 1
        assert calls < 10_000, "scan does not terminate"
        if cursor == b"0":
            return seen, calls
        during(calls)


def test_qscan_returns_every_queue_while_queues_are_added(r):
    pipe = r.pipeline(transaction=False)
    for n in range(1200):
        pipe.execute_command("ADDJOB", "sq-%d" % n, "x", 0)
    pipe.execute()
    added = []

    def add_more(call: int) -> None:
        name = "late-%d" % call
        addjob(r, name, "x")
        added.append(name.encode())
    seen, calls = _scan_all(r, "QSCAN", add_more)
    assert {b"sq-%d" % n for n in range(1200)} <= seen
    assert calls >= 1200 // 10 // 2  # COUNT bounds the work per call
    assert seen <= {b"sq-%d" % n for n in range(1200)} | set(added)


def test_jscan_returns_every_job_present_throughout(r):
    pipe = r.pipeline(transaction=False)
    for n in range(1500):
        pipe.execute_command("ADDJOB", "js-%d" % (n % 7), "x", 0)
    ids = pipe.execute()
    kept = set(ids[0::2])
    doomed = ids[1::2]

    def churn(call: int) -> None:
        # delete two jobs that are not in ``kept`` and add a new one
        victims = [doomed.pop() for _ in range(2) if doomed]
        if victims:
            r.execute_command("DELJOB", *victims)
        addjob(r, "js-new", "y")
    seen, calls = _scan_all(r, "JSCAN", churn)
    assert kept <= seen
    assert calls >= 1500 // 10 // 2
    # filters
    cursor, only = r.execute_command("JSCAN", "0", "BUSYLOOP", "QUEUE", "js-3", "STATE", "queued")
    assert cursor == b"0" and only
    assert all(show(r, job_id)["queue"] == b"js-3" for job_id in only[:20])


def test_qscan_filters_and_busyloop(r):
    for n in range(5):
        addjob(r, "long", str(n))
    addjob(r, "short", "x")
    r.execute_command("GETJOB", "NOHANG", "FROM", "empty")
    assert sorted(r.execute_command("QSCAN", "BUSYLOOP")[1]) == [b"empty", b"long", b"short"]
    assert r.execute_command("QSCAN", "BUSYLOOP", "MINLEN", 2) == [b"0", [b"long"]]
    assert sorted(r.execute_command("QSCAN", "BUSYLOOP", "MAXLEN", 1)[1]) == [b"empty",
                                                                             b"short"]
    assert r.execute_command("QSCAN", "BUSYLOOP", "IMPORTRATE", 1) == [b"0", []]


# ------------------------------------------------------------------ AUTH

def test_requirepass_and_auth(server):
    node = server
    node.stop()
    with open(node.config_path, "a") as f:
        f.write("requirepass s3cret\n")
    start_protected(node)
    conn = Conn(node.port)
    try:
        assert conn.raw_reply("PING") == NOAUTH
        assert conn.raw_reply("ADDJOB", "q", "x", 0) == NOAUTH
        assert conn.raw_reply("HELLO") == NOAUTH
        # unknown command and arity are checked before authentication
        assert conn.raw_reply("NOSUCH") == b"-ERR unknown command 'NOSUCH'\r\n"
        assert conn.raw_reply("ADDJOB") == (
            b"-ERR wrong number of arguments for 'addjob' command\r\n")
        assert conn.raw_reply("AUTH", "wrong") == b"-ERR invalid password\r\n"
        assert conn.raw_reply("AUTH", "s3cret") == b"+OK\r\n"
        assert conn.raw_reply("PING") == b"+PONG\r\n"
        # a wrong password makes the connection unauthenticated again
        assert conn.raw_reply("AUTH", "nope") == b"-ERR invalid password\r\n"
        assert conn.raw_reply("PING") == NOAUTH
        assert conn.raw_reply("AUTH", "x" * 600) == b"-ERR invalid password\r\n"
    finally:
        conn.close()
    authed = plain(node.client(password="s3cret"))  # redis-py authenticates in HELLO 3
    assert authed.execute_command("PING") == b"PONG"
    # CONFIG SET requirepass "" turns authentication off
    authed.execute_command("CONFIG", "SET", "requirepass", "")
    assert node.raw(b"PING\r\n") == b"+PONG\r\n"
    assert node.raw(b"AUTH x\r\n") == b"-ERR Client sent AUTH, but no password is set\r\n"


# ----------------------------------------------------------------- CONFIG

CONFIG_VALUES = [
    # (name, value set, value read back)
    ("timeout", "30", b"30"),
    ("maxmemory", "2mb", b"2097152"),
    ("maxmemory", "3000k", b"3000000"),
    ("maxmemory-policy", "noeviction", b"noeviction"),
    ("hz", "0", b"1"),
    ("hz", "1000", b"500"),
    ("hz", "20", b"20"),
    ("loglevel", "warning", b"warning"),
    ("slowlog-log-slower-than", "5000", b"5000"),
    ("slowlog-max-len", "64", b"64"),
    ("cluster-node-timeout", "3000", b"3000"),
    ("appendfsync", "always", b"always"),
    ("activerehashing", "no", b"no"),
    ("tcp-keepalive", "60", b"60"),
    ("requirepass", "", b""),
    ("latency-monitor-threshold", "100", b"100"),
    ("client-output-buffer-limit", "normal 1mb 512kb 10",
     b"normal 1048576 524288 10"),
]


def test_config_set_and_get(r):
    for name, value, shown in CONFIG_VALUES:
        assert r.execute_command("CONFIG", "SET", name, value) == b"OK", name
        assert r.execute_command("CONFIG", "GET", name) == {name.encode(): shown}, name
    assert r.execute_command("CONFIG", "GET", "nosuch*") == {}
    names = list(r.execute_command("CONFIG", "GET", "maxmemory*"))
    # The original's three, then the extension (Redis 7's name).
    assert names == [b"maxmemory", b"maxmemory-policy", b"maxmemory-samples",
                     b"maxmemory-clients"]
    everything = r.execute_command("CONFIG", "GET", "*")
    assert b"port" in everything and everything[b"dir"].startswith(b"/")


CONFIG_ERRORS = [
    (["CONFIG", "SET", "nosuch", "1"], b"-ERR Unsupported CONFIG parameter: nosuch\r\n"),
    (["CONFIG", "SET", "port", "1"],
     b"-ERR CONFIG SET failed (possibly related to argument 'port') - can't set immutable "
     b"config\r\n"),
    (["CONFIG", "SET", "timeout", "abc"],
     b"-ERR Invalid argument 'abc' for CONFIG SET 'timeout'\r\n"),
    (["CONFIG", "SET", "timeout", "-1"],
     b"-ERR Invalid argument '-1' for CONFIG SET 'timeout'\r\n"),
    (["CONFIG", "SET", "hz", "-1"], b"-ERR Invalid argument '-1' for CONFIG SET 'hz'\r\n"),
    (["CONFIG", "SET", "maxmemory", "lots"],
     b"-ERR Invalid argument 'lots' for CONFIG SET 'maxmemory'\r\n"),
    (["CONFIG", "SET", "loglevel", "loud"],
     b"-ERR Invalid argument 'loud' for CONFIG SET 'loglevel'\r\n"),
    (["CONFIG", "SET", "appendfsync", "sometimes"],
     b"-ERR Invalid argument 'sometimes' for CONFIG SET 'appendfsync'\r\n"),
    (["CONFIG", "SET", "slowlog-log-slower-than", "-1"],
     b"-ERR Invalid argument '-1' for CONFIG SET 'slowlog-log-slower-than'\r\n"),
    (["CONFIG", "SET", "activerehashing", "maybe"],
     b"-ERR Invalid argument 'maybe' for CONFIG SET 'activerehashing'\r\n"),
    (["CONFIG", "SET", "timeout"], b"-ERR Wrong number of arguments for CONFIG SET\r\n"),
    (["CONFIG", "GET"], b"-ERR Wrong number of arguments for CONFIG GET\r\n"),
    (["CONFIG", "GET", "a", "b"], b"-ERR Wrong number of arguments for CONFIG GET\r\n"),
    (["CONFIG", "REWRITE", "now"], b"-ERR Wrong number of arguments for CONFIG REWRITE\r\n"),
    (["CONFIG", "RESETSTAT", "x"],
     b"-ERR Wrong number of arguments for CONFIG RESETSTAT\r\n"),
    (["CONFIG", "FROB"],
     b"-ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE\r\n"),
    (["CONFIG"], b"-ERR wrong number of arguments for 'config' command\r\n"),
]


def test_config_error_texts(conns, r):
    conn = conns()
    for request, expected in CONFIG_ERRORS:
        assert conn.raw_reply(*request) == expected, request
    assert r.execute_command("CONFIG", "GET", "timeout") == {b"timeout": b"0"}
    assert conn.raw_reply("CONFIG", "RESETSTAT") == b"+OK\r\n"


def test_config_rewrite_survives_a_restart(server_factory):
    node = server_factory(config="# operator comment: keep me\nmaxmemory 100mb\ntimeout 5\n")
    conn = Conn(node.port)
    for name, value in (("maxmemory", "50mb"), ("timeout", "30"), ("slowlog-max-len", "64"),
                        ("maxmemory-policy", "noeviction"), ("hz", "20"),
                        ("requirepass", "pa ss\"word")):
        assert conn.call("CONFIG", "SET", name, value) == b"OK"
    # as in the original, a connection that never authenticated must AUTH now
    assert str(conn.call("CONFIG", "REWRITE")) == "NOAUTH Authentication required."
    assert conn.call("AUTH", 'pa ss"word') == b"OK"
    assert conn.call("CONFIG", "REWRITE") == b"OK"
    conn.close()
    text = node.config_path.read_text()
    lines = text.splitlines()
    assert "# operator comment: keep me" in lines
    assert "maxmemory 50mb" in lines and "maxmemory 100mb" not in lines
    assert lines.index("maxmemory 50mb") < lines.index("# Generated by CONFIG REWRITE")
    assert "timeout 30" in lines
    assert 'requirepass "pa ss\\"word"' in lines
    assert text.count("# Generated by CONFIG REWRITE") == 1
    node.stop()
    start_protected(node)
    client = plain(node.client(password='pa ss"word'))
    expected = {b"maxmemory": b"52428800", b"timeout": b"30", b"slowlog-max-len": b"64",
                b"maxmemory-policy": b"noeviction", b"hz": b"20",
                b"requirepass": b'pa ss"word', b"port": str(node.port).encode()}
    for name, value in expected.items():
        assert client.execute_command("CONFIG", "GET", name) == {name: value}
    # a second rewrite with nothing changed keeps the file as it is
    assert client.execute_command("CONFIG", "REWRITE") == b"OK"
    assert node.config_path.read_text() == text


def test_config_rewrite_without_config_file(tmp_path):
    proc = DisqueProcess(tmp_path / "node", config_file=False).start()
    assert proc.call("CONFIG", "GET", "bind") == {b"bind": b"127.0.0.1"}  # directives apply
    with pytest.raises(redis.ResponseError,
                       match="^The server is running without a config file$"):
        proc.call("CONFIG", "REWRITE")
    assert proc.stop() == 0
    assert list(proc.dir.glob("*.conf")) == [proc.dir / "nodes.conf"]


# ---------------------------------------------------------------- MONITOR

MONITOR_LINE = re.compile(rb'\+(\d{10})\.(\d{6}) \[127\.0\.0\.1:(\d+)\] (.*)\r\n')


def test_monitor_streams_commands_of_other_clients(conns):
    monitor = conns()
    assert monitor.raw_reply("MONITOR") == b"+OK\r\n"
    worker = conns()
    worker_port = worker.sock.getsockname()[1]
    job_id = worker.call("ADDJOB", "mq", "hello world", 0)
    worker.call("CONFIG", "GET", "timeout")  # admin commands are not shown
    worker.call("QLEN", b'we"ird\n\x01')
    worker.sendall(b"PING\r\n")
    assert worker.read() == b"PONG"
    data = b""
    while data.count(b"\r\n") < 3:
        data += monitor.sock.recv(65536)
    lines = [MONITOR_LINE.fullmatch(line + b"\r\n") for line in data.split(b"\r\n")[:3]]
    assert all(lines), data
    assert [int(m.group(3)) for m in lines] == [worker_port] * 3
    assert [m.group(4) for m in lines] == [
        b'"ADDJOB" "mq" "hello world" "0"', b'"QLEN" "we\\"ird\\n\\x01"', b'"PING"']
    assert abs(int(lines[0].group(1)) - time.time()) < 60
    assert job_id.startswith(b"D-")


# ----------------------------------------------------------------- CLIENT

CLIENT_LINE = re.compile(
    rb"id=(\d+) addr=127\.0\.0\.1:(\d+) fd=\d+ name=(\S*) age=\d+ idle=\d+ flags=(\w+) "
    rb"qbuf=\d+ qbuf-free=\d+ obl=\d+ oll=\d+ omem=\d+ events=r?w? cmd=(\S+)")


def test_client_list_id_setname_getname(conns):
    first, second = conns(), conns()
    first_id, second_id = first.call("CLIENT", "ID"), second.call("CLIENT", "ID")
    assert isinstance(first_id, int) and second_id > first_id
    assert first.call("CLIENT", "GETNAME") is None
    assert first.call("CLIENT", "SETNAME", "worker-1") == b"OK"
    assert first.call("CLIENT", "GETNAME") == b"worker-1"
    error = first.call("CLIENT", "SETNAME", "has space")
    assert str(error) == ("ERR Client names cannot contain spaces, newlines or special "
                          "characters.")
    listing = second.call("CLIENT", "LIST").decode().splitlines()
    entries = {}
    for line in listing:
        match = CLIENT_LINE.fullmatch(line.encode())
        assert match, line
        entries[int(match.group(1))] = match
    assert entries[first_id].group(3) == b"worker-1"
    assert int(entries[first_id].group(2)) == first.sock.getsockname()[1]
    assert entries[first_id].group(5) == b"client"
    assert entries[second_id].group(4) == b"N"
    assert first.call("CLIENT", "SETNAME", "") == b"OK"
    assert first.call("CLIENT", "GETNAME") is None
    assert str(first.call("CLIENT", "FROB")) == (
        "ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | SETNAME connection-name)")


def test_client_kill(r, conns):
    victim, other = conns(), conns()
    assert victim.call("PING") == b"PONG"  # accepted by the server
    victim_addr = "127.0.0.1:%d" % victim.sock.getsockname()[1]
    assert r.execute_command("CLIENT", "KILL", victim_addr) == b"OK"
    assert victim.wait_closed() == b""
    with pytest.raises(redis.ResponseError, match="^No such client$"):
        r.execute_command("CLIENT", "KILL", victim_addr)
    other_id = other.call("CLIENT", "ID")
    assert r.execute_command("CLIENT", "KILL", "ID", other_id) == 1
    assert other.wait_closed() == b""
    assert r.execute_command("CLIENT", "KILL", "ID", 999999) == 0
    with pytest.raises(redis.ResponseError, match="^Unknown client type 'pubsub'$"):
        r.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
    # SKIPME yes (default) spares the caller
    assert r.execute_command("CLIENT", "KILL", "TYPE", "normal") == 0
    assert r.execute_command("PING") == b"PONG"


# ---------------------------------------------------------- SLOWLOG/LATENCY

def test_slowlog(r):
    r.execute_command("CONFIG", "SET", "slowlog-log-slower-than", 0)
    assert r.execute_command("SLOWLOG", "RESET") == b"OK"
    r.execute_command("PING")
    r.execute_command("QLEN", "x" * 200)
    with pytest.raises(redis.ResponseError, match="^BADID"):
        r.execute_command("ACKJOB", *["bad%d" % n for n in range(40)])
    entries = r.execute_command("SLOWLOG", "GET")
    newest, longarg, ping = entries[0], entries[1], entries[2]
    assert [len(e) for e in entries[:3]] == [4, 4, 4]
    assert newest[0] > longarg[0] > ping[0]  # ids, newest first
    assert all(abs(e[1] - time.time()) < 60 and e[2] >= 0 for e in entries[:3])
    assert ping[3] == [b"PING"]
    assert longarg[3] == [b"QLEN", b"x" * 128 + b"... (72 more bytes)"]
    assert len(newest[3]) == 32
    assert newest[3][:2] == [b"ACKJOB", b"bad0"]
    assert newest[3][-1] == b"... (10 more arguments)"
    assert len(r.execute_command("SLOWLOG", "GET", 1)) == 1
    assert r.execute_command("SLOWLOG", "LEN") >= 4
    r.execute_command("CONFIG", "SET", "slowlog-max-len", 3)
    for _ in range(5):
        r.execute_command("PING")
    assert r.execute_command("SLOWLOG", "LEN") == 3
    r.execute_command("CONFIG", "SET", "slowlog-log-slower-than", 10_000_000)
    r.execute_command("SLOWLOG", "RESET")
    r.execute_command("PING")
    assert r.execute_command("SLOWLOG", "LEN") == 0
    with pytest.raises(redis.ResponseError,
                       match=r"^Unknown SLOWLOG subcommand or wrong # of args\. "
                             r"Try GET, RESET, LEN\.$"):
        r.execute_command("SLOWLOG", "FROB")


def test_latency_monitor(r):
    assert r.execute_command("LATENCY", "LATEST") == []
    r.execute_command("CONFIG", "SET", "latency-monitor-threshold", 50)
    assert r.execute_command("DEBUG", "SLEEP", "0.1") == b"OK"
    latest = r.execute_command("LATENCY", "LATEST")
    assert len(latest) == 1
    event, when, last_ms, max_ms = latest[0]
    assert event == b"command"
    assert abs(when - time.time()) < 60 and 100 <= last_ms <= max_ms < 5000
    history = r.execute_command("LATENCY", "HISTORY", "command")
    assert len(history) == 1 and history[0][1] == last_ms
    assert r.execute_command("LATENCY", "HISTORY", "nosuch") == []
    assert b"command" in r.execute_command("LATENCY", "GRAPH", "command")
    assert isinstance(r.execute_command("LATENCY", "DOCTOR"), bytes)
    assert r.execute_command("LATENCY", "RESET") == 1
    assert r.execute_command("LATENCY", "LATEST") == []
    with pytest.raises(redis.ResponseError, match="^No samples available for event 'command'$"):
        r.execute_command("LATENCY", "GRAPH", "command")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("LATENCY", "FROB")


# ---------------------------------------------------------------- COMMAND

# spec: commands.md "Command table (name, arity, flags)"
SPEC_COMMANDS = {
    "auth": (2, "rlF"), "ping": (-1, "rF"), "info": (-1, "rl"), "shutdown": (-1, "arl"),
    "monitor": (1, "ar"), "debug": (-2, "a"), "config": (-2, "ar"), "cluster": (-2, "ar"),
    "client": (-2, "ar"), "slowlog": (-2, "r"), "time": (1, "rF"), "command": (0, "rl"),
    "latency": (-2, "arl"), "addjob": (-4, "wmF"), "getjob": (-2, "wF"),
    "ackjob": (-1, "wF"), "fastack": (-1, "wF"), "deljob": (-1, "wF"), "show": (2, "rF"),
    "loadjob": (2, "w"), "bgrewriteaof": (1, "ar"), "qlen": (2, "rF"), "qpeek": (3, "r"),
    "qstat": (2, "rF"), "qscan": (-1, "r"), "jscan": (-1, "r"), "enqueue": (-1, "mwF"),
    "nack": (-1, "mwF"), "dequeue": (-1, "wF"), "working": (2, "wF"), "pause": (-3, "rF"),
}
FLAG_WORDS = [("w", b"write"), ("r", b"readonly"), ("m", b"denyoom"), ("a", b"admin"),
              ("l", b"loading"), ("F", b"fast")]


def test_command_table(r, conns):
    table = r.execute_command("COMMAND")
    assert r.execute_command("COMMAND", "COUNT") == len(table)
    by_name = {entry[0].decode(): entry for entry in table}
    assert len(by_name) == len(table)
    for name, (arity, flags) in SPEC_COMMANDS.items():
        entry = by_name[name]
        words = [word for letter, word in FLAG_WORDS if letter in flags]
        assert entry == [name.encode(), arity, words, 0, 0, 0], name
    # The spec table says HELLO is (1, "rF"); this server also accepts the
    # ``HELLO <protover> ...`` handshake RESP3 clients (redis-py 8) send on
    # connect, even while loading, hence -1 and "loading". Bare HELLO and
    # ``HELLO x`` still answer as in the spec (test_protocol_bytes).
    assert by_name["hello"] == [b"hello", -1, [b"readonly", b"loading", b"fast"], 0, 0, 0]
    info_reply = r.execute_command("COMMAND", "INFO", "addjob", "nosuch", "GETJOB")
    assert info_reply[0] == by_name["addjob"] and info_reply[1] is None
    assert info_reply[2] == by_name["getjob"]
    conn = conns()
    raw = conn.raw_reply("COMMAND", "INFO", "show")
    assert raw == (b"*1\r\n*6\r\n$4\r\nshow\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n"
                   b":0\r\n:0\r\n:0\r\n")  # flags are status replies
    assert conn.raw_reply("COMMAND", "FROB") == (
        b"-ERR Unknown subcommand or wrong number of arguments.\r\n")


# ------------------------------------------------------------ INFO / TIME

INFO_KEYS = {
    "Server": ["disque_version", "disque_git_sha1", "disque_git_dirty", "disque_build_id",
               "os", "arch_bits", "multiplexing_api", "gcc_version", "process_id", "run_id",
               "tcp_port", "uptime_in_seconds", "uptime_in_days", "hz", "executable",
               "config_file"],
    "Clients": ["connected_clients", "client_longest_output_list",
                "client_biggest_input_buf", "blocked_clients"],
    "Memory": ["used_memory", "used_memory_human", "used_memory_rss", "used_memory_peak",
               "used_memory_peak_human", "mem_fragmentation_ratio", "mem_allocator"],
    "Jobs": ["registered_jobs"],
    "Queues": ["registered_queues"],
    "Persistence": ["loading", "aof_enabled", "aof_state", "aof_rewrite_in_progress",
                    "aof_rewrite_scheduled", "aof_last_rewrite_time_sec",
                    "aof_current_rewrite_time_sec", "aof_last_bgrewrite_status",
                    "aof_last_write_status"],
    "Stats": ["total_connections_received", "total_commands_processed",
              "instantaneous_ops_per_sec", "total_net_input_bytes", "total_net_output_bytes",
              "instantaneous_input_kbps", "instantaneous_output_kbps", "rejected_connections",
              "latest_fork_usec"],
    "CPU": ["used_cpu_sys", "used_cpu_user", "used_cpu_sys_children",
            "used_cpu_user_children"],
}


def _sections(text: bytes) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    for block in text.decode().split("\r\n\r\n"):
        lines = [line for line in block.split("\r\n") if line]
        if lines:
            assert lines[0].startswith("# "), block
            sections[lines[0][2:]] = [line.partition(":")[0] for line in lines[1:]]
    return sections


def test_info_sections(server, r):
    addjob(r, "iq", "x")
    default = r.execute_command("INFO")
    assert default.endswith(b"\r\n") and not default.endswith(b"\r\n\r\n")
    sections = _sections(default)
    assert list(sections) == list(INFO_KEYS)
    for name, keys in INFO_KEYS.items():
        assert sections[name][:len(keys)] == keys, name
    assert _sections(r.execute_command("INFO", "default")) == sections
    everything = _sections(r.execute_command("INFO", "all"))
    assert list(everything) == list(INFO_KEYS) + ["Commandstats"]
    assert "cmdstat_addjob" in everything["Commandstats"]
    stats = r.execute_command("INFO", "commandstats").decode()
    assert re.search(r"^cmdstat_addjob:calls=1,usec=\d+,usec_per_call=\d+\.\d\d\r$",
                     stats, re.M)
    assert r.execute_command("INFO", "SERVER").startswith(b"# Server\r\n")
    assert r.execute_command("INFO", "nosuchsection") == b""
    assert server.raw(b"INFO nosuchsection\r\n") == b"$0\r\n\r\n"
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("INFO", "server", "clients")
    fields = info(r)
    assert fields["tcp_port"] == str(server.port)
    assert fields["process_id"] == str(server.proc.pid)
    assert fields["config_file"] == str(server.config_path)
    assert fields["disque_version"] == "1.0-rc1"
    assert re.fullmatch("[0-9a-f]{40}", fields["run_id"])
    assert fields["registered_jobs"] == "1" and fields["registered_queues"] == "1"
    assert fields["aof_state"] == "off"


def test_time(r):
    seconds, micros = r.execute_command("TIME")
    assert abs(int(seconds) + int(micros) / 1e6 - time.time()) < 5
    assert 0 <= int(micros) < 1_000_000


def server_time_us(reply: list) -> int:
    """A TIME reply → microseconds."""
    return int(reply[0]) * 1_000_000 + int(reply[1])


def test_debug_sleep_blocks_the_whole_server(server, conns):
    sleeper = conns()
    for _attempt in range(5):
        # TIME and DEBUG SLEEP arrive together and run in one loop turn.
        sleeper.sendall(encode_request(["TIME"]) + encode_request(["DEBUG", "SLEEP", "0.5"]))
        other = conns()
        other.send("TIME")
        served = server_time_us(other.read())
        before = server_time_us(sleeper.read())
        assert sleeper.read() == b"OK"
        if served >= before:  # the server's clock: not served during the sleep
            assert served - before >= 500_000, served - before
            return
        # the other TIME was served before the DEBUG SLEEP arrived: try again
    pytest.fail("the other client was always served before DEBUG SLEEP started")


# --------------------------------------------------------------- process

def test_shutdown_exits_with_zero_and_no_reply(server, conns):
    conn = conns()
    assert conn.raw_reply("SHUTDOWN", "bogus") == b"-ERR syntax error\r\n"
    assert conn.raw_reply("SHUTDOWN", "a", "b") == b"-ERR syntax error\r\n"
    conn.send("SHUTDOWN")
    assert conn.wait_closed() == b""
    assert server.proc.wait(10) == 0


def test_sigterm_exits_cleanly(server):
    assert server.call("PING") in (True, b"PONG")
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(10) == 0
    log = server.log_path.read_text()
    assert "Received SIGTERM" in log and "bye bye" in log


def test_maxclients(r, conns, server):
    r.execute_command("CONFIG", "SET", "maxclients", 2)
    assert r.execute_command("PING") == b"PONG"
    second = conns()
    assert second.call("PING") == b"PONG"
    third = conns()
    assert third.wait_closed() == b"-ERR max number of clients reached\r\n"
    assert info(r)["rejected_connections"] == "1"  # the third one only
    second.close()
    wait_until(lambda: int(info(r)["connected_clients"]) == 1, message="a free slot")
    fourth = conns()
    assert fourth.call("PING") == b"PONG"
    r.execute_command("CONFIG", "SET", "maxclients", 10000)


def test_idle_clients_are_closed_but_blocked_ones_are_not(r, conns):
    blocked = conns()
    blocked.send("GETJOB", "FROM", "idleq")
    wait_until(lambda: blocked_clients(r) == 1, message="GETJOB to block")
    idle = conns()
    assert idle.call("PING") == b"PONG"
    r.execute_command("CONFIG", "SET", "timeout", 1)
    started = time.monotonic()
    # r keeps talking while it polls, so it is never idle itself
    wait_until(lambda: r.execute_command("PING") and idle.is_closed(), timeout=6,
               message="the idle client to be closed")
    assert time.monotonic() - started >= 0.5
    assert blocked_clients(r) == 1
    r.execute_command("CONFIG", "SET", "timeout", 0)
    job_id = addjob(r, "idleq", "still here")
    assert blocked.read() == [[b"idleq", job_id, b"still here"]]


def _peak_rss_mb(pid: int) -> int:
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmHWM")


QPEEK_BIG = encode_request(["QPEEK", "big", 1])


def test_slow_reader_past_the_hard_output_limit_is_disconnected(server, r):
    r.execute_command("CONFIG", "SET", "client-output-buffer-limit", "normal 1mb 0 0")
    addjob(r, "big", b"x" * 100_000)
    before = _peak_rss_mb(server.proc.pid)
    reader = Conn(server.port)
    try:
        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        assert reader.call("PING") == b"PONG"  # accepted: it counts in connected_clients
        try:
            reader.sendall(QPEEK_BIG * 20_000)  # 2 GB of replies, never read
        except OSError:
            pass  # disconnected while still sending the requests
        wait_until(lambda: int(info(r)["connected_clients"]) == 1, timeout=20,
                   message="the slow reader to be disconnected")
    finally:
        reader.close()
    assert r.execute_command("PING") == b"PONG"
    assert _peak_rss_mb(server.proc.pid) - before < 100
    assert "closed for overcoming of output buffer limits" in server.log_path.read_text()


def test_slow_reader_without_limit_is_paused_not_buffered(server, r):
    addjob(r, "big", b"x" * 100_000)
    reply = b"*1\r\n*3\r\n$3\r\nbig\r\n$40\r\n%s\r\n$100000\r\n%s\r\n" % (
        r.execute_command("QPEEK", "big", 1)[0][1], b"x" * 100_000)
    before = _peak_rss_mb(server.proc.pid)
    reader = Conn(server.port)
    try:
        reader.sendall(QPEEK_BIG * 2000)  # 200 MB of replies
        # while the reader does not read, others are served and nothing piles up
        for _ in range(20):
            assert r.execute_command("QLEN", "big") == 1
        listing = r.execute_command("CLIENT", "LIST").decode()
        omem = max(int(n) for n in re.findall(r"omem=(\d+)", listing))
        assert omem < 8 * 1024 * 1024
        received = 0
        tail = b""
        while received < 2000 * len(reply):
            data = reader.sock.recv(1 << 20)
            assert data, "closed after %d bytes" % received
            received += len(data)
            tail = (tail + data)[-len(reply):]
        assert received == 2000 * len(reply) and tail == reply
        assert reader.call("PING") == b"PONG"
    finally:
        reader.close()
    assert _peak_rss_mb(server.proc.pid) - before < 100


# ---------------------------------------------------------------- memory

def test_maxmemory_evicts_idle_queues_and_refuses_addjob(r, conns):
    for name in ("m1", "m2", "m3"):
        r.execute_command("GETJOB", "NOHANG", "FROM", name)
    assert info(r)["registered_queues"] == "3"
    assert r.execute_command("CONFIG", "SET", "maxmemory", 1) == b"OK"
    wait_until(lambda: info(r)["registered_queues"] == "0", timeout=8,
               message="idle empty queues to be evicted")
    conn = conns()
    assert conn.raw_reply("ADDJOB", "m1", "x", 0) == OOM
    assert conn.raw_reply("PING") == b"+PONG\r\n"  # not a deny-oom command
    assert conn.raw_reply("ACKJOB") == b":0\r\n"
    r.execute_command("CONFIG", "SET", "maxmemory", "1gb")
    assert addjob(r, "m1", "x").startswith(b"D-")


def test_used_memory_follows_the_dataset(r):
    addjob(r, "mem", "warm-up")  # the queue object itself costs memory too
    before = int(info(r, "memory")["used_memory"])
    pipe = r.pipeline(transaction=False)
    for n in range(100):
        pipe.execute_command("ADDJOB", "mem", b"%03d" % n + b"y" * 10_000, 0)
    ids = pipe.execute()
    grown = int(info(r, "memory")["used_memory"])
    assert grown - before >= 100 * 10_000
    assert r.execute_command("DELJOB", *ids) == 100
    after = int(info(r, "memory")["used_memory"])
    assert after <= before + 1024
    assert int(info(r, "memory")["used_memory_peak"]) >= grown


def test_blocked_getjob_in_a_thread_with_redis_py(r, server):
    """redis-py's own blocking call returns the job pushed by another client."""
    consumer = plain(server.client())
    result = {}
    thread = threading.Thread(target=lambda: result.update(
        job=consumer.execute_command("GETJOB", "TIMEOUT", 10_000, "FROM", "tq2")))
    thread.start()
    wait_until(lambda: blocked_clients(r) == 1, message="redis-py GETJOB to block")
    job_id = addjob(r, "tq2", "threaded")
    thread.join(10)
    assert result["job"] == [[b"tq2", job_id, b"threaded"]]
