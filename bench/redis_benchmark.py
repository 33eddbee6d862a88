"""Run Debian's ``redis-benchmark`` against a server and read its ``--csv`` output.

redis-benchmark is the client the original Disque was measured with, so
running the very same binary against redis-server and disque keeps the
client cost identical on both sides. Against disque it prints
``WARNING: Could not fetch server CONFIG`` (there is no CONFIG GET save);
that goes to stderr, and the parser ignores any non-CSV line anyway.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Sequence

BINARY = "redis-benchmark"
CONFIG_WARNING = "WARNING: Could not fetch server CONFIG"


class BenchmarkError(RuntimeError):
    """redis-benchmark failed, or printed nothing we can read."""


@dataclass(frozen=True)
class BenchmarkResult:
    """The last result row: test name, requests per second, and any other numeric columns."""

    test: str
    rps: float
    columns: dict[str, float] = field(default_factory=dict)


def parse_csv(output: str) -> BenchmarkResult:
    """The last result row of ``redis-benchmark --csv`` stdout.

    Redis 7 prints a header (``"test","rps","avg_latency_ms",...``) and
    newer versions may add columns, so values are looked up by header name;
    Redis 6 and older print bare ``"TEST","rps"`` rows without a header.
    """
    header: list[str] | None = None
    last: BenchmarkResult | None = None
    for line in output.splitlines():
        if not line.startswith('"'):
            continue  # warnings, progress or blank lines
        row = next(csv.reader([line]))
        if "rps" in row and "test" in row:
            header = row
            continue
        if len(row) < 2:
            continue
        if header is None:
            last = BenchmarkResult(row[0], _number(row[1], line))
            continue
        values = dict(zip(header, row))
        columns = {k: _number(v, line) for k, v in values.items() if k not in ("test", "rps")}
        last = BenchmarkResult(values["test"], _number(values["rps"], line), columns)
    if last is None:
        raise BenchmarkError("no result row in redis-benchmark output: %r" % output[-500:])
    return last


def _number(text: str, line: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise BenchmarkError("not a number %r in redis-benchmark line %r" % (text, line)) from None


def run(port: int, command: Sequence[str], clients: int, requests: int, pipeline: int,
        timeout: float = 300.0, keyspace: int = 0) -> BenchmarkResult:
    """``redis-benchmark -c clients -n requests -P pipeline --csv <command...>`` on 127.0.0.1;
    with a ``keyspace``, ``-r keyspace``: each ``__rand_int__`` in the command becomes a
    random 12-digit number below it."""
    if shutil.which(BINARY) is None:
        raise BenchmarkError("redis-benchmark is not installed (apt-get install redis-tools)")
    argv = [BINARY, "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-n", str(requests),
            "-P", str(pipeline), "--csv", *(("-r", str(keyspace)) if keyspace else ()), *command]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        # It exits 1 on the first error reply ("Error from server: ...").
        errors = [l for l in done.stderr.splitlines() if l.strip() and l != CONFIG_WARNING]
        raise BenchmarkError("redis-benchmark exited with %d: %s"
                             % (done.returncode, "; ".join(errors[-3:]) or "(no message)"))
    return parse_csv(done.stdout)


def version() -> str | None:
    """``redis-benchmark --version`` (e.g. ``redis-benchmark 7.0.15``), None if missing."""
    if shutil.which(BINARY) is None:
        return None
    return subprocess.run([BINARY, "--version"], capture_output=True, text=True).stdout.strip()
