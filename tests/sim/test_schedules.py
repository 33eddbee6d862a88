"""Periodic jobs across nodes, in simulation (docs/schedules.md).

Every node gets a journal that records the jobs it stores; a tick's job
carries the DEDUPID ``schedule:<name>:<tick>``, so the journals say how
many distinct jobs each tick made, wherever they were made (a crashed
node's included). The ledger checks the two promises: no tick without a
job while a majority is up, and no tick with two jobs while the cluster
is connected.
"""

from __future__ import annotations

import random

import pytest

from disque.jobs.job import dedup_token

from tests.sim.harness import NetParams, Sim
from tests.sim.harness.checks import check_cluster
from tests.sim.harness.seeds import seeds

NODE_TIMEOUT = 3000
PREFIX = b"schedule:"


class TickLedger:
    """Which jobs each tick of each schedule made, from every node's journal."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.jobs: dict[tuple[bytes, int], set[bytes]] = {}
        self.made_at: dict[tuple[bytes, int], float] = {}
        self.made_by: dict[tuple[bytes, int], list[int]] = {}  # nodes that created a job
        for i in range(len(sim.nodes)):
            self.attach(i)

    def attach(self, i: int) -> None:
        """Record node ``i``'s jobs (again after each restart)."""
        self.sim.node(i).state.set_journal(_Recorder(self, i))

    def stored(self, job, i: int) -> None:
        token = dedup_token(job)
        if token is None or not token.startswith(PREFIX):
            return
        name, _, tick = token[len(PREFIX):].rpartition(b":")
        key = (name, int(tick))
        ids = self.jobs.setdefault(key, set())
        if job.id not in ids:  # the first node to store a job is the one that made it
            ids.add(job.id)
            self.made_by.setdefault(key, []).append(i)
        self.made_at.setdefault(key, self.sim.now)

    def ticks(self, name: bytes) -> dict[int, int]:
        """Tick -> number of distinct jobs."""
        return {tick: len(ids) for (n, tick), ids in self.jobs.items() if n == name}

    def check(self, name: bytes, first: int, last: int, every_ms: int,
              doubles_allowed: tuple[int, int] | None = None,
              missing_allowed: tuple[int, int] | None = None) -> None:
        """Every tick in [first, last] made a job, and only one unless it is
        in ``doubles_allowed`` (a closed range of tick times); none is
        missing unless it is in ``missing_allowed``."""
        made = self.ticks(name)
        missing = [t for t in range(first, last + 1, every_ms) if t not in made
                   and not (missing_allowed and missing_allowed[0] <= t <= missing_allowed[1])]
        assert not missing, "ticks without a job: %s" % _times(missing)
        doubled = [t for t, count in made.items() if count > 1
                   and not (doubles_allowed and doubles_allowed[0] <= t <= doubles_allowed[1])]
        assert not doubled, "ticks with two jobs: %s" % _times(doubled)
        early = [t for t in made if t < first]
        assert not early, "ticks before the schedule was set: %s" % _times(early)


class _Recorder:
    def __init__(self, ledger: TickLedger, i: int) -> None:
        self.ledger = ledger
        self.i = i

    def job_stored(self, job) -> None:
        self.ledger.stored(job, self.i)

    def job_removed(self, job, reason: bytes) -> None:
        pass


def _times(ticks: list[int]) -> str:
    return ", ".join(str(t - 1_700_000_000_000) for t in sorted(ticks)[:20])


def _cluster(size: int, seed: int, **net) -> tuple[Sim, TickLedger, random.Random]:
    rng = random.Random(seed)
    sim = Sim(size, seed, node_timeout=NODE_TIMEOUT)
    sim.join()
    sim.run_for(500)
    sim.net.params = NetParams(latency=(0.1, 5.0), **net)
    print("seed", seed)
    return sim, TickLedger(sim), rng


def _set_every(sim: Sim, i: int, name: str, seconds: int, *options) -> int:
    """SCHEDULE SET on node ``i``; returns the schedule's first tick."""
    assert sim.call(i, "SCHEDULE", "SET", name, "EVERY", seconds, "q", "body",
                    *options) == b"OK"
    s = sim.node(i).state.schedules.get(name.encode())
    return s.next_tick


def _firer(sim: Sim, name: bytes) -> int:
    """The node that fired the last tick, as the live nodes agree."""
    views = {sn.node.state.schedules.get(name).last_by for sn in sim.alive()}
    last_by = max(views, key=lambda v: v or b"")
    return sim.by_id(last_by).index


@pytest.mark.parametrize("seed", seeds("test_schedules_one_job_per_tick_while_connected", 6))
def test_schedules_one_job_per_tick_while_connected(seed):
    """Duplicated and reordered messages, clocks within a second of each
    other: every tick of a few schedules makes exactly one job, and every
    node agrees on the last tick."""
    sim, ledger, rng = _cluster(5, seed, dup=0.05, reorder=0.05)
    for i in range(5):
        sim.set_clock_offset(i, rng.uniform(-500, 500))
    firsts = {}
    for k in range(3):
        name = "s%d" % k
        firsts[name] = _set_every(sim, rng.randrange(5), name, 1 + k)
    sim.run_for(30_000)
    for k, (name, first) in enumerate(firsts.items()):
        last = int(sim.now) - 2000
        ledger.check(name.encode(), first, last - last % ((1 + k) * 1000), (1 + k) * 1000)
    ticks = {sn.node.state.schedules.get(b"s0").last_tick for sn in sim.alive()}
    assert len(ticks) == 1, ticks
    # Each schedule's ticks were all made by the node ranked first for it.
    ids = [sn.node_id for sn in sim.nodes]
    for name in firsts:
        key = name.encode()
        first_ranked = [i for i in range(5)
                        if sim.node(i).state.schedules.rank(sim.node(i).state.schedules.get(key), ids) == 0]
        makers = {i for (n, _), nodes in ledger.made_by.items() if n == key for i in nodes}
        assert makers == set(first_ranked), (name, makers, first_ranked)
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_schedules_firer_crash_and_restart", 6))
def test_schedules_firer_crash_and_restart(seed):
    """The firer crashes: another node fires the ticks it would have fired
    (the first ones about node-timeout late), none twice; when it restarts
    from its nodes.conf, it learns the ticks fired meanwhile before firing
    any, so none is made twice."""
    sim, ledger, rng = _cluster(3, seed)
    first = _set_every(sim, rng.randrange(3), "beat", 1)
    sim.run_for(5000 + 500 - sim.now % 1000)  # half-way between two ticks
    firer = _firer(sim, b"beat")
    sim.crash(firer)
    crashed_at = sim.now
    assert sim.run_until(lambda: _firer(sim, b"beat") != firer, 2 * NODE_TIMEOUT + 1000)
    takeover = sim.now - crashed_at
    sim.run_for(rng.uniform(2000, 10_000))
    # Slow links (up to a few cron periods): the restarted node's links are up
    # well before the tables it asked for arrive.
    sim.net.params.latency = (1.0, 300.0)
    sim.restart(firer)
    ledger.attach(firer)
    sim.run_for(15_000)
    last = int(sim.now) - 2000
    ledger.check(b"beat", first, last - last % 1000, 1000)
    assert takeover <= NODE_TIMEOUT + 1100, takeover
    assert sim.node(firer).state.schedules.get(b"beat") is not None  # kept across the restart
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_schedules_partition", 6))
def test_schedules_partition(seed):
    """A partition cuts the firer off with one other node (a minority of 5):
    the majority side takes over, the minority side stops firing once it
    sees it is a minority. Ticks about the partition's start may be made on
    both sides (at least once); none is lost, and after the heal none is
    made twice."""
    sim, ledger, rng = _cluster(5, seed)
    first = _set_every(sim, rng.randrange(5), "beat", 1)
    sim.run_for(4000 + rng.uniform(0, 1000))
    firer = _firer(sim, b"beat")
    others = [i for i in range(5) if i != firer]
    rng.shuffle(others)
    minority = [firer, others[0]]
    majority = others[1:]
    sim.net.partition([minority, majority])
    parted = int(sim.now)
    sim.run_for(rng.uniform(10_000, 20_000))
    # The minority side stopped firing within two node timeouts.
    late = [t for key, at in ledger.made_at.items() if at > parted + 2 * NODE_TIMEOUT
            for t in [key[1]] if set(ledger.made_by[key]) & set(minority)]
    assert not late, _times(late)
    sim.net.heal()
    healed = int(sim.now)
    sim.run_for(15_000)
    last = int(sim.now) - 2000
    ledger.check(b"beat", first, last - last % 1000, 1000,
                 doubles_allowed=(parted - 1000, parted + 2 * NODE_TIMEOUT))
    assert all(len(ids) == 1 for (n, t), ids in ledger.jobs.items() if t > healed)
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_schedules_clock_jumps", 6))
def test_schedules_clock_jumps(seed):
    """Clocks jump forward and back (NTP steps below node-timeout) on any
    node, the firer included: ticks are made early or late, each once."""
    sim, ledger, rng = _cluster(3, seed)
    first = _set_every(sim, rng.randrange(3), "beat", 1)
    for _ in range(8):
        sim.run_for(rng.uniform(1000, 4000))
        i = rng.randrange(3)
        sim.set_clock_offset(i, rng.uniform(-NODE_TIMEOUT / 2, NODE_TIMEOUT / 2))
    for i in range(3):
        sim.set_clock_offset(i, 0)
    sim.run_for(10_000)
    last = int(sim.now) - 2000
    ledger.check(b"beat", first, last - last % 1000, 1000)
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_schedules_lossy_network", 4))
def test_schedules_lossy_network(seed):
    """Messages are lost (5 %) and links fail to connect now and then: the
    table still converges (a SET, a re-SET and a DEL from different nodes)
    and no tick is lost while the nodes stay up. (A re-SET starts the ticks
    over after it: one still waiting for a firer then is not fired.)"""
    sim, ledger, rng = _cluster(5, seed, drop=0.05, connect_fail=0.1)
    first = _set_every(sim, 0, "beat", 2)
    _set_every(sim, 1, "gone", 1)
    sim.run_for(3000)
    assert sim.call(2, "SCHEDULE", "DEL", "gone") == 1
    sim.run_for(3000)
    assert sim.call(3, "SCHEDULE", "SET", "beat", "EVERY", 2, "q", "changed") == b"OK"
    reset = sim.node(3).state.schedules.get(b"beat").version
    sim.run_for(20_000)
    sim.net.params.calm()
    sim.run_for(SYNC_ROUNDS_MS)
    for sn in sim.alive():
        schedules = sn.node.state.schedules
        assert schedules.get(b"gone") is None, sn
        assert schedules.get(b"beat").body == b"changed", sn
    last = int(sim.now) - 3000
    ledger.check(b"beat", first, last - last % 2000, 2000,
                 doubles_allowed=(0, 1 << 62),  # a lost SCHEDFIRED may double a tick
                 missing_allowed=(reset - 2 * NODE_TIMEOUT, reset))
    check_cluster(sim)


SYNC_ROUNDS_MS = 12_000  # two sync rounds: every node asks every peer's table


@pytest.mark.parametrize("seed", seeds("test_schedules_over_the_real_bus", 2))
def test_schedules_over_the_real_bus(seed):
    """The same through the real bus framing and client connections."""
    sim = Sim(3, seed, node_timeout=NODE_TIMEOUT, wire=True)
    sim.join()
    sim.run_for(500)
    print("seed", seed)
    ledger = TickLedger(sim)
    first = _set_every(sim, 1, "beat", 1)
    sim.run_for(8000)
    [last] = {sn.node.state.schedules.get(b"beat").last_tick for sn in sim.alive()}
    assert last >= first + 6000
    ledger.check(b"beat", first, last, 1000)


@pytest.mark.parametrize("seed", seeds("test_schedules_catch_up_once_after_a_majority_returns", 6))
def test_schedules_catch_up_once_after_a_majority_returns(seed):
    """Two of three nodes are down for longer than node-timeout (the third
    fires nothing alone), then come back: the ticks missed meanwhile that
    are still within the catch-up window are made once each, by one node,
    whatever the order in which the nodes learn of each other."""
    sim, ledger, rng = _cluster(3, seed)
    first = _set_every(sim, rng.randrange(3), "beat", 1)
    # Half-way between two ticks: a firer crashing right after it made a
    # tick's job, before its SCHEDFIRED left, may have it made twice (at least once).
    sim.run_for(4000 + 500 - sim.now % 1000)
    down = rng.sample(range(3), 2)
    for i in down:
        sim.crash(i)
    outage = rng.uniform(10_000, 30_000)
    sim.run_for(outage)
    sim.net.params.latency = (1.0, 200.0)
    for i in down:
        sim.restart(i)
        ledger.attach(i)
        sim.run_for(rng.uniform(0, 3000))
    sim.run_for(15_000)
    last = int(sim.now) - 2000
    ledger.check(b"beat", first, last - last % 1000, 1000)
    check_cluster(sim)
