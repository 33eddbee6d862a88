"""``disque-cluster``: start, inspect and stop a cluster of nodes on this machine,
like Redis' create-cluster script in one command.

    disque-cluster create 3 [--port 7711] [--dir ./disque-cluster] [--appendonly]
    disque-cluster status [--dir ./disque-cluster]
    disque-cluster stop [PORT] [--dir ./disque-cluster]
    disque-cluster start PORT [--dir ./disque-cluster]
    disque-cluster restart PORT [--dir ./disque-cluster]

Each node gets its own directory ``DIR/<port>/`` with its own ``disque.conf``
(so a CONFIG REWRITE edits that node's file, never a shared one),
``nodes.conf``, ``disque.log``, ``disque.pid`` and, with ``--appendonly``,
``disque.aof``. The nodes daemonize themselves through their config file;
``status`` and ``stop`` find them again by their pid files and ports;
``start`` and ``restart`` run one node again from its own directory and
config, so it keeps its ``nodes.conf`` (its node ID and the other nodes'
addresses) and rejoins by itself. The launcher talks RESP through ``disque.tools.resp_client`` (hiredis, a
dependency of the server), so it needs no client library.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from disque.tools.resp_client import CommandError, Connection

PROGRAM: Final = "disque-cluster"
DEFAULT_DIR: Final = "disque-cluster"
DEFAULT_PORT: Final = 7711
HOST: Final = "127.0.0.1"
BUS_PORT_OFFSET: Final = 10000   # a node's cluster bus listens on its port + 10000
MAX_PORT: Final = 65535

CONFIG_NAME: Final = "disque.conf"
PID_NAME: Final = "disque.pid"
LOG_NAME: Final = "disque.log"
AOF_NAME: Final = "disque.aof"
NODES_CONF_NAME: Final = "nodes.conf"

# A pure-Python node answers within a second; the bounds leave room for a
# loaded machine, and a node that exits is noticed at once.
START_TIMEOUT_S: Final = 30.0
JOIN_TIMEOUT_S: Final = 30.0
SHUTDOWN_TIMEOUT_S: Final = 10.0
SIGNAL_TIMEOUT_S: Final = 5.0
POLL_INTERVAL_S: Final = 0.05
REPLY_TIMEOUT_S: Final = 5.0
LOG_TAIL_LINES: Final = 15

PING: Final = ("PING",)
PONG: Final = b"PONG"
OK: Final = b"OK"
HELLO: Final = ("HELLO",)
CLUSTER_MEET: Final = ("CLUSTER", "MEET")
CLUSTER_INFO: Final = ("CLUSTER", "INFO")
INFO_SERVER: Final = ("INFO", "server")
INFO_JOBS: Final = ("INFO", "jobs")
QSCAN_ALL: Final = ("QSCAN", "BUSYLOOP")
QLEN: Final = "QLEN"
SHUTDOWN: Final = ("SHUTDOWN",)
STOP_STEPS: Final = ("SHUTDOWN", "SIGTERM", "SIGKILL")   # how stop escalates, in order
INFO_PROCESS_ID: Final = "process_id"
INFO_REGISTERED_JOBS: Final = "registered_jobs"
INFO_KNOWN_NODES: Final = "cluster_known_nodes"
INFO_REACHABLE_NODES: Final = "cluster_reachable_nodes"   # other nodes, not counting itself

SERVER_COMMAND: Final = (sys.executable, "-m", "disque.server")
SERVER_PROCESS_MARK: Final = b"disque"   # in the command line of every node process


class LaunchError(Exception):
    """A create step failed; the message says which node and why."""


@dataclass(frozen=True)
class NodeFiles:
    """Where one node's files live: ``DIR/<port>/``."""

    port: int
    directory: Path

    @property
    def config(self) -> Path:
        return self.directory / CONFIG_NAME

    @property
    def pidfile(self) -> Path:
        return self.directory / PID_NAME

    @property
    def logfile(self) -> Path:
        return self.directory / LOG_NAME

    def config_text(self, index: int, size: int, appendonly: bool) -> str:
        """The node's own config file: only what differs from the defaults."""
        return "\n".join((
            "# Written by disque-cluster create: node %d of %d of a local cluster."
            % (index + 1, size),
            "# This file is the node's own: CONFIG REWRITE saves here.",
            "bind %s" % HOST,
            "port %d" % self.port,
            "dir %s" % _quoted(str(self.directory)),
            "daemonize yes",
            "pidfile %s" % _quoted(str(self.pidfile)),
            "logfile %s" % _quoted(str(self.logfile)),
            "appendonly %s" % ("yes" if appendonly else "no"),
            "appendfilename %s" % AOF_NAME,
            "cluster-config-file %s" % NODES_CONF_NAME,
            "",
        ))

    def log_tail(self) -> str:
        """The last lines of the node's log, indented for an error message."""
        try:
            lines = self.logfile.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        except OSError:
            return "    (no log at %s)" % self.logfile
        return "\n".join("    " + line for line in lines) or "    (empty log %s)" % self.logfile


@dataclass(frozen=True)
class NodeStatus:
    """What ``status`` shows of one node; None where a down node cannot tell."""

    port: int
    pid: int | None
    up: bool
    known_nodes: int | None = None
    reachable_nodes: int | None = None   # itself included
    jobs: int | None = None
    queued: int | None = None

    @property
    def state(self) -> str:
        """up, down, or a running process that does not answer (loading, stuck)."""
        if self.up:
            return "up"
        return "down" if self.pid is None else "no-reply"


def _quoted(text: str) -> str:
    """A config file argument in double quotes (the loader's sdssplitargs rules)."""
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def _link(port: int, timeout: float = REPLY_TIMEOUT_S) -> Connection:
    """A short-lived connection to the local node on ``port``."""
    return Connection(port, HOST, timeout)


def _info_fields(text: bytes) -> dict[str, str]:
    """``field:value`` lines of INFO or CLUSTER INFO."""
    fields = {}
    for line in text.decode(errors="replace").splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields[name] = value
    return fields


def answers_ping(port: int) -> bool:
    """True if a node answers PING on ``port`` now."""
    try:
        with _link(port, timeout=1.0) as link:
            return bool(link.call(*PING) == PONG)
    except (OSError, CommandError):
        return False


# ------------------------------------------------------------------ processes

def _process_alive(pid: int) -> bool:
    """True if ``pid`` runs a node: it exists, is no zombie, and (where /proc
    tells) its command line is a disque server's, not a later reuse of the pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    proc = Path("/proc/%d" % pid)
    if not proc.is_dir():
        return True
    try:
        state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
        command_line = (proc / "cmdline").read_bytes()
    except (OSError, IndexError):
        return False
    return state != "Z" and SERVER_PROCESS_MARK in command_line


def pidfile_pid(node: NodeFiles) -> int | None:
    """The pid the node's pid file holds (None without a file or while it is written)."""
    try:
        return int(node.pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def recorded_pid(node: NodeFiles) -> int | None:
    """The pid in the node's pid file if that process still runs, else None."""
    pid = pidfile_pid(node)
    return pid if pid is not None and _process_alive(pid) else None


def port_in_use(port: int) -> bool:
    """True if something listens on ``port`` of the loopback address (the
    nodes bind with SO_REUSEADDR, so a port in TIME_WAIT counts as free)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


def _wait_for(done: Callable[[], bool], timeout: float) -> bool:
    """Poll ``done`` until it holds or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL_S)
    return True


def cluster_nodes(root: Path) -> list[NodeFiles]:
    """The nodes laid out under ``root`` by create: ``<port>/disque.conf``, by port.

    Their paths are absolute, as create's: a node starts in its own
    directory, where a path relative to the caller's would not be found."""
    if not root.is_dir():
        return []
    nodes = [NodeFiles(int(entry.name), entry) for entry in root.resolve().iterdir()
             if entry.name.isdigit() and (entry / CONFIG_NAME).is_file()]
    return sorted(nodes, key=lambda node: node.port)


# ------------------------------------------------------------------ create

def create(size: int, first_port: int, root: Path, appendonly: bool) -> int:
    """Start ``size`` joined nodes on consecutive ports under ``root``."""
    ports = range(first_port, first_port + size)
    if size < 1:
        return _fail("the cluster needs at least one node")
    if first_port < 1 or ports[-1] + BUS_PORT_OFFSET > MAX_PORT:
        return _fail("ports %d-%d do not fit: each node's bus port is its port + %d, at most "
                     "%d, so --port must be between 1 and %d"
                     % (ports[0], ports[-1], BUS_PORT_OFFSET, MAX_PORT,
                        MAX_PORT - BUS_PORT_OFFSET - size + 1))
    existing = cluster_nodes(root)
    running = [node.port for node in existing
               if recorded_pid(node) is not None or answers_ping(node.port)]
    if running:
        return _fail("a cluster is already running in %s (ports %s); stop it first: %s"
                     % (root, _port_list(running), _command("stop", root)))
    if existing:
        return _fail("%s holds a stopped cluster's files (ports %s); start its nodes again "
                     "(%s), remove them (rm -r %s) or choose another --dir"
                     % (root, _port_list([node.port for node in existing]),
                        _command("start PORT", root), shlex.quote(str(root))))
    busy = ["%d (the %s port of node %d)" % (checked, kind, index + 1)
            for index, port in enumerate(ports)
            for checked, kind in ((port, "client"), (port + BUS_PORT_OFFSET, "bus"))
            if port_in_use(checked)]
    if busy:
        return _fail("ports in use: %s; choose another --port or stop what listens there"
                     % ", ".join(busy))
    nodes = [NodeFiles(port, root.resolve() / str(port)) for port in ports]
    for index, node in enumerate(nodes):
        node.directory.mkdir(parents=True, exist_ok=True)
        node.config.write_text(node.config_text(index, size, appendonly))
    try:
        _start(nodes)
        _join(nodes)
        ids = _node_ids(nodes)
    except (LaunchError, OSError, CommandError) as exc:
        sys.stderr.write("%s: %s\n" % (PROGRAM, exc))
        _stop_nodes(nodes, sys.stderr)
        sys.stderr.write("The nodes' files stay in %s for a look; remove them (rm -r %s) "
                         "before the next create.\n" % (root, shlex.quote(str(root))))
        return 1
    _print_created(nodes, ids, root, appendonly)
    return 0


def _start(nodes: Sequence[NodeFiles]) -> None:
    """Start every node (each daemonizes itself) and wait until each answers PING."""
    launches = [subprocess.Popen(SERVER_COMMAND + (str(node.config),), cwd=node.directory,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, start_new_session=True)
                for node in nodes]
    # The daemonizing parent exits as soon as it forked; only a config error
    # (before the fork) makes it fail, with the reason on stderr.
    for node, launch in zip(nodes, launches):
        try:
            _, stderr = launch.communicate(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            launch.kill()
            launch.communicate()
            raise LaunchError("node %d did not daemonize within %.0f s"
                              % (node.port, START_TIMEOUT_S)) from None
        if launch.returncode != 0:
            raise LaunchError("node %d did not start (exit status %d):\n%s"
                              % (node.port, launch.returncode,
                                 stderr.decode(errors="replace").rstrip()))
    pending = list(nodes)

    def all_answer() -> bool:
        for node in list(pending):
            if answers_ping(node.port):
                pending.remove(node)
            elif (pid := pidfile_pid(node)) is not None and not _process_alive(pid):
                raise LaunchError("node %d exited while starting; its log ends with:\n%s"
                                  % (node.port, node.log_tail()))
        return not pending

    if not _wait_for(all_answer, START_TIMEOUT_S):
        raise LaunchError("no answer to PING within %.0f s from %s; the log ends with:\n%s"
                          % (START_TIMEOUT_S, _port_list([node.port for node in pending]),
                             pending[0].log_tail()))


def _join(nodes: Sequence[NodeFiles]) -> None:
    """MEET the first node with each other one; wait until every node sees all."""
    first = nodes[0]
    with _link(first.port) as link:
        for node in nodes[1:]:
            if link.call(*CLUSTER_MEET, HOST, node.port) != OK:
                raise LaunchError("CLUSTER MEET %s %d failed on node %d"
                                  % (HOST, node.port, first.port))
    views: dict[int, tuple[int, int]] = {}

    def meshed() -> bool:
        for node in nodes:
            try:
                with _link(node.port) as link:
                    fields = _info_fields(link.call(*CLUSTER_INFO))
            except (OSError, CommandError):
                return False
            views[node.port] = (int(fields[INFO_KNOWN_NODES]),
                                int(fields[INFO_REACHABLE_NODES]) + 1)
        return all(view == (len(nodes), len(nodes)) for view in views.values())

    if not _wait_for(meshed, JOIN_TIMEOUT_S):
        raise LaunchError("the nodes did not all see each other within %.0f s "
                          "(port: known/reachable nodes) %s"
                          % (JOIN_TIMEOUT_S, ", ".join("%d: %d/%d" % (port, *view)
                                                       for port, view in views.items())))


def _node_ids(nodes: Sequence[NodeFiles]) -> list[str]:
    """Each node's ID, from its HELLO reply (version, own ID, nodes...)."""
    ids = []
    for node in nodes:
        with _link(node.port) as link:
            ids.append(link.call(*HELLO)[1].decode())
    return ids


def _print_created(nodes: Sequence[NodeFiles], ids: Sequence[str], root: Path,
                   appendonly: bool) -> None:
    first = nodes[0].port
    print("Started %d node%s in %s (%s, AOF %s), joined as one cluster:"
          % (len(nodes), "" if len(nodes) == 1 else "s", root, HOST,
             "on" if appendonly else "off"))
    for node, node_id in zip(nodes, ids):
        print("  %s:%d  pid %s  id %s  %s" % (HOST, node.port, recorded_pid(node) or "?",
                                            node_id[:8], node.directory))
    print()
    print("Connect:  redis-cli -p %d" % first)
    print("Nodes:    redis-cli -p %d HELLO" % first)
    print('Python:   DisqueClient("%s")' % ",".join("%s:%d" % (HOST, node.port) for node in nodes))
    print("Status:   %s" % _command("status", root))
    print("Stop:     %s   (then rm -r %s removes logs, node IDs and AOFs)"
          % (_command("stop", root), shlex.quote(str(root))))


# ------------------------------------------------------------------ status

def node_status(node: NodeFiles) -> NodeStatus:
    """Ask one node about itself; a node that does not answer is down."""
    pid = recorded_pid(node)
    try:
        with _link(node.port) as link:
            server, cluster, jobs, queues = link.pipeline(
                [INFO_SERVER, CLUSTER_INFO, INFO_JOBS, QSCAN_ALL])
            lengths = link.pipeline([(QLEN, queue) for queue in queues[1]])
    except (OSError, CommandError):
        return NodeStatus(node.port, pid, up=False)
    cluster_fields = _info_fields(cluster)
    return NodeStatus(
        node.port, int(_info_fields(server)[INFO_PROCESS_ID]), up=True,
        known_nodes=int(cluster_fields[INFO_KNOWN_NODES]),
        reachable_nodes=int(cluster_fields[INFO_REACHABLE_NODES]) + 1,
        jobs=int(_info_fields(jobs)[INFO_REGISTERED_JOBS]), queued=sum(lengths))


def status(root: Path) -> int:
    """Print each node's state; 0 if every node is up."""
    nodes = cluster_nodes(root)
    if not nodes:
        return _fail("no cluster in %s (start one with %s)"
                     % (root, _command("create N", root)))
    rows = [node_status(node) for node in nodes]
    up = sum(row.up for row in rows)
    print("Cluster in %s: %d of %d node%s up" % (root, up, len(rows), "" if len(rows) == 1 else "s"))
    header = ("PORT", "PID", "STATE", "KNOWN", "REACHABLE", "JOBS", "QUEUED")
    table = [header] + [(str(row.port), _shown(row.pid), row.state,
                         _shown(row.known_nodes), _shown(row.reachable_nodes),
                         _shown(row.jobs), _shown(row.queued)) for row in rows]
    widths = [max(len(line[column]) for line in table) for column in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    print("KNOWN: nodes in the node's table; REACHABLE: those it can reach, itself "
          "included; JOBS: jobs it holds; QUEUED: jobs in its queues.")
    return 0 if up == len(rows) else 1


def _shown(value: int | None) -> str:
    return "-" if value is None else str(value)


# ------------------------------------------------------------------ start, restart

def _cluster_node(root: Path, port: int) -> tuple[list[NodeFiles], NodeFiles | None, str]:
    """The cluster's nodes and the one on ``port``; without it, why not."""
    nodes = cluster_nodes(root)
    if not nodes:
        return nodes, None, "no cluster in %s" % root
    for node in nodes:
        if node.port == port:
            return nodes, node, ""
    return nodes, None, ("no node %d in the cluster in %s (its ports: %s)"
                         % (port, root, _port_list([node.port for node in nodes])))


def start_node(root: Path, port: int) -> int:
    """Start the stopped node on ``port`` from its own directory and config;
    0 once it answers and it and the other running nodes reach each other."""
    nodes, node, why = _cluster_node(root, port)
    if node is None:
        return _fail(why)
    pid = recorded_pid(node)
    if pid is not None or answers_ping(port):
        return _fail("node %d already runs%s; restart it with %s"
                     % (port, "" if pid is None else " (pid %d)" % pid,
                        _command("restart %d" % port, root)))
    busy = [str(checked) for checked in (port, port + BUS_PORT_OFFSET) if port_in_use(checked)]
    if busy:
        return _fail("node %d cannot start: port %s in use by another process"
                     % (port, " and ".join(busy)))
    # A node killed without SHUTDOWN leaves its pid file; a stale pid there
    # would read as "exited while starting" before the new process writes its own.
    if pidfile_pid(node) is not None:
        node.pidfile.unlink(missing_ok=True)
    try:
        _start([node])
        node_id = _node_ids([node])[0]
        _rejoin(node, nodes)
    except (LaunchError, OSError, CommandError) as exc:
        return _fail(str(exc))
    print("  %d: started (pid %s, id %s), reaches the %d other running node%s"
          % (port, recorded_pid(node) or "?", node_id[:8], len(_running(nodes)) - 1,
             "" if len(_running(nodes)) == 2 else "s"))
    return 0


def restart_node(root: Path, port: int) -> int:
    """Stop the node on ``port`` (if it runs), then start it again."""
    nodes, node, why = _cluster_node(root, port)
    if node is None:
        return _fail(why)
    if _stop_nodes([node], sys.stdout):
        return _fail("node %d still runs after SIGKILL" % port)
    if not _wait_for(lambda: not port_in_use(port) and not port_in_use(port + BUS_PORT_OFFSET),
                     SIGNAL_TIMEOUT_S):
        return _fail("node %d stopped but its ports are still in use" % port)
    return start_node(root, port)


def _running(nodes: Sequence[NodeFiles]) -> list[NodeFiles]:
    """The nodes that answer PING now."""
    return [node for node in nodes if answers_ping(node.port)]


def _rejoin(node: NodeFiles, nodes: Sequence[NodeFiles]) -> None:
    """Wait until ``node`` reaches every other running node and each of them
    reaches it (the restarted node dials the addresses in its nodes.conf)."""
    views: dict[int, int] = {}

    def rejoined() -> bool:
        up = _running(nodes)
        for other in up:
            try:
                with _link(other.port) as link:
                    fields = _info_fields(link.call(*CLUSTER_INFO))
            except (OSError, CommandError):
                return False
            views[other.port] = int(fields[INFO_REACHABLE_NODES]) + 1
        return node in up and all(seen >= len(up) for seen in views.values())

    if not _wait_for(rejoined, JOIN_TIMEOUT_S):
        raise LaunchError("node %d started but did not rejoin within %.0f s (port: reachable "
                          "nodes, itself included) %s; its log ends with:\n%s"
                          % (node.port, JOIN_TIMEOUT_S,
                             ", ".join("%d: %d" % item for item in views.items()),
                             node.log_tail()))


# ------------------------------------------------------------------ stop

def stop(root: Path, port: int | None = None) -> int:
    """Stop every node of the cluster under ``root``, or the one on ``port``;
    0 once none of them runs."""
    if port is None:
        nodes = cluster_nodes(root)
        if not nodes:
            return _fail("no cluster in %s" % root)
    else:
        _, node, why = _cluster_node(root, port)
        if node is None:
            return _fail(why)
        nodes = [node]
    survivors = _stop_nodes(nodes, sys.stdout)
    if survivors:
        return _fail("still running after SIGKILL: %s" % _port_list(survivors))
    if port is not None:
        print("Start it again with %s (same node ID, from its nodes.conf)."
              % _command("start %d" % port, root))
        return 0
    print("Files kept in %s (logs, nodes.conf%s); rm -r %s removes them."
          % (root, ", AOFs" if any((node.directory / AOF_NAME).exists() for node in nodes)
             else "", shlex.quote(str(root))))
    return 0


def _stop_nodes(nodes: Sequence[NodeFiles], out: TextIO) -> list[int]:
    """Stop every running node, each step bounded: SHUTDOWN (SIGTERM for a node
    that does not answer), then SIGTERM, then SIGKILL for what still runs.
    Reports each node to ``out``; returns the ports of nodes still running."""
    pids: dict[int, int] = {}
    steps: dict[int, int] = {}   # index in STOP_STEPS of the last step taken
    for node in nodes:
        pid = recorded_pid(node)
        try:
            with _link(node.port, timeout=1.0) as link:
                pid = int(_info_fields(link.call(*INFO_SERVER))[INFO_PROCESS_ID])
                link.send_only(*SHUTDOWN)
            steps[node.port] = 0
        except (OSError, CommandError):
            if pid is not None:
                _signal(pid, signal.SIGTERM)
                steps[node.port] = 1
        if pid is None:
            out.write("  %d: not running\n" % node.port)
        else:
            pids[node.port] = pid
    last_step = len(STOP_STEPS) - 1
    while pids:
        _wait_for(lambda: not any(_process_alive(pid) for pid in pids.values()),
                  SHUTDOWN_TIMEOUT_S if 0 in (steps[port] for port in pids)
                  else SIGNAL_TIMEOUT_S)
        for port, pid in list(pids.items()):
            if not _process_alive(pid):
                out.write("  %d: stopped (pid %d, %s)\n" % (port, pid, STOP_STEPS[steps[port]]))
                del pids[port]
        if all(steps[port] == last_step for port in pids):
            break
        for port, pid in pids.items():
            if steps[port] < last_step:
                steps[port] += 1
                _signal(pid, getattr(signal, STOP_STEPS[steps[port]]))
    return sorted(pids)


def _signal(pid: int, signum: int) -> None:
    """Send ``signum``, waking a stopped process first so that it can act on it."""
    try:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------ command line

def _port_list(ports: Sequence[int]) -> str:
    return ", ".join(str(port) for port in ports)


def _command(name: str, root: Path) -> str:
    """How to run another subcommand on the same cluster, spelled as this one
    was run (``.venv/bin/disque-cluster`` when it is not on PATH)."""
    program = sys.argv[0] if os.path.basename(sys.argv[0]) == PROGRAM else PROGRAM
    command = "%s %s" % (shlex.quote(program), name)
    if root == Path(DEFAULT_DIR):
        return command
    return "%s --dir %s" % (command, shlex.quote(str(root)))


def _fail(message: str) -> int:
    sys.stderr.write("%s: %s\n" % (PROGRAM, message))
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``disque-cluster``."""
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Start, inspect and stop a cluster of disque nodes on this machine.",
        epilog="A node started again (start, restart) runs from its own directory and "
               "config: it keeps its nodes.conf, so its node ID, and rejoins the others.")
    commands = parser.add_subparsers(dest="command", required=True)
    create_parser = commands.add_parser(
        "create", help="start N nodes on consecutive ports and join them")
    create_parser.add_argument("nodes", type=int, metavar="N", help="number of nodes")
    create_parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                               help="first node's port (default %d)" % DEFAULT_PORT)
    create_parser.add_argument("--appendonly", action="store_true",
                               help="each node keeps an AOF (appendonly yes)")
    commands.add_parser("status", help="show each node's state")
    commands.add_parser("stop", help="stop every node, or only the one on PORT").add_argument(
        "port", type=int, nargs="?", metavar="PORT", help="the node's port (default: all)")
    for name, text in (("start", "start the stopped node on PORT again"),
                       ("restart", "stop the node on PORT, then start it again")):
        commands.add_parser(name, help=text).add_argument(
            "port", type=int, metavar="PORT", help="the node's port")
    for sub in commands.choices.values():
        sub.add_argument("--dir", type=Path, default=Path(DEFAULT_DIR),
                         help="the cluster's directory (default ./%s)" % DEFAULT_DIR)
    args = parser.parse_args(argv)
    if args.command == "create":
        return create(args.nodes, args.port, args.dir, args.appendonly)
    if args.command == "status":
        return status(args.dir)
    if args.command == "start":
        return start_node(args.dir, args.port)
    if args.command == "restart":
        return restart_node(args.dir, args.port)
    return stop(args.dir, args.port)


if __name__ == "__main__":
    sys.exit(main())
