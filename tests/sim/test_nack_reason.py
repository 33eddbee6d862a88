"""NACK ... REASON across a cluster, in simulation (docs/commands.md "Why
a job failed"): every holder of a copy learns the reason with the NACK's
QUEUED, keeps it through a crash and a restart from its AOF, and keeps the
last one when the job moves to its dead-letter queue; a node that imports
the job later (federation) gets it with the copy."""

from __future__ import annotations

import pytest

from disque.jobs.job import nack_reason_of
from tests.sim.harness import Sim
from tests.sim.harness.checks import check_cluster
from tests.sim.harness.ops import getjob_ids, queued_on, states
from tests.sim.harness.seeds import seeds
from tests.sim.harness.start import add_ok, ready

RETRY_S = 3


def reasons(sim: Sim, job_id: bytes) -> dict[int, tuple[bytes | None, bytes | None]]:
    """Per live holder: (queue, nack reason)."""
    out = {}
    for sn in sim.nodes:
        if sn.node is not None:
            job = sn.node.state.jobs.get(job_id)
            if job is not None:
                out[sn.index] = (job.queue, nack_reason_of(job))
    return out


def fail_where_queued(sim: Sim, job_id: bytes, reason: bytes) -> int:
    """A consumer on the node where the job is queued takes it and NACKs it
    with ``reason``; returns that node."""
    assert sim.run_until(lambda: len(queued_on(sim, job_id)) == 1, 4 * RETRY_S * 1000)
    (i,) = queued_on(sim, job_id)
    assert getjob_ids(sim.call(i, "GETJOB", "NOHANG", "FROM", "q", "q:dead")) == [job_id]
    assert sim.call(i, "NACK", job_id, "REASON", reason) == 1
    return i


@pytest.mark.parametrize("seed", seeds("test_every_holder_keeps_the_reason_through_a_restart", 8))
def test_every_holder_keeps_the_reason_through_a_restart(seed):
    sim = ready(3, seed, aof=True)
    try:
        rng = sim.rng
        job_id = add_ok(sim, 0, "q", "b", 5000, "REPLICATE", 3, "RETRY", RETRY_S,
                        "MAXDELIVER", 2)
        first = b"ValueError: row %d\r\n\x00" % seed
        fail_where_queued(sim, job_id, first)
        assert sim.run_until(lambda: reasons(sim, job_id) == {i: (b"q", first) for i in range(3)},
                             1000), reasons(sim, job_id)
        crashed = rng.randrange(3)
        sim.crash(crashed)
        sim.run_for(rng.randrange(10, 2000))
        sim.restart(crashed)
        assert reasons(sim, job_id)[crashed] == (b"q", first)
        second = b"TimeoutError: upstream"
        fail_where_queued(sim, job_id, second)  # the second failure: a dead letter now
        assert sim.run_until(
            lambda: reasons(sim, job_id) == {i: (b"q:dead", second) for i in range(3)},
            4 * RETRY_S * 1000), reasons(sim, job_id)
        sim.crash(crashed)
        sim.restart(crashed)
        assert reasons(sim, job_id)[crashed] == (b"q:dead", second)
        check_cluster(sim)
    finally:
        sim.close()


@pytest.mark.parametrize("seed", seeds("test_a_node_importing_the_job_gets_its_reason", 6))
def test_a_node_importing_the_job_gets_its_reason(seed):
    sim = ready(3, seed)
    try:
        job_id = add_ok(sim, 0, "q", "b", 5000, "REPLICATE", 2, "RETRY", 60)
        (outsider,) = [i for i in range(3) if i not in states(sim, job_id)]
        fail_where_queued(sim, job_id, b"KeyError: 'id'")
        consumer = sim.command(outsider, "GETJOB", "TIMEOUT", 5000, "FROM", "q")
        assert sim.run_until(lambda: consumer.done, 5000), consumer
        assert getjob_ids(consumer.value) == [job_id]
        assert reasons(sim, job_id)[outsider] == (b"q", b"KeyError: 'id'")
        check_cluster(sim)
    finally:
        sim.close()
