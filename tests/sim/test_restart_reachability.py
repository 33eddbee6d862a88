"""A node that answered since its restart stays reachable for node-timeout.

spec: cluster-bus.md §4 (PFAIL after a ping unanswered for node-timeout,
FAIL by majority, FAIL cleared when the node answers), commands.md ADDJOB
(NOREPL when fewer nodes are reachable than requested).

The history: several nodes die at once, so the survivors can only mark the
victim PFAIL (no majority for FAIL); the others come back, then the victim
restarts and answers the origin but dies again before the other nodes
reached it (their old ping is still unanswered). Those nodes then reach the
FAIL majority, counting the failure report the origin gossiped before the
victim answered it, and broadcast FAIL. The origin heard from the victim
less than node-timeout ago: the FAIL must not make the victim unreachable
there, or a synchronous ADDJOB asking for every node is refused at once
(NOREPL) instead of waiting for the victim and retrying REPLJOB.
"""

from __future__ import annotations

import pytest

from disque.cluster.membership import FAIL, PFAIL
from tests.sim.harness import Sim
from tests.sim.harness.checks import check_cluster
from tests.sim.harness.ops import addjob, job_id_of, states
from tests.sim.harness.seeds import seeds

NODE_TIMEOUT = 3000
SIZE = 7
ORIGIN = 0
VICTIM = 6
HELPERS = [3, 4, 5]  # die with the victim, so that no FAIL majority is possible
LATE = [1, 2, 3, 4, 5]  # do not hear from the restarted victim before it dies again


def view(sim: Sim, observer: int, target: int):
    return sim.node(observer).state.membership.nodes[sim.nodes[target].node_id]


def flagged(sim: Sim, observer: int, target: int) -> bool:
    return bool(view(sim, observer, target).flags & (PFAIL | FAIL))


@pytest.mark.parametrize("seed", seeds("test_fail_from_others_does_not_override_a_fresh_pong", 8))
def test_fail_from_others_does_not_override_a_fresh_pong(seed):
    sim = Sim(SIZE, seed, node_timeout=NODE_TIMEOUT)
    sim.join()
    sim.run_for(1000)
    victim_id = sim.nodes[VICTIM].node_id

    # 1. Several nodes killed at once: the three survivors flag the victim
    #    PFAIL but can never gather the 4 votes FAIL needs.
    for i in [VICTIM] + HELPERS:
        sim.crash(i)
    survivors = [0, 1, 2]
    assert sim.run_until(lambda: all(flagged(sim, i, VICTIM) for i in survivors),
                         max_ms=2 * NODE_TIMEOUT), sim.describe_nodes()
    sim.run_for(500)
    assert all(view(sim, i, VICTIM).flags == PFAIL for i in survivors), sim.describe_nodes()

    # 2. The helpers come back (the origin hears from them again).
    for i in HELPERS:
        sim.restart(i)
    sim.run_for(2000)
    assert all(not flagged(sim, ORIGIN, i) for i in HELPERS), sim.describe_nodes()

    # 3. The victim restarts and answers the origin only: it dies again before
    #    the others hear from it (their messages to and from it are lost).
    late = {sim.nodes[i].node_id for i in LATE}

    def lose_victim_traffic(conn, to_dst, msg):
        ends = {conn.src.node_id, conn.dst.node_id}
        return victim_id in ends and bool(ends & late)
    sim.net.filters.append(lose_victim_traffic)
    restarted_at = sim.now
    sim.restart(VICTIM)
    assert sim.run_until(lambda: view(sim, ORIGIN, VICTIM).pong_received >= restarted_at
                         and not flagged(sim, ORIGIN, VICTIM), max_ms=1000, step_ms=1)
    answered_at = view(sim, ORIGIN, VICTIM).pong_received
    sim.crash(VICTIM)
    sim.net.filters.remove(lose_victim_traffic)

    # 4. The late nodes reach the FAIL majority and broadcast FAIL; the origin,
    #    answered less than node-timeout ago, keeps the victim reachable.
    others_failed = []
    request = None
    sim.run_for(150)  # the reachable set is refreshed by the next cluster cron
    while sim.now < answered_at + NODE_TIMEOUT - 100:
        assert not flagged(sim, ORIGIN, VICTIM), (
            "victim flagged %d ms after it answered:\n%s"
            % (sim.now - answered_at, sim.describe_nodes()))
        assert victim_id in sim.node(ORIGIN).state.membership.reachable
        if not others_failed:
            others_failed = [i for i in LATE if view(sim, i, VICTIM).flags & FAIL]
            if others_failed:
                # The FAIL broadcast is out: a synchronous ADDJOB for every node
                # must wait for the victim, not be refused.
                request = addjob(sim, ORIGIN, "q", "body", 20_000, "REPLICATE", SIZE)
                sim.run_for(5)
                assert not request.done, request
        sim.run_for(10)
    assert others_failed, "nobody reached FAIL: the history did not happen\n" + \
        sim.describe_nodes()

    # 5. After node-timeout without an answer the origin flags it too (spec §4).
    assert sim.run_until(lambda: view(sim, ORIGIN, VICTIM).flags & FAIL,
                         max_ms=NODE_TIMEOUT), sim.describe_nodes()

    # 6. The victim is back: the blocked ADDJOB reaches it (REPLJOB retried).
    sim.restart(VICTIM)
    assert sim.run_until(lambda: request.done, max_ms=10_000), request
    job_id = job_id_of(request)
    assert len(states(sim, job_id)) == SIZE
    assert sim.run_until(lambda: not flagged(sim, ORIGIN, VICTIM), max_ms=5000)
    check_cluster(sim)


# ---------------------------------------------------------------------------
# The original's replication test ("Replicating job expires before reaching
# the replication level", then "Sync REPLJOB messages are retried against old
# nodes"), with the race it loses on a slow start: the restarted node speaks
# to the origin on the link it opened, then dies before the origin's own link
# reaches it. The origin's ping to its previous process is never answered;
# the frame it got since is a sign of life (docs/cluster.md "Failure
# detection"), so the node stays reachable until it has been silent for
# node-timeout, and a synchronous ADDJOB for every node waits for it.

RACE_VICTIM = 1


@pytest.mark.parametrize("seed", seeds("test_a_restarted_node_that_spoke_is_waited_for", 8))
def test_a_restarted_node_that_spoke_is_waited_for(seed):
    sim = Sim(SIZE, seed, node_timeout=NODE_TIMEOUT)
    sim.join()
    sim.run_for(1000)
    victim_id = sim.nodes[RACE_VICTIM].node_id
    origin_id = sim.nodes[ORIGIN].node_id

    # The job expires before it reaches the killed node: NOREPL.
    sim.crash(RACE_VICTIM)
    request = addjob(sim, ORIGIN, "q", "j", 15_000, "REPLICATE", SIZE, "TTL", 1)
    assert sim.run_until(lambda: request.done, max_ms=5000), request
    assert request.raw.startswith(b"-NOREPL"), request
    old_ping = view(sim, ORIGIN, RACE_VICTIM).ping_sent
    assert old_ping, sim.describe_nodes()  # unanswered since the crash

    # Restarted, it speaks to the origin on its own link (the origin's link to
    # it loses everything), then dies again.
    def origin_link_lost(conn, to_dst, msg):
        return conn.src.node_id == origin_id and conn.dst.node_id == victim_id
    sim.net.filters.append(origin_link_lost)
    restarted_at = sim.now
    sim.restart(RACE_VICTIM)
    assert sim.run_until(lambda: view(sim, ORIGIN, RACE_VICTIM).data_received >= restarted_at,
                         max_ms=1000, step_ms=1), sim.describe_nodes()
    spoke_at = view(sim, ORIGIN, RACE_VICTIM).data_received
    sim.crash(RACE_VICTIM)
    sim.net.filters.remove(origin_link_lost)

    # Past node-timeout after the old ping, the node is reachable still: a
    # synchronous ADDJOB for every node waits for it.
    sim.run_until(lambda: sim.now > max(old_ping + NODE_TIMEOUT + 200, spoke_at + 150),
                  max_ms=NODE_TIMEOUT + 1000)
    assert view(sim, ORIGIN, RACE_VICTIM).ping_sent == old_ping  # still unanswered
    assert not flagged(sim, ORIGIN, RACE_VICTIM), sim.describe_nodes()
    assert victim_id in sim.node(ORIGIN).state.membership.reachable
    request = addjob(sim, ORIGIN, "q", "j", 30_000, "REPLICATE", SIZE)
    sim.run_for(5)
    assert not request.done, request

    # Silent for node-timeout since it spoke: PFAIL after all (spec §4).
    assert sim.run_until(lambda: flagged(sim, ORIGIN, RACE_VICTIM),
                         max_ms=NODE_TIMEOUT + 500), sim.describe_nodes()
    assert sim.now - spoke_at > NODE_TIMEOUT

    # Back for good: the blocked ADDJOB reaches it.
    sim.restart(RACE_VICTIM)
    assert sim.run_until(lambda: request.done, max_ms=10_000), request
    assert len(states(sim, job_id_of(request))) == SIZE
    check_cluster(sim)
