"""A cluster of real disque-server processes for tests/cluster.

Nodes are started in parallel, joined with a chain of CLUSTER MEETs
(0→1, 1→2, ...) and are considered joined once every node reports
``cluster_reachable_nodes + 1 == N`` (spec: commands.md CLUSTER INFO).
Everything waits with bounded polls; ``stop_all`` always cleans up.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from disque.tools.resp_client import encode_command  # the protocol tests' request encoder
from tests.support.process import DisqueProcess, wait_until

DEFAULT_NODE_TIMEOUT_MS = 3000
JOIN_TIMEOUT_S = 30.0
# DISQUE_TEST_BUS=secret, tls or tls+secret runs every test cluster's bus so
# secured (DISQUE_TEST_BUS=tls+secret pytest tests/cluster): the suite then
# shows that a secured bus changes nothing else the nodes do.
BUS_SECURITY = frozenset(filter(None, os.environ.get("DISQUE_TEST_BUS", "").split("+")))
TEST_SECRET = "secret-of-the-test-clusters-0123456789abcdef"


@functools.cache
def _test_certificates() -> Path:
    """A CA and node certificate for the test clusters of this process."""
    from disque.net import tls
    directory = Path(tempfile.mkdtemp(prefix="disque-test-certs-"))
    atexit.register(shutil.rmtree, directory, True)
    tls.generate_certificates(str(directory))
    return directory


def bus_security_config() -> str:
    """The config lines DISQUE_TEST_BUS asks for."""
    unknown = BUS_SECURITY - {"secret", "tls"}
    assert not unknown, "DISQUE_TEST_BUS: unknown %s (secret, tls, tls+secret)" % unknown
    text = ""
    if "secret" in BUS_SECURITY:
        text += "cluster-secret %s\n" % TEST_SECRET
    if "tls" in BUS_SECURITY:
        certs = _test_certificates()
        text += ("tls-cluster yes\ntls-cert-file %s/node.crt\ntls-key-file %s/node.key\n"
                 "tls-ca-cert-file %s/ca.crt\n" % (certs, certs, certs))
    return text


@dataclass(frozen=True)
class NodeLine:
    """One parsed CLUSTER NODES line (spec: cluster-bus.md §2)."""

    id: str
    addr: str
    flags: frozenset
    ping_sent: int
    pong_recv: int
    link: str

    @property
    def port(self) -> int:
        """The client port part of ``addr``."""
        return int(self.addr.rpartition(":")[2])


@dataclass(frozen=True)
class HelloEntry:
    """One node of a HELLO reply: [id, ip, port, priority]."""

    id: str
    ip: str
    port: str
    priority: str


def parse_cluster_nodes(text: str | bytes) -> dict[str, NodeLine]:
    """CLUSTER NODES bulk → {node id: NodeLine}; lines split on single spaces."""
    if isinstance(text, bytes):
        text = text.decode()
    assert text.endswith("\n"), "CLUSTER NODES must end with a newline: %r" % text
    nodes = {}
    for line in text[:-1].split("\n"):
        fields = line.split(" ")
        assert len(fields) == 6, "bad CLUSTER NODES line %r" % line
        node_id, addr, flags, ping_sent, pong_recv, link = fields
        nodes[node_id] = NodeLine(node_id, addr, frozenset(flags.split(",")), int(ping_sent),
                                  int(pong_recv), link)
    return nodes


def parse_cluster_info(text: str | bytes) -> dict[str, str]:
    """CLUSTER INFO bulk (``field:value\\r\\n`` lines) → dict."""
    if isinstance(text, bytes):
        text = text.decode()
    assert text.endswith("\r\n"), "CLUSTER INFO lines end with CRLF: %r" % text
    return dict(line.split(":", 1) for line in text[:-2].split("\r\n"))


def parse_hello(reply: list) -> tuple[int, str, dict[str, HelloEntry]]:
    """HELLO reply → (version, own id, {id: HelloEntry})."""
    version, myid, *entries = reply
    nodes = {}
    for entry in entries:
        assert len(entry) == 4, "bad HELLO entry %r" % (entry,)
        node_id, ip, port, priority = (_text(x) for x in entry)
        nodes[node_id] = HelloEntry(node_id, ip, port, priority)
    return version, _text(myid), nodes


def parse_show(reply: list | None) -> dict | None:
    """SHOW's flat 30-element array → dict (None for an unknown job)."""
    if reply is None:
        return None
    assert len(reply) == 30, "SHOW must return 30 elements: %r" % (reply,)
    info = {}
    for key, value in zip(reply[0::2], reply[1::2]):
        key = _text(key)
        if key in ("nodes-delivered", "nodes-confirmed"):
            value = {_text(v) for v in value}
        elif key in ("id", "queue", "state") and value is not None:
            value = _text(value)
        info[key] = value
    return info


def parse_qstat(reply: list | None) -> dict | None:
    """QSTAT's flat 20-element array → dict (None for a missing queue)."""
    if reply is None:
        return None
    assert len(reply) == 20, "QSTAT must return 20 elements: %r" % (reply,)
    info = {_text(key): value for key, value in zip(reply[0::2], reply[1::2])}
    info["import-from"] = {_text(v) for v in info["import-from"]}
    return info


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


# ------------------------------------------------------------------ raw RESP

class _Reader:
    """A strict reply parser that keeps each reply's type byte and the exact
    bytes read, which hiredis does not tell, for tests that compare them."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.data = b""
        self.pos = 0

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed in the middle of a reply")
        self.data += chunk

    def line(self) -> bytes:
        while True:
            end = self.data.find(b"\r\n", self.pos)
            if end >= 0:
                line = self.data[self.pos:end]
                self.pos = end + 2
                return line
            self._fill()

    def exact(self, n: int) -> bytes:
        while len(self.data) - self.pos < n + 2:
            self._fill()
        value = self.data[self.pos:self.pos + n]
        assert self.data[self.pos + n:self.pos + n + 2] == b"\r\n", "bulk not CRLF-terminated"
        self.pos += n + 2
        return value

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-", b":"):
            return (kind.decode(), rest)
        if kind == b"$":
            size = int(rest)
            return ("$", None if size < 0 else self.exact(size))
        if kind == b"*":
            size = int(rest)
            return ("*", None if size < 0 else [self.reply() for _ in range(size)])
        if kind == b"%":  # RESP3 map, only after HELLO 3: its pairs, flattened
            return ("%", [self.reply() for _ in range(2 * int(rest))])
        raise AssertionError("bad RESP type byte in %r" % line)


def parse_resp(raw: bytes):
    """One complete RESP2 reply → tagged tree ``(type, value)``; checks every length."""
    reader = _Reader(None)
    reader.data = raw
    tree = reader.reply()
    assert reader.pos == len(raw), "trailing bytes after the reply: %r" % raw[reader.pos:]
    return tree


def encode_resp(tree) -> bytes:
    """Tagged tree → RESP2 bytes (inverse of ``parse_resp``)."""
    kind, value = tree
    if kind in "+-:":
        return kind.encode() + value + b"\r\n"
    if value is None:
        return kind.encode() + b"-1\r\n"
    if kind == "$":
        return b"$%d\r\n%s\r\n" % (len(value), value)
    return b"*%d\r\n" % len(value) + b"".join(encode_resp(item) for item in value)


def raw_command(port: int, *args, timeout: float = 30.0) -> bytes:
    """Send one command on a fresh connection; return exactly the reply's bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(encode_command(*args))
        reader = _Reader(sock)
        reader.reply()
        return reader.data[:reader.pos]


class Cluster:
    """N disque-server processes joined into one cluster."""

    def __init__(self, base_dir: Path, size: int, config: str = "", appendonly: bool = False,
                 node_timeout: int = DEFAULT_NODE_TIMEOUT_MS,
                 node_config: Callable[[int], str] | None = None) -> None:
        """``node_config(i)``: lines for node ``i`` alone (a port of its own)."""
        text = "cluster-node-timeout %d\n" % node_timeout
        if appendonly:
            text += "appendonly yes\n"
        text += bus_security_config() + config
        self.nodes = [DisqueProcess(Path(base_dir) / ("node%d" % i),
                                    config=text + (node_config(i) if node_config else ""))
                      for i in range(size)]
        self.ids: list[str] = []
        self._clients: dict[int, redis.Redis] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    # ----------------------------------------------------------- life cycle

    def start(self, join: bool = True) -> "Cluster":
        """Start every node (in parallel), then MEET them in a chain and wait."""
        for node in self.nodes:
            node.start(wait=False)
        for node in self.nodes:
            node.wait_ready()
        self.ids = [self.call(i, "CLUSTER", "MYID").decode() for i in range(len(self))]
        if join:
            self.join()
        return self

    def join(self) -> None:
        """CLUSTER MEET 0→1, 1→2, ... then wait for the full mesh."""
        for i in range(len(self) - 1):
            assert self.call(i, "CLUSTER", "MEET", "127.0.0.1", self.nodes[i + 1].port) == b"OK"
        self.wait_joined()

    def wait_joined(self, timeout: float = JOIN_TIMEOUT_S, indexes=None) -> None:
        """Every (given) node reports cluster_reachable_nodes + 1 == N."""
        size = len(self)
        indexes = list(range(size)) if indexes is None else list(indexes)

        def joined() -> bool:
            return all(int(self.info(i)["cluster_reachable_nodes"]) + 1 == size
                       for i in indexes)
        wait_until(joined, timeout, interval=0.1, message="a full mesh of %d nodes" % size)

    def wait_linked(self, timeout: float = JOIN_TIMEOUT_S) -> None:
        """Every node's CLUSTER NODES shows a connected link to every other node. A
        node counts a peer reachable before its link to a restarted peer is back (a
        TLS link with a secret takes a moment longer), and a message sent meanwhile
        is lost, as in the original."""
        def linked() -> bool:
            return all(line.split()[-1] == b"connected"
                       for i in range(len(self))
                       for line in self.call(i, "CLUSTER", "NODES").splitlines())
        wait_until(linked, timeout, interval=0.05, message="every link connected")

    def kill(self, i: int) -> None:
        """SIGKILL node ``i`` (a crash)."""
        self._drop_client(i)
        self.nodes[i].kill()

    def restart(self, i: int) -> None:
        """Start node ``i`` again in its directory (same port, nodes.conf, AOF)."""
        self._drop_client(i)
        self.nodes[i].restart()

    def restart_many(self, indexes) -> None:
        """Restart several killed nodes in parallel."""
        indexes = list(indexes)
        for i in indexes:
            self._drop_client(i)
            self.nodes[i].stop()
            self.nodes[i].start(wait=False)
        for i in indexes:
            self.nodes[i].wait_ready()

    def stop_all(self) -> None:
        """Stop every node that is still running (SIGTERM, SIGKILL if stuck)."""
        for i in list(self._clients):
            self._drop_client(i)
        for node in self.nodes:
            node.stop()

    def expect_log(self, *patterns: str) -> None:
        """Log entries matching these regexes are expected on every node."""
        for node in self.nodes:
            node.expect_log(*patterns)

    def verify(self) -> list[str]:
        """Stop every node; return their unexpected exits and log entries."""
        self.stop_all()
        return [problem for node in self.nodes for problem in node.verify()]

    def freeze(self, i: int) -> None:
        """SIGSTOP node ``i``: its links stay up but it answers nothing."""
        os.kill(self.nodes[i].proc.pid, signal.SIGSTOP)

    def alive(self, i: int) -> bool:
        """Node ``i``'s process is running."""
        proc = self.nodes[i].proc
        return proc is not None and proc.poll() is None

    def live(self) -> list[int]:
        """Indexes of the running nodes."""
        return [i for i in range(len(self)) if self.alive(i)]

    # -------------------------------------------------------------- access

    def client(self, i: int) -> redis.Redis:
        """A cached redis-py client for node ``i`` (bytes replies)."""
        client = self._clients.get(i)
        if client is None:
            client = redis.Redis(host="127.0.0.1", port=self.nodes[i].port, socket_timeout=30,
                                 protocol=2)
            self._clients[i] = client
        return client

    def _drop_client(self, i: int) -> None:
        client = self._clients.pop(i, None)
        if client is not None:
            client.close()

    def call(self, i: int, *args):
        """Run one command on node ``i``."""
        return self.client(i).execute_command(*args)

    def raw(self, i: int, *args, timeout: float = 30.0) -> bytes:
        """Exact reply bytes of one command on node ``i``."""
        return raw_command(self.nodes[i].port, *args, timeout=timeout)

    def port(self, i: int) -> int:
        """Client port of node ``i``."""
        return self.nodes[i].port

    def index_of(self, node_id: str | bytes) -> int:
        """Which node has this ID."""
        return self.ids.index(_text(node_id))

    def info(self, i: int) -> dict[str, str]:
        """Parsed CLUSTER INFO of node ``i``."""
        return parse_cluster_info(self.call(i, "CLUSTER", "INFO"))

    def info_section(self, i: int, section: str) -> dict:
        """One INFO section of node ``i`` (values parsed by redis-py)."""
        return self.call(i, "INFO", section)

    def registered_jobs(self, i: int) -> int:
        """INFO jobs registered_jobs of node ``i``."""
        return int(self.info_section(i, "jobs")["registered_jobs"])

    def used_memory(self, i: int) -> int:
        """INFO memory used_memory of node ``i`` (the dataset estimate)."""
        return int(self.info_section(i, "memory")["used_memory"])

    def qscan(self, i: int, *options) -> list[bytes]:
        """Every queue name QSCAN BUSYLOOP lists on node ``i`` (sorted)."""
        cursor, names = self.call(i, "QSCAN", "BUSYLOOP", *options)
        assert cursor == b"0", "QSCAN BUSYLOOP must finish in one call"
        return sorted(names)

    def jscan(self, i: int, *options) -> list[bytes]:
        """Every job ID JSCAN BUSYLOOP lists on node ``i``."""
        cursor, ids = self.call(i, "JSCAN", "BUSYLOOP", *options)
        assert cursor == b"0", "JSCAN BUSYLOOP must finish in one call"
        return list(ids)

    def qstat(self, i: int, queue) -> dict | None:
        """Parsed QSTAT of a queue on node ``i``."""
        return parse_qstat(self.call(i, "QSTAT", queue))

    def cluster_nodes(self, i: int) -> dict[str, NodeLine]:
        """Parsed CLUSTER NODES of node ``i``."""
        return parse_cluster_nodes(self.call(i, "CLUSTER", "NODES"))

    def hello(self, i: int) -> tuple[int, str, dict[str, HelloEntry]]:
        """Parsed HELLO of node ``i``."""
        return parse_hello(self.call(i, "HELLO"))

    def flags(self, observer: int, target: int) -> frozenset:
        """Flags of node ``target`` as seen by ``observer`` (empty set if unknown)."""
        line = self.cluster_nodes(observer).get(self.ids[target])
        return line.flags if line is not None else frozenset()

    def show(self, i: int, job_id: str | bytes) -> dict | None:
        """Parsed SHOW of a job on node ``i``."""
        return parse_show(self.call(i, "SHOW", job_id))

    def holders(self, job_id: str | bytes, among=None) -> list[int]:
        """Live nodes (or the given ones) where SHOW knows the job."""
        among = self.live() if among is None else among
        return [i for i in among if self.call(i, "SHOW", job_id) is not None]

    def stable_holders(self, origin: int, job_id, timeout: float = 5.0) -> list[int]:
        """Holders once they match the origin's nodes-delivered (a REPLJOB to an
        extra node added by the 50 ms retry may still be in flight)."""
        found: list[int] = []

        def settled() -> bool:
            delivered = self.show(origin, job_id)["nodes-delivered"]
            found[:] = self.holders(job_id)
            return {self.ids[i] for i in found} == delivered
        wait_until(settled, timeout, interval=0.05, message="holders of %s" % _text(job_id))
        return found

    def wait_holders(self, job_id, count: int, timeout: float = 10.0, among=None) -> list[int]:
        """Wait until exactly ``count`` nodes hold the job; return them."""
        found: list[int] = []

        def enough() -> bool:
            found[:] = self.holders(job_id, among)
            return len(found) == count
        try:
            wait_until(enough, timeout, interval=0.05)
        except AssertionError:
            raise AssertionError("job %s held by %s, expected %d holders"
                                 % (_text(job_id), found, count)) from None
        return found

    def wait_flag(self, target: int, flag: str, observers=None, timeout: float = 20.0,
                  present: bool = True) -> None:
        """Wait until every observer sees (or no longer sees) ``flag`` on ``target``."""
        observers = [i for i in self.live() if i != target] if observers is None else observers

        def seen() -> bool:
            return all((flag in self.flags(i, target)) == present for i in observers)
        wait_until(seen, timeout, interval=0.1,
                   message="flag %r %s on node %d" % (flag, "set" if present else "cleared",
                                                     target))

    def wait_reachable(self, i: int, count: int, timeout: float = 20.0) -> None:
        """Wait until node ``i`` counts ``count`` reachable peers."""
        wait_until(lambda: int(self.info(i)["cluster_reachable_nodes"]) == count, timeout,
                   interval=0.05, message="node %d with %d reachable nodes" % (i, count))

    def logs(self) -> str:
        """The tail of every node's log (for assertion messages)."""
        return "\n".join("--- node%d (port %d)\n%s" % (i, n.port, n.tail_log(15))
                         for i, n in enumerate(self.nodes))
