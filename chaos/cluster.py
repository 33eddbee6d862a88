"""Real nodes for a chaos run, and the faults done to them.

Two networks. ``NamespaceNetwork`` (root only): every node runs in its
own network namespace with one veth interface on a bridge of the root
namespace, where the producers and consumers run; a partition is a set
of ``blackhole`` or ``unreachable`` routes inside the namespaces (packets
vanish, or connects fail at once), and ``ip link set eth0 down`` cuts a
node off from everybody, clients included. ``LoopbackNetwork``: every
node on 127.0.0.1 with its own port; no partitions.

A node keeps its directory, config file, AOF and nodes.conf across
restarts; it runs with ``appendonly yes`` and a password (so that the
nodes serve clients on non-loopback addresses whatever protected mode
says).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis

# What in a node's log or stderr means it hit a bug (its own handlers'
# catch-all messages, or a traceback that reached stderr).
LOG_ERRORS = re.compile(r"Traceback \(most recent call last\)|Error in server cron"
                        r"|Error handling bus messages|Exception in callback"
                        r"|exception was never retrieved|Fatal error|Unhandled exception")
CLIENT_PORT = 7711
BUS_OFFSET = 10000


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=20)


class LoopbackNetwork:
    """Nodes on 127.0.0.1, distinct ports; nothing to partition."""

    partitions = False
    kind = "loopback"

    def __init__(self, size: int) -> None:
        self.size = size
        self.ports = _free_ports(size)

    def setup(self) -> None:
        """Nothing to build."""

    def address(self, i: int) -> tuple[str, int]:
        return "127.0.0.1", self.ports[i]

    def command_prefix(self, i: int) -> list[str]:
        return []

    def teardown(self) -> None:
        """Nothing to remove."""


class NamespaceNetwork:
    """One network namespace per node on a bridge (needs root and iproute2)."""

    partitions = True
    kind = "namespaces"

    def __init__(self, size: int) -> None:
        self.size = size
        tag = "%d" % (os.getpid() % 100000)
        self.bridge = "dqc%sb" % tag
        self.namespaces = ["dqc%sn%d" % (tag, i) for i in range(size)]
        self.host_ends = ["dqc%sh%d" % (tag, i) for i in range(size)]
        self.subnet = "10.213.%d" % (os.getpid() % 250 + 1)
        self.routes: list[tuple[int, str]] = []  # (node, address) routes added by partitions
        self.down: set[int] = set()
        self.made: list[str] = []

    @staticmethod
    def available() -> bool:
        """Root, iproute2, and namespaces that can be made here."""
        if os.geteuid() != 0:
            return False
        probe = "dqcprobe%d" % (os.getpid() % 100000)
        try:
            _run("ip", "netns", "add", probe)
        except (OSError, subprocess.SubprocessError):
            return False
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=20)
        return True

    def ip(self, i: int) -> str:
        return "%s.%d" % (self.subnet, i + 1)

    def address(self, i: int) -> tuple[str, int]:
        return self.ip(i), CLIENT_PORT

    def command_prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[i]]

    def setup(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self.made.append("bridge")
        _run("ip", "addr", "add", "%s.254/24" % self.subnet, "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for i, ns in enumerate(self.namespaces):
            _run("ip", "netns", "add", ns)
            self.made.append(ns)
            peer = "dqctmp%d" % i
            _run("ip", "link", "add", self.host_ends[i], "type", "veth", "peer", "name", peer)
            _run("ip", "link", "set", peer, "netns", ns)
            _run("ip", "-n", ns, "link", "set", peer, "name", "eth0")
            _run("ip", "-n", ns, "addr", "add", "%s/24" % self.ip(i), "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "link", "set", self.host_ends[i], "master", self.bridge)
            _run("ip", "link", "set", self.host_ends[i], "up")

    def partition(self, groups: list[list[int]], blackhole: bool) -> None:
        """Nodes of different groups cannot reach each other (clients still can)."""
        kind = "blackhole" if blackhole else "unreachable"
        side = {i: g for g, members in enumerate(groups) for i in members}
        for a in range(self.size):
            for b in range(self.size):
                if a != b and side.get(a) != side.get(b):
                    _run("ip", "-n", self.namespaces[a], "route", "add", kind,
                         "%s/32" % self.ip(b))
                    self.routes.append((a, self.ip(b)))

    def link_down(self, i: int) -> None:
        _run("ip", "-n", self.namespaces[i], "link", "set", "eth0", "down")
        self.down.add(i)

    def link_up(self, i: int) -> None:
        _run("ip", "-n", self.namespaces[i], "link", "set", "eth0", "up")
        self.down.discard(i)

    def heal(self) -> None:
        """Remove every partition route."""
        for a, address in self.routes:
            subprocess.run(["ip", "-n", self.namespaces[a], "route", "del", "%s/32" % address],
                           capture_output=True, timeout=20)
        self.routes.clear()

    def teardown(self) -> None:
        for item in reversed(self.made):
            argv = (["ip", "link", "del", self.bridge] if item == "bridge"
                    else ["ip", "netns", "del", item])
            subprocess.run(argv, capture_output=True, timeout=20)
        self.made.clear()


Network = LoopbackNetwork | NamespaceNetwork


def _free_ports(count: int) -> list[int]:
    """Loopback ports free for a node (and its bus port, +10000)."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port > 55535 or port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + BUS_OFFSET))
            except OSError:
                continue
        ports.append(port)
    return ports


class NodeProcess:
    """One disque-server: its directory, its process, and its restarts."""

    def __init__(self, index: int, directory: Path, network: Network, password: str,
                 appendfsync: str, node_timeout: int) -> None:
        self.index = index
        self.name = "n%d" % index
        self.dir = directory
        self.network = network
        self.host, self.port = network.address(index)
        self.process: subprocess.Popen | None = None
        self.stopped = False  # SIGSTOPped
        self.starts = 0
        self.dir.mkdir(parents=True, exist_ok=True)
        bind = self.host
        (self.dir / "disque.conf").write_text(
            "port %d\nbind %s\ndir %s\nlogfile disque.log\nappendonly yes\nappendfsync %s\n"
            "requirepass %s\ncluster-node-timeout %d\n"
            % (self.port, bind, self.dir, appendfsync, password, node_timeout))
        self.password = password

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        argv = self.network.command_prefix(self.index) + [
            sys.executable, "-m", "disque.server", str(self.dir / "disque.conf")]
        with open(self.dir / "stderr.log", "ab") as err:
            self.process = subprocess.Popen(argv, cwd=self.dir, stdout=err, stderr=err,
                                            start_new_session=True)
        self.stopped = False
        self.starts += 1

    def client(self, timeout: float = 2.0) -> redis.Redis:
        return redis.Redis(self.host, self.port, password=self.password, socket_timeout=timeout,
                           socket_connect_timeout=timeout, lib_name=None, lib_version=None)

    def wait_ready(self, deadline_s: float = 30.0) -> None:
        """Until the node answers PING (its AOF loaded); raise if it exited or never does."""
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError("%s exited with status %s at start (see %s)" % (
                    self.name, self.process.returncode, self.dir))
            try:
                conn = self.client(1.0)
                try:
                    if conn.ping():
                        return
                finally:
                    conn.close()
            except redis.RedisError:
                pass
            time.sleep(0.1)
        raise RuntimeError("%s not ready after %.0f s (see %s)" % (self.name, deadline_s,
                                                                  self.dir))

    def kill(self) -> None:
        """SIGKILL: no shutdown, nothing flushed but what the kernel already has."""
        if self.process is not None:
            if self.stopped:
                self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=30)
        self.stopped = False

    def pause(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)
            self.stopped = True

    def resume(self) -> None:
        if self.process is not None and self.stopped:
            self.process.send_signal(signal.SIGCONT)
        self.stopped = False

    def stop(self) -> int | None:
        """End of the run: SIGTERM (a clean shutdown), SIGKILL if it hangs."""
        process = self.process
        if process is None:
            return None
        self.resume()
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=20)
        return process.returncode

    def log_errors(self) -> list[str]:
        """Lines of its logs that mean a bug."""
        found = []
        for name in ("disque.log", "stderr.log"):
            path = self.dir / name
            if path.exists():
                for line in path.read_text(errors="replace").splitlines():
                    if LOG_ERRORS.search(line):
                        found.append("%s %s: %s" % (self.name, name, line.strip()[:300]))
        return found


def join(nodes: list[NodeProcess], deadline_s: float = 60.0) -> None:
    """CLUSTER MEET from the first node to the others; wait until all see all."""
    first = nodes[0].client()
    try:
        for node in nodes[1:]:
            first.execute_command("CLUSTER", "MEET", node.host, node.port)
    finally:
        first.close()
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if all(connected_peers(node) >= len(nodes) - 1 for node in nodes):
            return
        time.sleep(0.2)
    raise RuntimeError("the cluster did not form in %.0f s" % deadline_s)


def connected_peers(node: NodeProcess) -> int:
    """Peers ``node`` lists as connected and not failing (-1 if it does not answer)."""
    try:
        conn = node.client(1.0)
        try:
            text = conn.execute_command("CLUSTER", "NODES")
        finally:
            conn.close()
    except redis.RedisError:
        return -1
    if isinstance(text, bytes):
        text = text.decode()
    count = 0
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and "myself" not in fields[2] and "connected" in fields \
                and not {"handshake", "fail", "fail?", "noaddr"} & set(fields[2].split(",")):
            count += 1
    return count
