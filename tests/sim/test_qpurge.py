"""QPURGE across a simulated cluster (docs/commands.md "Extensions"): the
copies of the purged jobs go from every node the purging node reaches,
over a network that delays, duplicates and reorders messages; a node cut
off keeps its copies (the DELJOB is best effort, as FASTACK's)."""

from __future__ import annotations

import pytest

from tests.sim.harness.network import NetParams
from tests.sim.harness.ops import getjob_ids, states
from tests.sim.harness.seeds import seeds
from tests.sim.harness.start import add_ok, ready

GONE_MS = 2000


def holders(sim, job_id: bytes) -> set[int]:
    return set(states(sim, job_id))


@pytest.mark.parametrize("seed", seeds("test_purged_copies_go_everywhere_reached", 8))
def test_purged_copies_go_everywhere_reached(seed):
    sim = ready(5, seed)
    sim.net.params = NetParams(latency=(0.1, 20.0), dup=0.05, reorder=0.1)
    rng = sim.rng
    purged = [add_ok(sim, 0, "purged", "p%d" % i, 5000, "REPLICATE", rng.randint(1, 5))
              for i in range(12)]
    kept = [add_ok(sim, 0, "kept", "k%d" % i, 5000, "REPLICATE", 3) for i in range(3)]
    active = getjob_ids(sim.call(0, "GETJOB", "NOHANG", "FROM", "purged"))
    assert len(active) == 1
    expected = len(purged) - 1
    assert sim.call(0, "QPURGE", "purged") == expected
    gone = [job_id for job_id in purged if job_id not in active]
    assert sim.run_until(lambda: not any(holders(sim, j) for j in gone), GONE_MS), (
        seed, {j: holders(sim, j) for j in gone if holders(sim, j)})
    assert states(sim, active[0]).get(0) == "active"
    assert all(len(holders(sim, job_id)) == 3 for job_id in kept)


@pytest.mark.parametrize("seed", seeds("test_a_node_cut_off_keeps_its_copies", 4))
def test_a_node_cut_off_keeps_its_copies(seed):
    sim = ready(3, seed)
    job_ids = [add_ok(sim, 0, "purged", "p%d" % i, 5000, "REPLICATE", 3) for i in range(4)]
    sim.net.partition([[0, 1], [2]])
    assert sim.call(0, "QPURGE", "purged") == 4
    assert sim.run_until(lambda: all(holders(sim, j) == {2} for j in job_ids), GONE_MS), seed
