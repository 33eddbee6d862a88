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
  them written in one go (``set=``: one QLIMIT's round trip).

For each it prints the pinger's p50/p99/p99.9/max in milliseconds and
the heavy workload's own time. ``--only jscan,bulk`` selects workloads,
``--scale 0.1`` shrinks the job counts for a quick run, ``--against
PATH`` runs each workload on the server of another source tree too (the
same run, one after the other). Figures are in docs/benchmarks.md "One
client against the others".
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import sys
import time
from pathlib import Path
from typing import Callable

from bench.servers import REPO, Servers

PING = b"*1\r\n$4\r\nPING\r\n"


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


def _read_replies(sock: socket.socket, count: int) -> None:
    """Read ``count`` one-line replies (ADDJOB's status or error lines)."""
    seen = 0
    tail = b""
    while seen < count:
        data = sock.recv(1 << 20)
        if not data:
            raise RuntimeError("connection closed after %d replies" % seen)
        seen += data.count(b"\n")  # a reply line ends in one \n, never split
        tail = data[-200:]
    if b"-" in tail.split(b"\r\n")[-2][:1]:
        raise RuntimeError("error reply: %r" % tail)


def _pipeline(sock: socket.socket, commands: list[bytes]) -> None:
    sock.sendall(b"".join(commands))
    _read_replies(sock, len(commands))


def _fill(port: int, jobs: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        _pipeline(sock, [_command(b"ADDJOB", b"fill", b"job-%d" % i, b"0") for i in range(jobs)])


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
    parser.add_argument("--only", default="jscan,pipeline,queues,bulk")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--against", type=Path, action="append", default=[],
                        help="another source tree whose server runs each workload too")
    args = parser.parse_args(argv)
    wanted = args.only.split(",")
    jobs = int(150_000 * args.scale)
    trees = [REPO] + args.against
    with Servers() as servers:
        for name in wanted:
            for tree in trees:
                label = name if tree == REPO else "%s@%s" % (name, tree)
                _run(servers, parser, name, label, tree, jobs, args.scale)
    return 0


def _run(servers: Servers, parser: argparse.ArgumentParser, name: str, label: str,
         tree: Path, jobs: int, scale: float) -> None:
    """One workload on a fresh node of ``tree``; one line of figures."""
    # A tree that spends long on each command must not close the pipelining
    # client as stalled (client-request-timeout) before it is served.
    config = "client-request-timeout 0\n" if name in ("schedules", "qlimits") else ""
    with servers.fresh_disque("stall-" + name, config=config, tree=tree) as node:
        extra = ""
        if name == "jscan":
            _fill(node.port, jobs)
            workload = _jscan(node.port)
        elif name == "pipeline":
            workload = _addjobs(node.port, jobs, False)
        elif name == "queues":
            workload = _addjobs(node.port, int(100_000 * scale), True)
        elif name == "bulk":
            workload = _bulk(node.port, int(200_000_000 * scale))
        elif name in ("schedules", "qlimits"):
            workload, one = _table_changes(node.port, name, int(10_000 * scale))
            extra = "  set=%.2f ms" % one
        else:
            parser.error("unknown workload %r" % name)
        figures = measure(node.port, workload)
        print("%-9s pings=%-5d p50=%.2f p99=%.2f p99.9=%.2f max=%.2f ms  (workload %.0f ms)%s"
              % (label, figures["pings"], figures["p50"], figures["p99"], figures["p99.9"],
                 figures["max"], figures["workload_ms"], extra), flush=True)


if __name__ == "__main__":
    sys.exit(main())
