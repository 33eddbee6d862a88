"""Real disque-server processes for integration and cluster tests.

Each process runs in its own directory on a free loopback port; tests
wait for conditions with bounded polls and always stop what they start.

A process is also judged when the test is done (``verify``): it must have
exited with status 0 unless the test killed it on purpose (``kill``,
``send_signal``) or checked the status itself (``wait_exit``), and its
logs (disque.log, stderr.log) must hold no traceback or error line such as
"Error in server cron" unless the test declared it (``expect_log``, or the
``expect_log`` marker). The fixtures in tests/conftest.py and
tests/cluster/conftest.py call ``verify`` at teardown and fail the test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import re
import time
from pathlib import Path

import redis

SERVER = [sys.executable, "-m", "disque.server"]
REPO = Path(__file__).resolve().parents[2]

# Log lines that mean the server hit a bug. The server's own log drops
# tracebacks (disque/context/log.py prints only the message), so its catch-all
# handlers are known by their text (server.py "Error in server cron",
# cluster/bus.py "Error handling bus messages"); whatever reaches stderr
# (asyncio's handler, an uncaught exception) comes with a traceback.
UNEXPECTED_LOG = re.compile(
    r"Traceback \(most recent call last\)|Error in server cron|Error handling bus messages"
    r"|Exception in callback|exception was never retrieved|Fatal error|Unhandled exception"
    r"|^\w*(Error|Exception)\b.*:")

_unverified: list["DisqueProcess"] = []


def unverified() -> list["DisqueProcess"]:
    """Processes started and not yet judged by ``verify`` (oldest first)."""
    return list(_unverified)


def log_entries(text: str) -> list[str]:
    """A log split into entries: one line each, except that a traceback and
    its indented lines up to the exception line make one entry."""
    entries: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("Traceback (most recent call last)"):
            while i < len(lines) and (lines[i].startswith(" ") or not lines[i].strip()):
                line += "\n" + lines[i]
                i += 1
            if i < len(lines):
                line += "\n" + lines[i]
                i += 1
        entries.append(line)
    return entries


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
                 args: tuple[str, ...] = (), env: dict | None = None,
                 config_file: bool = True, config_path: Path | None = None,
                 config_head: str = "", host: str = "127.0.0.1",
                 prefix: tuple[str, ...] = (), config_stdin: bool = False,
                 server: tuple[str, ...] = tuple(SERVER)) -> None:
        """``config_path`` puts the config file elsewhere than in ``workdir``,
        after ``config_head`` (a shipped file the test's lines override);
        ``host`` is the address the test reaches it on; ``prefix`` runs the
        server through a wrapper command that execs it (``ip netns exec
        <ns>`` for a node on another "machine", a sandbox); ``server`` is the
        command that runs the server (an installed ``disque-server``)."""
        self.host = host
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        # Tests run DEBUG and CONFIG SET dir, which a node refuses by default.
        base = ("bind 127.0.0.1\nport %d\ndir %s\nlogfile disque.log\nloglevel verbose\n"
                "enable-debug-command yes\nenable-protected-configs yes\n"
                % (self.port, self.dir))
        self.config_path: Path | None = None
        if config_file:
            self.config_path = Path(config_path) if config_path else self.dir / "disque.conf"
            self.config_path.write_text(config_head + base + config)
            self.args = tuple(args)
        else:  # the same directives on the command line, and no config file at all
            assert not config, "config text needs a config file"
            directives = [line.split(" ", 1) for line in base.splitlines()]
            self.args = tuple(arg for name, value in directives
                              for arg in ("--" + name, value)) + tuple(args)
        # config_stdin: the same config text goes through `disque-server -`.
        self.config_stdin = config_stdin
        self.env = env
        self.prefix = tuple(prefix)
        self.server = tuple(server)
        self.proc: subprocess.Popen | None = None
        self._clients: list[redis.Redis] = []
        self.shared = False  # owned by a module-scoped fixture, judged at its teardown
        self.expected_log: list[re.Pattern] = []
        self.exit_problems: list[str] = []
        self._signals_sent: set[int] = set()  # of the current process
        self._exit_checked = False  # the test asserted the current process's status
        self._exit_noted = True  # nothing to note before the first start

    @property
    def log_path(self) -> Path:
        return self.dir / "disque.log"

    def start(self, wait: bool = True) -> "DisqueProcess":
        if self.proc is not None and self.proc.poll() is None:
            raise AssertionError("start() while pid %d still runs" % self.proc.pid)
        self._note_exit()
        env = dict(os.environ, PYTHONPATH=str(REPO))
        if self.env:
            env.update(self.env)
        with open(self.dir / "stderr.log", "ab") as stderr:
            if self.config_stdin and self.config_path:
                command = [*self.prefix, *self.server, "-"]
                stdin = open(self.config_path, "rb")
            else:
                command = [*self.prefix, *self.server] + (
                    [str(self.config_path)] if self.config_path else [])
                stdin = None
            try:
                self.proc = subprocess.Popen(command + list(self.args),
                                             cwd=self.dir, env=env, stdout=subprocess.DEVNULL,
                                             stderr=stderr, stdin=stdin)
            finally:
                if stdin is not None:
                    stdin.close()
        self._signals_sent = set()
        self._exit_checked = False
        self._exit_noted = False
        if self not in _unverified:
            _unverified.append(self)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 10.0) -> None:
        def answers() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError("disque-server exited with %s: %s"
                                     % (self.proc.returncode, self.tail_log()))
            with socket.create_connection((self.host, self.port), timeout=1) as s:
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
        client = redis.Redis(host=self.host, port=self.port, **kwargs)
        self._clients.append(client)
        return client

    def call(self, *args):
        """One command through a fresh connection's execute_command."""
        with redis.Redis(host=self.host, port=self.port, socket_timeout=30) as client:
            return client.execute_command(*args)

    def raw(self, data: bytes, timeout: float = 2.0, until_close: bool = False,
            expect: int | None = None) -> bytes:
        """Send raw bytes and return what came back.

        Reads until ``expect`` bytes arrived, the peer closed, or nothing more
        arrives for a short while."""
        with socket.create_connection((self.host, self.port), timeout=timeout) as s:
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
        """SIGTERM and wait; SIGKILL (a failure of the test) if it does not exit."""
        for client in self._clients:
            client.close()
        self._clients.clear()
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a frozen process could not exit
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.exit_problems.append("pid %d still ran %.0f s after SIGTERM: killed"
                                          % (self.proc.pid, timeout))
                self._signals_sent.add(signal.SIGKILL)
                self.proc.kill()
                self.proc.wait()
        self._note_exit()
        return self.proc.returncode

    def send_signal(self, sig: int) -> None:
        """Signal the process on purpose: an exit by this signal is expected."""
        self._signals_sent.add(sig)
        self.proc.send_signal(sig)

    def kill(self, wait: bool = True) -> None:
        """SIGKILL, like a crash (an expected exit). ``wait=False`` sends it only."""
        if self.proc is not None and self.proc.returncode is None:
            self.send_signal(signal.SIGKILL)
            if wait:
                self.proc.wait()
                self._note_exit()

    def wait_exit(self, timeout: float = 10.0) -> int:
        """Wait for the process to exit; the caller checks the status it returns."""
        code = self.proc.wait(timeout)
        self._exit_checked = True
        self._note_exit()
        return code

    def expect_log(self, *patterns: str) -> None:
        """Log entries matching any of these regexes are expected, not failures."""
        self.expected_log.extend(re.compile(p) for p in patterns)

    def _note_exit(self) -> None:
        """Record, once, whether the last process ended as the test meant it to."""
        proc = self.proc
        if proc is None or proc.returncode is None or self._exit_noted:
            return
        self._exit_noted = True
        code = proc.returncode
        if code == 0 or self._exit_checked or (code < 0 and -code in self._signals_sent):
            return
        how = ("killed by signal %d" % -code) if code < 0 else ("exit status %d" % code)
        self.exit_problems.append("pid %d ended unexpectedly (%s)" % (proc.pid, how))

    def log_problems(self) -> list[str]:
        """Unexpected error entries of disque.log and stderr.log."""
        problems = []
        for name in ("disque.log", "stderr.log"):
            path = self.dir / name
            if not path.exists():
                continue
            for entry in log_entries(path.read_text(errors="replace")):
                if (UNEXPECTED_LOG.search(entry)
                        and not any(p.search(entry) for p in self.expected_log)):
                    problems.append("%s: %s" % (name, entry))
        return problems

    def verify(self) -> list[str]:
        """Stop the process if it still runs; return what went wrong (empty if all
        is well): unexpected exits and unexpected log entries."""
        self.stop()
        if self in _unverified:
            _unverified.remove(self)
        problems = self.exit_problems + self.log_problems()
        self.exit_problems = []
        return ["%s (port %d): %s" % (self.dir, self.port, p) for p in problems]

    def restart(self) -> "DisqueProcess":
        self.stop()
        return self.start()
