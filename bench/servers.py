"""The server processes a benchmark run talks to: redis-server and disque nodes.

Every process runs on a loopback port in a temporary directory owned by
one ``Servers`` object, which stops all of them when the run ends, also
on an exception or Ctrl-C. Children additionally get SIGTERM from the
kernel if the harness itself is killed, so a ``kill -9`` of the harness
does not leave servers holding ports.

A disque node runs the ``disque`` package of this checkout by default, or
of another source tree (``tree=``, put first on its PYTHONPATH) when two
builds are compared in one run (``bench.compare``). ``ReferenceNode`` is
the original C Disque 1.0-rc1 (``../shared/reference`` beside the
checkout, or ``$DISQUE_REFERENCE_SERVER``), which the sections of
``bench.original`` measure side by side with this project's nodes.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, TypeVar

import redis

REPO = Path(__file__).resolve().parents[1]
REFERENCE_ENV = "DISQUE_REFERENCE_SERVER"  # names another copy of the original server
REFERENCE_SERVER = REPO.parent / "shared" / "reference" / "disque-server-1.0-rc1"
BUS_PORT_OFFSET = 10000  # a disque node also listens on port + 10000 for the cluster bus
PR_SET_PDEATHSIG = 1
log = logging.getLogger("bench")
S = TypeVar("S", bound="ServerProcess")


class ServerError(RuntimeError):
    """A server could not be started or stopped."""


class PortAllocator:
    """Loopback ports for the run: free ones picked by the kernel, or consecutive from a base."""

    def __init__(self, base: int | None = None) -> None:
        self.next = base

    def take(self, with_bus: bool = False) -> int:
        """A free port (and, for a disque node, a free bus port next to it)."""
        for _ in range(1000):
            port = self._candidate()
            if _is_free(port) and (not with_bus or _is_free(port + BUS_PORT_OFFSET)):
                return port
        raise ServerError("no free loopback port found")

    def _candidate(self) -> int:
        if self.next is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                return s.getsockname()[1]
        port, self.next = self.next, self.next + 1
        return port


def _is_free(port: int) -> bool:
    if not 0 < port < 65536:
        return False
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def parse_vmrss(status: str) -> int:
    """Bytes of resident memory from the text of /proc/<pid>/status (``VmRSS:  1234 kB``)."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            value, unit = line.split()[1:3]
            if unit != "kB":
                raise ValueError("unexpected VmRSS unit %r" % unit)
            return int(value) * 1024
    raise ValueError("no VmRSS line in /proc status")


def parse_cpu_seconds(stat: str, ticks_per_second: int) -> float:
    """User + system CPU seconds of all threads from /proc/<pid>/stat text."""
    return sum(parse_cpu_split(stat, ticks_per_second))


def parse_cpu_split(stat: str, ticks_per_second: int) -> tuple[float, float]:
    """User and system CPU seconds of all threads from /proc/<pid>/stat text (fields
    14 and 15, counted after the parenthesised command name, which may hold spaces)."""
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) / ticks_per_second, int(fields[12]) / ticks_per_second


def _die_with_parent() -> None:
    """Runs in the child before exec: ask Linux for SIGTERM when the harness dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class ServerProcess:
    """One server child process on a loopback port, with its own directory."""

    kind = "server"
    pythonpath = REPO  # put first on the child's PYTHONPATH

    def __init__(self, name: str, workdir: Path, port: int) -> None:
        self.name = name
        self.dir = workdir
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.dir.mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        """The argv that starts the server."""
        raise NotImplementedError

    @property
    def pid(self) -> int:
        """Process id of the running server."""
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 15.0) -> None:
        """Start the process and wait until it answers PING."""
        env = dict(os.environ, PYTHONPATH=str(self.pythonpath))
        with open(self.dir / "stderr.log", "ab") as stderr:
            self.proc = subprocess.Popen(self.command(), cwd=self.dir, env=env,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=stderr, preexec_fn=_die_with_parent)
        self._wait_ready(timeout)
        log.info("started %s %s on port %d (pid %d)", self.kind, self.name, self.port, self.pid)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError("%s %s exited with %s:\n%s"
                                  % (self.kind, self.name, self.proc.returncode, self.tail_logs()))
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise ServerError("%s %s did not answer PING on port %d within %.0f s:\n%s"
                          % (self.kind, self.name, self.port, timeout, self.tail_logs()))

    def tail_logs(self, lines: int = 20) -> str:
        """The end of the server's log files, for error messages."""
        text = []
        for path in sorted(self.dir.glob("*.log")):
            text.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(text)

    def client(self) -> redis.Redis:
        """A redis-py client for administrative calls (INFO, flushes, checks)."""
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=60)

    def call(self, *args: object) -> object:
        """One command on a short-lived connection."""
        with self.client() as client:
            return client.execute_command(*args)

    def rss_bytes(self) -> int:
        """Resident set size of the server process, from /proc/<pid>/status."""
        return parse_vmrss(Path("/proc/%d/status" % self.pid).read_text())

    def cpu_seconds(self) -> float:
        """CPU time the server process has used so far (user + system)."""
        return sum(self.cpu_split())

    def cpu_split(self) -> tuple[float, float]:
        """User and system CPU time the server process has used so far."""
        return parse_cpu_split(Path("/proc/%d/stat" % self.pid).read_text(),
                               os.sysconf("SC_CLK_TCK"))

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if the process does not exit in time."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        log.info("stopped %s %s", self.kind, self.name)


class RedisServer(ServerProcess):
    """Debian's redis-server, persistence off, as the reference implementation."""

    kind = "redis-server"

    def command(self) -> list[str]:
        """redis-server with snapshots and AOF disabled so disk never enters the picture."""
        return ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(self.dir),
                "--logfile", "redis.log", "--daemonize", "no"]

    def flush(self) -> None:
        """Forget all keys so each sample starts from the same empty state."""
        self.call("FLUSHALL")

    def queue_length(self, key: str) -> int:
        """LLEN of a list."""
        return int(self.call("LLEN", key))


class DisqueNode(ServerProcess):
    """A disque-server, started as ``python -m disque.server <config>`` with ``tree``
    (default: this repository) first on PYTHONPATH, so its ``disque`` package is used:
    the editable install of the venv only comes after PYTHONPATH on sys.path."""

    kind = "disque"

    def __init__(self, name: str, workdir: Path, port: int, config: str = "",
                 tree: Path = REPO) -> None:
        super().__init__(name, workdir, port)
        self.pythonpath = tree
        self.config_path = self.dir / "disque.conf"
        self.config_path.write_text(
            "bind 127.0.0.1\nport %d\ndir %s\nlogfile disque.log\nloglevel notice\n"
            "enable-debug-command yes\n%s"  # the benchmark flushes with DEBUG FLUSHALL
            % (port, self.dir, config))

    def command(self) -> list[str]:
        """The same interpreter that runs the harness, so the venv's uvloop/hiredis are used."""
        return [sys.executable, "-m", "disque.server", str(self.config_path)]

    def flush(self) -> None:
        """Drop all jobs and queues (DEBUG FLUSHALL) between samples."""
        self.call("DEBUG", "FLUSHALL")

    def queue_length(self, queue: str) -> int:
        """QLEN of a queue."""
        return int(self.call("QLEN", queue))


def reference_server() -> Path | None:
    """The original C server's binary, or None when this machine has none."""
    path = Path(os.environ.get(REFERENCE_ENV) or REFERENCE_SERVER)
    return path if path.is_file() and os.access(path, os.X_OK) else None


class ReferenceNode(DisqueNode):
    """The original C Disque 1.0-rc1: the same commands as a disque node
    (DEBUG FLUSHALL, QLEN, CLUSTER MEET/INFO), started from its binary."""

    kind = "original disque"

    def __init__(self, name: str, workdir: Path, port: int, binary: Path,
                 config: str = "") -> None:
        ServerProcess.__init__(self, name, workdir, port)
        self.binary = binary
        self.config_path = self.dir / "disque.conf"
        self.config_path.write_text(
            "bind 127.0.0.1\nport %d\ndir %s\nlogfile disque.log\nloglevel notice\n"
            "appendonly no\n%s" % (port, self.dir, config))

    def command(self) -> list[str]:
        """The binary with its config file."""
        return [str(self.binary), str(self.config_path)]

    def client(self) -> redis.Redis:
        """RESP2 from the start: redis-py's default HELLO 3 is, to Disque 1.0,
        its own HELLO command given a wrong number of arguments."""
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=60, protocol=2)


class Servers:
    """All processes of one run; shared ones start on first use, everything stops on close().

    A shared server that crashed is replaced after ``reap()``, so one crash
    costs one section's numbers instead of all the following ones.
    """

    def __init__(self, port_base: int | None = None) -> None:
        self.ports = PortAllocator(port_base)
        self.root = Path(tempfile.mkdtemp(prefix="disque-bench-"))
        self.running: list[ServerProcess] = []
        self._redis: RedisServer | None = None
        self._disques: dict[str, DisqueNode] = {}

    def __enter__(self) -> "Servers":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def redis(self) -> RedisServer:
        """The run's redis-server (started on first call)."""
        if self._redis is None:
            if shutil.which("redis-server") is None:
                raise ServerError("redis-server is not installed (apt-get install redis-server)")
            self._redis = self._start(RedisServer("redis", self.root / "redis", self.ports.take()))
        return self._redis

    def disque(self, name: str = "disque", tree: Path = REPO) -> DisqueNode:
        """The run's shared disque node of that name (started on first call)."""
        if name not in self._disques:
            self._disques[name] = self._start(self._new_disque(name, tree=tree))
        return self._disques[name]

    @contextlib.contextmanager
    def fresh_disque(self, name: str, config: str = "", tree: Path = REPO
                     ) -> Iterator[DisqueNode]:
        """A dedicated node for one section, e.g. so memory starts from an untouched heap."""
        node = self._start(self._new_disque(name, config, tree))
        try:
            yield node
        finally:
            node.stop()
            self.running.remove(node)

    @contextlib.contextmanager
    def cluster(self, size: int, config: str = "cluster-node-timeout 3000\n",
                name: str = "cluster", tree: Path = REPO,
                reference: Path | None = None) -> Iterator[list[DisqueNode]]:
        """``size`` fresh nodes joined by a chain of CLUSTER MEETs, stopped afterwards;
        with ``reference`` (the original server's binary), nodes of the original."""
        nodes: list[DisqueNode] = []
        try:
            for i in range(size):
                node_name = "%s%d" % (name, i)
                if reference is None:
                    node = self._new_disque(node_name, config, tree)
                else:
                    node = ReferenceNode(node_name, self.root / node_name,
                                         self.ports.take(with_bus=True), reference, config)
                nodes.append(self._start(node))
        except BaseException:
            for node in nodes:
                node.stop()
                self.running.remove(node)
            raise
        try:
            join_chain(nodes, timeout=30)
            yield nodes
        finally:
            for node in nodes:
                node.stop()
                self.running.remove(node)

    def reap(self) -> list[str]:
        """Describe and forget servers that died; the next section starts new shared ones."""
        dead = [s for s in self.running if s.proc is not None and s.proc.poll() is not None]
        for server in dead:
            self.running.remove(server)
            if server is self._redis:
                self._redis = None
            if self._disques.get(server.name) is server:
                del self._disques[server.name]
        return ["%s %s exited with status %s; log tail:\n%s"
                % (s.kind, s.name, s.proc.returncode, s.tail_logs(10)) for s in dead]

    def close(self) -> None:
        """Stop every process still running and remove the temporary directory."""
        while self.running:
            self.running.pop().stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _new_disque(self, name: str, config: str = "", tree: Path = REPO) -> DisqueNode:
        return DisqueNode(name, self.root / name, self.ports.take(with_bus=True), config, tree)

    def _start(self, server: S) -> S:
        self.running.append(server)
        server.start()
        return server


def join_chain(nodes: list, timeout: float) -> None:
    """Join the nodes by a chain of CLUSTER MEETs and wait until each reaches the others."""
    for left, right in zip(nodes, nodes[1:]):
        left.call("CLUSTER", "MEET", "127.0.0.1", right.port)
    deadline = time.monotonic() + timeout
    while not all(b"cluster_reachable_nodes:%d" % (len(nodes) - 1) in n.call("CLUSTER", "INFO")
                  for n in nodes):
        if time.monotonic() > deadline:
            raise ServerError("the %d-node cluster did not form within %g s"
                              % (len(nodes), timeout))
        time.sleep(0.1)
