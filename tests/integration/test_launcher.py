"""disque-cluster (disque/tools/launcher.py): the real command starts, reports on and
stops daemonized nodes on free loopback ports.

Every cluster a test creates is stopped at teardown even when the test fails,
every node process must be gone by then, and the nodes' logs must hold no
unexpected error (tests/support/process.py's log check)."""

from __future__ import annotations

import os
import random
import re
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import redis

from tests.support.cluster import parse_cluster_info, parse_cluster_nodes, parse_show
from tests.support.process import REPO, UNEXPECTED_LOG, log_entries, wait_until
from tests.support.teardown import fail_on
from tests.support.tls import gen_certs, tls_handshake

SCRIPT = Path(sys.executable).parent / "disque-cluster"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "disque.tools.launcher"]
BUS_PORT_OFFSET = 10000
COMMAND_TIMEOUT_S = 120   # a hung launcher fails the test instead of blocking the run


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` consecutive free loopback ports whose bus ports are free too."""
    for _ in range(200):
        base = random.randrange(20000, 30000)
        ports = list(range(base, base + count))
        if all(_port_free(p) and _port_free(p + BUS_PORT_OFFSET) for p in ports):
            return ports
    raise RuntimeError("no run of %d free ports found" % count)


def running(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path("/proc/%d/stat" % pid)
    try:
        return stat.read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def pidfile_pids(directory: Path) -> dict[int, int]:
    """{port: pid} from the pid files under a cluster directory."""
    pids = {}
    for pidfile in directory.glob("*/disque.pid"):
        text = pidfile.read_text().strip()
        if text:
            pids[int(pidfile.parent.name)] = int(text)
    return pids


class Launcher:
    """Runs the real disque-cluster command and remembers what it started."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.directories: list[Path] = []
        self.pids: set[int] = set()

    def run(self, *args: str) -> subprocess.CompletedProcess:
        """Run ``disque-cluster args``; the output is text, the status not checked."""
        if "--dir" in args:
            directory = Path(args[args.index("--dir") + 1])
            if directory not in self.directories:
                self.directories.append(directory)
        result = subprocess.run(COMMAND + list(args), cwd=self.workdir, capture_output=True,
                                text=True, timeout=COMMAND_TIMEOUT_S,
                                env=dict(os.environ, PYTHONPATH=str(REPO)))
        self.note_pids()
        return result

    def create(self, directory: Path, ports: list[int], *options: str) -> str:
        """``create`` that must succeed; returns its output."""
        result = self.run("create", str(len(ports)), "--port", str(ports[0]),
                          "--dir", str(directory), *options)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def note_pids(self) -> None:
        for directory in self.directories:
            self.pids.update(pidfile_pids(directory).values())

    def finish(self) -> list[str]:
        """Stop what still runs; return the problems: survivors and error log entries."""
        problems = []
        self.note_pids()
        for directory in self.directories:
            if any(running(pid) for pid in pidfile_pids(directory).values()):
                result = self.run("stop", "--dir", str(directory))
                if result.returncode != 0:
                    problems.append("stop --dir %s failed: %s" % (directory, result.stderr))
        for pid in sorted(self.pids):
            if running(pid):
                problems.append("pid %d still runs after stop: killed" % pid)
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        for directory in self.directories:
            for log in sorted(directory.glob("*/disque.log")):
                problems += ["%s: %s" % (log, entry)
                             for entry in log_entries(log.read_text(errors="replace"))
                             if UNEXPECTED_LOG.search(entry)]
        return problems


@pytest.fixture
def launcher(tmp_path):
    """The disque-cluster command; what it started is stopped and judged at teardown."""
    runner = Launcher(tmp_path)
    yield runner
    fail_on(runner.finish())


def status_rows(output: str) -> dict[int, list[str]]:
    """status's table: {port: [pid, state, known, reachable, jobs, queued, dashboard]}."""
    rows = {}
    for line in output.splitlines():
        cells = line.split()
        if cells and cells[0].isdigit():
            rows[int(cells[0])] = cells[1:]
    return rows


def test_create_status_stop(launcher, tmp_path):
    directory = tmp_path / "cluster"
    ports = free_ports(3)
    output = launcher.create(directory, ports)
    assert "redis-cli -p %d" % ports[0] in output
    assert "redis-cli -p %d HELLO" % ports[0] in output
    assert "disque-cluster stop --dir %s" % directory in output

    clients = [redis.Redis(port=port, socket_timeout=30) for port in ports]
    for port, client in zip(ports, clients):
        info = parse_cluster_info(client.execute_command("CLUSTER", "INFO"))
        assert (info["cluster_known_nodes"], info["cluster_reachable_nodes"]) == ("3", "2")
        nodes = parse_cluster_nodes(client.execute_command("CLUSTER", "NODES"))
        assert sorted(line.port for line in nodes.values()) == ports
        # Each node has its own config file and directory.
        assert client.execute_command("CONFIG", "GET", "dir") == {
            b"dir": str(directory / str(port)).encode()}
        assert ("port %d" % port) in (directory / str(port) / "disque.conf").read_text()
    job = clients[0].execute_command("ADDJOB", "launched", b"body", 5000, "REPLICATE", 3)
    for client in clients:
        assert parse_show(client.execute_command("SHOW", job))["id"] == job.decode()
    # CONFIG REWRITE saves into the node's own file only.
    others = {port: (directory / str(port) / "disque.conf").read_text() for port in ports[1:]}
    clients[0].execute_command("CONFIG", "SET", "hz", 20)
    clients[0].execute_command("CONFIG", "REWRITE")
    assert "\nhz 20\n" in (directory / str(ports[0]) / "disque.conf").read_text()
    assert {port: (directory / str(port) / "disque.conf").read_text()
            for port in ports[1:]} == others
    for client in clients:
        client.close()

    pids = pidfile_pids(directory)
    assert sorted(pids) == ports
    result = launcher.run("status", "--dir", str(directory))
    assert result.returncode == 0, result.stderr
    rows = status_rows(result.stdout)
    assert sorted(rows) == ports
    for port, (pid, state, known, reachable, jobs, queued, dashboard) in rows.items():
        assert (int(pid), state, known, reachable, jobs, dashboard) == (
            pids[port], "up", "3", "3", "1", "-")
    assert sum(int(row[5]) for row in rows.values()) == 1   # queued on the node that took it

    result = launcher.run("stop", "--dir", str(directory))
    assert result.returncode == 0, result.stderr
    for port, pid in pids.items():
        assert "%d: stopped (pid %d, SHUTDOWN)" % (port, pid) in result.stdout
        assert not running(pid)
    assert pidfile_pids(directory) == {}

    result = launcher.run("status", "--dir", str(directory))
    assert result.returncode == 1
    assert [row[1] for row in status_rows(result.stdout).values()] == ["down"] * 3


def test_appendonly_nodes_write_their_aof(launcher, tmp_path):
    directory = tmp_path / "cluster"
    ports = free_ports(2)
    assert "AOF on" in launcher.create(directory, ports, "--appendonly")
    with redis.Redis(port=ports[0], socket_timeout=30) as client:
        job = client.execute_command("ADDJOB", "durable", b"kept", 5000, "REPLICATE", 2)
    for port in ports:
        aof = directory / str(port) / "disque.aof"
        with redis.Redis(port=port, socket_timeout=30) as client:
            assert client.execute_command("CONFIG", "GET", "appendonly") == {
                b"appendonly": b"yes"}
        wait_until(lambda: aof.exists() and job in aof.read_bytes(),
                   message="%s to hold the job" % aof)
    result = launcher.run("stop", "--dir", str(directory))
    assert result.returncode == 0 and "AOFs" in result.stdout, result.stdout + result.stderr


def test_create_refuses_a_running_or_stopped_cluster(launcher, tmp_path):
    directory = tmp_path / "cluster"
    ports = free_ports(2)
    launcher.create(directory, ports)
    pids = pidfile_pids(directory)

    result = launcher.run("create", "3", "--port", str(free_ports(3)[0]), "--dir", str(directory))
    assert result.returncode == 1
    assert "already running in %s" % directory in result.stderr
    assert sorted(p.name for p in directory.iterdir()) == sorted(map(str, ports))
    assert pidfile_pids(directory) == pids and all(map(running, pids.values()))

    assert launcher.run("stop", "--dir", str(directory)).returncode == 0
    result = launcher.run("create", "2", "--port", str(ports[0]), "--dir", str(directory))
    assert result.returncode == 1
    assert "holds a stopped cluster's files" in result.stderr and "rm -r" in result.stderr
    assert pidfile_pids(directory) == {}


def test_create_refuses_ports_in_use(launcher, tmp_path):
    directory = tmp_path / "cluster"
    ports = free_ports(3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports[1] + BUS_PORT_OFFSET))
        taken.listen()
        result = launcher.run("create", "3", "--port", str(ports[0]), "--dir", str(directory))
    assert result.returncode == 1
    assert "ports in use: %d (the bus port of node 2)" % (ports[1] + BUS_PORT_OFFSET) \
        in result.stderr
    assert not directory.exists()


def test_status_and_stop_with_a_dead_and_a_frozen_node(launcher, tmp_path):
    directory = tmp_path / "cluster"
    ports = free_ports(3)
    launcher.create(directory, ports)
    pids = pidfile_pids(directory)
    dead, frozen, healthy = ports
    os.kill(pids[dead], signal.SIGKILL)
    wait_until(lambda: not running(pids[dead]), message="the killed node to be gone")
    os.kill(pids[frozen], signal.SIGSTOP)

    result = launcher.run("status", "--dir", str(directory))
    assert result.returncode == 1
    rows = status_rows(result.stdout)
    assert [rows[port][1] for port in ports] == ["down", "no-reply", "up"]
    assert rows[frozen][0] == str(pids[frozen])

    result = launcher.run("stop", "--dir", str(directory))
    assert result.returncode == 0, result.stderr
    assert "%d: not running" % dead in result.stdout
    assert "%d: stopped (pid %d, SIGTERM)" % (frozen, pids[frozen]) in result.stdout
    assert "%d: stopped (pid %d, SHUTDOWN)" % (healthy, pids[healthy]) in result.stdout
    assert not any(map(running, pids.values()))


def test_status_and_stop_without_a_cluster(launcher, tmp_path):
    for command in ("status", "stop"):
        result = launcher.run(command, "--dir", str(tmp_path / "nothing"))
        assert result.returncode == 1
        assert "no cluster in %s" % (tmp_path / "nothing") in result.stderr


def node_id(port: int) -> str:
    with redis.Redis(port=port, socket_timeout=30) as client:
        return client.execute_command("HELLO")[1].decode()


def others_see_connected(ports: list[int], port: int, node: str) -> bool:
    """Every node on ``ports`` but ``port`` lists ``node`` at ``port``, connected."""
    for other in ports:
        if other == port:
            continue
        with redis.Redis(port=other, socket_timeout=30) as client:
            line = parse_cluster_nodes(client.execute_command("CLUSTER", "NODES")).get(node)
        if line is None or line.port != port or line.link != "connected" \
                or line.flags & {"fail", "fail?", "noaddr"}:
            return False
    return True


def test_stop_start_and_restart_one_node(launcher, tmp_path):
    directory = tmp_path / "cluster"
    ports = free_ports(3)
    launcher.create(directory, ports)
    ids = {port: node_id(port) for port in ports}
    pids = pidfile_pids(directory)
    target = ports[1]

    result = launcher.run("stop", str(target), "--dir", str(directory))
    assert result.returncode == 0, result.stderr
    assert "%d: stopped (pid %d, SHUTDOWN)" % (target, pids[target]) in result.stdout
    assert "disque-cluster start %d --dir %s" % (target, directory) in result.stdout
    assert not running(pids[target])
    assert all(running(pids[port]) for port in ports if port != target)
    rows = status_rows(launcher.run("status", "--dir", str(directory)).stdout)
    assert [rows[port][1] for port in ports] == ["up", "down", "up"]

    result = launcher.run("start", str(target), "--dir", str(directory))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "%d: started" % target in result.stdout and ids[target][:8] in result.stdout
    assert node_id(target) == ids[target]   # its nodes.conf kept its ID
    wait_until(lambda: others_see_connected(ports, target, ids[target]),
               message="the others to see the started node connected")
    started = pidfile_pids(directory)[target]
    assert started != pids[target]

    # A second start of a running node is refused and changes nothing.
    result = launcher.run("start", str(target), "--dir", str(directory))
    assert result.returncode == 1
    assert "node %d already runs (pid %d)" % (target, started) in result.stderr
    assert "restart %d" % target in result.stderr

    result = launcher.run("restart", str(target), "--dir", str(directory))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "%d: stopped (pid %d, SHUTDOWN)" % (target, started) in result.stdout
    assert "%d: started" % target in result.stdout
    assert not running(started)
    restarted = pidfile_pids(directory)[target]
    assert restarted not in (started, pids[target]) and running(restarted)
    assert node_id(target) == ids[target]
    wait_until(lambda: others_see_connected(ports, target, ids[target]),
               message="the others to see the restarted node connected")
    result = launcher.run("status", "--dir", str(directory))
    assert result.returncode == 0, result.stdout
    assert [row[1:4] for row in status_rows(result.stdout).values()] == [["up", "3", "3"]] * 3


def test_start_after_a_kill_and_bad_ports(launcher, tmp_path):
    directory = tmp_path / "cluster"
    ports = free_ports(2)
    launcher.create(directory, ports)
    ids = {port: node_id(port) for port in ports}
    pids = pidfile_pids(directory)
    # Killed without SHUTDOWN: the stale pid file must not fail the start.
    os.kill(pids[ports[0]], signal.SIGKILL)
    wait_until(lambda: not running(pids[ports[0]]), message="the killed node to be gone")
    result = launcher.run("start", str(ports[0]), "--dir", str(directory))
    assert result.returncode == 0, result.stdout + result.stderr
    assert node_id(ports[0]) == ids[ports[0]]
    wait_until(lambda: others_see_connected(ports, ports[0], ids[ports[0]]),
               message="the others to see the started node connected")

    stranger = free_ports(1)[0]
    for command in ("start", "stop", "restart"):
        result = launcher.run(command, str(stranger), "--dir", str(directory))
        assert result.returncode == 1
        assert "no node %d in the cluster in %s (its ports: %s)" % (
            stranger, directory, ", ".join(map(str, ports))) in result.stderr
    result = launcher.run("start", "--dir", str(directory))
    assert result.returncode == 2 and "PORT" in result.stderr
    result = launcher.run("start", str(ports[0]), "--dir", str(tmp_path / "nothing"))
    assert result.returncode == 1 and "no cluster in" in result.stderr


def test_restart_with_a_relative_directory(launcher, tmp_path):
    """``--dir`` as the README gives it, relative to where the command runs
    (``disque-cluster`` defaults to ./disque-cluster): the node starts in its
    own directory, so its config must be named by an absolute path."""
    directory = tmp_path / "cluster"
    ports = free_ports(3)
    launcher.create(directory, ports)
    target = ports[2]
    node = node_id(target)
    result = launcher.run("restart", str(target), "--dir", directory.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert node_id(target) == node
    wait_until(lambda: others_see_connected(ports, target, node),
               message="the others to see the restarted node connected")


def raw_reply(port: int, request: bytes) -> bytes:
    """One inline request's reply line, as the node sends it."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            assert chunk, "the node closed the connection"
            reply += chunk
    return reply


def http_get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=30, context=context) as response:
        return response.status, response.read()


def test_create_with_a_base_config_directives_and_metrics_ports(launcher, tmp_path):
    """Every node runs the base file's lines, then --conf's, then its own
    (port, dir, ... : the base file's are replaced); each gets its own
    metrics port, which serves /metrics once create returns."""
    directory = tmp_path / "cluster"
    ports, metrics = free_ports(3), free_ports(3)
    base = tmp_path / "base.conf"
    base.write_text("# shared by the nodes\nmaxdeliver-default 7\nhz 30\nport 7711\n"
                    "daemonize no\ndir /\n")
    output = launcher.create(directory, ports, "--base-config", str(base),
                             "--conf", "appendonly yes", "--conf", "hz 20",
                             "--metrics-port", str(metrics[0]))
    assert "AOF on" in output
    urls = ["http://127.0.0.1:%d/" % port for port in metrics]
    assert "Dashboards: " + "  ".join(urls) in output
    for port, metrics_port in zip(ports, metrics):
        with redis.Redis(port=port, socket_timeout=30) as client:
            for name, value in (("appendonly", "yes"), ("hz", "20"),
                                ("maxdeliver-default", "7"), ("port", str(port)),
                                ("daemonize", "yes"), ("metrics-port", str(metrics_port)),
                                ("dir", str(directory / str(port)))):
                assert client.execute_command("CONFIG", "GET", name) == {
                    name.encode(): value.encode()}, (port, name)
        status_code, body = http_get("http://127.0.0.1:%d/metrics" % metrics_port)
        assert status_code == 200 and b"disque_jobs_added_total" in body

    result = launcher.run("status", "--dir", str(directory))
    assert result.returncode == 0, result.stdout + result.stderr
    assert [row[6] for row in status_rows(result.stdout).values()] == urls

    # A parameter read at startup only is named immutable, as Redis 7 does; a
    # name that is no parameter keeps Disque 1.0's text.
    assert raw_reply(ports[0], b"CONFIG SET metrics-port 9711\r\n") == (
        b"-ERR CONFIG SET failed (possibly related to argument 'metrics-port') - "
        b"can't set immutable config\r\n")
    assert raw_reply(ports[0], b"CONFIG SET nosuchthing 1\r\n") == (
        b"-ERR Unsupported CONFIG parameter: nosuchthing\r\n")


def test_create_refuses_directives_it_cannot_run(launcher, tmp_path):
    """Nothing is written or started when a node's config would not load or
    would take a setting the launcher gives each node."""
    directory = tmp_path / "cluster"
    ports = free_ports(2)
    shared = tmp_path / "shared.conf"
    shared.write_text("metrics-port 9711\n")
    for options, message in (
            (["--conf", "appendonly maybe"], ">>> 'appendonly maybe'\nargument must be "
                                             "'yes' or 'no'"),
            (["--conf", "port 9999"], "--conf 'port 9999': disque-cluster sets port for "
                                      "each node (give --port)"),
            (["--conf", "metrics-port 9711"], "(give --metrics-port)"),
            (["--base-config", str(shared)], "%s sets metrics-port 9711, which the nodes "
                                             "cannot share" % shared),
            (["--base-config", str(tmp_path / "missing.conf")], "cannot read the base config"),
            (["--conf", "requirepass secret"], "default user would need a password"),
            (["--metrics-port", str(ports[1])], "port %d would be both the metrics port of "
                                                "node 1 and the client port of node 2"
                                                % ports[1])):
        result = launcher.run("create", "2", "--port", str(ports[0]), "--dir", str(directory),
                              *options)
        assert result.returncode == 1, options
        assert message in result.stderr, (options, result.stderr)
        assert not directory.exists(), options


def test_status_sees_a_stopped_node_unreachable_at_once(launcher, tmp_path):
    """REACHABLE counts the bus links open now: a node whose process ended
    stops counting within a second or two, not after node-timeout (15 s)."""
    directory = tmp_path / "cluster"
    ports = free_ports(3)
    launcher.create(directory, ports)
    pids = pidfile_pids(directory)

    def reachable() -> dict[int, str]:
        rows = status_rows(launcher.run("status", "--dir", str(directory)).stdout)
        return {port: row[3] for port, row in rows.items()}

    os.kill(pids[ports[0]], signal.SIGTERM)
    wait_until(lambda: reachable() == {ports[0]: "-", ports[1]: "2", ports[2]: "2"},
               timeout=3, message="status to count 2 reachable nodes after a SIGTERM")
    result = launcher.run("stop", str(ports[1]), "--dir", str(directory))
    assert result.returncode == 0, result.stdout + result.stderr
    wait_until(lambda: reachable() == {ports[0]: "-", ports[1]: "-", ports[2]: "1"},
               timeout=3, message="status to count 1 reachable node after a stop")


def test_tls_nodes_show_an_https_dashboard(launcher, tmp_path):
    certs = gen_certs(tmp_path / "certs")
    directory = tmp_path / "cluster"
    port, metrics_port, tls_port = free_ports(1)[0], free_ports(1)[0], free_ports(1)[0]
    output = launcher.create(directory, [port], "--metrics-port", str(metrics_port),
                             "--tls-port", str(tls_port),
                             "--conf", "tls-cert-file %s" % (certs / "node.crt"),
                             "--conf", "tls-key-file %s" % (certs / "node.key"),
                             "--conf", "tls-ca-cert-file %s" % (certs / "ca.crt"))
    url = "https://127.0.0.1:%d/" % metrics_port
    assert "Dashboards: " + url in output
    rows = status_rows(launcher.run("status", "--dir", str(directory)).stdout)
    assert rows[port][6] == url
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    status_code, body = http_get(url + "metrics", context)
    assert status_code == 200 and b"disque_jobs_added_total" in body
    assert tls_handshake(certs, tls_port, with_cert=True) == b"+PONG\r\n"


def test_the_readme_cluster_one_liner(launcher, tmp_path):
    """README's "Three nodes on one machine" command, on free ports: three
    nodes keeping an AOF, each with a dashboard."""
    readme = (REPO / "README.md").read_text()
    [line] = re.findall(r"^\.venv/bin/disque-cluster create 3 (.*?)(?:  #.*)?$", readme, re.M)
    options = shlex.split(line)
    metrics = free_ports(3)
    options[options.index("--metrics-port") + 1] = str(metrics[0])
    directory = tmp_path / "cluster"
    ports = free_ports(3)
    output = launcher.create(directory, ports, *options)
    assert "AOF on" in output
    assert "Dashboards: " + "  ".join("http://127.0.0.1:%d/" % port for port in metrics) in output
    for port in metrics:
        assert http_get("http://127.0.0.1:%d/metrics" % port)[0] == 200
