"""``python -m bench.stall``: how long one heavy client makes another wait.

One real disque-server process; a pinger in a process of its own sends
PING every millisecond on its own connection and records each round trip,
while this process runs one heavy workload on another connection:

- ``jscan``: JSCAN over 150,000 jobs with ``COUNT 1000000000 REPLY all``,
  following the cursor to the end;
- ``pipeline``: 150,000 ADDJOBs to one queue written in one go;
- ``queues``: 100,000 ADDJOBs to 100,000 distinct queues written in one go;
- ``bulk``: one ADDJOB whose body is 200 MB;
- ``schedules``: with 10,000 schedules set, 10,000 ``SCHEDULE SET`` that
  replace them written in one go (before it, the round trip of one SET at
  that size is printed as ``set=``);
- ``qlimits``: with 10,000 queue limits set, 10,000 ``QLIMIT`` that change
  them written in one go (``set=``: one QLIMIT's round trip);
- ``qpurge``: QPURGE of a queue of 1,000,000 jobs, and ``qpurge-always``
  the same with ``appendonly yes`` and ``appendfsync always`` (automatic
  rewrites off);
- ``qpeek``: ``QPEEK q 1000000`` on a queue of 1,000,000 jobs;
- ``getjob-count``: ``GETJOB NOHANG COUNT 1000000`` on the same;
- ``show-big``: SHOW of a job whose body is 300 MB;
- ``ackjob-many``, ``deljob-many``, ``fastack-many``: one ACKJOB, DELJOB
  or FASTACK naming 100,000 jobs.

For each it prints the pinger's p50/p99/p99.9/max in milliseconds and
the heavy workload's own time and the core build the node loaded.
``--only jscan,bulk`` selects workloads (``all``: every one),
``--scale 0.1`` shrinks the job counts and sizes for a quick run,
``--against PATH`` runs each workload on the server of another source
tree too (the same run, one after the other). Figures are in
docs/benchmarks.md "One client against the others".
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import sys
import time
from pathlib import Path
from typing import Callable

import hiredis

from bench.servers import REPO, Servers

PING = b"*1\r\n$4\r\nPING\r\n"
# No automatic AOF rewrite: the fill would start one whose end (an fsync of
# the new file on the loop) lands in the measured window.
APPENDFSYNC_ALWAYS = "appendonly yes\nappendfsync always\nauto-aof-rewrite-percentage 0\n"
DEFAULT_WORKLOADS = "jscan,pipeline,queues,bulk"
ALL_WORKLOADS = ("jscan,pipeline,queues,bulk,schedules,qlimits,qpurge,qpurge-always,qpeek,"
                 "getjob-count,show-big,ackjob-many,deljob-many,fastack-many")


def _pinger(port: int, ready: "multiprocessing.synchronize.Event",
            stop: "multiprocessing.synchronize.Event", out: "multiprocessing.Queue[list[float]]"
            ) -> None:
    """PING every ms until ``stop``; put the round trips (ms) on ``out``."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    samples: list[float] = []
    ready.set()
    while not stop.is_set():
        begin = time.perf_counter()
        sock.sendall(PING)
        got = b""
        while not got.endswith(b"+PONG\r\n"):
            got += sock.recv(64)
        samples.append((time.perf_counter() - begin) * 1000)
        time.sleep(0.001)
    sock.close()
    out.put(samples)


def _command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _read_reply(sock: socket.socket) -> object:
    """Read one whole reply of any size (hiredis parses it)."""
    reader = hiredis.Reader()
    while True:
        reply = reader.gets()
        if reply is not False:
            if isinstance(reply, hiredis.ReplyError):
                raise RuntimeError("error reply: %s" % reply)
            return reply
        data = sock.recv(1 << 20)
        if not data:
            raise RuntimeError("connection closed before the reply")
        reader.feed(data)


def _read_lines(sock: socket.socket, count: int) -> list[bytes]:
    """Read ``count`` one-line replies (ADDJOB's status or error lines)."""
    lines: list[bytes] = []
    tail = b""
    while len(lines) < count:
        data = sock.recv(1 << 20)
        if not data:
            raise RuntimeError("connection closed after %d replies" % len(lines))
        parts = (tail + data).split(b"\r\n")
        tail = parts.pop()
        lines += parts
    errors = [line for line in lines if line[:1] == b"-"]
    if errors:
        raise RuntimeError("error reply: %r" % errors[0])
    return lines


def _pipeline(sock: socket.socket, commands: list[bytes]) -> list[bytes]:
    sock.sendall(b"".join(commands))
    return _read_lines(sock, len(commands))


def _fill(port: int, jobs: int, queue: bytes = b"fill") -> list[bytes]:
    """Add ``jobs`` small jobs to ``queue`` in pipelines; their IDs."""
    ids: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for start in range(0, jobs, 100_000):
            commands = [_command(b"ADDJOB", queue, b"job-%d" % i, b"0")
                        for i in range(start, min(jobs, start + 100_000))]
            ids += [line[1:] for line in _pipeline(sock, commands)]
    return ids


def _one_command(port: int, *args: bytes) -> Callable[[], None]:
    """A workload sending one command and reading its whole reply."""
    command = _command(*args)

    def run() -> None:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(command)
            _read_reply(sock)
    return run


def _jscan(port: int) -> Callable[[], None]:
    import redis
    client = redis.Redis(port=port)

    def run() -> None:
        cursor = b"0"
        total = 0
        while True:
            cursor, items = client.execute_command("JSCAN", cursor, "COUNT", 1000000000,
                                                   "REPLY", "all")
            total += len(items)
            if cursor in (b"0", 0):
                break
    return run


def _addjobs(port: int, jobs: int, distinct_queues: bool) -> Callable[[], None]:
    commands = [_command(b"ADDJOB", b"q%d" % i if distinct_queues else b"one", b"x", b"0")
                for i in range(jobs)]

    def run() -> None:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            _pipeline(sock, commands)
    return run


def _bulk(port: int, size: int) -> Callable[[], None]:
    command = _command(b"ADDJOB", b"big", b"x" * size, b"0")

    def run() -> None:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            _pipeline(sock, [command])
    return run


def _show_big(port: int, size: int) -> Callable[[], None]:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        (job_id,) = _pipeline(sock, [_command(b"ADDJOB", b"big", b"x" * size, b"0")])
    return _one_command(port, b"SHOW", job_id[1:])


def _table_commands(kind: str, count: int, version: int) -> list[bytes]:
    """``count`` SCHEDULE SETs (or QLIMITs) of distinct names, ``version``
    making each differ from the previous round's."""
    if kind == "schedules":
        return [_command(b"SCHEDULE", b"SET", b"s%d" % i, b"EVERY", b"86400", b"q%d" % i,
                         b"body %d of round %d" % (i, version)) for i in range(count)]
    return [_command(b"QLIMIT", b"q%d" % i, b"RATE", b"%d" % (version + 1 + i % 100))
            for i in range(count)]


def _table_changes(port: int, kind: str, count: int) -> tuple[Callable[[], None], float]:
    """Fill the table with ``count`` entries, measure one change's round trip
    (ms, the mean of 200) at that size, and return the workload that changes
    them all in one go."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        fill = _table_commands(kind, count, 0)
        for i in range(0, count, 1000):
            _pipeline(sock, fill[i:i + 1000])
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        singles = _table_commands(kind, 200, 1)
        begin = time.perf_counter()
        for command in singles:
            _pipeline(sock, [command])
        one = (time.perf_counter() - begin) * 1000 / len(singles)
    commands = _table_commands(kind, count, 2)

    def run() -> None:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            _pipeline(sock, commands)
    return run, one


def _workload(name: str, port: int, scale: float) -> Callable[[], None]:
    """Prepare the node for workload ``name``; the heavy request to time."""
    jobs = int(150_000 * scale)
    million = int(1_000_000 * scale)
    many = int(100_000 * scale)
    if name == "jscan":
        _fill(port, jobs)
        return _jscan(port)
    if name == "pipeline":
        return _addjobs(port, jobs, False)
    if name == "queues":
        return _addjobs(port, many, True)
    if name == "bulk":
        return _bulk(port, int(200_000_000 * scale))
    if name in ("qpurge", "qpurge-always"):
        _fill(port, million)
        return _one_command(port, b"QPURGE", b"fill")
    if name == "qpeek":
        _fill(port, million)
        return _one_command(port, b"QPEEK", b"fill", b"%d" % million)
    if name == "getjob-count":
        _fill(port, million)
        return _one_command(port, b"GETJOB", b"NOHANG", b"COUNT", b"%d" % million, b"FROM",
                            b"fill")
    if name == "show-big":
        return _show_big(port, int(300_000_000 * scale))
    if name in ("ackjob-many", "deljob-many", "fastack-many"):
        ids = _fill(port, many)
        return _one_command(port, name.split("-")[0].upper().encode(), *ids)
    raise ValueError("unknown workload %r" % name)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(port: int, workload: Callable[[], None]) -> dict[str, float]:
    """Run ``workload`` while the pinger runs; the pinger's figures in ms."""
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Event(), context.Event()
    out: multiprocessing.Queue[list[float]] = context.Queue()
    pinger = context.Process(target=_pinger, args=(port, ready, stop, out))
    pinger.start()
    ready.wait(30)
    time.sleep(0.2)  # a few PINGs before, so the pinger is warm
    begin = time.perf_counter()
    workload()
    elapsed = (time.perf_counter() - begin) * 1000
    time.sleep(0.1)
    stop.set()
    samples = out.get(timeout=60)
    pinger.join(30)
    return {"pings": len(samples), "p50": _percentile(samples, 0.5),
            "p99": _percentile(samples, 0.99), "p99.9": _percentile(samples, 0.999),
            "max": max(samples), "workload_ms": elapsed}


def main(argv: list[str] | None = None) -> int:
    """Run the selected workloads and print one line of figures each."""
    parser = argparse.ArgumentParser(prog="python -m bench.stall", description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=DEFAULT_WORKLOADS,
                        help="comma-separated workloads, or 'all': " + ALL_WORKLOADS)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--against", type=Path, action="append", default=[],
                        help="another source tree whose server runs each workload too")
    args = parser.parse_args(argv)
    wanted = (ALL_WORKLOADS if args.only == "all" else args.only).split(",")
    unknown = set(wanted) - set(ALL_WORKLOADS.split(","))
    if unknown:
        parser.error("unknown workload %s" % ", ".join(sorted(unknown)))
    trees = [REPO] + args.against
    with Servers() as servers:
        for name in wanted:
            for tree in trees:
                label = name if tree == REPO else "%s@%s" % (name, tree)
                _run(servers, name, label, tree, args.scale)
    return 0


def _run(servers: Servers, name: str, label: str, tree: Path, scale: float) -> None:
    """One workload on a fresh node of ``tree``; one line of figures."""
    config = ""
    if name in ("schedules", "qlimits"):
        # A tree that spends long on each command must not close the pipelining
        # client as stalled (client-request-timeout) before it is served.
        config = "client-request-timeout 0\n"
    elif name == "qpurge-always":
        config = APPENDFSYNC_ALWAYS
    with servers.fresh_disque("stall-" + name, config=config, tree=tree) as node:
        extra = ""
        if name in ("schedules", "qlimits"):
            workload, one = _table_changes(node.port, name, int(10_000 * scale))
            extra = "  set=%.2f ms" % one
        else:
            workload = _workload(name, node.port, scale)
        build = node.client().info("build").get("core_build", "?")
        figures = measure(node.port, workload)
        print("%-13s pings=%-5d p50=%.2f p99=%.2f p99.9=%.2f max=%.2f ms  (workload %.0f ms, %s)%s"
              % (label, figures["pings"], figures["p50"], figures["p99"], figures["p99.9"],
                 figures["max"], figures["workload_ms"], build, extra), flush=True)


if __name__ == "__main__":
    sys.exit(main())
