"""Start-up time: exec of ``disque-server`` to its first PONG.

``python -m bench.startup`` starts one node with a default configuration
(``python -m disque.server --port N``, in a temporary directory, nothing
else configured) on a free loopback port, waits until it answers PING,
kills it and prints the milliseconds from exec to PONG. ``--reference``
instead times ``python -c 'import asyncio, uvloop'`` in the same way (exec
to exit): the floor a node built on that loop cannot go below. Run under
an outside timer, both forms pay this script's own start the same, so the
ratio of the two whole processes compares the same things.

``startup`` is the ``make bench`` section: rounds of both, alternating,
and the ratio of the medians (target: at most 1.3).

Only the standard library is imported here, and nothing of disque: the
script's own start stays small and the node imports what it imports.
The node's bytecode is expected cached, as an installed package's is
(``make install`` writes it); the section writes it first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.measurement import Measurement
    from bench.servers import Servers
    from bench.settings import Settings

REPO = Path(__file__).resolve().parents[1]
REFERENCE_CODE = "import asyncio, uvloop"
BUS_PORT_OFFSET = 10000
POLL_INTERVAL_S = 0.001  # a refused connect on loopback costs microseconds
READY_TIMEOUT_S = 30.0
TARGET_RATIO = 1.3
ROUNDS = 20
QUICK_ROUNDS = 6


def free_port() -> int:
    """A loopback port whose bus port (+10000) is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + BUS_PORT_OFFSET > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + BUS_PORT_OFFSET))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair found")


def _environment(tree: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(tree))


def _answers_ping(port: int) -> bool:
    """One attempt: a refused connection (nothing listens yet) costs microseconds."""
    with socket.socket() as s:
        s.settimeout(READY_TIMEOUT_S)
        try:
            if s.connect_ex(("127.0.0.1", port)):
                return False
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False


def time_node(python: str = sys.executable, tree: Path = REPO) -> float:
    """Seconds from exec of a default-configured node to its first PONG."""
    workdir = tempfile.mkdtemp(prefix="disque-startup-")
    port = free_port()
    command = [python, "-m", "disque.server", "--port", str(port), "--bind", "127.0.0.1",
               "--logfile", "disque.log"]
    try:
        started = time.perf_counter()
        proc = subprocess.Popen(command, cwd=workdir, env=_environment(tree),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            while not _answers_ping(port):
                if proc.poll() is not None:
                    log = Path(workdir, "disque.log")
                    raise RuntimeError("the node exited with %s: %s" % (
                        proc.returncode, log.read_text()[-2000:] if log.exists() else ""))
                if time.perf_counter() - started > READY_TIMEOUT_S:
                    raise RuntimeError("no PONG within %g s" % READY_TIMEOUT_S)
                time.sleep(POLL_INTERVAL_S)
            return time.perf_counter() - started
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def time_reference(python: str = sys.executable, tree: Path = REPO) -> float:
    """Seconds from exec of ``python -c 'import asyncio, uvloop'`` to its exit."""
    started = time.perf_counter()
    subprocess.run([python, "-c", REFERENCE_CODE], env=_environment(tree), check=True,
                   stdin=subprocess.DEVNULL)
    return time.perf_counter() - started


def startup(servers: Servers, settings: Settings) -> list[Measurement]:
    """Exec to first PONG of a default-configured node against importing asyncio and uvloop."""
    import compileall
    import logging

    from bench.measurement import Measurement, Reference, Target, median

    log = logging.getLogger("bench")
    compileall.compile_dir(str(REPO / "disque"), quiet=1)  # as installed: nothing compiled at start
    rounds = QUICK_ROUNDS if settings.quick else ROUNDS
    node: list[float] = []
    reference: list[float] = []
    for i in range(rounds):
        # The order flips each round, so drift in the machine's load hits both alike.
        for which in ((time_reference, time_node) if i % 2 else (time_node, time_reference)):
            (node if which is time_node else reference).append(which() * 1000)
        log.info("  start to PING %.1f ms, import asyncio, uvloop %.1f ms",
                 node[-1], reference[-1])
    return [Measurement(
        "startup_to_ping",
        "exec of python -m disque.server --port N (default configuration) to its first PONG, "
        "against python -c '%s' (exec to exit), %d rounds alternating" % (REFERENCE_CODE, rounds),
        median(node), "ms", samples=node,
        reference=Reference("python -c '%s'" % REFERENCE_CODE, median(reference), reference),
        target=Target("ratio", "<=", TARGET_RATIO),
        details={"ratio_by_round": [round(a / b, 3) for a, b in zip(node, reference)]})]


SECTIONS = {"startup": startup}


def main(argv: list[str] | None = None) -> int:
    """Time one start (or the reference) and print it in milliseconds."""
    parser = argparse.ArgumentParser(prog="python -m bench.startup",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--reference", action="store_true",
                        help="time python -c '%s' instead of a node" % REFERENCE_CODE)
    parser.add_argument("--tree", type=Path, default=REPO,
                        help="the source tree whose disque runs (first on PYTHONPATH)")
    parser.add_argument("--quiet", action="store_true", help="print nothing")
    args = parser.parse_args(argv)
    seconds = (time_reference if args.reference else time_node)(tree=args.tree)
    if not args.quiet:
        print("%.1f ms" % (seconds * 1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
