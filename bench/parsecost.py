"""The request parser's cost per request, for instruction counts.

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null \\
        .venv/bin/python -m bench.parsecost WORKLOAD REQUESTS --callgrind

The total callgrind reports, divided by REQUESTS, is the figure: only the
feeding is counted (valgrind's instrumentation is switched on around it),
with the cyclic garbage collector off, as ``bench.corecost`` does. Each
read is followed by the ``held()`` call the connection makes.

Workloads, on the server's parser (``python-`` before a name: on the
Python parser alone):
* ``pipeline``: ``ADDJOB q <64 bytes> 0`` pipelined, in reads of 64 KB;
* ``inline``: ``PING`` inline, pipelined, in reads of 64 KB;
* ``alone``: ``ADDJOB q <64 bytes> 0``, one read each (the -P 1 path);
* ``inline-alone``: ``PING`` inline, one read each.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys

from disque.protocol.request import RequestParser
from disque.protocol.request_hiredis import HiredisRequestParser
from disque.protocol.request_python import PythonRequestParser

READ = 64 * 1024
BODY = b"x" * 64
PYTHON_PREFIX = "python-"
WORKLOADS = ("pipeline", "inline", "alone", "inline-alone")


def _command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join([b"$%d\r\n%s\r\n" % (len(a), a) for a in args])


def _reads(stream: bytes) -> list[bytes]:
    return [stream[at:at + READ] for at in range(0, len(stream), READ)]


def _callgrind(switch: str) -> None:
    """Switch valgrind's instrumentation of this process on or off."""
    subprocess.run(["callgrind_control", "-i", switch, str(os.getpid())], check=True,
                   stdout=subprocess.DEVNULL)


def reads_of(workload: str, requests: int) -> list[bytes]:
    """The reads a client sending ``requests`` requests of ``workload`` makes."""
    addjob = _command(b"ADDJOB", b"q", BODY, b"0")
    if workload == "pipeline":
        return _reads(addjob * requests)
    if workload == "inline":
        return _reads(b"PING\r\n" * requests)
    if workload == "alone":
        return [addjob] * requests
    if workload == "inline-alone":
        return [b"PING\r\n"] * requests
    raise SystemExit("unknown workload %r (one of %s)" % (workload, ", ".join(WORKLOADS)))


def main(argv: list[str]) -> int:
    """Feed the workload's reads to a parser, counted when ``--callgrind`` is given."""
    workload, requests = argv[0], int(argv[1])
    measure = argv[2:] == ["--callgrind"]
    parser: RequestParser
    if workload.startswith(PYTHON_PREFIX):
        parser = PythonRequestParser()
        workload = workload[len(PYTHON_PREFIX):]
    else:
        parser = HiredisRequestParser()
    reads = reads_of(workload, requests)
    commands: list[list[bytes]] = []
    gc.disable()
    if measure:
        _callgrind("on")
    for data in reads:
        parser.feed(data, commands)
        parser.held()
        if len(commands) > 4096:
            commands.clear()
    if measure:
        _callgrind("off")
    gc.enable()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
