"""The README's worker example, run as written: its ``mymodule.py`` block,
pointed at a test node, as ``python mymodule.py`` and through ``disque-worker
mymodule:send``. Its handler once called an undefined ``deliver()``, so every
job was NACKed for ever; and run as a script it logged bare lines, without
time or level, where ``disque-worker`` logs ``ts=... level=... event=...``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.process import REPO, wait_until

README = (REPO / "README.md").read_text()
# The console script installed next to the interpreter running the tests.
DISQUE_WORKER = str(Path(sys.executable).parent / "disque-worker")
README_SEED = "127.0.0.1:7711"
LOG_LINE = re.compile(r"ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z level=(\w+) event=(\S+)")


def readme_module() -> str:
    """The README's Python block that starts ``# mymodule.py``."""
    [code] = [block for block in re.findall(r"^```python\n(.*?)^```", README, re.M | re.S)
              if block.startswith("# mymodule.py\n")]
    assert README_SEED in code
    return code


def readme_command() -> list[str]:
    """``.venv/bin/disque-worker mymodule:send ...`` as the README writes it."""
    [command] = re.findall(r"`\.venv/bin/disque-worker (mymodule:send[^`]*)`", README)
    return command.split()


def start(command: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(command, cwd=cwd, stderr=out, stdout=subprocess.DEVNULL,
                                env=dict(os.environ, PYTHONPATH=str(REPO)))


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def log_lines(log: Path) -> list[re.Match]:
    """Every line of a worker's stderr, each of which must be a ``key=value`` event."""
    lines = log.read_text().splitlines()
    matches = [LOG_LINE.match(line) for line in lines]
    assert lines and all(matches), lines
    return matches


def acked_by(server, command: list[str], cwd: Path, log: Path) -> None:
    """Run the worker, add a job, see it acknowledged (gone from the node) and
    never NACKed; stop the worker."""
    proc = start(command, cwd, log)
    try:
        wait_until(lambda: "event=worker.started" in log.read_text(), timeout=30,
                   message="the worker started")
        job_id = server.call("ADDJOB", "emails", "hello", 0, "RETRY", 60).decode()
        wait_until(lambda: server.call("SHOW", job_id) is None, timeout=30,
                   message="job %s acknowledged" % job_id)
    finally:
        stop(proc)
    assert "event=job.failed" not in log.read_text()


def test_readme_worker_acks_jobs_and_logs_like_disque_worker(server, tmp_path):
    module = readme_module().replace(README_SEED, "127.0.0.1:%d" % server.port)
    (tmp_path / "mymodule.py").write_text(module)

    as_script = tmp_path / "script.log"
    acked_by(server, [sys.executable, "mymodule.py"], tmp_path, as_script)
    as_command = tmp_path / "command.log"
    acked_by(server, [DISQUE_WORKER, *readme_command(), "--cluster",
                      "127.0.0.1:%d" % server.port], tmp_path, as_command)

    script_events = [(m.group(1), m.group(2)) for m in log_lines(as_script)]
    command_events = [(m.group(1), m.group(2)) for m in log_lines(as_command)]
    assert script_events[0] == command_events[0] == ("info", "worker.started")
    assert script_events == command_events
