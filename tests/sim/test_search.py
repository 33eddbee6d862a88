"""The fault-schedule search (tests/sim/search.py) and the simulated AOF it uses.

A few hundred seeds of the search run here (the seed range is printed);
``make sim-search SEEDS=10000`` runs many more. The AOF tests show that a
simulated crash with ``appendonly`` on keeps a node's jobs through the
server's own writer and loader, and that the ledger counts such a node
as still holding its jobs.
"""

from __future__ import annotations

import os

import pytest

from tests.sim import search
from tests.sim.harness import Sim
from tests.sim.harness.checks import check_cluster
from tests.sim.harness.ops import getjob_ids, states
from tests.sim.harness.seeds import seeds
from tests.sim.harness.start import add_ok
from tests.sim.harness.workload import GONE_AFTER_MS, WATCH_GONE_EVERY_MS, JobRecord, Ledger

SEARCH_SEEDS = 200


def test_search_seeds():
    """SEARCH_SEEDS seeded fault schedules, each checked by the ledger."""
    count = int(os.environ.get("SIM_SEEDS", SEARCH_SEEDS))
    base = seeds("test_search_seeds", 1)[0] + search.DEFAULT_BASE
    print("fault-schedule search: seeds %d..%d" % (base, base + count - 1))
    outcomes = search.search(range(base, base + count), workers=2)
    failed = [o for o in outcomes if not o.ok]
    assert not failed, "\n".join(search.failure_report(o) for o in failed)
    # The schedules did what they are for: faults, AOF restarts, redeliveries.
    totals = {key: sum(o.stats.get(key, 0) for o in outcomes)
              for key in ("crash", "aof_loads", "partition", "duplicates", "delivered")}
    assert all(totals.values()), totals


def test_aof_restart_keeps_jobs():
    """A node with its AOF on crashes and restarts: its queued job is back
    (active, requeued after its retry time) and delivered."""
    seed = seeds("test_aof_restart_keeps_jobs", 1)[0]
    sim = Sim(3, seed, aof=[0])
    try:
        sim.join()
        job_id = add_ok(sim, 0, "q", "kept", 0, "REPLICATE", 1, "RETRY", 2)
        sim.crash(0)
        assert sim.nodes[0].aof.live_at_crash == {job_id}
        sim.restart(0)
        assert sim.nodes[0].aof.jobs_loaded == 1 and states(sim, job_id) == {0: "active"}
        request = sim.command(0, "GETJOB", "TIMEOUT", 5000, "FROM", "q")
        assert sim.run_until(lambda: request.done, 5000)
        assert getjob_ids(request.value) == [job_id]
        assert sim.call(0, "ACKJOB", job_id) == 1
        sim.run_for(100)
        # The DELJOB went to the file: another crash does not bring it back.
        sim.crash(0)
        sim.restart(0)
        assert states(sim, job_id) == {}
    finally:
        sim.close()


def test_crash_without_aof_or_with_disk_lost_wipes():
    """Only a crash that loses the jobs counts against a job's holders."""
    sim = Sim(2, seeds("test_crash_wipes", 1)[0], aof=[1])
    try:
        sim.join()
        job_id = add_ok(sim, 1, "q", "gone", 0, "REPLICATE", 2)
        sim.crash(0)
        sim.crash(1)
        assert (sim.nodes[0].wipes, sim.nodes[1].wipes) == (1, 0)
        sim.restart(1)
        assert 1 in states(sim, job_id)
        sim.crash(1, wipe=True)
        sim.restart(1)
        assert sim.nodes[1].wipes == 1 and states(sim, job_id) == {}
    finally:
        sim.close()


def test_replay_command_runs_one_seed(capsys):
    """The command printed for a failing seed replays it (here one that passes)."""
    seed = seeds("test_replay_command_runs_one_seed", 1)[0] + search.DEFAULT_BASE
    assert search.main(["--replay", str(seed)]) == 0
    assert "seed %d passed" % seed in capsys.readouterr().out


def test_stall_freezes_a_node_and_keeps_what_reaches_it():
    """A stalled node (SIGSTOP) answers nothing until it resumes, then
    handles the commands and bus messages that waited, in order."""
    sim = Sim(3, seeds("test_stall", 1)[0])
    try:
        sim.join()
        sim.stall(1, 2000)
        started = sim.now
        replies = []
        sim.command(1, "PING", on_reply=lambda request: replies.append(request))
        request = sim.command(0, "ADDJOB", "q", "while-stalled", 5000, "REPLICATE", 3)
        assert sim.run_until(lambda: replies, 5000)
        assert replies[0].value == b"PONG" and replies[0].done_at >= started + 2000
        # The ADDJOB needed n1's GOTJOB: it could only complete after the stall.
        assert sim.run_until(lambda: request.done, 5000) and request.done_at >= started + 2000
        assert set(states(sim, request.value)) == {0, 1, 2}
    finally:
        sim.close()


@pytest.mark.parametrize("seed", seeds("test_job_in_flight_to_a_stalled_node_is_not_gone", 3))
def test_job_in_flight_to_a_stalled_node_is_not_gone(seed):
    """The ledger marks nothing gone while a node is stalled: a stalled node
    may have a YOURJOBS carrying a job waiting for it while a FASTACK
    elsewhere deletes every other copy, and its delivery of that job on
    resuming (before the DELJOB that waits behind it on the same link) is
    not a resurrection. Staged: n2's consumer asked for jobs before n2
    froze; n0 pushes it the job it queues next, then FASTACKs it while n2
    is frozen for longer than the ledger's GONE_AFTER_MS."""
    # A node timeout longer than the stall: the others keep their links to n2.
    sim = Sim(3, seed, node_timeout=10_000)
    try:
        sim.join()
        sim.run_for(500)
        ledger = Ledger(sim)

        def watch() -> None:
            ledger.watch_gone()
            sim.after(WATCH_GONE_EVERY_MS, watch)
        sim.after(WATCH_GONE_EVERY_MS, watch)

        # n2's consumer waits: n2 asks the others for jobs (NEEDJOBS), and n0,
        # with none, remembers it wants some.
        got = sim.command(2, "GETJOB", "TIMEOUT", 10_000, "FROM", "q")
        sim.run_for(50)
        assert not got.done, got
        stall_ms = 2 * GONE_AFTER_MS + 1000
        sim.stall(2, stall_ms)
        stalled_at = sim.now

        # n0 queues a job and pushes it to n2 at once (YOURJOBS, waiting for n2).
        record = JobRecord(b"in-flight", b"q", 1, 30, False, 0, sim.now)
        ledger.produced(record)
        added = sim.command(0, "ADDJOB", "q", "in-flight", 0, "REPLICATE", 1, "RETRY", 30)
        assert sim.run_until(lambda: added.done, 1000), added
        ledger.added(record, added)
        job_id = record.job_id
        assert sim.run_until(lambda: states(sim, job_id) == {0: "active"}, 500), \
            states(sim, job_id)

        # FASTACK on n0: its copy goes, the DELJOB queues behind the YOURJOBS.
        assert sim.call(0, "FASTACK", job_id) == 1
        ledger.acked(job_id, fast=True)
        assert states(sim, job_id) == {}
        sim.run_until(lambda: not sim.stalled(2), stall_ms)
        assert sim.now - stalled_at >= 2 * GONE_AFTER_MS  # held nowhere that long

        # n2 resumes: the YOURJOBS first (its consumer gets the job), then the
        # DELJOB. The ledger must take that delivery for what it is.
        assert sim.run_until(lambda: got.done, 1000), got
        assert getjob_ids(got.value) == [job_id]
        for entry in got.value:
            ledger.delivered(2, entry, False)
        assert sim.run_until(lambda: states(sim, job_id) == {}, 1000), states(sim, job_id)
    finally:
        sim.close()


def test_simulated_aof_is_the_servers_format():
    """The simulated AOF is written as the server writes it: one format
    marker at the start (checksummed records after it), none added by a
    restart, and disque-check-aof finds it valid."""
    from disque.aof.check import check
    from disque.jobs.records import FILE_MARKER

    sim = Sim(2, seeds("test_simulated_aof_format", 1)[0], aof=True)
    try:
        sim.join()
        add_ok(sim, 0, "q", "one", 0, "REPLICATE", 2)
        sim.crash(0)
        sim.restart(0)
        add_ok(sim, 0, "q", "two", 0, "REPLICATE", 2)
        sim.run_for(100)
        with open(sim.nodes[0].aof.path, "rb") as f:
            data = f.read()
        assert data.startswith(FILE_MARKER) and data.count(FILE_MARKER) == 1
        assert check(data)[1] is None, check(data)
    finally:
        sim.close()


def test_seed_5008750_clock_jumped_back_does_not_wedge_failure_detection():
    """Membership heals after a clock jumps back: after the jump, a PING's
    ping_sent can be earlier than the pong_received recorded before it, and
    the cron must still send another PING when a new link's first one is
    lost, or the peer stays PFAIL for good. Seed 5008750 replays a clock
    jumping back 1.4 s on n1 after a PONG from n5."""
    outcome = search.run_seed(5008750)
    assert outcome.ok, search.failure_report(outcome)
    assert outcome.stats["clock"] >= 1


@pytest.mark.parametrize("seed",
                         seeds("test_holders_learned_later_survive_a_restart_from_the_aof", 3))
def test_holders_learned_later_survive_a_restart_from_the_aof(seed):
    """Holders a replica learns from a re-sent REPLJOB reach its AOF too, so
    that after every node is killed and restarted from its AOF, an ACK there
    reaches every holder and no copy stays behind to be delivered again.
    Staged: a REPLICATE 3 job's first REPLJOBs go to replicas a and b; b's
    is lost, so the origin re-sends REPLJOB to a wider list (a, b, c) and c
    confirms. Then every node is killed; the origin (no AOF) comes back
    without the job, a and c from their AOFs. An ACKJOB on a must reach c."""
    sim = Sim(4, seed, aof=[1, 2, 3])
    try:
        sim.join()
        sim.run_for(500)
        ids = {sn.node_id: sn.index for sn in sim.nodes}
        first_targets: list[int] = []

        def lose_second_replica(conn, to_dst, msg):
            if msg.get("type") != "REPLJOB":
                return False
            target = ids[(conn.dst if to_dst else conn.src).node_id]
            if len(first_targets) < 2 and target not in first_targets:
                first_targets.append(target)
            return len(first_targets) == 2 and target == first_targets[1]
        sim.net.filters.append(lose_second_replica)
        job_id = add_ok(sim, 0, "q", "widened", 5000, "REPLICATE", 3, "RETRY", 2)
        sim.net.filters.remove(lose_second_replica)
        a, b = first_targets
        c = ({1, 2, 3} - {a, b}).pop()
        assert set(states(sim, job_id)) == {0, a, c}, states(sim, job_id)
        # a learns of c from the re-sent REPLJOB (in memory), which may land
        # after c's GOTJOB completed the ADDJOB.
        everyone = {sn.node_id for sn in sim.nodes}
        assert sim.run_until(lambda: set(sim.node(a).state.jobs[job_id].delivered) == everyone,
                             1000, step_ms=1), sim.node(a).jobs[job_id].delivered

        for i in range(4):
            sim.crash(i)
        for i in range(4):
            sim.restart(i)
        assert set(states(sim, job_id)) == {a, c}, states(sim, job_id)
        assert sim.run_until(sim.is_full_mesh, 10_000), sim.describe_nodes()

        # a's copy, loaded from its AOF, still lists c: its ACK reaches c's copy
        # (left behind, c would queue it again and deliver an acked job).
        listed = sorted("n%d" % ids[n] for n in sim.node(a).state.jobs[job_id].delivered)
        assert sim.call(a, "ACKJOB", job_id) == 1
        assert sim.run_until(lambda: states(sim, job_id) == {}, 5000), (
            "copies left after the ACK on n%d, whose copy listed %s: %s"
            % (a, listed, states(sim, job_id)))
        check_cluster(sim)
    finally:
        sim.close()
