"""The single node's per-job paths in one process, for instruction counts.

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python -m bench.corecost WORKLOAD JOBS

Run it with JOBS and with 0 and divide the difference of the "Collected"
totals by JOBS: instructions per job, repeatable within a fraction of a
percent whatever else the machine is doing (wall-clock rates drift by
±30 % here). No sockets and no request parsing: the node's core only,
with a fixed clock. With ``--callgrind`` as a third argument (and
valgrind's ``--instr-atstart=no``) only the measured commands are counted,
not the start nor a workload's setup: the total divided by JOBS is the
figure (the GETJOB workloads need it, their setup adds the jobs). The
cyclic garbage collector is off meanwhile: where its passes fall depends
on the whole allocation history, enough to move the counts of one path by
up to 3 % between two builds that differ elsewhere.

Workloads:
* ``addjob``: ``ADDJOB q <64 bytes> 0`` one by one through ``Node.call`` (the -P 1 path);
* ``addjob-run``: the same in pipelined runs of 16 through ``Node.call_run`` (-P 16);
* ``addjob-options-run``: runs of 16 of ``ADDJOB q <64 bytes> 0 REPLICATE 1 RETRY 60 TTL 3600``;
* ``addjob-priority-run``: runs of 16 of ``ADDJOB q <64 bytes> 0 PRIORITY 9``;
* ``addjob-dedupid-run``: runs of 16 of ``ADDJOB q <64 bytes> 0 DEDUPID <n>``, n counting up;
* ``cycle``: runs of 16 ADDJOBs, one GETJOB COUNT 16, one ACKJOB of the 16 IDs;
* ``getjob``: ``GETJOB FROM q`` one by one through ``Node.call``, JOBS jobs
  added first (setup);
* ``getjob-limited``: the same with a QLIMIT on ``q`` that never holds a job
  back (``RATE 1000000 BURST 1000000``): the cost of a limit in use;
* ``nack``: ``NACK <id>`` one by one through ``Node.call``, JOBS jobs added
  and delivered first (setup);
* ``nack-reason``: the same with ``REASON <a 42-byte exception text>``;
* ``addjob-user``: ``addjob`` by a client logged in as a named user
  without a quota (every command then goes through the access check);
* ``addjob-quota``: the same user with a quota it never reaches;
* ``addjobs``: ``ADDJOBS q 0 BODIES <64 bytes> ...``, 100 bodies a command, through
  ``Node.call``;
* ``addjobs-dedupids``: the same with ``DEDUPIDS <n> <64 bytes> ...``, n counting up;
* ``cron``: ``Node.cron()`` passes (JOBS of them) on the lone node with no
  schedule, the clock 100 ms later at each (the server's ``hz 10``); one
  pass first (setup) so the counted ones are the steady ones;
* ``cron-schedules``: the same with 100 ``SCHEDULE SET sN EVERY 3600 q
  <64 bytes>`` set first (setup), none due during the counted passes (the
  next tick is 2,800 s away: up to 28,000 passes).

``DISQUE_PURE_PYTHON=1`` measures the pure-Python core of a compiled tree.
"""

from __future__ import annotations

import gc
import os
import random
import subprocess
import sys

from disque.context.clients import ClientState
from disque.config import Config
from disque.jobs.ids import ID_LENGTH
from disque.node import Node

BODY = b"x" * 64
RUN = 16
ADDJOB = [b"ADDJOB", b"q", BODY, b"0"]
ADDJOB_OPTIONS = [*ADDJOB, b"REPLICATE", b"1", b"RETRY", b"60", b"TTL", b"3600"]
FORMS = {"addjob-options-run": ADDJOB_OPTIONS, "addjob-priority-run": [*ADDJOB, b"PRIORITY", b"9"]}
GETJOB = [b"GETJOB", b"COUNT", b"%d" % RUN, b"FROM", b"q"]
ENTRY_ID_OFFSET = len(b"*3\r\n$1\r\nq\r\n$40\r\n")  # where the ID starts in a job entry
ENTRY_LENGTH = ENTRY_ID_OFFSET + ID_LENGTH + len(b"\r\n$64\r\n") + len(BODY) + 2
BULK = 100  # bodies per ADDJOBS


GETJOB_ONE = [b"GETJOB", b"FROM", b"q"]
NACK_REASON = [b"REASON", b"ValueError: invalid literal for int(): 'x'"]
USER_RULES = [b"ACL", b"SETUSER", b"producer", b"on", b"nopass", b"~*", b"+@all"]
QUOTA = b"quota-jobs=1000000000"
START_MS = 1_700_000_000_000  # the clock at the start: 800 s past an hour
CRON_PERIOD_MS = 100  # between two cron passes of a server at hz 10
SCHEDULES = 100
WORKLOADS = ("addjob", "addjob-run", "addjob-options-run", "addjob-priority-run",
             "addjob-dedupid-run", "cycle", "getjob", "getjob-limited", "nack", "nack-reason",
             "addjob-user", "addjob-quota", "addjobs", "addjobs-dedupids", "cron",
             "cron-schedules")


def _callgrind(switch: str) -> None:
    """Switch valgrind's instrumentation of this process on or off."""
    subprocess.run(["callgrind_control", "-i", switch, str(os.getpid())],
                   stdout=subprocess.DEVNULL, check=True)


def main(argv: list[str]) -> int:
    workload, jobs = argv[0], int(argv[1])
    if workload not in WORKLOADS:
        raise SystemExit("unknown workload %r (choose from %s)" % (workload, ", ".join(WORKLOADS)))
    measure_only = argv[2:] == ["--callgrind"]
    now = [START_MS]
    node = Node(Config(), b"a" * 40, clock=lambda: now[0], rng=random.Random(1))
    client = ClientState(1)
    if workload in ("addjob-user", "addjob-quota"):
        node.call(client, USER_RULES + ([QUOTA] if workload == "addjob-quota" else []))
        assert node.call(client, [b"AUTH", b"producer", b"any"]) == b"+OK\r\n"
    if workload.startswith(("getjob", "nack")):
        if workload == "getjob-limited":
            node.call(client, [b"QLIMIT", b"q", b"RATE", b"1000000", b"BURST", b"1000000"])
        fill = node.run_commands[b"ADDJOB"]
        for _ in range(jobs // RUN + 1):
            node.call_run(client, fill, [ADDJOB] * RUN, 0, [])
    nacks: list[list[bytes]] = []
    if workload.startswith("nack"):
        node.call(client, [b"GETJOB", b"COUNT", b"%d" % len(node.state.jobs), b"FROM", b"q"])
        tail = NACK_REASON if workload == "nack-reason" else []
        nacks = [[b"NACK", job_id, *tail] for job_id in list(node.state.jobs.by_id)[:jobs]]
    if workload == "cron-schedules":
        for n in range(SCHEDULES):
            reply = node.call(client, [b"SCHEDULE", b"SET", b"s%d" % n, b"EVERY", b"3600",
                                       b"q", BODY])
            assert reply == b"+OK\r\n", reply
    if workload.startswith("cron"):
        _cron(node, now)
    if measure_only:
        gc.disable()
        _callgrind("on")
    _run(workload, jobs, node, client, now, nacks)
    if measure_only:
        _callgrind("off")
        gc.enable()
    return 0


def _cron(node: Node, now: list[int]) -> None:
    """One cron pass, the clock advanced first as between two passes of a server."""
    now[0] += CRON_PERIOD_MS
    node.cron()


def _run(workload: str, jobs: int, node: Node, client: ClientState, now: list[int],
         nacks: list[list[bytes]]) -> None:
    """The measured commands of ``workload`` (``nacks``: the NACK workloads' commands)."""
    if workload.startswith("cron"):
        for _ in range(jobs):  # _cron's body, without a Python call's cost per pass
            now[0] += CRON_PERIOD_MS
            node.cron()
        if workload == "cron-schedules":
            assert not node.state.jobs, "a schedule fired during the measured passes"
        return
    if workload in ("addjob", "addjob-user", "addjob-quota"):
        for _ in range(jobs):
            node.call(client, ADDJOB)
        return
    if workload.startswith("getjob"):
        for _ in range(jobs):
            node.call(client, GETJOB_ONE)
        return
    if workload.startswith("nack"):
        for command in nacks:
            node.call(client, command)
        assert node.call(client, [b"QLEN", b"q"]) == b":%d\r\n" % len(nacks), "not all requeued"
        return
    if workload in ("addjobs", "addjobs-dedupids"):
        bulk = [b"ADDJOBS", b"q", b"0", b"BODIES", *[BODY] * BULK]  # built once, as sent
        for n in range(jobs // BULK):
            if workload == "addjobs-dedupids":  # built per command, tokens counting up
                bulk = [b"ADDJOBS", b"q", b"0", b"DEDUPIDS"]
                for i in range(n * BULK, (n + 1) * BULK):
                    bulk += [b"%d" % i, BODY]
            node.call(client, bulk)
        return
    run = node.run_commands[b"ADDJOB"]
    commands = [FORMS.get(workload, ADDJOB)] * RUN
    for n in range(jobs // RUN):
        if workload == "addjob-dedupid-run":
            commands = [[*ADDJOB, b"DEDUPID", b"%d" % (n * RUN + i)] for i in range(RUN)]
        node.call_run(client, run, commands, 0, [])
        if workload == "cycle":
            now[0] += 1
            reply = node.call(client, GETJOB)
            assert reply is not None
            head = len(b"*%d\r\n" % RUN)
            ids = [reply[head + i * ENTRY_LENGTH + ENTRY_ID_OFFSET:][:ID_LENGTH]
                   for i in range(RUN)]
            node.call(client, [b"ACKJOB", *ids])
    if workload == "cycle":
        assert not node.state.jobs, "the cycle left %d jobs" % len(node.state.jobs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
