"""Random command sequences against one Node, with time moving and (in one
variant) a fake peer: nothing may escape ``node.call``, every reply must be
one well-formed RESP value, and the node's bookkeeping must stay consistent
after every step."""

from __future__ import annotations

import random

import hiredis
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from disque.context.clients import Block, ClientState
from disque.cluster import messages as m
from disque.cluster.membership import FAIL, PFAIL
from disque.state.command import unique_commands
from disque.state.eviction import is_evictable
from disque.jobs.codec import to_bus
from disque.jobs.ids import is_at_most_once_id, is_valid_job_id
from disque.jobs.job import ACKED, ACTIVE, QUEUED, WAIT_REPL, Job
from disque.jobs.timers import NEVER
from disque.queues.skiplist import _before
from tests.unit.helpers import PEER_ID, START_MS, add_peer, deliver, expected_memory, make_node

NAMES = sorted({c.name for c in unique_commands(make_node().state.commands)} | {"quit", "nosuch"})
QUEUES = [b"q", b"a", b"b", b"", b"Q", b"q\r\n"]
WORDS = [
    b"REPLICATE", b"DELAY", b"RETRY", b"TTL", b"MAXLEN", b"ASYNC", b"NOHANG", b"TIMEOUT",
    b"COUNT", b"WITHCOUNTERS", b"FROM", b"BUSYLOOP", b"MINLEN", b"IMPORTRATE", b"QUEUE",
    b"STATE", b"REPLY", b"in", b"out", b"all", b"none", b"state", b"bcast", b"ALL", b"ID",
    b"queued", b"active", b"acked", b"wait-repl", b"GET", b"SET", b"LEN", b"RESET", b"INFO",
    b"LIST", b"KILL", b"GETNAME", b"SETNAME", b"FLUSHALL", b"ERROR", b"LATEST", b"HISTORY",
    b"DOCTOR", b"GRAPH", b"MYID", b"NODES", b"LEAVING", b"yes", b"no", b"jobs", b"default",
]
NUMBERS = [b"0", b"1", b"2", b"3", b"5", b"10", b"100", b"-1", b"", b"+1", b"1.5", b"x",
           b"65536", b"9223372036854775807", b"-9223372036854775808", b"99999999999999999999"]
WELL_FORMED_UNKNOWN = [b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAB-0001",
                       b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAC-0002",
                       b"D-ffffffff-////////////////////////-ffff"]
SAFE_CONFIG = [(b"maxmemory-policy", b"noeviction"), (b"maxmemory-policy", b"acks"),
               (b"hz", b"50"), (b"slowlog-max-len", b"3"), (b"cluster-node-timeout", b"x"),
               (b"nosuch", b"1"), (b"maxmemory", b"-1")]
NO_REPLY = {(b"CLIENT", b"REPLY", b"OFF"), (b"CLIENT", b"REPLY", b"SKIP")}


class Fuzzer:
    """Drives one node: commands, time, disconnections, peer messages; checks
    invariants. Used by the hypothesis machine and by the seeded long runs."""

    def __init__(self, rng: random.Random, with_peer: bool) -> None:
        self.rng = rng
        self.node = make_node(seed=rng.randrange(1 << 30))
        self.with_peer = with_peer
        if with_peer:
            add_peer(self.node)
        self.clients = [ClientState(i, "127.0.0.1:%d" % (40000 + i)) for i in range(4)]
        self.next_client_id = 10
        self.ids: list[bytes] = []
        self.steps = 0

    # ------------------------------------------------------------ arguments

    def job_id(self) -> bytes:
        rng = self.rng
        roll = rng.random()
        if self.node.state.jobs and roll < 0.2:
            # Includes jobs whose ID no reply showed yet (waiting producers).
            return rng.choice(list(self.node.state.jobs))
        if self.ids and roll < 0.7:
            return rng.choice(self.ids[-30:])
        if roll < 0.85:
            return rng.choice(WELL_FORMED_UNKNOWN)
        return rng.choice([b"badid", b"", b"D-" + b"x" * 38, b"D-00000000-AAAA"])

    def arg(self) -> bytes:
        rng = self.rng
        kind = rng.randrange(6)
        if kind == 0:
            return rng.choice(QUEUES)
        if kind == 1:
            return self.job_id()
        if kind == 2:
            return rng.choice(WORDS) if rng.random() < 0.8 else rng.choice(WORDS).lower()
        if kind == 3:
            return rng.choice(NUMBERS)
        if kind == 4:
            return rng.randbytes(rng.randrange(6))
        return str(rng.randrange(-5, 400)).encode()

    def addjob_argv(self) -> list[bytes]:
        rng = self.rng
        argv = [b"ADDJOB", rng.choice(QUEUES[:3]), rng.randbytes(rng.randrange(50)),
                rng.choice([b"0", b"0", b"50", b"1000"])]
        for _ in range(rng.randrange(4)):
            option = rng.choice([b"REPLICATE", b"DELAY", b"RETRY", b"TTL", b"MAXLEN", b"ASYNC"])
            argv.append(option)
            if option == b"ASYNC":
                continue
            if option == b"REPLICATE":
                argv.append(rng.choice([b"1", b"1", b"2", b"3"]))
            elif option == b"TTL":
                argv.append(rng.choice([b"3", b"10", b"60", b"500"]))
            else:
                argv.append(str(rng.randrange(0, 5)).encode())
        return argv

    def structured_argv(self) -> list[bytes]:
        rng = self.rng
        choice = rng.randrange(12)
        if choice < 3:
            return self.addjob_argv()
        if choice == 3:
            argv = [b"GETJOB"]
            if rng.random() < 0.6:
                argv.append(b"NOHANG")
            else:
                argv += [b"TIMEOUT", rng.choice([b"0", b"10", b"200", b"5000"])]
            if rng.random() < 0.4:
                argv += [b"COUNT", rng.choice([b"1", b"3", b"10"])]
            if rng.random() < 0.3:
                argv.append(b"WITHCOUNTERS")
            return argv + [b"FROM"] + rng.sample(QUEUES[:3], rng.randrange(1, 4))
        if choice < 9:
            name = rng.choice([b"ACKJOB", b"FASTACK", b"DELJOB", b"NACK", b"ENQUEUE", b"DEQUEUE",
                               b"WORKING", b"SHOW"])
            count = 1 if name in (b"WORKING", b"SHOW") else rng.randrange(0, 4)
            return [name] + [self.job_id() for _ in range(count)]
        if choice == 9:
            options = [b"in", b"out", b"all", b"none", b"none", b"none", b"state", b"bcast"]
            return [b"PAUSE", rng.choice(QUEUES[:3])] + rng.sample(options, rng.randrange(1, 3))
        if choice == 10:
            name = rng.choice([b"QSCAN", b"JSCAN", b"QPEEK", b"QSTAT", b"QLEN"])
            if name == b"QPEEK":
                return [name, rng.choice(QUEUES[:3]), rng.choice([b"3", b"-2", b"0"])]
            if name in (b"QSTAT", b"QLEN"):
                return [name, rng.choice(QUEUES)]
            return [name] + [self.arg() for _ in range(rng.randrange(4))] + [b"BUSYLOOP"]
        key, value = rng.choice(SAFE_CONFIG)
        return [b"CONFIG", b"SET", key, value]

    def random_argv(self) -> list[bytes]:
        rng = self.rng
        name = rng.choice(NAMES).encode()
        if rng.random() < 0.5:
            name = name.upper()
        argv = [name] + [self.arg() for _ in range(rng.randrange(5))]
        upper = name.upper()
        if upper == b"CONFIG" and len(argv) > 1 and argv[1].upper() == b"SET":
            argv = [b"CONFIG", b"GET", b"*"]  # CONFIG SET dir would chdir the test process
        if upper == b"CLUSTER" and len(argv) > 1 and argv[1].upper() == b"MEET":
            argv = argv[:2]
        return argv

    # ---------------------------------------------------------------- steps

    def command(self, argv: list[bytes] | None = None) -> None:
        rng = self.rng
        ready = [c for c in self.clients if c.blocked is None]
        if not ready:
            self.time(rng.choice([100, 1000, 6000]))
            return
        client = rng.choice(ready)
        if argv is None:
            argv = self.structured_argv() if rng.random() < 0.6 else self.random_argv()
        node = self.node
        before = len(client.sent)
        reply = node.call(client, argv)
        if reply is None:
            assert client.blocked is not None, argv
        elif reply == b"":
            upper = tuple(a.upper() for a in argv)
            assert upper in NO_REPLY or upper[0] == b"SHUTDOWN", argv
        else:
            value = check_resp(reply, argv)
            self.learn(value)
        for raw in client.sent[before:]:
            self.learn(check_resp(raw, argv))
        if client.close_after_reply:
            self.disconnect(client)
        self.steps += 1

    def learn(self, value) -> None:
        """Remember job IDs seen in replies."""
        if isinstance(value, bytes):
            if len(value) == 40 and value.startswith(b"D-"):
                self.ids.append(value)
        elif isinstance(value, list):
            for item in value:
                self.learn(item)

    def time(self, ms: int) -> None:
        node = self.node
        node.state.clock.advance(ms)
        if self.rng.random() < 0.5:
            node.cron()
        node.run_timers()
        now = node.state.clock()
        for job in node.state.jobs.values():
            assert job.awakeme > now, "timer still due after run_timers: %r" % job
        for client in self.clients:
            for raw in client.sent:
                check_resp(raw, [b"<timer>"])
            client.sent.clear()

    def disconnect(self, client: ClientState | None = None) -> None:
        if client is None:
            client = self.rng.choice(self.clients)
        self.node.client_gone(client)
        self.clients.remove(client)
        self.clients.append(ClientState(self.next_client_id))
        self.next_client_id += 1

    def memory(self) -> None:
        node = self.node
        node.state.config.maxmemory = self.rng.choice(
            [1, node.state.used_memory + 5000, int(node.state.used_memory * 1.2)] + [1 << 30] * 4)
        node.state.update_memory_limits()

    def peer_message(self) -> None:
        if not self.with_peer:
            return
        rng = self.rng
        job_id = self.job_id()
        kind = rng.choice([m.GOTJOB, m.SETACK, m.GOTACK, m.DELJOB, m.QUEUED, m.WORKING,
                           m.WILLQUEUE, m.ENQUEUE, m.YOURJOBS, m.NEEDJOBS, m.PAUSE, m.REPLJOB])
        msg = {m.TYPE: kind, m.ID: job_id}
        if kind in (m.YOURJOBS, m.REPLJOB):
            payload = self.job_payload(job_id)
            if payload is None:
                return
            msg = {m.TYPE: kind, m.JOB: payload, m.JOBS: [payload],
                   m.MFLAGS: rng.choice([0, m.MFLAG_NOREPLY])}
        elif kind == m.NEEDJOBS:
            msg = {m.TYPE: kind, m.QUEUE: rng.choice(QUEUES[:3]), m.COUNT: rng.randrange(1, 5)}
        elif kind == m.PAUSE:
            msg = {m.TYPE: kind, m.QUEUE: rng.choice(QUEUES[:3]),
                   m.PAUSE_STATE: rng.choice([b"none", b"in", b"out", b"all"])}
        if kind == m.SETACK:
            msg[m.MAY_HAVE] = rng.randrange(3)
        elif kind == m.GOTACK:
            msg[m.KNOWN] = rng.randrange(2)
        elif kind == m.QUEUED:
            msg[m.MFLAGS] = rng.choice([0, m.MFLAG_INCR_NACKS, m.MFLAG_INCR_DELIV])
        elif kind == m.ENQUEUE:
            job = self.node.state.jobs.get(job_id)
            if job is not None and job.state == WAIT_REPL:
                return  # only the origin holds it in wait-repl, and nobody sends it ENQUEUE
            msg[m.DELAY] = rng.randrange(3)
        node = self.node
        node.state.read_clock()
        deliver(node, PEER_ID, msg)
        if node.state.queues.ready:
            node.consumers.serve_ready()

    def job_payload(self, job_id: bytes) -> list | None:
        """A job as another node would serialise it (a copy of a local one,
        or a new job when the ID is unknown here)."""
        if not is_valid_job_id(job_id):
            return None
        rng = self.rng
        job = self.node.state.jobs.get(job_id)
        if job is None or job.queue is None:
            retry = 0 if is_at_most_once_id(job_id) else rng.choice([1, 5, 60])
            job = Job(job_id, rng.choice(QUEUES[:3]), b"remote", rng.choice([1, 2]),
                      (self.node.state.clock() - rng.randrange(10_000)) * 1_000_000,
                      self.node.state.clock() // 1000 + rng.choice([5, 100, 3600]), 0, retry)
            job.delivered = (PEER_ID,)
        return to_bus(job, self.node.state.clock())

    def pump_peer(self) -> None:
        """The peer answers most replication and ACK requests, like a live node."""
        node = self.node
        # Alive: it answers pings (so failure detection leaves it reachable).
        peer = node.state.membership.nodes.get(PEER_ID)
        if peer is not None:
            peer.ping_sent = 0
            peer.pong_received = node.state.clock()
            peer.flags &= ~(PFAIL | FAIL)
            peer.link = True
            node.state.membership.update_reachable()
        outbox = list(node.state.outbox.transport)
        node.state.outbox.transport.clear()
        for dest, msg in outbox:
            assert dest == PEER_ID, (dest, msg)
            kind = msg.get(m.TYPE)
            if self.rng.random() < 0.2:
                continue
            if kind == m.REPLJOB and not msg.get(m.MFLAGS, 0) & m.MFLAG_NOREPLY:
                reply = {m.TYPE: m.GOTJOB, m.ID: msg[m.JOB][0]}
            elif kind == m.SETACK:
                reply = {m.TYPE: m.GOTACK, m.ID: msg[m.ID], m.KNOWN: 1}
            else:
                continue
            node.state.read_clock()
            deliver(node, PEER_ID, reply)
            if node.state.queues.ready:
                node.consumers.serve_ready()
        for client in self.clients:
            for raw in client.sent:
                self.learn(check_resp(raw, [b"<peer>"]))
            client.sent.clear()

    def step(self) -> None:
        """One random action, then (usually) the peer's answers."""
        roll = self.rng.random()
        if roll < 0.75:
            self.command()
        elif roll < 0.9:
            self.time(self.rng.choice([1, 7, 50, 100, 499, 1000, 3000, 60_000, 400_000]))
        elif roll < 0.94:
            self.disconnect()
        elif roll < 0.95:
            self.memory()
        else:
            self.peer_message()
        if self.with_peer and self.rng.random() < 0.8:
            self.pump_peer()

    # ----------------------------------------------------------- invariants

    def check(self) -> None:
        check_node(self.node, self.clients)


def check_resp(raw: bytes, argv) -> object:
    """``raw`` must hold exactly one complete RESP value."""
    reader = hiredis.Reader()
    reader.feed(raw)
    value = reader.gets()
    assert value is not False, (argv, raw)
    assert reader.gets() is False, (argv, raw)
    return value


def check_node(node, clients) -> None:
    jobs = node.state.jobs
    # registered_jobs as INFO reports it (work done after a command, like
    # pushing jobs to other nodes, may change the registry once more).
    for _ in range(5):
        before = len(node.state.jobs)
        info = node.call(ClientState(999), [b"INFO", b"jobs"])
        if len(node.state.jobs) == before:
            break
    jobs = node.state.jobs
    assert info == b"$%d\r\n# Jobs\r\nregistered_jobs:%d\r\n\r\n" % (
        len("# Jobs\r\nregistered_jobs:%d\r\n" % len(jobs)), len(jobs))
    # Queued jobs and skiplists agree, and skiplists are sorted.
    in_queues = set()
    for name, queue in node.state.queues.items():
        assert queue.name == name
        items = list(queue.jobs.iter_from_head())
        assert len(items) == len(queue.jobs)
        assert list(reversed(list(queue.jobs.iter_from_tail()))) == items
        for prev, item in zip(items, items[1:]):
            assert _before(prev, item), (prev, item)
        for job in items:
            assert job.state == QUEUED and job.queue == name and jobs.get(job.id) is job, job
            in_queues.add(id(job))
        if queue.blocked is not None:
            assert queue.blocked, "empty waiter dict left behind"
            for client in queue.blocked:
                assert client.blocked is not None and client.blocked.kind == Block.GETJOB
                assert queue in client.blocked.queues
    for job_id, job in jobs.items():
        assert job.id == job_id
        assert job.seq >= 0, job
        if job.state == QUEUED:
            assert id(job) in in_queues, "queued job missing from its queue: %r" % job
        # Every registered job has a pending timer, at least its expiry check.
        assert job.awakeme != 0, "job without timer: %r" % job
        assert job.awakeme <= job.etime * 1000 + 1000
        assert job in node.state.timers, "timer wheel lost %r" % job
        if job.state == WAIT_REPL:
            client = node.state.blocked.producers.get(job_id)
            assert client is not None and client.blocked.job_id == job_id, job
        if is_evictable(job):
            assert job in node.state.jobs.evictable, "evictable job not tracked: %r" % job
        if job.state in (ACTIVE, QUEUED) and job.retry:
            assert job.qtime != 0, "at-least-once job that will never be requeued: %r" % job
    assert node.state.timers.earliest <= min((j.awakeme for j in jobs.values()), default=NEVER)
    # Blocked clients.
    for client in node.state.blocked.clients:
        block = client.blocked
        assert block is not None
        if block.kind == Block.GETJOB:
            for queue in block.queues:
                assert node.state.queues.get(queue.name) is queue, "blocked on a dropped queue"
                assert client in queue.blocked
        else:
            assert node.state.blocked.producers.get(block.job_id) is client
            job = jobs.get(block.job_id)
            assert job is not None and job.state == WAIT_REPL
    for client in clients:
        assert (client.blocked is not None) == (client in node.state.blocked.clients)
    for job_id, client in node.state.blocked.producers.items():
        assert client in node.state.blocked.clients
    # Memory accounting.
    assert node.state.used_memory == expected_memory(node), (node.state.used_memory, expected_memory(node))
    # Scan indexes hold exactly the registered jobs and queues.
    cursor, found = 0, []
    while True:
        cursor, items = node.state.jobs.scan.scan(cursor, 1000)
        found.extend(items)
        if cursor == 0:
            break
    assert sorted(id(j) for j in found) == sorted(id(j) for j in jobs.values())
    cursor, found = 0, []
    while True:
        cursor, items = node.state.queues.scan.scan(cursor, 1000)
        found.extend(items)
        if cursor == 0:
            break
    assert sorted(id(q) for q in found) == sorted(id(q) for q in node.state.queues.values())


# -------------------------------------------------------- hypothesis machine

class NodeMachine(RuleBasedStateMachine):
    """Shrinkable version: hypothesis picks the seed, the variant and the steps."""

    @initialize(seed=st.integers(0, 2 ** 32), with_peer=st.booleans())
    def setup(self, seed, with_peer):
        self.fuzzer = Fuzzer(random.Random(seed), with_peer)

    @rule(n=st.integers(1, 5))
    def commands(self, n):
        for _ in range(n):
            self.fuzzer.command()

    @precondition(lambda self: self.fuzzer.with_peer)
    @rule()
    def peer_answers(self):
        self.fuzzer.pump_peer()

    @rule(ms=st.sampled_from([1, 10, 100, 500, 1000, 5000, 60_000, 400_000]))
    def advance_time(self, ms):
        self.fuzzer.time(ms)

    @rule()
    def disconnect(self):
        self.fuzzer.disconnect()

    @rule()
    def memory(self):
        self.fuzzer.memory()

    @precondition(lambda self: self.fuzzer.with_peer)
    @rule()
    def peer_message(self):
        self.fuzzer.peer_message()

    @invariant()
    def consistent(self):
        self.fuzzer.check()


NodeMachine.TestCase.settings = settings(
    max_examples=30, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestNodeMachine = NodeMachine.TestCase


# ------------------------------------------------------- long seeded runs

@pytest.mark.parametrize("seed, with_peer", [(1, False), (2, True), (3, False), (4, True)])
def test_long_random_run(seed, with_peer):
    fuzzer = Fuzzer(random.Random(seed), with_peer)
    for i in range(1500):
        fuzzer.step()
        if i % 5 == 0:
            fuzzer.check()
    fuzzer.check()
    assert fuzzer.steps > 800
    assert fuzzer.node.state.clock.now > START_MS


def test_fuzzer_reaches_interesting_states():
    """The generators are not all rejected: jobs, queues and blocking happen."""
    fuzzer = Fuzzer(random.Random(11), True)
    seen_states = set()
    blocked = 0
    for _ in range(1500):
        fuzzer.step()
        seen_states.update(j.state for j in fuzzer.node.state.jobs.values())
        blocked += bool(fuzzer.node.state.blocked.clients)
    assert len(fuzzer.ids) > 50
    assert seen_states >= {QUEUED, ACKED, WAIT_REPL}
    assert blocked > 0
