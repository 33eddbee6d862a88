"""The README's controlled restart, run as written against a node that the
real ``make run`` started in a copy of the clone's layout.

The README once summed the procedure up as ``CONFIG SET aof-enqueue-jobs-once
yes`` then ``SHUTDOWN REWRITE-AOF``: without docs/persistence.md's ``CONFIG
REWRITE`` the next start read ``no`` from the file and the queue came back
empty; and ``make run`` ran from the tracked ``conf/disque.conf``, which the
procedure's rewrite then changed. Here the README's block must be the
procedure's commands, and after it the jobs (a ``RETRY 0`` one too) are
queued again while the tracked file is byte for byte what it was.

``make run`` runs with a stand-in ``.venv`` (``VENV=``) whose stamps say
installed and whose ``disque-server`` is the console script beside the test's
interpreter, so the Makefile's own recipe runs (the first-run copy, the
command line) without installing anything; the copy of ``conf/disque.conf``
differs from the clone's only in its port, a free one.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.support.process import REPO, UNEXPECTED_LOG, free_port, log_entries, wait_until

README_PORT = "7711"
TRACKED_CONF = Path("conf/disque.conf")
RUN_CONF = Path("conf/run.conf")


def sh_block(text: str, heading: str) -> list[str]:
    """The commands of the one ``sh`` block under ``heading``, comments dropped."""
    section = text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"^```sh\n(.*?)^```", section, re.M | re.S)
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [command for command in commands if command]


README_STEPS = sh_block((REPO / "README.md").read_text(), "## Persistence (AOF)")
PROCEDURE = sh_block((REPO / "docs/persistence.md").read_text(),
                     "## Controlled restart or upgrade")


def test_readme_summary_is_the_documented_procedure():
    assert [step for step in README_STEPS if step.startswith("redis-cli")] == PROCEDURE
    assert README_STEPS[-1] == "make run"


@pytest.fixture
def clone(tmp_path) -> Path:
    """The files ``make run`` reads, laid out as in a clone, and a stand-in
    ``.venv`` beside them whose stamps are newer than pyproject.toml and setup.py."""
    clone = tmp_path / "clone"
    (clone / "conf").mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml", "setup.py"):
        shutil.copy(REPO / name, clone / name)
    port = free_port()
    conf = (REPO / TRACKED_CONF).read_text()
    assert "\nport %s\n" % README_PORT in conf
    (clone / TRACKED_CONF).write_text(conf.replace("\nport %s\n" % README_PORT,
                                                   "\nport %d\n" % port))
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "disque-server").symlink_to(Path(sys.executable).parent / "disque-server")
    for stamp in (".installed", ".core-compiled", ".core-pure"):
        (venv / stamp).touch()
    return clone


class MakeRun:
    """``make run`` in the clone, its output in a file; ``port`` is the node's."""

    def __init__(self, clone: Path) -> None:
        self.clone = clone
        self.port = int(re.search(r"^port (\d+)$", (clone / TRACKED_CONF).read_text(),
                                  re.M).group(1))
        self.output = clone.parent / "make-run.log"
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        with open(self.output, "ab") as out:
            self.procs.append(subprocess.Popen(
                ["make", "--no-print-directory", "run", "VENV=%s" % (self.clone.parent / "venv")],
                cwd=self.clone, stdout=out, stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONPATH=str(REPO)), start_new_session=True))
        client = redis.Redis(port=self.port, socket_timeout=10)
        wait_until(client.ping, timeout=30, message="make run's node answering PING")

    def redis_cli(self, command: str) -> str:
        """A README command line, run with the node's port for 7711."""
        argv = shlex.split(command)
        assert argv[:3] == ["redis-cli", "-p", README_PORT], command
        result = subprocess.run(["redis-cli", "-p", str(self.port), *argv[3:]],
                                capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def wait_exit(self) -> None:
        assert self.procs[-1].wait(30) == 0, self.output.read_text()

    def stop(self) -> None:
        """Kill what still runs: make and, in its session, the node it started."""
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def problems(self) -> list[str]:
        return [entry for entry in log_entries(self.output.read_text())
                if UNEXPECTED_LOG.search(entry)]


def test_readme_controlled_restart_brings_the_queue_back(clone, redis_cli):
    tracked = (clone / TRACKED_CONF).read_bytes()
    run = MakeRun(clone)
    try:
        run.start()
        assert (clone / RUN_CONF).read_bytes() == tracked  # the first run's copy
        at_least_once = run.redis_cli('redis-cli -p 7711 ADDJOB myqueue "hello world" 0').strip()
        at_most_once = run.redis_cli("redis-cli -p 7711 ADDJOB myqueue once 0 RETRY 0").strip()
        for step in README_STEPS:
            if step == "make run":
                run.start()
            else:
                run.redis_cli(step)
                if "SHUTDOWN" in step:
                    run.wait_exit()
        assert run.redis_cli("redis-cli -p 7711 QLEN myqueue") == "2\n"
        jobs = run.redis_cli("redis-cli -p 7711 GETJOB NOHANG COUNT 10 FROM myqueue").split()
        assert {at_least_once, at_most_once} <= set(jobs)
        run.redis_cli("redis-cli -p 7711 SHUTDOWN")
        run.wait_exit()
    finally:
        run.stop()
    assert (clone / TRACKED_CONF).read_bytes() == tracked
    run_conf = (clone / RUN_CONF).read_text()
    assert "aof-enqueue-jobs-once no" in run_conf  # set back after the load
    assert not run.problems(), run.problems()
