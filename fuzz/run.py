"""``make fuzz``: every fuzz target for its share of the inputs, then the
property tests, then a summary table (docs/security.md, "Fuzzing").

Each target runs in its own process (``python -m fuzz.<name>``: libFuzzer
ends the process when it is done) on the pure-Python core, which atheris
can instrument for coverage. The inputs that reached new coverage are
added to ``fuzz/corpus/<name>`` (``--merge``); a crash leaves its input
in ``fuzz/crashes/`` and makes the run fail.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

# Inputs per target in a full run: about 1,000,000 in all, shared by what
# each target costs per input (the node targets build a node per input).
RUNS = {"resp": 450_000, "bus": 250_000, "aof": 170_000, "command": 130_000}
DONE = re.compile(r"^Done (\d+) runs in (\d+) second", re.M)
RANDOM_DONE = re.compile(r"^\w+: (\d+) inputs \(random engine", re.M)
NEW_UNITS = re.compile(r"^stat::new_units_added:\s+(\d+)", re.M)
KEPT = re.compile(r"^\w+: (\d+) new inputs added", re.M)


def run_target(name: str, runs: int, engine: str | None) -> dict:
    """Fuzz one target in a child process; its figures."""
    command = [sys.executable, "-m", "fuzz.%s" % name, "--runs", str(runs)]
    command += ["--merge"] if engine in (None, "atheris") else []
    if engine is not None:
        command += ["--engine", engine]
    env = dict(os.environ, DISQUE_PURE_PYTHON="1")
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    output = done.stdout + done.stderr
    found = DONE.search(output) or RANDOM_DONE.search(output)
    new = NEW_UNITS.search(output)
    kept = KEPT.search(output)
    result = {"target": name, "inputs": int(found.group(1)) if found else 0,
              "seconds": round(elapsed, 1), "new_coverage": int(new.group(1)) if new else 0,
              "kept": int(kept.group(1)) if kept else 0, "status": done.returncode}
    if done.returncode != 0:
        result["output"] = output[-4000:]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every target's inputs (0.01 for a quick try)")
    parser.add_argument("--engine", choices=("atheris", "random"),
                        help="default: atheris where installed")
    parser.add_argument("--examples", type=int, default=2000,
                        help="examples per property test")
    parser.add_argument("--only", action="append", choices=sorted(RUNS))
    args = parser.parse_args(argv)
    results = []
    for name in args.only or RUNS:
        result = run_target(name, max(1, int(RUNS[name] * args.scale)), args.engine)
        results.append(result)
        print("%-8s %9d inputs %7.1f s  %5d reached new coverage, %3d kept  %s"
              % (name, result["inputs"], result["seconds"], result["new_coverage"],
                 result["kept"], "ok" if result["status"] == 0 else "CRASH"), flush=True)
        if result["status"] != 0:
            print(result["output"], file=sys.stderr)
    started = time.monotonic()
    properties = subprocess.run([sys.executable, "-m", "fuzz.properties", "--examples",
                                 str(args.examples)], env=dict(os.environ, DISQUE_PURE_PYTHON="1"))
    total = sum(r["inputs"] for r in results)
    crashed = [r["target"] for r in results if r["status"] != 0]
    print("total: %d inputs in %.0f s, property tests %.0f s; crashes: %s"
          % (total, sum(r["seconds"] for r in results), time.monotonic() - started,
             ", ".join(crashed) or "none"))
    return 1 if crashed or properties.returncode != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
