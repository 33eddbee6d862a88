"""A rolling upgrade with real processes (docs/operations.md, "Upgrading a
cluster"): three nodes run the code of an earlier commit, AOF on, while
producers and consumers work through ``DisqueClient``; each node in turn
gets the controlled restart of docs/persistence.md and comes back on the
current code. Every job acknowledged to a producer must reach a consumer
(at least once), and the clients may meet only the errors they retry.

The earlier code is the commit before the bus formats were agreed per
link, unpacked from git and run as pure Python (no second compile); the
current code runs as the suite does. Without git or that commit (a
tarball, a shallow clone) the test is skipped and says why.
"""

from __future__ import annotations

import io
import random
import re
import shutil
import socket
import struct
import subprocess
import tarfile
import threading
from collections import Counter
from pathlib import Path

import msgpack
import pytest
import redis

from disque.client import DisqueClient
from disque.client.errors import CONNECTION_ERRORS, DisqueError, ResponseError
from disque.cluster.wire import BUS_FORMATS
from tests.support.cluster import Cluster
from tests.support.process import REPO, DisqueProcess, wait_until
from tests.support.teardown import expected_log, fail_on

pytestmark = pytest.mark.cluster

# The code before this version's bus format agreement: it sends no formats.
BEFORE = "aac858209cc7144a7f1109fcebe466754457f91e"
QUEUE = "upgrade"
# Acknowledged means durable: the record is on disk before the reply.
CONFIG = "appendfsync always\n"
PRODUCERS = 2
CONSUMERS = 2
RETRY_S = 2  # a job delivered to a consumer the restart cut off comes back this soon
ADD_TIMEOUT_MS = 5000
JOBS_PER_PHASE = 30  # acknowledged after each restart before the next one
PHASE_WAIT_S = 60.0
DELIVERY_WAIT_S = 60.0
# The errors a client of this test retries: a node still loading its AOF,
# replicas not reached in time while a node restarts, no node answering.
RETRIED = ("LOADING", "NOREPL")


@pytest.fixture(scope="module")
def before_tree(tmp_path_factory) -> Path:
    """The package as it was at BEFORE, unpacked from git."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed: the rolling upgrade starts nodes on the code of "
                    "commit %s" % BEFORE[:7])
    found = subprocess.run([git, "-C", str(REPO), "cat-file", "-e", BEFORE + "^{commit}"],
                           capture_output=True)
    if found.returncode != 0:
        pytest.skip("commit %s is not in this checkout (a tarball or a shallow clone): the "
                    "rolling upgrade starts nodes on its code" % BEFORE[:7])
    archive = subprocess.run([git, "-C", str(REPO), "archive", "--format=tar", BEFORE, "disque"],
                             capture_output=True, check=True).stdout
    target = tmp_path_factory.mktemp("before")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target)  # our own repository's files
    return target


def before_env(tree: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(tree), "DISQUE_PURE_PYTHON": "1"}


@pytest.fixture
def old_cluster(tmp_path, request, before_tree):
    """Three nodes on the code of BEFORE, joined, AOF on; judged at teardown."""
    cluster = Cluster(tmp_path / "cluster", 3, config=CONFIG, appendonly=True)
    cluster.expect_log(*expected_log(request))
    for node in cluster.nodes:
        node.env = before_env(before_tree)
    try:
        cluster.start()
        yield cluster
    finally:
        fail_on(cluster.verify())


class Workload:
    """Producers and consumers on every node through DisqueClient; what
    each saw is recorded."""

    def __init__(self, cluster: Cluster) -> None:
        self.nodes = ",".join("127.0.0.1:%d" % node.port for node in cluster.nodes)
        self.lock = threading.Lock()
        self.acknowledged: dict[str, str] = {}  # job ID -> body, once ADDJOB replied it
        self.delivered: set[str] = set()
        self.retried: Counter[str] = Counter()
        self.unexpected: list[str] = []
        self.producers_stopped = threading.Event()
        self.consumers_stopped = threading.Event()
        self.threads = [threading.Thread(target=self._produce, args=(i,), daemon=True)
                        for i in range(PRODUCERS)]
        self.threads += [threading.Thread(target=self._consume, daemon=True)
                         for _ in range(CONSUMERS)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.producers_stopped.set()
        self.consumers_stopped.set()
        for thread in self.threads:
            thread.join(DELIVERY_WAIT_S)
        assert not any(thread.is_alive() for thread in self.threads), "a client is stuck"

    def _client(self) -> DisqueClient:
        return DisqueClient(self.nodes, socket_timeout=10, connect_timeout=2,
                            propagate_trace=False)

    def _failed(self, exc: Exception) -> None:
        """An error a client saw: retried if it is one of RETRIED or no node
        answered, else recorded as unexpected."""
        text = str(exc)
        if isinstance(exc, ResponseError):
            kind = text.split(" ", 1)[0]
            ok = kind in RETRIED
        else:
            kind = type(exc).__name__
            ok = isinstance(exc, (DisqueError, *CONNECTION_ERRORS))
        with self.lock:
            if ok:
                self.retried[kind] += 1
            else:
                self.unexpected.append("%s: %s" % (kind, text))

    def _produce(self, producer: int) -> None:
        client = self._client()
        sequence = 0
        while not self.producers_stopped.is_set():
            body = "p%d-%d" % (producer, sequence)
            sequence += 1
            try:
                job_id = client.add(QUEUE, body, timeout_ms=ADD_TIMEOUT_MS,
                                    replicate=2 + producer % 2, retry=RETRY_S)
            except Exception as exc:
                self._failed(exc)
                self.producers_stopped.wait(0.05)
                continue
            with self.lock:
                self.acknowledged[job_id] = body
            self.producers_stopped.wait(0.01)
        client.close()

    def _consume(self) -> None:
        client = self._client()
        while not self.consumers_stopped.is_set():
            try:
                jobs = client.get_jobs(QUEUE, count=10, timeout_ms=200)
                if jobs:
                    with self.lock:
                        self.delivered.update(job.id for job in jobs)
                    client.ack_jobs([job.id for job in jobs])
            except Exception as exc:
                self._failed(exc)
                self.consumers_stopped.wait(0.05)
        client.close()

    def acknowledged_count(self) -> int:
        with self.lock:
            return len(self.acknowledged)

    def undelivered(self) -> set[str]:
        with self.lock:
            return set(self.acknowledged) - self.delivered


def controlled_restart(node: DisqueProcess, env: dict[str, str] | None) -> None:
    """docs/persistence.md's controlled restart, starting the node again with ``env``."""
    assert node.call("CONFIG", "SET", "aof-enqueue-jobs-once", "yes") == b"OK"
    assert node.call("CONFIG", "REWRITE") == b"OK"
    with pytest.raises(redis.ConnectionError):
        node.call("SHUTDOWN", "REWRITE-AOF")  # no reply: the process exits
    assert node.wait_exit(30) == 0, node.tail_log()
    node.env = env
    node.start()


def bus_info(cluster: Cluster, i: int) -> dict:
    return cluster.info_section(i, "bus")


def old_nodes_complaints(node: DisqueProcess) -> list[str]:
    """What a node of the earlier code logged about the bus frames it read."""
    text = node.log_path.read_text(errors="replace")
    return [line for line in text.splitlines()
            if "Bad bus message" in line or "Bus protocol error" in line]


def test_rolling_upgrade_loses_no_acknowledged_job(old_cluster, before_tree, run_seed):
    cluster = old_cluster
    order = list(range(len(cluster)))
    random.Random(run_seed).shuffle(order)
    print("seed %d: nodes upgraded in the order %s" % (run_seed, order))
    workload = Workload(cluster)
    workload.start()
    try:
        def progress(what: str) -> None:
            target = workload.acknowledged_count() + JOBS_PER_PHASE
            wait_until(lambda: workload.acknowledged_count() >= target, PHASE_WAIT_S,
                       interval=0.1, message="%d more jobs acknowledged %s (%s)"
                       % (JOBS_PER_PHASE, what, dict(workload.retried)))

        progress("on the old cluster")
        for step, i in enumerate(order):
            controlled_restart(cluster.nodes[i], None)
            cluster.wait_joined()
            progress("after node %d's upgrade" % i)
            if step == 0:
                # The new node speaks format 1 to the old ones, which named none.
                info = bus_info(cluster, i)
                assert info["bus_links_unversioned"] == 4, info
                assert info["bus_format_refusals"] == 0, info
            for j in order[step + 1:]:
                assert old_nodes_complaints(cluster.nodes[j]) == [], j
        for i in range(len(cluster)):
            info = bus_info(cluster, i)
            # Every link now joins two nodes of this version: agreed, none unversioned.
            assert info["bus_link_formats"] == {str(max(BUS_FORMATS)): 4}, (i, info)
            assert info["bus_links_unversioned"] == 0 and info["bus_format_refusals"] == 0
        # A downgrade: one node back on the earlier code, which reads the AOF
        # this version wrote and talks to this version's nodes.
        back = order[-1]
        controlled_restart(cluster.nodes[back], before_env(before_tree))
        cluster.wait_joined()
        progress("after node %d's downgrade" % back)
        assert old_nodes_complaints(cluster.nodes[back]) == []
        workload.producers_stopped.set()
        try:
            wait_until(lambda: not workload.undelivered(), DELIVERY_WAIT_S, interval=0.2)
        except AssertionError:
            missing = sorted(workload.undelivered())
            raise AssertionError("%d of %d acknowledged jobs never delivered: %s" % (
                len(missing), workload.acknowledged_count(), missing[:5])) from None
    finally:
        workload.stop()
    assert workload.unexpected == [], workload.unexpected
    print("acknowledged %d jobs, delivered %d, retried errors %s" % (
        len(workload.acknowledged), len(workload.delivered), dict(workload.retried)))


def hello_frame(sender: bytes, formats: list) -> bytes:
    """The first frame of a link from a node speaking ``formats``."""
    payload = msgpack.packb([{"v": 1, "sender": sender, "port": 7000, "flags": 0,
                              "formats": formats}])
    return struct.pack(">I", len(payload)) + payload


def test_a_peer_of_an_unknown_bus_format_is_refused_with_a_log_line(server):
    with socket.create_connection(("127.0.0.1", server.port + 10000), timeout=10) as sock:
        sock.sendall(hello_frame(b"f" * 40, [99]))
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
    # The node's hello, so that the peer can say why too, then the close.
    (size,) = struct.unpack(">I", received[:4])
    assert len(received) == 4 + size
    assert msgpack.unpackb(received[4:], raw=False)[0]["formats"] == list(BUS_FORMATS)
    line = ("Bus link from 127.0.0.1 refused: it speaks bus formats 99, this node %s, so the "
            "two versions cannot talk" % ", ".join(map(str, BUS_FORMATS)))
    wait_until(lambda: line in server.log_path.read_text(), message="the refusal logged")
    info = server.call("INFO", "bus")
    assert info["bus_format_refusals"] == 1
    formats = info["bus_formats"]  # redis-py reads "1,2" as a list, "1" as an int
    assert (formats if isinstance(formats, list) else [formats]) == list(BUS_FORMATS)
    assert server.call("PING") is True  # and it keeps running


def test_an_aof_of_a_later_format_stops_the_start_with_what_to_do(tmp_path):
    node = DisqueProcess(tmp_path / "node", config="appendonly yes\n")
    aof = node.dir / "disque.aof"
    later = b"*2\r\n$9\r\nAOFFORMAT\r\n$1\r\n3\r\n"
    aof.write_bytes(later)
    node.start(wait=False)
    assert node.wait_exit(30) != 0
    log = node.log_path.read_text() + (node.dir / "stderr.log").read_text()
    assert re.search(r"unsupported AOF format 3: the file was written by a later version, and "
                     r"this one reads format 2 and the files before it\. Start the version that "
                     r"wrote it \(docs/operations\.md, \"Upgrading a cluster\"\)", log), log
    assert aof.read_bytes() == later  # left as it was
