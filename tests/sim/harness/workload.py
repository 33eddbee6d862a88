"""A random job workload with a nemesis, and the ledger that judges it.

Producers ADDJOB with random options at random nodes, consumers GETJOB
and ACKJOB / FASTACK / NACK / WORKING (or forget the job, like a crashed
worker), while the nemesis partitions the network, crashes and restarts
nodes and changes the loss / duplication / reordering rates. Then
everything heals, a drainer acknowledges whatever is still delivered,
and the ledger checks what the cluster promised:

* a job whose synchronous ADDJOB with REPLICATE N >= 2 succeeded is
  delivered (and here acknowledged) unless every node that held it when
  the producer got its ID lost its jobs since (a crash without AOF, or
  one that took the AOF too; a node with AOF restarts with its jobs);
* once healed, acknowledged jobs disappear from every node, and an
  at-least-once job never comes back after its last copy is gone;
* a RETRY 0 job is delivered at most once;
* a job ID always carries the body and queue it was created with;
* every reply is one well-formed RESP value (checked by the harness).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from disque.cluster.membership import FAIL, LEAVING, PFAIL
from disque.jobs.job import ACTIVE

from tests.sim.harness.checks import check_cluster
from tests.sim.harness.clients import SimFailure, is_error

if TYPE_CHECKING:
    from tests.sim.harness.fuzz import MessageFuzzer

QUEUES = (b"q0", b"q1", b"q2")
RELINK_MS = 5000  # after healing, every bus link is up again well within this
ACK_PROPAGATION_MS = 1000  # SETACK / DELJOB travel time, with margin
# A message is delivered at most the network's highest latency (300 ms)
# after it was sent, or never: a job absent from every node (and AOF) for
# this long is not in flight either.
GONE_AFTER_MS = 1000
WATCH_GONE_EVERY_MS = 250


class JobRecord:
    """What the test knows about one ADDJOB (one unique body)."""

    __slots__ = ("body", "queue", "repl", "retry", "ttl", "async_", "sync", "node", "issued_at",
                 "outcome", "job_id", "reply_at", "holders", "crash_marks", "deliveries",
                 "acked_at", "gone_at", "absent_since", "error")

    def __init__(self, body: bytes, queue: bytes, repl: int, retry: int, async_: bool,
                 node: int, issued_at: float, ttl: int = 86400) -> None:
        self.body = body
        self.queue = queue
        self.repl = repl
        self.retry = retry
        self.ttl = ttl
        self.async_ = async_
        self.sync = repl > 1 and not async_
        self.node = node
        self.issued_at = issued_at
        self.outcome = "pending"
        self.job_id: bytes | None = None
        self.reply_at: float | None = None
        self.holders: tuple[int, ...] = ()
        self.crash_marks: dict[int, int] = {}
        self.deliveries: list[tuple[float, int]] = []
        self.acked_at: list[float] = []
        self.gone_at: float | None = None
        self.absent_since: float | None = None  # watch_gone: first seen held nowhere
        self.error = ""

    def __repr__(self) -> str:
        return ("<Job %s body=%s q=%s repl=%d retry=%d%s from n%d at %.0f: %s holders=%s "
                "deliveries=%s acked=%s>" % (
                    (self.job_id or b"?").decode("latin-1"), self.body.decode(),
                    self.queue.decode(), self.repl, self.retry, " ASYNC" if self.async_ else "",
                    self.node, self.issued_at - 1_700_000_000_000, self.outcome,
                    ["n%d" % h for h in self.holders],
                    [("%.0f" % (t - 1_700_000_000_000), "n%d" % n) for t, n in self.deliveries],
                    ["%.0f" % (t - 1_700_000_000_000) for t in self.acked_at]))


class Ledger:
    """Every job produced, delivered and acknowledged, and the invariants over them."""

    def __init__(self, sim) -> None:
        self.sim = sim
        self.by_body: dict[bytes, JobRecord] = {}
        self.by_id: dict[bytes, JobRecord] = {}
        self.check_resurrection = True
        self.healed_at: float | None = None
        self.orphans = 0  # redeliveries of copies no other node knew about
        # First ACKJOB once links are back: time, and the nodes some other live
        # copy lists as holders (only those can be told about the ACK).
        self.acks_after_heal: dict[bytes, tuple[float, set]] = {}

    def fail(self, text: str) -> None:
        raise SimFailure(text)

    def produced(self, record: JobRecord) -> None:
        self.by_body[record.body] = record

    def added(self, record: JobRecord, request) -> None:
        record.reply_at = self.sim.now
        if request.lost:
            record.outcome = "lost"
            return
        if is_error(request.value):
            record.outcome = "error"
            record.error = str(request.value)
            if not record.error.startswith(("NOREPL", "PAUSED", "LEAVING")):
                self.fail("unexpected ADDJOB error %r for %r" % (record.error, record))
            return
        if not request.raw.startswith(b"+D-"):
            self.fail("ADDJOB replied %r, not a status job ID" % (request.raw,))
        self._bind(record, request.value)
        record.outcome = "ok"
        sim = self.sim
        record.holders = tuple(sn.index for sn in sim.nodes
                               if sn.node is not None and record.job_id in sn.node.state.jobs)
        record.crash_marks = {h: sim.nodes[h].wipes for h in record.holders}

    def _bind(self, record: JobRecord, job_id: bytes) -> None:
        if record.job_id is None:
            record.job_id = job_id
            other = self.by_id.get(job_id)
            if other is not None and other is not record:
                self.fail("two ADDJOBs got the same ID %r: %r and %r" % (job_id, other, record))
            self.by_id[job_id] = record
        elif record.job_id != job_id:
            self.fail("body %r seen with IDs %r and %r" % (record.body, record.job_id, job_id))

    def delivered(self, node: int, entry, withcounters: bool) -> bytes:
        """Record one GETJOB entry; returns the job ID."""
        expected_len = 7 if withcounters else 3
        if not isinstance(entry, list) or len(entry) != expected_len:
            self.fail("malformed GETJOB entry %r" % (entry,))
        queue, job_id, body = entry[:3]
        if withcounters and (entry[3] != b"nacks" or entry[5] != b"additional-deliveries"
                             or not isinstance(entry[4], int) or not isinstance(entry[6], int)):
            self.fail("malformed WITHCOUNTERS entry %r" % (entry,))
        record = self.by_body.get(body)
        if record is None:
            self.fail("n%d delivered unknown job %r body %r" % (node, job_id, body))
        if queue != record.queue:
            self.fail("n%d delivered %r from queue %r instead of %r" % (
                node, job_id, queue, record.queue))
        self._bind(record, job_id)
        now = self.sim.now
        if record.retry == 0 and record.deliveries:
            self.fail("RETRY 0 job delivered twice (n%d): %r" % (node, record))
        if self.check_resurrection and record.gone_at is not None:
            self.fail("n%d delivered %r after every copy was gone: %r" % (node, job_id, record))
        acked = self.acks_after_heal.get(job_id)
        if acked is not None and now > acked[0] + ACK_PROPAGATION_MS:
            if self.sim.nodes[node].node_id in acked[1]:
                self.fail("n%d redelivered %r %.0f ms after an ACKJOB in the healed cluster: %r"
                          % (node, job_id, now - acked[0], record))
            # Else the only nodes that knew this copy existed crashed: nobody can
            # tell it about the ACK (the job was imported by NEEDJOBS and its
            # source lost its list). At-least-once allows this redelivery.
            self.orphans += 1
        record.deliveries.append((now, node))
        return job_id

    def acked(self, job_id: bytes, fast: bool = False) -> None:
        record = self.by_id.get(job_id)
        if record is None:
            self.fail("acked an unknown ID %r" % (job_id,))
        now = self.sim.now
        record.acked_at.append(now)
        # ACKJOB (FASTACK is best effort) at any node, once every link is back,
        # must stop deliveries everywhere (spec: cluster-bus.md §6.6).
        if (not fast and self.healed_at is not None and now >= self.healed_at + RELINK_MS
                and job_id not in self.acks_after_heal):
            knowers = set()
            for sn in self.sim.nodes:
                job = sn.node.state.jobs.get(job_id) if sn.node is not None else None
                if job is not None:
                    knowers.update(n for n in job.delivered if n != sn.node_id)
            self.acks_after_heal[job_id] = (now, knowers)

    def protected(self, record: JobRecord) -> bool:
        """Must not be lost: synchronous REPLICATE >= 2 succeeded, it cannot expire
        during the run, and some node that held it when the producer got its ID
        never lost its jobs since (a crash without AOF, or with its disk)."""
        if record.outcome != "ok" or not record.sync or record.ttl < 3600:
            return False
        nodes = self.sim.nodes
        wiped = sum(1 for h in record.holders if nodes[h].wipes > record.crash_marks[h])
        return wiped < len(record.holders)

    def mark_gone(self) -> None:
        """Note acked jobs that no live node holds any more (nor the AOF of
        a crashed one: a restart brings those back), and none did for
        GONE_AFTER_MS: a YOURJOBS sent before a FASTACK's DELJOB arrived may
        still carry one."""
        self.watch_gone()

    def watch_gone(self) -> None:
        """During the chaos: note acked jobs held nowhere (no node, no AOF of
        a crashed one) for GONE_AFTER_MS, so neither in flight: delivering
        one of those again is a resurrection (a stale AOF, a lost DELJOB)."""
        nodes = self.sim.nodes
        now = self.sim.now
        if any(self.sim.stalled(sn.index) for sn in nodes):
            # Messages wait for a stalled node, and may carry a job held
            # nowhere else: count absences again once it resumed.
            for record in self.by_id.values():
                record.absent_since = None
            return
        holders = [sn.node.state.jobs for sn in nodes if sn.node is not None]
        holders += [sn.aof.live_at_crash for sn in nodes if sn.node is None and sn.aof is not None]
        for record in self.by_id.values():
            if not record.acked_at or record.gone_at is not None:
                continue
            job_id = record.job_id
            if any(job_id in jobs for jobs in holders):
                record.absent_since = None
            elif record.absent_since is None:
                record.absent_since = now
            elif now - record.absent_since >= GONE_AFTER_MS:
                record.gone_at = record.absent_since

    def final_check(self) -> None:
        lost = [r for r in self.by_body.values() if self.protected(r) and not r.acked_at]
        if lost:
            lines = ["%r holders now %s" % (r, self.sim.holders(r.job_id)) for r in lost[:10]]
            self.fail("%d protected jobs were lost:\n  %s" % (len(lost), "\n  ".join(lines)))


class Workload:
    """Producers, consumers, nemesis, then heal and drain."""

    def __init__(self, sim, rng: random.Random, *, producers: int = 3, consumers: int = 3,
                 max_down: int = 1, faults: bool = True, crash: bool = True,
                 partitions: bool = True, reorder: bool = False,
                 noise: "MessageFuzzer | None" = None, admin: bool = True,
                 clocks: bool = True, disk_loss: float = 0.0,
                 mass_crash: bool = False, watch_gone: bool = False,
                 stalls: bool = False) -> None:
        self.sim = sim
        self.rng = rng
        self.ledger = Ledger(sim)
        self.ledger.check_resurrection = not reorder
        self.size = len(sim.nodes)
        self.producers = producers
        self.consumers = consumers
        self.max_down = max_down
        self.faults = faults
        self.crash_enabled = crash
        self.partitions = partitions
        self.reorder = reorder
        self.noise = noise  # a MessageFuzzer: inject messages every node must ignore
        self.admin = admin  # the nemesis also pauses queues and makes nodes leave
        self.clocks = clocks  # the nemesis also makes node clocks jump
        self.disk_loss = disk_loss  # chance that a crash takes a node's AOF too
        # The nemesis may also kill several nodes with an AOF at once (beyond
        # max_down: they keep their jobs) and restart each a moment later.
        self.mass_crash = mass_crash
        self.watch_gone = watch_gone  # check resurrections during the chaos too
        self.stalls = stalls  # the nemesis also freezes node processes (SIGSTOP)
        self.phase = "chaos"
        self.pending_adds: set = set()
        self.counter = 0
        self.stats = {"addjob": 0, "getjob": 0, "ackjob": 0, "fastack": 0, "nack": 0,
                      "working": 0, "enqueue": 0, "dequeue": 0, "crash": 0, "partition": 0,
                      "pause": 0, "leaving": 0, "reads": 0, "disk_lost": 0, "restart": 0,
                      "clock": 0, "faults": 0, "mass_crash": 0, "stall": 0}

    # ------------------------------------------------------------ running

    def run(self, chaos_ms: float, settle_ms: float = 300_000, tail_ms: float = 12_000) -> None:
        sim = self.sim
        for p in range(self.producers):
            sim.after(self.rng.random() * 200, self._produce, p)
        for c in range(self.consumers):
            sim.after(self.rng.random() * 200, self._consume, c)
        sim.after(self.rng.random() * 2000, self._nemesis)
        sim.after(2000, self._check_states)
        if self.watch_gone and self.ledger.check_resurrection:
            sim.after(WATCH_GONE_EVERY_MS, self._watch_gone)
        if self.noise is not None:
            sim.after(0, self._noise)
        sim.run_for(chaos_ms)
        self.heal()
        converged = sim.run_until(self._converged, settle_ms, step_ms=1000)
        if not converged:
            self._fail_not_converged(settle_ms)
        self.phase = "tail"
        sim.run_for(tail_ms)
        if not self._converged():
            self._fail_not_converged(tail_ms)
        check_cluster(sim)
        self.ledger.final_check()
        # Membership healed too: everyone linked to everyone, no failure flags left.
        if not sim.is_full_mesh():
            raise SimFailure("membership did not heal:\n%s" % sim.describe_nodes())
        for sn in sim.nodes:
            for entry in sn.node.state.membership.nodes.values():
                if entry.flags & (PFAIL | FAIL | LEAVING) or entry.priority() != b"1":
                    raise SimFailure("%s still sees flags %d for %s:\n%s" % (
                        sn.name, entry.flags, sim.name_of(entry.id), sim.describe_nodes()))

    def heal(self) -> None:
        sim = self.sim
        self.phase = "heal"
        self.ledger.healed_at = sim.now
        sim.net.heal()
        sim.net.params.calm()
        for sn in sim.nodes:
            if sn.node is None:
                sim.restart(sn.index)
        # Once stalled nodes resume, and again once in-flight PAUSE broadcasts landed.
        resumed = max([sn.paused_until - sim.now for sn in sim.nodes] + [0.0])
        for delay in (0, 200, 1000):
            sim.after(resumed + delay, self._undo_admin)
        sim.after(0, self._drain)

    def _undo_admin(self) -> None:
        """Operator clean-up after the chaos: no paused queue, nobody leaving."""
        for sn in self.sim.nodes:
            if sn.node is None:
                continue
            for queue in QUEUES:
                self.sim.call(sn.index, "PAUSE", queue, "none")
            self.sim.call(sn.index, "CLUSTER", "LEAVING", "no")

    def _converged(self) -> bool:
        self.ledger.mark_gone()
        if self.pending_adds:
            return False
        for sn in self.sim.nodes:
            node = sn.node
            if node is None:
                return False
            for job in node.state.jobs.values():
                # Only RETRY 0 jobs may stay (until their TTL): delivered and never
                # acked, or never queued because their one ENQUEUE was lost.
                if job.retry or job.state != ACTIVE:
                    return False
        return True

    def _fail_not_converged(self, waited: float) -> None:
        sim = self.sim
        lines = []
        for sn in sim.nodes:
            node = sn.node
            for job in list(node.jobs.values())[:8] if node is not None else ():
                record = self.ledger.by_id.get(job.id)
                lines.append("%s holds %r %s retry=%d D=%s C=%s gc_retry=%d awake+%d: %r" % (
                    sn.name, job, job.queue, job.retry, [sim.name_of(n) for n in job.delivered],
                    [sim.name_of(n) for n in job.confirmed or ()], job.gc_retry,
                    job.awakeme - sim.now if job.awakeme else -1, record))
        raise SimFailure("cluster did not converge %d ms after healing (pending ADDJOBs: %d):"
                         "\n  %s\n%s" % (waited, len(self.pending_adds), "\n  ".join(lines[:40]),
                                         sim.describe_nodes()))

    def _watch_gone(self) -> None:
        if self.phase == "chaos":
            self.ledger.watch_gone()
            self.sim.after(WATCH_GONE_EVERY_MS, self._watch_gone)

    def _check_states(self) -> None:
        check_cluster(self.sim)
        if self.phase != "tail":
            self.sim.after(2000, self._check_states)

    def _pick_node(self) -> int:
        return self.rng.randrange(self.size)

    # ---------------------------------------------------------- producers

    def _produce(self, actor: int) -> None:
        if self.phase != "chaos":
            return
        rng = self.rng
        sim = self.sim
        node = self._pick_node()
        self.counter += 1
        body = b"p%d-%d" % (actor, self.counter)
        queue = rng.choice(QUEUES)
        repl = rng.randint(1, min(3, self.size))
        if repl == 1 and rng.random() < 0.4:
            retry = 0
        else:
            retry = rng.choice((1, 1, 2, 3, 5, 10))
        async_ = repl > 1 and rng.random() < 0.2
        timeout = rng.choice((300, 1000, 2000, 5000))
        argv = ["ADDJOB", queue, body, timeout, "REPLICATE", repl, "RETRY", retry]
        if async_:
            argv.append("ASYNC")
        if rng.random() < 0.1:
            argv += ["DELAY", rng.randint(1, 3)]
        ttl = 86400
        roll = rng.random()
        if roll < 0.1:
            ttl = 3600
        elif roll < 0.2:
            ttl = rng.choice((5, 10, 30))  # expires during the run: not protected
        if ttl != 86400:
            argv += ["TTL", ttl]
        record = JobRecord(body, queue, repl, retry, async_, node, sim.now, ttl)
        self.ledger.produced(record)
        self.stats["addjob"] += 1
        self.pending_adds.add(record)

        def on_reply(request, record=record):
            self.pending_adds.discard(record)
            self.ledger.added(record, request)
            sim.after(rng.uniform(10, 400), self._produce, actor)

        sim.command(node, *argv, on_reply=on_reply)

    # ---------------------------------------------------------- consumers

    def _consume(self, actor: int) -> None:
        if self.phase != "chaos":
            return
        rng = self.rng
        node = self._pick_node()
        argv = ["GETJOB"]
        roll = rng.random()
        if roll < 0.3:
            argv.append("NOHANG")
        elif roll < 0.9:
            argv += ["TIMEOUT", rng.choice((50, 200, 1000, 3000))]
        withcounters = rng.random() < 0.2
        if withcounters:
            argv.append("WITHCOUNTERS")
        if rng.random() < 0.3:
            argv += ["COUNT", rng.randint(2, 4)]
        argv.append("FROM")
        argv += rng.sample(QUEUES, rng.randint(1, 3))
        self.stats["getjob"] += 1

        def on_reply(request):
            self._got(node, request, withcounters)
            if self.phase == "chaos":
                self.sim.after(rng.uniform(5, 300), self._consume, actor)

        self.sim.command(node, *argv, on_reply=on_reply)
        if rng.random() < 0.05:
            self._read(node)

    def _got(self, node: int, request, withcounters: bool) -> None:
        if request.lost or request.value is None:
            return
        if is_error(request.value):
            if str(request.value).startswith("LEAVING"):
                return  # asked a leaving node to block (spec: cluster-bus.md §7)
            self.ledger.fail("GETJOB error %r" % (request,))
        for entry in request.value:
            job_id = self.ledger.delivered(node, entry, withcounters)
            if self.phase == "chaos":
                self.sim.after(self.rng.uniform(1, 2500), self._handle, node, job_id)
            else:
                self._ack(self.rng.choice((node, self._pick_node())), job_id)

    def _handle(self, node: int, job_id: bytes) -> None:
        """What a worker does with a job it got from ``node``."""
        rng = self.rng
        roll = rng.random()
        if self.phase != "chaos":
            roll = 0.0
        if roll < 0.45:
            self._ack(rng.choice((node, self._pick_node())), job_id)
        elif roll < 0.55:
            self._ack(self._pick_node(), job_id, fast=True)
        elif roll < 0.65:
            self.stats["nack"] += 1
            self.sim.command(node, "NACK", job_id, on_reply=self._check_int)
        elif roll < 0.7:
            verb = rng.choice(("ENQUEUE", "DEQUEUE"))
            self.stats[verb.lower()] += 1
            target = node if verb == "ENQUEUE" else self._pick_node()
            self.sim.command(target, verb, job_id, on_reply=self._check_int)
            if rng.random() < 0.5:
                self.sim.after(rng.uniform(100, 3000), self._ack, self._pick_node(), job_id)
        elif roll < 0.77:
            self.stats["working"] += 1

            def after_working(request):
                if not request.lost and is_error(request.value):
                    text = str(request.value)
                    if not text.startswith(("NOJOB", "TOOLATE")):
                        self.ledger.fail("WORKING error %r" % (request,))
                self.sim.after(rng.uniform(100, 2000), self._ack, node, job_id)

            self.sim.command(node, "WORKING", job_id, on_reply=after_working)
        # else: the worker died; the job must come back after its retry time.

    def _ack(self, node: int, job_id: bytes, fast: bool = False) -> None:
        self.stats["fastack" if fast else "ackjob"] += 1

        def on_reply(request):
            self._check_int(request)
            if request.ok:
                self.ledger.acked(job_id, fast)

        self.sim.command(node, "FASTACK" if fast else "ACKJOB", job_id, on_reply=on_reply)

    def _check_int(self, request) -> None:
        if request.done and not request.lost and not isinstance(request.value, int):
            self.ledger.fail("expected an integer reply: %r" % (request,))

    def _read(self, node: int) -> None:
        """Read-only commands: their replies must be well formed whatever the state."""
        rng = self.rng
        self.stats["reads"] += 1
        queue = rng.choice(QUEUES)
        known = list(self.ledger.by_id)
        choice = rng.randrange(6)
        if choice == 0 and known:
            self.sim.command(node, "SHOW", rng.choice(known))
        elif choice == 1:
            self.sim.command(node, "QPEEK", queue, rng.choice((1, -2, 5)))
        elif choice == 2:
            self.sim.command(node, "QSTAT", queue)
        elif choice == 3:
            self.sim.command(node, "JSCAN", "COUNT", 20, "REPLY", "all")
        elif choice == 4:
            self.sim.command(node, "HELLO")
        else:
            self.sim.command(node, "INFO")

    # -------------------------------------------------------------- drain

    def _drain(self) -> None:
        if self.phase == "chaos":
            return
        sim = self.sim
        for sn in sim.nodes:
            if sn.node is None:
                continue

            def on_reply(request, i=sn.index):
                self._got(i, request, False)

            sim.command(sn.index, "GETJOB", "NOHANG", "COUNT", 100, "FROM", *QUEUES,
                        on_reply=on_reply)
        sim.after(300, self._drain)

    def _restart_after_mass_crash(self, i: int) -> None:
        if self.phase == "chaos":
            self.sim.restart(i)
            self.stats["restart"] += 1

    def _noise(self) -> None:
        if self.phase == "tail":
            return
        self.noise.inject(self._pick_node(), noise=True)
        self.sim.after(self.rng.uniform(1, 100), self._noise)

    # ------------------------------------------------------------- nemesis

    def _nemesis(self) -> None:
        if self.phase != "chaos":
            return
        sim = self.sim
        rng = self.rng
        actions = ["heal"]
        down = [sn.index for sn in sim.nodes if sn.node is None]
        up = [sn.index for sn in sim.nodes if sn.node is not None]
        if self.partitions:
            actions += ["partition", "partition", "isolate"]
        if self.crash_enabled and len(down) < self.max_down and len(up) > 1:
            actions += ["crash"]
        if down:
            actions += ["restart", "restart"]
        if self.faults:
            actions += ["faults"]
        # Admin commands need an answer now: not from a stalled node.
        responsive = [i for i in up if not sim.stalled(i)]
        if self.admin and responsive:  # (every node can be down after a mass crash)
            actions += ["pause", "leaving"]
        if self.stalls and responsive:
            actions += ["stall"]
        if self.clocks and up:
            actions += ["clock"]
        durable = [i for i in up if sim.nodes[i].aof is not None]
        if self.mass_crash and len(durable) >= 2:
            actions += ["mass_crash"]
        action = rng.choice(actions)
        if action == "heal":
            sim.net.heal()
        elif action == "partition":
            order = list(range(self.size))
            rng.shuffle(order)
            cut = rng.randint(1, self.size - 1)
            sim.net.partition([order[:cut], order[cut:]], blackhole=rng.random() < 0.3)
            self.stats["partition"] += 1
        elif action == "isolate":
            victim = rng.randrange(self.size)
            sim.net.partition([[i for i in range(self.size) if i != victim]],
                              blackhole=rng.random() < 0.3)
            self.stats["partition"] += 1
        elif action == "crash":
            victim = rng.choice(up)
            wipe = (self.disk_loss and sim.nodes[victim].aof is not None
                    and rng.random() < self.disk_loss)
            sim.crash(victim, wipe=bool(wipe))
            self.stats["crash"] += 1
            self.stats["disk_lost"] += bool(wipe)
        elif action == "restart":
            sim.restart(rng.choice(down))
            self.stats["restart"] += 1
        elif action == "stall":
            self.stats["stall"] += 1
            sim.stall(rng.choice(responsive), rng.uniform(100, 6000))
        elif action == "mass_crash":
            self.stats["mass_crash"] += 1
            for victim in rng.sample(durable, rng.randint(2, len(durable))):
                sim.crash(victim)
                self.stats["crash"] += 1
                sim.after(rng.uniform(50, 3000), self._restart_after_mass_crash, victim)
        elif action == "pause":
            self.stats["pause"] += 1
            target = rng.choice(responsive)
            state = rng.choice(("in", "out", "all", "none", "none"))
            argv = ["PAUSE", rng.choice(QUEUES), state]
            if rng.random() < 0.5:
                argv.append("BCAST")
            reply = sim.call(target, *argv)
            if reply != (b"none" if state == "none" else state.encode()):
                self.ledger.fail("%r replied %r" % (argv, reply))
        elif action == "leaving":
            self.stats["leaving"] += 1
            target = rng.choice(responsive)
            leaving = sim.node(target).state.membership.leaving
            value = "no" if leaving or rng.random() < 0.3 else "yes"
            if sim.call(target, "CLUSTER", "LEAVING", value) != b"OK":
                self.ledger.fail("CLUSTER LEAVING %s failed" % value)
        elif action == "clock":
            self.stats["clock"] += 1
            target = rng.choice(up)
            jump = rng.uniform(-1500, 1500)
            sim.set_clock_offset(target, sim.nodes[target].clock_offset + jump)
        elif action == "faults":
            self.stats["faults"] += 1
            params = sim.net.params
            params.drop = rng.choice((0.0, 0.0, 0.001, 0.01, 0.05))
            params.dup = rng.choice((0.0, 0.0, 0.01, 0.05))
            params.reorder = rng.choice((0.0, 0.01, 0.05)) if self.reorder else 0.0
            params.connect_fail = rng.choice((0.0, 0.0, 0.1))
            params.latency = (0.1, rng.choice((1.0, 5.0, 5.0, 20.0, 300.0)))
        sim.after(rng.uniform(300, 4000), self._nemesis)
