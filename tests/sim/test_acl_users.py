"""ACL users across nodes, in simulation (docs/security.md "Users across
the cluster"): with a cluster secret, changes made on both sides of a
partition converge once it heals, to the last writer's on every name (a
deletion included), through lost and duplicated messages, crashes and
restarts; without a secret each node keeps its own users."""

from __future__ import annotations

import random

import pytest

from tests.sim.harness import NetParams, Sim
from tests.sim.harness.checks import check_cluster
from tests.sim.harness.seeds import seeds

NODE_TIMEOUT = 3000
SECRET = "the-simulated-cluster-secret-0123456789"
SETTLE_MS = 15_000  # links back, then a sync round (5 s) or two


def _secured(config, index: int) -> None:
    config.cluster_secret = SECRET


def _cluster(size: int, seed: int, secret: bool = True, **net) -> tuple[Sim, random.Random]:
    print("seed", seed)
    rng = random.Random(seed)
    sim = Sim(size, seed, node_timeout=NODE_TIMEOUT, configure=_secured if secret else None)
    sim.join()
    sim.run_for(500)
    sim.net.params = NetParams(latency=(0.1, 5.0), **net)
    for i in range(size):
        sim.set_clock_offset(i, rng.uniform(-300, 300))
    return sim, rng


def _users(sim: Sim, i: int) -> dict[bytes, str]:
    return {name: user.describe() for name, user in sim.node(i).state.config.users.items()}


def _winner(sim: Sim, made: list[tuple[int, bytes]]) -> dict[bytes, tuple]:
    """Per name, the (version, node ID, rules or None) of the last change
    among those ``made`` (node, name), read where each was made."""
    best: dict[bytes, tuple] = {}
    for i, name in made:
        rec = sim.node(i).state.user_table.records[name]
        key = (rec.version, rec.origin, None if rec.deleted else tuple(rec.rules))
        if name not in best or key[:2] > best[name][:2]:
            best[name] = key
    return best


def _setuser(sim: Sim, i: int, name: str, *rules: str) -> tuple[int, bytes]:
    assert sim.call(i, "ACL", "SETUSER", name, *rules) == b"OK"
    return i, name.encode()


def _deluser(sim: Sim, i: int, name: str) -> tuple[int, bytes]:
    assert sim.call(i, "ACL", "DELUSER", name) == 1
    return i, name.encode()


def _converged(sim: Sim) -> bool:
    views = [_users(sim, sn.index) for sn in sim.alive()]
    return all(view == views[0] for view in views)


@pytest.mark.parametrize("seed", seeds("test_acl_changes_on_both_sides_of_a_partition_converge", 6))
def test_acl_changes_on_both_sides_of_a_partition_converge(seed):
    """Five nodes cut 2 / 3. Each side creates users of its own, changes
    the same user differently, and one side deletes a user the other
    updates: after the heal every node has the same users, each name as
    its last change left it (the deletion too when it was last)."""
    sim, rng = _cluster(5, seed, dup=0.05)
    made = [_setuser(sim, 0, "shared", "on", ">start", "~*", "+@all"),
            _setuser(sim, 1, "contested", "on", ">start", "+@read")]
    sim.run_for(1000)
    assert _converged(sim) and b"shared" in sim.node(4).state.config.users
    sides = list(range(5))
    rng.shuffle(sides)
    left, right = sides[:2], sides[2:]
    sim.net.partition([left, right])
    sim.run_for(rng.uniform(500, 3000))
    made += [_setuser(sim, left[0], "left-only", "on", ">l", "+@consume"),
             _setuser(sim, right[0], "right-only", "on", ">r", "+@produce")]
    for side in (left, right):
        sim.run_for(rng.uniform(0, 2000))
        made.append(_setuser(sim, rng.choice(side), "shared", "on", "resetpass",
                             ">pw-%d" % side[0], "~*", "+@all"))
    # A deletion on one side, an update of the same user on the other.
    deleting, updating = (left, right) if rng.random() < 0.5 else (right, left)
    sim.run_for(rng.uniform(0, 2000))
    made.append(_deluser(sim, rng.choice(deleting), "contested"))
    sim.run_for(rng.uniform(0, 2000))
    made.append(_setuser(sim, rng.choice(updating), "contested", "+@produce"))
    sim.run_for(rng.uniform(1000, 5000))
    assert not _converged(sim)
    sim.net.heal()
    assert sim.run_until(lambda: _converged(sim), SETTLE_MS), sim.describe_nodes()
    expected = _winner(sim, made)
    for sn in sim.alive():
        table = sn.node.state.user_table
        for name, (version, origin, rules) in expected.items():
            rec = table.records[name]
            assert (rec.version, rec.origin) == (version, origin), (sn, name)
            assert (name in sn.node.state.config.users) == (rules is not None), (sn, name)
        assert table.digest.packed() == sim.node(0).state.user_table.digest.packed()
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_acl_users_reach_a_restarted_node_and_survive_restarts", 4))
def test_acl_users_reach_a_restarted_node_and_survive_restarts(seed):
    """A node down while users change gets them when it comes back (its
    peers answer its digest); every node then restarts at once and keeps
    them (the tables file), with nothing to send but digests."""
    sim, rng = _cluster(3, seed, drop=0.02)
    _setuser(sim, 0, "w", "on", ">pw", "~*", "+@all")
    sim.run_for(1000)
    down = rng.randrange(3)
    sim.crash(down)
    up = [i for i in range(3) if i != down]
    _setuser(sim, up[0], "w", "resetpass", ">new")
    _setuser(sim, up[1], "late", "on", "nopass")
    sim.run_for(rng.uniform(1000, 5000))
    sim.restart(down)
    sim.net.params.calm()
    assert sim.run_until(lambda: _converged(sim), SETTLE_MS), sim.describe_nodes()
    before = _users(sim, 0)
    for i in range(3):
        sim.crash(i)
    for i in range(3):
        sim.restart(i)
    assert all(_users(sim, i) == before for i in range(3))
    sim.run_for(SETTLE_MS)
    assert all(_users(sim, i) == before for i in range(3))
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_acl_without_a_secret_users_stay_on_their_node", 2))
def test_acl_without_a_secret_users_stay_on_their_node(seed):
    sim, rng = _cluster(3, seed, secret=False)
    _setuser(sim, 0, "w", "on", ">pw")
    sim.run_for(SETTLE_MS)
    assert b"w" in sim.node(0).state.config.users
    assert all(b"w" not in sim.node(i).state.config.users for i in (1, 2))
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_acl_a_node_without_the_secret_refuses_records", 2))
def test_acl_a_node_without_the_secret_refuses_records(seed):
    """A node left without the secret while the others have it (a rollout
    under way; on a real bus they could not even link) takes no record,
    and the others no user of its."""
    sim = Sim(3, seed, node_timeout=NODE_TIMEOUT,
              configure=lambda config, i: _secured(config, i) if i else None)
    sim.join()
    sim.run_for(500)
    _setuser(sim, 1, "w", "on", ">pw")
    _setuser(sim, 0, "local", "on", ">pw")
    sim.run_for(SETTLE_MS)
    assert b"w" in sim.node(2).state.config.users
    assert b"w" not in sim.node(0).state.config.users
    assert sim.node(0).state.user_table.refused >= 1
    assert all(b"local" not in sim.node(i).state.config.users for i in (1, 2))
    check_cluster(sim)
