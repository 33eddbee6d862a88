"""``disque-worker module:function`` when the module runs a worker itself: the
README's first worker example called ``worker.run()`` at module level, so the
command's import ran that worker until a first SIGTERM and then its own. The
real command, against a real node, now refuses such a module at once (exit 2,
a message naming the fix) and still runs a module whose ``run()`` is guarded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.process import REPO, wait_until

# The console script installed next to the interpreter running the tests
# (.venv/bin/disque-worker), as a user runs it.
DISQUE_WORKER = str(Path(sys.executable).parent / "disque-worker")

MODULE = """
from disque.worker import {kind}

worker = {kind}({seed!r}, concurrency=2)

@worker.task("emails")
{async_}def send(job):
    with open({done!r}, "ab") as out:
        out.write(job.body + b"\\n")

{run}
"""
UNGUARDED = "worker.run()"
GUARDED = 'if __name__ == "__main__":\n    worker.run()'
KINDS = [("ThreadedWorker", ""), ("AsyncioWorker", "async ")]


def write_module(tmp_path: Path, server, kind: tuple[str, str], run: str) -> Path:
    """``mymodule.py`` in ``tmp_path``, the README's example (a handler appending each
    job's body to done.txt) ending in ``run``."""
    done = tmp_path / "done.txt"
    (tmp_path / "mymodule.py").write_text(MODULE.format(
        kind=kind[0], async_=kind[1], seed="127.0.0.1:%d" % server.port, done=str(done),
        run=run))
    return done


def start_worker(tmp_path: Path, server) -> subprocess.Popen:
    """The README's command line, from the module's directory."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with open(tmp_path / "worker.log", "wb") as log:
        return subprocess.Popen([DISQUE_WORKER, "mymodule:send", "-q", "emails", "-n", "2",
                                 "--cluster", "127.0.0.1:%d" % server.port],
                                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen, timeout: float) -> int:
    """The exit status within ``timeout`` seconds (the process killed otherwise)."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


@pytest.mark.parametrize("kind", KINDS, ids=["threaded", "asyncio"])
def test_module_that_runs_a_worker_on_import_is_refused(server, tmp_path, kind):
    """No worker runs: the command exits 2 before fetching anything, says why and how
    to fix it; the job waiting in the queue is left alone."""
    done = write_module(tmp_path, server, kind, UNGUARDED)
    job_id = server.call("ADDJOB", "emails", "hello", 0, "RETRY", 60)
    proc = start_worker(tmp_path, server)
    assert finish(proc, 15) == 2
    output = (tmp_path / "worker.log").read_text()
    assert "event=worker.cannot_start" in output, output
    assert "importing mymodule started a worker" in output, output
    assert "put the module's run() under 'if __name__ ==" in output, output
    assert "event=worker.started" not in output, output
    assert not done.exists()
    show = server.call("SHOW", job_id)
    assert dict(zip(show[0::2], show[1::2]))[b"state"] == b"queued"


@pytest.mark.parametrize("kind", KINDS, ids=["threaded", "asyncio"])
def test_guarded_module_runs_once_and_stops_on_one_sigterm(server, tmp_path, kind):
    """The README's fixed example: the command processes the job, and one SIGTERM
    ends the process with status 0."""
    done = write_module(tmp_path, server, kind, GUARDED)
    server.call("ADDJOB", "emails", "hello", 0, "RETRY", 60)
    proc = start_worker(tmp_path, server)
    try:
        wait_until(lambda: done.exists() and done.read_bytes() == b"hello\n",
                   message="the job processed")
        wait_until(lambda: int(server.client().info("jobs")["registered_jobs"]) == 0,
                   message="the job acknowledged")
        proc.send_signal(signal.SIGTERM)
        assert finish(proc, 15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = (tmp_path / "worker.log").read_text()
    assert output.count("event=worker.started") == 1, output
    assert output.count("event=worker.stopped") == 1, output
