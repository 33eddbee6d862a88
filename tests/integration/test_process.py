"""Process behaviour: systemd notification, daemonize + pidfile, config errors."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

from disque.aof.service import LOAD_SLICE_RECORDS
from disque.process.supervision import LOADING_NOTIFY_INTERVAL
from tests.integration.test_proctitle import assert_titled
from tests.support.process import REPO, DisqueProcess, free_port, wait_until


def test_systemd_ready_and_stopping_notifications(tmp_path):
    notify_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify_path)
    sock.settimeout(10)
    node = DisqueProcess(tmp_path / "node", config="supervised systemd\n",
                         env={"NOTIFY_SOCKET": notify_path})
    try:
        node.start(wait=False)
        assert sock.recv(256) == b"READY=1"
        assert node.raw(b"PING\r\n") == b"+PONG\r\n"
        node.proc.terminate()
        assert sock.recv(256) == b"STOPPING=1"
        assert node.proc.wait(10) == 0
    finally:
        node.stop()
        sock.close()


def _notifications_until_ready(sock: socket.socket) -> list[bytes]:
    """Datagrams received on the fake NOTIFY_SOCKET up to READY=1 (included)."""
    messages: list[bytes] = []
    while not messages or messages[-1] != b"READY=1":
        messages.append(sock.recv(256))
    return messages


def test_aof_load_extends_the_systemd_start_timeout(tmp_path, server_factory):
    """While a large AOF loads the node keeps pushing systemd's start timeout
    back, so TimeoutStartSec does not kill a node that is making progress."""
    notify_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify_path)
    sock.settimeout(120)
    try:
        node = server_factory("appendonly yes\nsupervised systemd\n",
                              env={"NOTIFY_SOCKET": notify_path})
        assert _notifications_until_ready(sock) == [b"READY=1"]  # an empty AOF: no wait
        count = 5 * LOAD_SLICE_RECORDS  # five loader slices
        for start in range(0, count, 5000):
            with socket.create_connection(("127.0.0.1", node.port), timeout=60) as s:
                s.sendall(b"".join(b"ADDJOB q job%d 0\r\n" % i for i in range(start, start + 5000)))
                received = b""
                while received.count(b"\r\n") < 5000:
                    received += s.recv(1 << 16)
                assert all(line.startswith(b"+D-") for line in received.split(b"\r\n")[:-1])
        assert node.call("QLEN", "q") == count
        node.stop()
        assert sock.recv(256) == b"STOPPING=1"

        node.start(wait=False)
        messages = _notifications_until_ready(sock)
        extends = messages[:-1]
        assert extends and all(m.startswith(b"EXTEND_TIMEOUT_USEC=") for m in extends), messages
        assert all(int(m.split(b"=")[1]) >= 1_000_000 for m in extends), messages
        node.wait_ready()
        # Loaded jobs are active until their retry time: counted, not queued.
        loaded = re.search(r"DB loaded from append only file: ([0-9.]+) seconds \((\d+) jobs\)",
                           node.log_path.read_text())
        assert loaded is not None and int(loaded.group(2)) == count
        # One as the load begins, then one after the first slice past each
        # interval: a load of three intervals spans at least two.
        seconds = float(loaded.group(1))
        if seconds >= 3 * LOADING_NOTIFY_INTERVAL:
            assert len(extends) >= 2, (seconds, extends)
        print("AOF of %d jobs loaded in %.2f s with %d EXTEND_TIMEOUT_USEC"
              % (count, seconds, len(extends)))
    finally:
        sock.close()


def test_supervised_no_sends_nothing(tmp_path):
    notify_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify_path)
    node = DisqueProcess(tmp_path / "node", config="supervised no\n",
                         env={"NOTIFY_SOCKET": notify_path})
    try:
        node.start()
        assert node.stop() == 0
        # A datagram is queued when sent: once the process has exited, any
        # READY=1 or STOPPING=1 it sent would be waiting here.
        try:
            data = sock.recv(256, socket.MSG_DONTWAIT)
        except BlockingIOError:
            data = None
        assert data is None
    finally:
        node.stop()
        sock.close()


def test_daemonize_writes_and_removes_pidfile_and_titles_the_daemon(tmp_path):
    pidfile = tmp_path / "disque.pid"
    node = DisqueProcess(tmp_path / "node",
                         config="daemonize yes\npidfile %s\n" % pidfile)
    node.start(wait=False)
    assert node.proc.wait(10) == 0  # the launcher exits, the daemon lives on
    pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip()))
    try:
        wait_until(lambda: node.raw(b"PING\r\n") == b"+PONG\r\n")
        assert_titled(pid, node.port)  # the title set before detaching stays the daemon's
        assert node.raw(b"*1\r\n$8\r\nSHUTDOWN\r\n", until_close=True) == b"<EOF>"
        wait_until(lambda: not pidfile.exists(), message="pidfile removal")
    finally:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def test_bad_config_is_fatal_with_line_number(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("port 7711\nnosuchdirective 1\n")
    result = subprocess.run([sys.executable, "-m", "disque.server", str(conf)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=20,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.returncode == 1
    assert "*** FATAL CONFIG FILE ERROR ***" in result.stderr
    assert "at line 2" in result.stderr
    assert "Bad directive or wrong number of arguments" in result.stderr


def test_command_line_overrides_file_and_sigint_exits_cleanly(tmp_path):
    port = free_port()
    node = DisqueProcess(tmp_path / "node", args=("--port", str(port)))
    node.port = port
    node.start()
    try:
        assert node.call("CONFIG", "GET", "port") == {b"port": str(port).encode()}
        node.proc.send_signal(2)
        assert node.proc.wait(10) == 0
    finally:
        node.stop()


def test_version_flag():
    result = subprocess.run([sys.executable, "-m", "disque.server", "--version"],
                            capture_output=True, text=True, timeout=20,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.returncode == 0
    assert "v=1.0-rc1" in result.stdout


def test_help_flag_exits_zero_and_names_the_program():
    for flag in ("--help", "-h"):
        result = subprocess.run([sys.executable, "-m", "disque.server", flag],
                                capture_output=True, text=True, timeout=20,
                                env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("Usage: disque-server [/path/to/disque.conf] [options]\n")
        assert "disque-server - (read config from stdin)" in result.stdout
        assert "./disque-server" not in result.stdout


def test_config_from_stdin_starts_a_node_on_its_port(tmp_path):
    node = DisqueProcess(tmp_path / "node", config_stdin=True)
    node.start()
    try:
        assert node.raw(b"PING\r\n") == b"+PONG\r\n"
        assert node.call("CONFIG", "GET", "port") == {b"port": str(node.port).encode()}
        # No file to rewrite, and the node did not claim it had no config.
        assert "no config file specified" not in node.log_path.read_text()
    finally:
        assert node.stop() == 0


def test_config_error_at_startup_ends_with_a_newline(tmp_path):
    missing = tmp_path / "missing.conf"
    result = subprocess.run([sys.executable, "-m", "disque.server", str(missing)],
                            capture_output=True, text=True, timeout=20,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.returncode == 1
    assert result.stderr == ("Fatal error, can't open config file '%s': "
                             "No such file or directory\n" % missing)
