"""Membership in simulation: discovery, failure detection, HELLO, FORGET, LEAVING.

spec: cluster-bus.md §2-§4 and §7, commands.md HELLO / CLUSTER.
"""

from __future__ import annotations

import pytest

from tests.sim.harness import NetParams, Sim, SimFailure
from tests.sim.harness.checks import check_cluster
from tests.sim.harness.seeds import seeds

NODE_TIMEOUT = 3000


def nodes_table(sim: Sim, i: int) -> dict[str, dict]:
    """CLUSTER NODES of node ``i`` parsed as the spec's test harness does (split on spaces),
    keyed by the simulated machine name."""
    text = sim.call(i, "CLUSTER", "NODES")
    table = {}
    for line in text.decode().splitlines():
        fields = line.split(" ")
        assert len(fields) == 6, line
        owner = sim.by_id(fields[0].encode())
        table[owner.name if owner else fields[0]] = {
            "addr": fields[1], "flags": set(fields[2].split(",")),
            "ping_sent": int(fields[3]), "pong_recv": int(fields[4]), "link": fields[5]}
    assert text.endswith(b"\n")
    return table


def cluster_info(sim: Sim, i: int) -> dict[str, str]:
    text = sim.call(i, "CLUSTER", "INFO").decode()
    return dict(line.split(":", 1) for line in text.split("\r\n") if line)


def hello_priorities(sim: Sim, i: int) -> dict[str, bytes]:
    reply = sim.call(i, "HELLO")
    assert reply[0] == 1 and reply[1] == sim.nodes[i].node_id
    return {sim.name_of(entry[0]): entry[3] for entry in reply[2:]}


def flags_of(sim: Sim, observer: int, target: int) -> set[str]:
    return nodes_table(sim, observer)[sim.nodes[target].name]["flags"]


# --------------------------------------------------------------------- discovery

@pytest.mark.parametrize("size", [3, 4, 5, 6, 7])
@pytest.mark.parametrize("seed", seeds("test_meet_chain_becomes_full_mesh", 4))
def test_meet_chain_becomes_full_mesh(size, seed):
    sim = Sim(size, seed)
    sim.meet_chain()
    sim.wait_full_mesh(max_ms=10_000)
    sim.run_for(2000)  # let the reachable sets settle
    for sn in sim.nodes:
        table = nodes_table(sim, sn.index)
        assert set(table) == {n.name for n in sim.nodes}
        for other in sim.nodes:
            row = table[other.name]
            assert row["addr"] == "%s:%d" % (other.ip, other.port)
            assert row["link"] == "connected"
            if other is sn:
                assert row["flags"] == {"myself"}
                assert row["ping_sent"] == row["pong_recv"] == 0
            else:
                assert row["flags"] == {"noflags"}
                assert row["pong_recv"] > 0
        info = cluster_info(sim, sn.index)
        assert info["cluster_state"] == "ok"
        assert int(info["cluster_known_nodes"]) == size
        assert int(info["cluster_size"]) == size
        assert int(info["cluster_reachable_nodes"]) == size - 1
        assert set(hello_priorities(sim, sn.index).values()) == {b"1"}
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_full_mesh_despite_lossy_network", 10))
def test_full_mesh_despite_lossy_network(seed):
    """Lost, duplicated and reordered packets and refused connects only slow discovery.

    A lost MEET (or its PONG) makes that handshake expire, as in C: like an
    operator, the test repeats the MEET chain until the mesh is complete.
    """
    sim = Sim(5, seed, net=NetParams(drop=0.1, dup=0.05, reorder=0.05, connect_fail=0.2))
    for _ in range(12):
        sim.meet_chain()
        if sim.run_until(sim.is_full_mesh, max_ms=5000, step_ms=50):
            break
    sim.wait_full_mesh(max_ms=1)
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_restarted_node_rejoins_from_its_nodes_conf", 5))
def test_restarted_node_rejoins_from_its_nodes_conf(seed):
    sim = Sim(4, seed)
    sim.join()
    old_id = sim.nodes[2].node_id
    sim.crash(2)
    sim.run_for(500)
    sim.restart(2)
    assert sim.call(2, "CLUSTER", "MYID") == old_id
    assert len(sim.node(2).state.membership.nodes) == 4  # peers restored, no MEET needed
    sim.wait_full_mesh(max_ms=10_000)


# ------------------------------------------------------------ failure detection

@pytest.mark.parametrize("seed", seeds("test_crash_gives_pfail_then_fail_and_restart_clears_it",
                                       10))
def test_crash_gives_pfail_then_fail_and_restart_clears_it(seed):
    sim = Sim(5, seed)
    sim.join()
    sim.run_for(1000)
    victim = 4
    crashed_at = sim.now
    sim.crash(victim)
    observers = [0, 1, 2, 3]
    first_pfail = {}
    first_fail = {}

    def observe() -> bool:
        for i in observers:
            flags = flags_of(sim, i, victim)
            if "fail?" in flags:
                first_pfail.setdefault(i, sim.now)
                assert "fail" not in flags
            if "fail" in flags:
                first_fail.setdefault(i, sim.now)
        return len(first_fail) == len(observers)

    assert sim.run_until(observe, max_ms=4 * NODE_TIMEOUT, step_ms=20), (
        "FAIL not agreed:\n" + sim.describe_nodes())
    for i in observers:
        # PFAIL needs a ping unanswered for node-timeout; FAIL needs a majority of reports.
        if i in first_pfail:
            assert first_pfail[i] - crashed_at >= NODE_TIMEOUT
            assert first_pfail[i] <= first_fail[i]
        assert first_fail[i] - crashed_at >= NODE_TIMEOUT
        assert hello_priorities(sim, i)[sim.nodes[victim].name] == b"100"
        assert int(cluster_info(sim, i)["cluster_reachable_nodes"]) == 3
        assert int(cluster_info(sim, i)["cluster_size"]) == 5
    assert any(i in first_pfail for i in observers), "nobody went through PFAIL first"

    sim.restart(victim)
    assert sim.run_until(lambda: all(flags_of(sim, i, victim) == {"noflags"} for i in observers),
                         max_ms=10_000), sim.describe_nodes()
    sim.run_for(200)
    for i in observers:
        assert int(cluster_info(sim, i)["cluster_reachable_nodes"]) == 4
        assert hello_priorities(sim, i)[sim.nodes[victim].name] == b"1"
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_minority_cannot_mark_fail", 5))
def test_minority_cannot_mark_fail(seed):
    """A node cut off alone sees everyone PFAIL but never reaches the FAIL quorum."""
    sim = Sim(5, seed)
    sim.join()
    sim.net.partition([[0], [1, 2, 3, 4]])
    sim.run_for(4 * NODE_TIMEOUT)
    for other in range(1, 5):
        assert flags_of(sim, 0, other) == {"fail?"}
        assert flags_of(sim, other, 0) == {"fail"}
    sim.net.heal()
    assert sim.run_until(lambda: sim.is_full_mesh() and all(
        flags_of(sim, i, j) in ({"noflags"}, {"myself"}) for i in range(5) for j in range(5)),
        max_ms=15_000), sim.describe_nodes()


@pytest.mark.parametrize("seed", seeds("test_hello_priorities", 5))
def test_hello_priorities(seed):
    """1 ok, 5 no link, 10 PFAIL, 100 FAIL or leaving (spec: commands.md HELLO)."""
    sim = Sim(4, seed)
    sim.join()
    reply = sim.call(0, "HELLO")
    assert len(reply) == 2 + 4
    for entry in reply[2:]:
        owner = sim.by_id(entry[0])
        assert entry[1] == owner.ip.encode() and entry[2] == str(owner.port).encode()
        assert entry[3] == b"1"
    sim.crash(3)
    sim.run_for(50)  # the peers see their links drop
    assert hello_priorities(sim, 0)["n3"] == b"5"
    assert sim.run_until(lambda: hello_priorities(sim, 0)["n3"] != b"5", max_ms=2 * NODE_TIMEOUT)
    assert hello_priorities(sim, 0)["n3"] == b"10"
    assert sim.run_until(lambda: hello_priorities(sim, 0)["n3"] == b"100",
                         max_ms=2 * NODE_TIMEOUT)
    sim.call(1, "CLUSTER", "LEAVING", "yes")
    assert sim.run_until(lambda: hello_priorities(sim, 0)["n1"] == b"100", max_ms=NODE_TIMEOUT)
    assert hello_priorities(sim, 1)["n1"] == b"100"  # a leaving node says so itself
    assert hello_priorities(sim, 0)["n0"] == b"1"
    assert hello_priorities(sim, 0)["n2"] == b"1"


# ------------------------------------------------------------------ forget

@pytest.mark.parametrize("seed", seeds("test_forget_blacklists_for_a_minute", 5))
def test_forget_blacklists_for_a_minute(seed):
    sim = Sim(4, seed)
    sim.join()
    target = sim.nodes[3].node_id
    assert sim.call(0, "CLUSTER", "FORGET", target) == b"OK"
    forgotten_at = sim.now
    assert "n3" not in nodes_table(sim, 0)
    # The others still gossip about n3 and n3 still pings n0: the blacklist keeps it out.
    assert sim.run_until(lambda: target in sim.node(0).state.membership.nodes,
                         max_ms=55_000, step_ms=100) is False
    assert int(cluster_info(sim, 0)["cluster_known_nodes"]) == 3
    # After 60 s gossip brings it back.
    assert sim.run_until(lambda: sim.is_full_mesh(), max_ms=30_000, step_ms=100), (
        sim.describe_nodes())
    assert sim.now - forgotten_at >= 60_000
    check_cluster(sim)


def test_forget_errors():
    sim = Sim(2, 1)
    sim.join()
    err = sim.call(0, "CLUSTER", "FORGET", "abc")
    assert str(err) == "ERR Invalid node identifier"
    unknown = b"f" * 40
    assert str(sim.call(0, "CLUSTER", "FORGET", unknown)) == "ERR Unknown node " + "f" * 40
    assert str(sim.call(0, "CLUSTER", "FORGET", sim.nodes[0].node_id)) == (
        "ERR I tried hard but I can't forget myself...")


@pytest.mark.parametrize("seed", seeds("test_forget_everywhere_removes_a_dead_node", 5))
def test_forget_everywhere_removes_a_dead_node(seed):
    """The operator's procedure for a node that left: stop it, FORGET it everywhere."""
    sim = Sim(4, seed)
    sim.join()
    dead = sim.nodes[3].node_id
    sim.crash(3)
    for i in range(3):
        assert sim.call(i, "CLUSTER", "FORGET", dead) == b"OK"
    sim.run_for(90_000)  # the blacklist expires, but nobody gossips about it any more
    for i in range(3):
        assert dead not in sim.node(i).state.membership.nodes
        assert int(cluster_info(sim, i)["cluster_size"]) == 3
        assert int(cluster_info(sim, i)["cluster_reachable_nodes"]) == 2
    check_cluster(sim)


# ----------------------------------------------------------------- leaving

@pytest.mark.parametrize("seed", seeds("test_leaving_flag_propagates_by_gossip", 5))
def test_leaving_flag_propagates_by_gossip(seed):
    sim = Sim(5, seed)
    sim.join()
    assert sim.call(2, "CLUSTER", "LEAVING") == b"no"
    assert sim.call(2, "CLUSTER", "LEAVING", "yes") == b"OK"
    assert sim.call(2, "CLUSTER", "LEAVING") == b"yes"
    assert any("myself,leaving" in line for line in sim.nodes[2].saved_conf.splitlines())
    others = [0, 1, 3, 4]
    assert sim.run_until(lambda: all("leaving" in flags_of(sim, i, 2) for i in others),
                         max_ms=NODE_TIMEOUT), sim.describe_nodes()
    sim.run_for(200)
    for i in others:
        assert int(cluster_info(sim, i)["cluster_reachable_nodes"]) == 3
        assert hello_priorities(sim, i)["n2"] == b"100"
    err = sim.call(2, "GETJOB", "FROM", "q")
    assert str(err).startswith("LEAVING")
    # The flag survives a restart (nodes.conf) ...
    sim.crash(2)
    sim.restart(2)
    assert sim.call(2, "CLUSTER", "LEAVING") == b"yes"
    # ... and clearing it propagates the same way.
    assert sim.run_until(lambda: all(sim.nodes[2].node_id in sim.node(i).state.membership.nodes
                                     for i in others), max_ms=10_000)
    assert sim.call(2, "CLUSTER", "LEAVING", "no") == b"OK"
    assert sim.run_until(lambda: all(flags_of(sim, i, 2) == {"noflags"} for i in others),
                         max_ms=3 * NODE_TIMEOUT), sim.describe_nodes()
    sim.wait_full_mesh()


def test_sim_failure_reports_are_readable():
    """The harness refuses to pretend: a command on a crashed node is an error."""
    sim = Sim(2, 3)
    sim.crash(1)
    with pytest.raises(SimFailure):
        sim.call(1, "PING")
