"""Starting a scenario: a joined cluster, and ADDJOBs that must succeed."""

from __future__ import annotations

import random

from tests.sim.harness.cluster import Sim
from tests.sim.harness.network import NetParams
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


def skewed_cluster(rng: random.Random, size: int, seed: int, net: NetParams, **kwargs) -> Sim:
    """A cluster of ``size`` nodes whose clocks differ by up to 2 s (drawn
    from ``rng``), joined on a calm network, then given ``net``'s faults."""
    sim = Sim(size, seed, **kwargs)
    for i in range(size):  # clocks are not synchronised (and jump, see the nemesis)
        sim.set_clock_offset(i, rng.uniform(-2000, 2000))
    sim.join()  # on a calm network: a lost MEET would need an operator to retry it
    sim.net.params = net
    return sim
