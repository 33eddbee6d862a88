"""ADDJOB ... DEDUPID across nodes, in simulation (docs/dedup.md).

A token is answered by every node that holds (or held) a copy of its job: the
copies made by REPLJOB and the jobs moved by YOURJOBS carry it. A node that
never held a copy knows nothing of it: during a partition a producer that
retries there creates a second job. These scenarios pin both down, each on a
few seeds (latency, jitter, the choice of replicas).
"""

from __future__ import annotations

import pytest

from tests.sim.harness import Sim
from tests.sim.harness.checks import check_cluster
from tests.sim.harness.clients import is_error
from tests.sim.harness.ops import addjob, getjob_ids, job_id_of, states
from tests.sim.harness.seeds import seeds
from tests.sim.harness.start import add_ok, ready

NODE_TIMEOUT = 3000


def all_jobs(sim: Sim) -> set[bytes]:
    """Every job ID held anywhere."""
    return {job_id for sn in sim.nodes if sn.node is not None for job_id in sn.node.state.jobs.by_id}


@pytest.mark.parametrize("seed", seeds("test_every_replica_answers_for_the_job", 6))
def test_every_replica_answers_for_the_job(seed):
    sim = ready(5, seed)
    job_id = add_ok(sim, 0, "q", "body", 5000, "REPLICATE", 3, "DEDUPID", "order-1")
    holders = sorted(states(sim, job_id))
    assert len(holders) == 3 and holders[0] == 0
    for i in holders:
        again = add_ok(sim, i, "q", "body", 5000, "REPLICATE", 3, "DEDUPID", "order-1")
        assert again == job_id, (i, again)
    assert all_jobs(sim) == {job_id}
    # A node without a copy has no way to know the token: a second job.
    outsider = next(i for i in range(5) if i not in holders)
    other = add_ok(sim, outsider, "q", "body", 5000, "REPLICATE", 3, "DEDUPID", "order-1")
    assert other != job_id and all_jobs(sim) == {job_id, other}
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_a_job_moved_by_yourjobs_keeps_its_token", 6))
def test_a_job_moved_by_yourjobs_keeps_its_token(seed):
    """RETRY 0: the job is handed over whole (it leaves its origin); its new
    holder and its origin both answer the token."""
    sim = ready(3, seed)
    consumer = sim.command(1, "GETJOB", "FROM", "q")
    sim.run_for(500)
    job_id = add_ok(sim, 2, "q", "body", 5000, "REPLICATE", 1, "RETRY", 0, "DEDUPID", "t")
    assert sim.run_until(lambda: consumer.done, 1000)
    assert getjob_ids(consumer.value) == [job_id]
    assert states(sim, job_id) == {1: "active"}  # moved: it exists on node 1 only
    assert sim.node(1).state.jobs.by_id[job_id].ext == b"t"  # the copy holds the token alone too
    for i in (1, 2):
        assert add_ok(sim, i, "q", "body", 5000, "REPLICATE", 1, "DEDUPID", "t") == job_id
    assert all_jobs(sim) == {job_id}
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_a_retry_during_the_wait_for_replicas", 6))
def test_a_retry_during_the_wait_for_replicas(seed):
    """The origin answers -PENDING while the first ADDJOB waits; once it is
    replicated, the job's ID."""
    sim = ready(3, seed)
    sim.net.partition([[0, 1], [2]], blackhole=True)  # n2 silent, not yet failed
    first = addjob(sim, 0, "q", "body", 5000, "REPLICATE", 3, "DEDUPID", "t")
    sim.run_for(300)
    assert not first.done
    (waiting,) = sim.node(0).state.blocked.producers
    retry = sim.call(0, "ADDJOB", "q", "body", 5000, "REPLICATE", 3, "DEDUPID", "t")
    assert is_error(retry) and str(retry).startswith("PENDING Job %s " % waiting.decode())
    sim.net.heal()
    assert sim.run_until(lambda: first.done, 5000)
    assert job_id_of(first) == waiting
    assert add_ok(sim, 0, "q", "body", 5000, "REPLICATE", 3, "DEDUPID", "t") == waiting
    assert all_jobs(sim) == {waiting}
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_a_retry_at_the_origin_after_norepl_creates_the_job",
                                       6))
def test_a_retry_at_the_origin_after_norepl_creates_the_job(seed):
    sim = ready(3, seed)
    sim.net.partition([[0, 1], [2]], blackhole=True)
    first = addjob(sim, 0, "q", "body", 1000, "REPLICATE", 3, "DEDUPID", "t")
    assert sim.run_until(lambda: first.done, 2000)
    assert str(first.value).startswith("NOREPL")
    sim.run_for(100)
    assert not all_jobs(sim)  # DELJOB removed the partial copy on n1
    sim.net.heal()
    job_id = add_ok(sim, 0, "q", "body", 5000, "REPLICATE", 3, "DEDUPID", "t")
    assert all_jobs(sim) == {job_id}
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_a_retry_at_a_replica_after_norepl", 3))
def test_a_retry_at_a_replica_after_norepl(seed):
    """The origin's DELJOB removed the partial copy on n1, and the token with it
    (AckPropagation.on_deljob): a retry there creates the job instead of naming
    the deleted one."""
    sim = ready(3, seed)
    sim.net.partition([[0, 1], [2]], blackhole=True)
    first = addjob(sim, 0, "q", "body", 1000, "REPLICATE", 3, "DEDUPID", "t")
    assert sim.run_until(lambda: first.done, 2000)
    assert str(first.value).startswith("NOREPL")
    sim.run_for(100)
    assert not all_jobs(sim)
    retry = sim.command(1, "ADDJOB", "q", "body", 1000, "REPLICATE", 2, "DEDUPID", "t")
    assert sim.run_until(lambda: retry.done, 2000)
    job_id = job_id_of(retry)
    assert job_id in all_jobs(sim), "the producer was told %s exists; no node holds it" % (
        job_id.decode())


@pytest.mark.parametrize("seed", seeds("test_a_retry_across_a_partition_creates_a_second_job",
                                       6))
def test_a_retry_across_a_partition_creates_a_second_job(seed):
    """What DEDUPID does not do: the producer's first ADDJOB made the job on
    n0 and n1; cut off from them, it retries on n2, which holds no copy and
    cannot ask: n2 creates a second job. After the partition heals both jobs
    live on and are delivered (at-least-once, as without DEDUPID), and the
    token keeps naming the job each node learned of."""
    sim = ready(3, seed)
    first = add_ok(sim, 0, "q", "body", 5000, "REPLICATE", 2, "DEDUPID", "t")
    holders = set(states(sim, first))
    outsider = ({0, 1, 2} - holders).pop()
    sim.net.partition([sorted(holders), [outsider]])
    sim.run_for(2 * NODE_TIMEOUT)  # the sides see each other fail
    second = add_ok(sim, outsider, "q", "body", 5000, "REPLICATE", 1, "DEDUPID", "t")
    assert second != first
    sim.net.heal()
    sim.run_for(2 * NODE_TIMEOUT)
    assert all_jobs(sim) == {first, second}
    for i in holders:
        assert add_ok(sim, i, "q", "body", 5000, "REPLICATE", 1, "DEDUPID", "t") == first
    assert add_ok(sim, outsider, "q", "body", 5000, "REPLICATE", 1, "DEDUPID", "t") == second
    got = set()
    for _ in range(2):
        request = sim.command(outsider, "GETJOB", "TIMEOUT", 5000, "FROM", "q")
        assert sim.run_until(lambda: request.done, 6000)
        got.update(getjob_ids(request.value))
    assert got == {first, second}
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_a_replica_answers_before_its_origin_settles", 4))
def test_a_replica_answers_before_its_origin_settles(seed):
    """What DEDUPID does not do (docs/dedup.md, "During a partition"): a
    replica holding its copy answers with the job's ID while the origin still
    waits for another replica; if the origin's ADDJOB then fails, that answer
    named a job that is deleted. The producer's -NOREPL from the first ADDJOB
    is the authoritative answer: retried after it, the job is created."""
    sim = ready(3, seed)
    sim.net.partition([[0, 1], [2]], blackhole=True)
    first = addjob(sim, 0, "q", "body", 1000, "REPLICATE", 3, "DEDUPID", "t")
    assert sim.run_until(lambda: 1 in states(sim, _waiting(sim)), 500)
    early = add_ok(sim, 1, "q", "body", 1000, "REPLICATE", 2, "DEDUPID", "t")
    assert early == _waiting(sim) and not first.done
    assert sim.run_until(lambda: first.done, 2000)
    assert str(first.value).startswith("NOREPL")
    sim.run_for(100)
    assert early not in all_jobs(sim)  # the ID node 1 gave names nothing now
    sim.net.heal()
    created = add_ok(sim, 1, "q", "body", 1000, "REPLICATE", 2, "DEDUPID", "t")
    assert created != early and created in all_jobs(sim)
    check_cluster(sim)


def _waiting(sim: Sim) -> bytes | None:
    """The job node 0's producer waits for, once it does."""
    producers = list(sim.node(0).state.blocked.producers)
    return producers[0] if len(producers) == 1 else None
