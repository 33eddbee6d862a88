"""The processes of a ``disque-cluster``'s nodes: starting them as daemons,
finding them again by their pid files and ports, and stopping them with
bounded steps."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, TextIO

from disque.tools.node_files import HOST, NodeFiles
from disque.tools.node_queries import (INFO_PROCESS_ID, INFO_SERVER, QUERY_ERRORS,
                                       SHORT_REPLY_TIMEOUT_S, SHUTDOWN, answers_ping,
                                       info_fields, link)

# A pure-Python node answers within a second; the bounds leave room for a
# loaded machine, and a node that exits is noticed at once.
START_TIMEOUT_S: Final = 30.0
SHUTDOWN_TIMEOUT_S: Final = 10.0
SIGNAL_TIMEOUT_S: Final = 5.0
POLL_INTERVAL_S: Final = 0.05
STOP_STEPS: Final = ("SHUTDOWN", "SIGTERM", "SIGKILL")   # how stop escalates, in order

SERVER_COMMAND: Final = (sys.executable, "-m", "disque.server")
SERVER_PROCESS_MARK: Final = b"disque"   # in the command line of every node process


class LaunchError(Exception):
    """A node did not start or join; the message says which node and why."""


def port_list(ports: Sequence[int]) -> str:
    """Ports for a message: ``7711, 7712``."""
    return ", ".join(str(port) for port in ports)


def wait_for(done: Callable[[], bool], timeout: float) -> bool:
    """Poll ``done`` until it holds or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL_S)
    return True


def process_alive(pid: int) -> bool:
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


def recorded_pid(node: NodeFiles) -> int | None:
    """The pid in the node's pid file if that process still runs, else None."""
    pid = node.pidfile_pid()
    return pid if pid is not None and process_alive(pid) else None


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


def start_nodes(nodes: Sequence[NodeFiles]) -> None:
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
            elif (pid := node.pidfile_pid()) is not None and not process_alive(pid):
                raise LaunchError("node %d exited while starting; its log ends with:\n%s"
                                  % (node.port, node.log_tail()))
        return not pending

    if not wait_for(all_answer, START_TIMEOUT_S):
        raise LaunchError("no answer to PING within %.0f s from %s; the log ends with:\n%s"
                          % (START_TIMEOUT_S, port_list([node.port for node in pending]),
                             pending[0].log_tail()))


def stop_nodes(nodes: Sequence[NodeFiles], out: TextIO) -> list[int]:
    """Stop every running node, each step bounded: SHUTDOWN (SIGTERM for a node
    that does not answer), then SIGTERM, then SIGKILL for what still runs.
    Reports each node to ``out``; returns the ports of nodes still running."""
    pids: dict[int, int] = {}
    steps: dict[int, int] = {}   # index in STOP_STEPS of the last step taken
    for node in nodes:
        pid = recorded_pid(node)
        try:
            with link(node.port, timeout=SHORT_REPLY_TIMEOUT_S) as connection:
                pid = int(info_fields(connection.call(*INFO_SERVER))[INFO_PROCESS_ID])
                connection.send_only(*SHUTDOWN)
            steps[node.port] = 0
        except QUERY_ERRORS:
            if pid is not None:
                _signal(pid, signal.SIGTERM)
                steps[node.port] = 1
        if pid is None:
            out.write("  %d: not running\n" % node.port)
        else:
            pids[node.port] = pid
    last_step = len(STOP_STEPS) - 1
    while pids:
        wait_for(lambda: not any(process_alive(pid) for pid in pids.values()),
                 SHUTDOWN_TIMEOUT_S if 0 in (steps[port] for port in pids)
                 else SIGNAL_TIMEOUT_S)
        for port, pid in list(pids.items()):
            if not process_alive(pid):
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
