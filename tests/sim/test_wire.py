"""The simulation over the real adapters: ``Sim(..., wire=True)``.

The nodes' bus traffic goes through ``disque.net.bus`` (frames of
msgpack, partial reads, connect timeouts) and their clients' through
``disque.net.connection`` and the modules it is built on (RESP parsing, the reply batch), over the loopback
transport of ``tests.sim.harness.wire``. Some scenarios of the message
level simulation run here unchanged, with ``Sim`` switched to wire mode;
the others are about what only the wire has: frames cut across reads,
resets, unanswered connects.
"""

from __future__ import annotations

import random
import struct

import pytest

from disque.net.bus import BusConnection
from tests.sim import test_federation, test_membership, test_replication
from tests.sim.harness import NetParams, Sim
from tests.sim.harness.checks import check_cluster
from tests.sim.harness.ops import getjob_ids, job_id_of, states
from tests.sim.harness.seeds import seeds
from tests.sim.harness.wire import WireNetwork, reply_end
from tests.sim.harness.workload import Workload

NODE_TIMEOUT = 3000


def wire_ready(size: int, seed: int, **kwargs) -> Sim:
    sim = Sim(size, seed, wire=True, **kwargs)
    sim.join()
    sim.run_for(500)
    return sim


def check_wire(sim: Sim) -> None:
    """The state invariants, and no error that asyncio would have logged."""
    check_cluster(sim)
    assert isinstance(sim.net, WireNetwork)
    assert sim.net.loop_errors() == []


@pytest.fixture
def wire_mode(monkeypatch):
    """Existing scenario modules build wire simulations (checked afterwards)."""
    built: list[Sim] = []

    def wire_sim(*args, **kwargs) -> Sim:
        sim = Sim(*args, wire=True, **kwargs)
        built.append(sim)
        return sim

    for module in (test_federation, test_membership, test_replication):
        monkeypatch.setattr(module, "Sim", wire_sim)
    yield
    assert built, "the scenario built no simulation"
    for sim in built:
        assert sim.net.stats["bytes"] > 0 and sim.net.loop_errors() == []


# ------------------------------------------------- existing scenarios, on the wire

# The message-level scenarios that do not hook messages in transit
# (``Network.filters``, ``transmit``): on the wire those see bytes.
SCENARIOS = [
    (test_membership, "test_meet_chain_becomes_full_mesh", {"size": 5}),
    (test_membership, "test_full_mesh_despite_lossy_network", {}),
    (test_membership, "test_restarted_node_rejoins_from_its_nodes_conf", {}),
    (test_membership, "test_crash_gives_pfail_then_fail_and_restart_clears_it", {}),
    (test_membership, "test_minority_cannot_mark_fail", {}),
    (test_membership, "test_hello_priorities", {}),
    (test_membership, "test_forget_blacklists_for_a_minute", {}),
    (test_membership, "test_forget_everywhere_removes_a_dead_node", {}),
    (test_membership, "test_leaving_flag_propagates_by_gossip", {}),
    (test_replication, "test_sync_addjob_waits_for_a_crashed_replica_to_restart", {}),
    (test_replication, "test_norepl_timeout_cleans_partial_copies", {}),
    (test_replication, "test_idle_job_stays_queued_on_one_node", {}),
    (test_replication, "test_unacked_job_is_requeued_by_one_node_at_a_time", {}),
    (test_replication, "test_working_postpones_requeue_everywhere", {}),
    (test_replication, "test_ack_removes_every_copy", {}),
    (test_replication, "test_ack_waits_for_a_down_holder", {}),
    (test_replication, "test_dummy_ack_at_a_node_without_a_copy", {}),
    (test_replication, "test_dummy_ack_while_holders_are_partitioned", {}),
    (test_replication, "test_fastack", {"where": "replica"}),
    (test_replication, "test_leaving_node_replicates_externally", {}),
    (test_replication, "test_federation_moves_jobs_to_waiting_consumers", {}),
    (test_replication, "test_ack_reaches_a_node_that_imported_the_job", {"acker": "importer"}),
    (test_replication, "test_ack_reaches_holders_known_to_another_holder_only", {}),
    (test_federation, "test_every_job_reaches_a_remote_consumer_under_faults", {}),
]


@pytest.mark.parametrize("seed", seeds("test_wire_scenario", 2))
@pytest.mark.parametrize("module, name, params", SCENARIOS,
                         ids=[name.removeprefix("test_") for _, name, _ in SCENARIOS])
def test_wire_scenario(wire_mode, module, name, params, seed):
    getattr(module, name)(seed=seed, **params)


# ------------------------------------------------------------------ jobs

@pytest.mark.parametrize("seed", seeds("test_wire_replicated_job_consumed_on_another_node", 5))
def test_wire_replicated_job_consumed_on_another_node(seed):
    """ADDJOB REPLICATE 3 on n0, a GETJOB blocked on n1 served by federation,
    ACKJOB on n2: every step is RESP bytes through ClientConnection and
    frames through the bus."""
    sim = wire_ready(3, seed)
    consumer = sim.command(1, "GETJOB", "TIMEOUT", 5000, "FROM", "q")
    sim.run_for(50)
    assert not consumer.done
    producer = sim.command(0, "ADDJOB", "q", "body", 5000, "REPLICATE", 3, "RETRY", 10)
    assert sim.run_until(lambda: producer.done, 2000), producer
    job_id = job_id_of(producer)
    assert set(states(sim, job_id)) == {0, 1, 2}
    assert sim.run_until(lambda: consumer.done, 2000), consumer
    assert consumer.raw.startswith(b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n" + job_id)
    assert getjob_ids(consumer.value) == [job_id]
    assert sim.call(2, "ACKJOB", job_id) == 1
    assert sim.run_until(lambda: not states(sim, job_id), 3000), sim.holders(job_id)
    for sn in sim.nodes:  # every command came in as bytes and every reply left as bytes
        assert sn.server.net_input_bytes > 0 and sn.server.net_output_bytes > 0
        assert sn.server.output_batch.clients == []
    check_wire(sim)


@pytest.mark.parametrize("seed", seeds("test_wire_partition_heals", 4))
@pytest.mark.parametrize("blackhole", [False, True])
def test_wire_partition_heals(seed, blackhole):
    """A partition resets the links that cross it (or, as a blackhole, holds
    their bytes and leaves connects unanswered until the bus times them
    out); the majority keeps replicating, and after healing the mesh and
    the minority's jobs come back."""
    sim = wire_ready(5, seed)
    resets = sim.net.stats["resets"]
    sim.net.partition([[0, 1, 2], [3, 4]], blackhole=blackhole)
    minority = sim.command(3, "ADDJOB", "q", "minority", 10_000, "REPLICATE", 2)
    majority = sim.command(0, "ADDJOB", "q", "majority", 10_000, "REPLICATE", 3)
    assert sim.run_until(lambda: majority.done and minority.done, 3000)
    assert set(states(sim, job_id_of(majority))) <= {0, 1, 2}
    assert set(states(sim, job_id_of(minority))) <= {3, 4}
    sim.run_for(3 * NODE_TIMEOUT)
    table = sim.node(0).state.membership.nodes
    assert not table[sim.nodes[3].node_id].is_reachable
    if blackhole:
        assert sim.net.stats["unanswered"] > 0  # reconnects into the blackhole timed out
    else:
        assert sim.net.stats["resets"] > resets
    sim.net.heal()
    sim.wait_full_mesh(max_ms=20_000)
    job_id = job_id_of(minority)
    got = sim.call(0, "GETJOB", "TIMEOUT", 100, "FROM", "q")  # n0 has the majority's job
    assert getjob_ids(got) == [job_id_of(majority)]
    request = sim.command(0, "GETJOB", "TIMEOUT", 5000, "FROM", "q")
    assert sim.run_until(lambda: request.done, 5000)
    assert getjob_ids(request.value) == [job_id]  # fetched from the healed minority
    check_wire(sim)


# ------------------------------------------------------------- the wire itself

class FrameWatch:
    """Reassembles every bus stream as it is read, counting reads that stop
    inside a frame and frames that arrive in more than one read."""

    def __init__(self, net: WireNetwork) -> None:
        self.pending: dict = {}
        self.partial_reads = 0
        self.split_frames = 0
        self.whole_frames = 0
        self.multi_frame_reads = 0
        read = net._read

        def watched(stream, data: bytes) -> None:
            if isinstance(stream.dst.protocol, BusConnection):
                self.saw(stream, data)
            read(stream, data)

        net._read = watched

    def saw(self, stream, data: bytes) -> None:
        buffered, reads = self.pending.get(stream, (b"", 0))
        buffered += data
        reads += 1
        frames = 0
        while len(buffered) >= 4:
            (size,) = struct.unpack_from(">I", buffered)
            if len(buffered) < 4 + size:
                break
            buffered = buffered[4 + size:]
            frames += 1
            if reads > 1:
                self.split_frames += 1
            else:
                self.whole_frames += 1
            reads = 0 if not buffered else 1
        if buffered:
            self.partial_reads += 1
        if frames > 1:
            self.multi_frame_reads += 1
        self.pending[stream] = (buffered, reads)


@pytest.mark.parametrize("seed", seeds("test_wire_frames_cut_across_reads", 4))
def test_wire_frames_cut_across_reads(seed):
    """Every write is cut into 2-4 reads (client requests and replies too):
    the bus reassembles each frame, the cluster forms and jobs replicate,
    are consumed and acknowledged as usual."""
    sim = Sim(4, seed, wire=True, net=NetParams(latency=(0.1, 3.0)))
    sim.net.split = 1.0
    watch = FrameWatch(sim.net)
    sim.join()
    for n in range(20):
        request = sim.command(n % 4, "ADDJOB", "q%d" % (n % 3), b"body-%d" % n * 50, 5000,
                              "REPLICATE", 3)
        assert sim.run_until(lambda: request.done, 2000), request
        job_id = job_id_of(request)
        got = sim.call(n % 4, "GETJOB", "NOHANG", "FROM", "q%d" % (n % 3))
        assert getjob_ids(got) == [job_id]
        other_holder = min(i for i in states(sim, job_id) if i != n % 4)
        assert sim.call(other_holder, "ACKJOB", job_id) == 1
    assert sim.run_until(lambda: all(not sn.node.state.jobs for sn in sim.nodes), 5000)
    assert watch.split_frames > 100 and watch.partial_reads > 100
    assert watch.whole_frames == 0  # every write was cut
    assert sim.net.stats["segments"] >= sim.net.stats["sent"]
    check_wire(sim)


@pytest.mark.parametrize("seed", seeds("test_wire_frames_coalesce_in_one_read", 2))
def test_wire_frames_coalesce_in_one_read(seed):
    """Without cuts, frames written one after the other may be read together
    (a frame that waits behind a slower one arrives with it)."""
    sim = Sim(3, seed, wire=True, net=NetParams(latency=(0.1, 30.0)))
    sim.net.split = 0.0
    watch = FrameWatch(sim.net)
    sim.join()
    for n in range(30):
        sim.command(n % 3, "ADDJOB", "q", "b%d" % n, 5000, "REPLICATE", 3)
        sim.run_for(1)
    sim.run_for(1000)
    assert watch.multi_frame_reads > 0 and watch.split_frames == 0
    check_wire(sim)


def test_reply_end_finds_one_value():
    cases = [b"+OK\r\n", b"-ERR x\r\n", b":12\r\n", b"$-1\r\n", b"*-1\r\n", b"$3\r\nabc\r\n",
             b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n", b"*0\r\n"]
    for raw in cases:
        assert reply_end(raw + b"+next\r\n") == len(raw)
        for cut in range(1, len(raw)):
            assert reply_end(raw[:cut]) == -1, (raw, cut)


@pytest.mark.parametrize("seed", seeds("test_wire_same_seed_same_history", 2))
def test_wire_same_seed_same_history(seed):
    digests = []
    for _ in range(2):
        sim = wire_ready(4, seed, net=NetParams(drop=0.001))
        for n in range(10):
            sim.command(n % 4, "ADDJOB", "q", "b%d" % n, 5000, "REPLICATE", 2)
            sim.run_for(7)
        sim.net.partition([[0, 1], [2, 3]])
        sim.run_for(2000)
        sim.net.heal()
        sim.run_for(4000)
        digests.append((sim.history.hexdigest(), dict(sim.net.stats)))
    assert digests[0] == digests[1]


@pytest.mark.parametrize("seed", seeds("test_wire_random_history", 3))
def test_wire_random_history(seed):
    """Producers, consumers and the nemesis (crashes, partitions, resets from
    drops, clock jumps) over the wire: the job model's promises hold."""
    rng = random.Random(seed)
    size = rng.choice((3, 4, 5))
    sim = Sim(size, seed, wire=True)
    sim.join()
    sim.net.params = NetParams(latency=(0.1, rng.choice((1.0, 5.0))), drop=0.001)
    workload = Workload(sim, random.Random(rng.getrandbits(64)), producers=2, consumers=2,
                        max_down=1)
    workload.run(chaos_ms=rng.randint(8_000, 15_000))
    assert sim.net.loop_errors() == []
