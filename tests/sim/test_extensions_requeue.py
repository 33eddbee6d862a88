"""Dead letters and delayed NACKs across partitions, in simulation
(docs/dead-letters.md, "How copies agree").

A dead-letter move decided on one side of a partition reaches the other
side after it heals, whatever that side did meanwhile (requeued the job in
its origin queue, delivered it, moved it too): the copies end in one
queue, the dead-letter queue, queued on one node. A NACK ... DELAY heard by
the holders before a partition keeps them from requeueing the job before
the delay and their retry period have passed.
"""

from __future__ import annotations

import pytest

from disque.jobs.job import QUEUED
from tests.sim.harness import Sim
from tests.sim.harness.checks import check_cluster
from tests.sim.harness.ops import getjob_ids, queued_on, states
from tests.sim.harness.seeds import seeds
from tests.sim.harness.start import add_ok, ready

RETRY_S = 3
JITTER_MS = 250


def copies(sim: Sim, job_id: bytes) -> dict[int, tuple[bytes, int, bool]]:
    """Per live holder: (queue, generation, queued)."""
    out = {}
    for sn in sim.nodes:
        if sn.node is not None:
            job = sn.node.state.jobs.get(job_id)
            if job is not None:
                out[sn.index] = (job.queue, job.ext.moves, job.state == QUEUED)
    return out


def deliver_and_nack(sim: Sim, i: int, job_id: bytes, queue: str = "q") -> bool:
    """A consumer on node ``i`` takes the job from ``queue`` if it is there and NACKs it."""
    if getjob_ids(sim.call(i, "GETJOB", "NOHANG", "FROM", queue)) != [job_id]:
        return False
    assert sim.call(i, "NACK", job_id) == 1
    return True


def converged(sim: Sim, job_id: bytes, queue: bytes) -> bool:
    held = copies(sim, job_id)
    return (len(held) == 3 and len({gen for _, gen, _ in held.values()}) == 1
            and all(q == queue for q, _, _ in held.values())
            and sum(queued for _, _, queued in held.values()) == 1)


@pytest.mark.parametrize("seed", seeds("test_a_dead_letter_move_survives_a_partition", 12))
def test_a_dead_letter_move_survives_a_partition(seed):
    sim = ready(3, seed)
    rng = sim.rng
    job_id = add_ok(sim, 0, "q", "poison", 5000, "REPLICATE", 3, "RETRY", RETRY_S,
                    "MAXDELIVER", 3)
    assert set(states(sim, job_id)) == {0, 1, 2}
    (first,) = queued_on(sim, job_id)
    assert deliver_and_nack(sim, first, job_id)  # delivery 1 failed, everyone heard it
    sim.run_for(100)
    mover = queued_on(sim, job_id)[0]
    others = [i for i in range(3) if i != mover]
    sim.net.partition([[mover], others], blackhole=bool(seed % 2))
    assert deliver_and_nack(sim, mover, job_id)  # delivery 2
    assert deliver_and_nack(sim, mover, job_id)  # delivery 3: moved, and nobody hears it
    assert copies(sim, job_id)[mover] == (b"q:dead", 1, True)
    # Meanwhile the other side requeues it in q after its retry period, and a
    # consumer there may fail it too (then that side moves it as well).
    for _ in range(rng.randrange(5, 40)):
        sim.run_for(500)
        if rng.random() < 0.3:
            for i in others:
                if deliver_and_nack(sim, i, job_id):
                    break
    if rng.random() < 0.5:  # a consumer holds the dead letter: the mover's copy is active
        assert getjob_ids(sim.call(mover, "GETJOB", "NOHANG", "FROM", "q:dead")) == [job_id]
    sim.net.heal()
    assert sim.run_until(lambda: converged(sim, job_id, b"q:dead"), 8 * RETRY_S * 1000), (
        copies(sim, job_id))
    # Settled: never back in q, queued in one place (two nodes' timers
    # firing within a message's latency may overlap for a moment).
    overlap = 0
    for _ in range(2000):  # 20 s
        sim.run_for(10)
        held = copies(sim, job_id)
        assert all(q == b"q:dead" for q, _, _ in held.values()), held
        overlap = overlap + 10 if sum(queued for _, _, queued in held.values()) > 1 else 0
        assert overlap <= 20, held
    assert all(sim.call(i, "QLEN", "q") == 0 for i in range(3))
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_a_redrive_during_a_partition_wins_after_it", 8))
def test_a_redrive_during_a_partition_wins_after_it(seed):
    """QREDRIVE on one side (generation 2) while the other still has the
    dead letter (generation 1): after the heal the job is back in q only."""
    sim = ready(3, seed)
    job_id = add_ok(sim, 0, "q", "poison", 5000, "REPLICATE", 3, "RETRY", RETRY_S,
                    "MAXDELIVER", 1)
    (first,) = queued_on(sim, job_id)
    assert deliver_and_nack(sim, first, job_id)
    assert sim.run_until(lambda: all(c[1] == 1 for c in copies(sim, job_id).values()), 1000)
    others = [i for i in range(3) if i != first]
    sim.net.partition([[first], others], blackhole=bool(seed % 2))
    assert sim.call(first, "QREDRIVE", "q:dead") == 1
    assert copies(sim, job_id)[first] == (b"q", 2, True)
    sim.run_for(sim.rng.randrange(1000, 4 * RETRY_S * 1000))
    sim.net.heal()
    assert sim.run_until(lambda: converged(sim, job_id, b"q"), 8 * RETRY_S * 1000), (
        copies(sim, job_id))
    for i in range(3):
        job = sim.node(i).state.jobs[job_id]
        assert (job.ext.origin, job.ext.reason, job.ext.moves) == (None, None, 2)
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_a_delayed_nack_is_not_requeued_early_by_a_partition",
                                       12))
def test_a_delayed_nack_is_not_requeued_early_by_a_partition(seed):
    sim = ready(3, seed)
    rng = sim.rng
    delay_s = rng.randrange(5, 15)
    job_id = add_ok(sim, 0, "q", "b", 5000, "REPLICATE", 3, "RETRY", RETRY_S, "MAXDELIVER", 2)
    (nacker,) = queued_on(sim, job_id)
    assert getjob_ids(sim.call(nacker, "GETJOB", "FROM", "q")) == [job_id]
    nacked_at = sim.now
    assert sim.call(nacker, "NACK", job_id, "DELAY", delay_s) == 1
    sim.run_for(50)  # the holders heard it (WORKING with the delay)
    others = [i for i in range(3) if i != nacker]
    sim.net.partition([[nacker], others], blackhole=bool(seed % 2))
    first_queued: dict[int, float] = {}
    while sim.now < nacked_at + (delay_s + RETRY_S) * 1000 + 1000:
        sim.run_for(10)
        for i in queued_on(sim, job_id):
            first_queued.setdefault(i, sim.now)
    # The NACKer requeued it when the delay ended; the others, cut off from
    # it, not before the delay plus their retry period.
    assert nacked_at + delay_s * 1000 <= first_queued[nacker] <= nacked_at + delay_s * 1000 + 20
    for i in others:
        assert first_queued.get(i, float("inf")) >= (
            nacked_at + (delay_s + RETRY_S) * 1000 - JITTER_MS), (i, first_queued)
    assert sim.node(nacker).state.jobs[job_id].nacks == 1  # counted once
    sim.net.heal()
    sim.run_for(2 * RETRY_S * 1000)
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_a_delayed_nack_past_maxdeliver_moves_once", 8))
def test_a_delayed_nack_past_maxdeliver_moves_once(seed):
    """The delayed requeue is the failure that moves the job; a partition
    then makes both sides move it, in the same generation, to one queue."""
    sim = ready(3, seed)
    job_id = add_ok(sim, 0, "q", "b", 5000, "REPLICATE", 3, "RETRY", RETRY_S, "MAXDELIVER", 1)
    (nacker,) = queued_on(sim, job_id)
    assert getjob_ids(sim.call(nacker, "GETJOB", "FROM", "q")) == [job_id]
    assert sim.call(nacker, "NACK", job_id, "DELAY", 4) == 1
    sim.run_for(50)
    partitioned = bool(seed % 2)
    if partitioned:
        sim.net.partition([[nacker], [i for i in range(3) if i != nacker]])
    sim.run_for(4000)
    assert copies(sim, job_id)[nacker] == (b"q:dead", 1, True)
    sim.run_for(6000)
    sim.net.heal()
    assert sim.run_until(lambda: converged(sim, job_id, b"q:dead"), 8 * RETRY_S * 1000), (
        copies(sim, job_id))
    assert all(gen == 1 for _, gen, _ in copies(sim, job_id).values())
    check_cluster(sim)
