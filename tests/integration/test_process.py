"""Process behaviour: systemd notification, daemonize + pidfile, config errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

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


def test_daemonize_writes_and_removes_pidfile(tmp_path):
    pidfile = tmp_path / "disque.pid"
    node = DisqueProcess(tmp_path / "node",
                         config="daemonize yes\npidfile %s\n" % pidfile)
    node.start(wait=False)
    assert node.proc.wait(10) == 0  # the launcher exits, the daemon lives on
    pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip()))
    try:
        wait_until(lambda: node.raw(b"PING\r\n") == b"+PONG\r\n")
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
        assert node.call("CONFIG", "GET", "port") == [b"port", str(port).encode()]
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
