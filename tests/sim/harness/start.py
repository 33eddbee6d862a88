"""Starting a scenario: a joined cluster, and ADDJOBs that must succeed."""

from __future__ import annotations

from tests.sim.harness.cluster import Sim
from tests.sim.harness.ops import job_id_of


def ready(size: int, seed: int, **kwargs) -> Sim:
    """A joined cluster of ``size`` nodes, half a second after the join."""
    sim = Sim(size, seed, **kwargs)
    sim.join()
    sim.run_for(500)
    return sim


def add_ok(sim: Sim, i: int, *args, max_ms: float = 5000) -> bytes:
    """ADDJOB ``args`` on node ``i``, which must answer an ID within ``max_ms``."""
    request = sim.command(i, "ADDJOB", *args)
    assert sim.run_until(lambda: request.done, max_ms), request
    return job_id_of(request)
