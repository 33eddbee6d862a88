"""ADDJOBS across nodes, in simulation (docs/commands.md "Bulk add").

A synchronous ADDJOBS parks its producer until every job has its copies or
has failed: each job answered with an ID has its replicas, each answered
NOREPL is gone from every node once the partition heals, and the retry
cron widens the replication of every waiting job of the command, not only
the first. The jobs carry their headers to every copy. Each scenario runs
on several seeds (latency, jitter, drops, the choice of replicas).
"""

from __future__ import annotations

import pytest

from disque.jobs.job import job_headers
from tests.sim.harness.checks import check_cluster
from tests.sim.harness.clients import is_error
from tests.sim.harness.network import NetParams
from tests.sim.harness.ops import states
from tests.sim.harness.seeds import seeds
from tests.sim.harness.start import ready

JOBS = 12


def _addjobs(sim, i: int, timeout: int, *options):
    bodies = ["job %d" % n for n in range(JOBS)]
    return sim.command(i, "ADDJOBS", "q", timeout, *options, "BODIES", *bodies)


def _held(sim) -> set[bytes]:
    return {job_id for sn in sim.nodes if sn.node is not None for job_id in sn.node.state.jobs.by_id}


@pytest.mark.parametrize("seed", seeds("test_every_job_answered_has_its_copies", 6))
def test_every_job_answered_has_its_copies(seed):
    sim = ready(5, seed)  # joined on a calm network, then a lossy one
    sim.net.params = NetParams(latency=(0.1, 8.0), drop=0.02, dup=0.02, reorder=0.05)
    request = _addjobs(sim, 0, 10_000, "REPLICATE", 3, "HEADER", "traceparent", "tp")
    assert sim.run_until(lambda: request.done, 11_000), request
    ids = request.value
    assert len(ids) == JOBS and not any(is_error(r) for r in ids), ids
    for job_id in ids:
        holders = states(sim, job_id)
        assert len(holders) >= 3, (job_id, holders)
        for i in holders:
            assert job_headers(sim.node(i).state.jobs.by_id[job_id]) == (b"traceparent", b"tp")
    sim.net.params.calm()
    sim.run_for(1000)
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_a_partition_fails_every_job_and_leaves_none", 6))
def test_a_partition_fails_every_job_and_leaves_none(seed):
    sim = ready(5, seed)
    sim.net.partition([[0, 1], [2, 3, 4]], blackhole=True)  # silent, not yet failed
    request = _addjobs(sim, 0, 1000, "REPLICATE", 3)
    assert sim.run_until(lambda: request.done, 2000), request
    assert len(request.value) == JOBS
    assert all(str(r).startswith("NOREPL Timeout") for r in request.value), request.value
    sim.run_for(100)
    assert not sim.node(0).state.blocked.producers
    sim.net.heal()
    # DELJOB reached node 1 during the partition; copies asked of the far side
    # never arrived. Nothing is left anywhere.
    assert sim.run_until(lambda: not _held(sim), 5000), _held(sim)
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_healing_in_time_replicates_every_waiting_job", 6))
def test_healing_in_time_replicates_every_waiting_job(seed):
    """The copies first asked for are lost; once the partition heals, the
    retry cron adds a target for each waiting job until all have three."""
    sim = ready(5, seed)
    sim.net.partition([[0, 1], [2, 3, 4]], blackhole=True)
    request = _addjobs(sim, 0, 8000, "REPLICATE", 3)
    sim.run_for(400)
    assert not request.done and len(sim.node(0).state.blocked.producers) == JOBS
    sim.net.heal()
    assert sim.run_until(lambda: request.done, 8000), request
    ids = request.value
    assert not any(is_error(r) for r in ids), ids
    assert all(len(states(sim, job_id)) >= 3 for job_id in ids)
    assert sim.call(0, "QLEN", "q") == JOBS
    check_cluster(sim)
