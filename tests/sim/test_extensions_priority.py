"""Priorities through federation, in simulation (docs/priorities.md).

A node gives the jobs it pops, so NEEDJOBS gets its highest priorities
first; YOURJOBS carries each job's priority (the job's 13th bus field),
so the importing node queues them by priority too. A consumer on the
importing node therefore sees the giver's priority-9 jobs before the
giver's older priority-5 jobs, over the in-process network and over the
real bus code (``wire=True``).
"""

from __future__ import annotations

import random

import pytest

from tests.sim.harness import NetParams, Sim
from tests.sim.harness.checks import check_cluster
from tests.sim.harness.ops import getjob_ids, job_id_of
from tests.sim.harness.seeds import seeds

LATENCY = (1.0, 5.0)
A, B = 1, 0  # A holds the jobs, B's consumer imports them


def ready(seed: int, wire: bool = False) -> Sim:
    sim = Sim(3, seed, net=NetParams(latency=LATENCY), wire=wire)
    sim.join()
    sim.run_for(500)
    return sim


def add(sim: Sim, i: int, body: str, priority: int | None, retry: int) -> bytes:
    options = ["REPLICATE", 1, "RETRY", retry]
    if priority is not None:
        options += ["PRIORITY", priority]
    request = sim.command(i, "ADDJOB", "q", body, 5000, *options)
    assert sim.run_until(lambda: request.done, 5000), request
    sim.run_for(1)  # one job per millisecond: ctimes in the order they were added
    return job_id_of(request)


def consume(sim: Sim, i: int, count: int, got: list[bytes]) -> None:
    """A consumer on node ``i`` that asks again as soon as it is served."""

    def ask(request=None):
        if request is not None:
            got.extend(getjob_ids(request.value))
        sim.command(i, "GETJOB", "COUNT", count, "FROM", "q", on_reply=ask)

    ask()


@pytest.mark.parametrize("seed", seeds("test_imported_priority_jobs_come_first", 3))
@pytest.mark.parametrize("retry", [0, 30])
@pytest.mark.parametrize("wire", [False, True])
def test_imported_priority_jobs_come_first(seed, retry, wire):
    """A holds four priority-5 jobs, then three newer priority-9 ones; B's
    consumer, one job at a time, gets the three priority-9 jobs first."""
    sim = ready(seed, wire)
    normal = [add(sim, A, "n%d" % k, None, retry) for k in range(4)]
    urgent = [add(sim, A, "u%d" % k, 9, retry) for k in range(3)]
    got: list[bytes] = []
    consume(sim, B, 1, got)
    assert sim.run_until(lambda: got, 3000)
    # The first job given was A's oldest priority-9 job, not its oldest job.
    assert got[0] == urgent[0]
    assert sim.run_until(lambda: len(got) == 7, 20_000), got
    assert got == urgent + normal
    sim.run_for(100)
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_imports_are_served_in_priority_order", 6))
def test_imports_are_served_in_priority_order(seed):
    """Random priorities on A, added in random order; B's consumer takes
    random batch sizes: B serves exactly A's queue order (priority, then
    age), because A gives in that order and B queues by it."""
    sim = ready(seed)
    rng = random.Random(seed)
    jobs = []
    for k in range(24):
        priority = rng.choice([None, None, 5, rng.randrange(10)])
        jobs.append((-(5 if priority is None else priority), k,
                     add(sim, A, "j%d" % k, priority, rng.choice([0, 30]))))
    expected = [job_id for _, _, job_id in sorted(jobs)]
    peek = sim.call(A, "QPEEK", "q", 100)
    assert [entry[1] for entry in peek] == expected
    got: list[bytes] = []
    consume(sim, B, rng.randint(1, 3), got)
    assert sim.run_until(lambda: len(got) == len(expected), 60_000), (len(got), len(expected))
    assert got == expected
    sim.run_for(100)
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_importer_qstat_shows_imported_priorities", 2))
def test_importer_qstat_shows_imported_priorities(seed):
    """Jobs moved to B keep their priority: QSTAT on B counts them, and
    SHOW on B tells it."""
    sim = ready(seed)
    ids = [add(sim, A, "j%d" % k, p, 30) for k, p in enumerate([9, 0, None, 9])]
    # B asks for many: a blocked GETJOB with a large count, then its jobs go back
    # to B's queue by NACK, so QSTAT sees them queued there.
    got: list[bytes] = []
    consume(sim, B, 10, got)
    assert sim.run_until(lambda: len(got) == 4, 10_000), got
    assert got == [ids[0], ids[3], ids[2], ids[1]]
    sim.call(B, "PAUSE", "q", "OUT")  # the consumer's next GETJOB stays blocked
    assert sim.call(B, "NACK", *got) == 4
    stats = sim.call(B, "QSTAT", "q")
    assert dict(zip(stats[0::2], stats[1::2]))[b"priorities"] == [9, 2, 5, 1, 0, 1]
    assert [entry[1] for entry in sim.call(B, "QPEEK", "q", 10)] == got
    show = sim.call(B, "SHOW", ids[1])
    assert dict(zip(show[0::2], show[1::2]))[b"priority"] == 0
