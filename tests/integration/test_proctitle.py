"""The process title (disque/process/proctitle.py): ps, pgrep and /proc show a
node as ``disque-server 127.0.0.1:PORT [cluster]``, named ``disque-server``,
as redis-server shows itself, whether it runs as ``python -m disque.server``,
as the ``disque-server`` console script (the systemd unit's ExecStart) or
daemonized (tests/integration/test_process.py); without setproctitle a node
still runs, under its command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import redis

from tests.support.process import REPO, DisqueProcess, free_port, wait_until

# The console script installed next to the interpreter running the tests
# (.venv/bin/disque-server), as a user or the systemd unit runs it.
DISQUE_SERVER = str(Path(sys.executable).parent / "disque-server")


def title_of(pid: int) -> str:
    """The process's command line as ps shows it."""
    raw = Path("/proc/%d/cmdline" % pid).read_bytes()
    return " ".join(part.decode() for part in raw.split(b"\0") if part)


def name_of(pid: int) -> str:
    return Path("/proc/%d/comm" % pid).read_text().strip()


def pgrep(*args: str) -> set[int]:
    result = subprocess.run(["pgrep", *args], capture_output=True, text=True, timeout=10)
    return {int(pid) for pid in result.stdout.split()}


def assert_titled(pid: int, port: int) -> None:
    title = "disque-server 127.0.0.1:%d [cluster]" % port
    assert title_of(pid) == title
    assert name_of(pid) == "disque-server"
    assert pid in pgrep("-f", "^%s$" % title.replace("[", r"\["))
    assert pid in pgrep("-x", "disque-server")


def test_python_m_disque_server_shows_as_disque_server(server):
    assert_titled(server.proc.pid, server.port)


def test_console_script_shows_the_same_title(tmp_path):
    port = free_port()
    (tmp_path / "disque.conf").write_text("bind 127.0.0.1\nport %d\nlogfile disque.log\n" % port)
    with open(tmp_path / "stderr.log", "wb") as stderr:
        proc = subprocess.Popen([DISQUE_SERVER, "disque.conf"], cwd=tmp_path, stderr=stderr,
                                env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        client = redis.Redis(port=port, socket_timeout=10)
        wait_until(client.ping, message="PING on %d" % port)
        assert_titled(proc.pid, port)
        try:
            client.execute_command("SHUTDOWN")
        except redis.ConnectionError:
            pass  # SHUTDOWN answers by closing the connection
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (tmp_path / "stderr.log").read_text() == ""


def test_without_setproctitle_the_node_keeps_its_command_line(tmp_path, server_factory):
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "setproctitle.py").write_text('raise ImportError("not installed")\n')
    node = server_factory(env={"PYTHONPATH": "%s:%s" % (hidden, REPO)})
    assert node.raw(b"PING\r\n") == b"+PONG\r\n"
    assert "-m disque.server" in title_of(node.proc.pid)
