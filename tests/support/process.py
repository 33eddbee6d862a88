"""Real disque-server processes for integration and cluster tests.

Each process runs in its own directory on a free loopback port; tests
wait for conditions with bounded polls and always stop what they start.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis

SERVER = [sys.executable, "-m", "disque.server"]
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback port that is free, and whose bus port (+10000) is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port > 55535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair found")


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, message: str = ""):
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (redis.ConnectionError, redis.ResponseError, OSError) as exc:
            last_error = exc
        time.sleep(interval)
    raise AssertionError("timed out waiting for %s (last error: %r)"
                         % (message or getattr(predicate, "__name__", "condition"), last_error))


class DisqueProcess:
    """One disque-server child process."""

    def __init__(self, workdir: Path, port: int | None = None, config: str = "",
                 args: tuple[str, ...] = (), env: dict | None = None) -> None:
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.config_path = self.dir / "disque.conf"
        self.config_path.write_text(
            "bind 127.0.0.1\nport %d\ndir %s\nlogfile disque.log\nloglevel verbose\n%s"
            % (self.port, self.dir, config))
        self.args = tuple(args)
        self.env = env
        self.proc: subprocess.Popen | None = None
        self._clients: list[redis.Redis] = []

    @property
    def log_path(self) -> Path:
        return self.dir / "disque.log"

    def start(self, wait: bool = True) -> "DisqueProcess":
        env = dict(os.environ, PYTHONPATH=str(REPO))
        if self.env:
            env.update(self.env)
        self.proc = subprocess.Popen(SERVER + [str(self.config_path), *self.args], cwd=self.dir,
                                     env=env, stdout=subprocess.DEVNULL,
                                     stderr=open(self.dir / "stderr.log", "ab"))
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 10.0) -> None:
        def answers() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError("disque-server exited with %s: %s"
                                     % (self.proc.returncode, self.tail_log()))
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                reply = s.recv(64)
                return reply.startswith(b"+PONG") or reply.startswith(b"-NOAUTH")
        wait_until(answers, timeout, message="PING on port %d" % self.port)

    def tail_log(self, lines: int = 30) -> str:
        text = ""
        for name in ("disque.log", "stderr.log"):
            path = self.dir / name
            if path.exists():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text

    def client(self, **kwargs) -> redis.Redis:
        """A redis-py client for this node (closed by stop())."""
        kwargs.setdefault("socket_timeout", 30)
        client = redis.Redis(host="127.0.0.1", port=self.port, **kwargs)
        self._clients.append(client)
        return client

    def call(self, *args):
        """One command through a fresh connection's execute_command."""
        with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=30) as client:
            return client.execute_command(*args)

    def raw(self, data: bytes, timeout: float = 2.0, until_close: bool = False,
            expect: int | None = None) -> bytes:
        """Send raw bytes and return what came back.

        Reads until ``expect`` bytes arrived, the peer closed, or nothing more
        arrives for a short while."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(data)
            out = b""
            s.settimeout(0.3 if not until_close and expect is None else timeout)
            while True:
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    break
                if not chunk:
                    if until_close:
                        out += b"<EOF>"
                    break
                out += chunk
                if expect is not None and len(out) >= expect:
                    break
            return out

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit."""
        for client in self._clients:
            client.close()
        self._clients.clear()
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        """SIGKILL, like a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> "DisqueProcess":
        self.stop()
        return self.start()
