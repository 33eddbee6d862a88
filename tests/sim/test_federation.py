"""Federation (NEEDJOBS / YOURJOBS) and leaving nodes, in simulation.

spec: cluster-bus.md §6.7 and §7, jobs-and-ids.md §7 (import rate),
commands.md GETJOB (federation side effects), index.md decision 1. Beyond
the spec, a node that cannot serve a NEEDJOBS remembers it for 2.5 s and
pushes jobs queued meanwhile (disque/cluster/federation.py ``interest``).

Every NEEDJOBS / YOURJOBS put on the wire and every one that arrives is
logged with its virtual time (``BusLog``), so backoff schedules are
checked to the millisecond and jobs lost in transit are told apart from
jobs lost by a node.
"""

from __future__ import annotations

import random
from math import ceil
from typing import NamedTuple

import pytest

from tests.sim.harness import NetParams, Sim
from tests.sim.harness.checks import check_cluster
from tests.sim.harness.ops import getjob_ids, job_id_of, states
from tests.sim.harness.seeds import seeds

CRON_MS = 100  # hz 10: blocked consumers ask again on every client cron pass
BCAST_MS, BCAST_MAX_MS = 2000, 30000
ADHOC_MS, ADHOC_MAX_MS = 25, 2000
INTEREST_TTL_MS = 2500
LATENCY = (1.0, 5.0)
LEAVING_ERR = "LEAVING This node is leaving the cluster, please connect to a different one"


class Wire(NamedTuple):
    """One federation message: when, from which node to which, what."""

    time: int
    src: int
    dst: int
    type: str
    queue: bytes
    count: int
    ids: tuple


class BusLog:
    """NEEDJOBS / YOURJOBS sent (at the sender) and arrived (at the receiver)."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.sent: list[Wire] = []
        self.arrived: list[Wire] = []
        self.rate_at_send: dict[int, int] = {}  # index in ``sent`` -> sender's import rate
        transmit, send_unlinked, deliver = sim.net.transmit, sim.net.send_unlinked, sim.deliver

        def on_transmit(conn, to_dst, msg):
            src, dst = (conn.src, conn.dst) if to_dst else (conn.dst, conn.src)
            self._sent(src, dst.index, msg)
            transmit(conn, to_dst, msg)

        def on_send_unlinked(src, node_id, msg):
            # Written on a connection that broke before the sender noticed: it
            # was sent (and the sender acted on it) but never arrives.
            self._sent(src, sim.by_id(node_id).index, msg)
            send_unlinked(src, node_id, msg)

        def on_deliver(sn, link, msg):
            if isinstance(msg, dict) and msg.get("type") in ("NEEDJOBS", "YOURJOBS"):
                sender = sim.by_id(msg.get("sender"))
                self.arrived.append(self._wire(sender.index if sender else -1, sn.index, msg))
            deliver(sn, link, msg)

        sim.net.transmit = on_transmit
        sim.net.send_unlinked = on_send_unlinked
        sim.deliver = on_deliver

    def _sent(self, src, dst: int, msg: dict) -> None:
        if msg.get("type") not in ("NEEDJOBS", "YOURJOBS"):
            return
        wire = self._wire(src.index, dst, msg)
        if wire.type == "NEEDJOBS" and src.node is not None:
            queue = src.node.state.queues.get(wire.queue)
            if queue is not None:
                self.rate_at_send[len(self.sent)] = queue.import_rate(src.node.state.now)
        self.sent.append(wire)

    def _wire(self, src: int, dst: int, msg: dict) -> Wire:
        ids = tuple(payload[0] for payload in msg.get("jobs") or ())
        return Wire(int(self.sim.now), src, dst, msg["type"], msg.get("queue"),
                    msg.get("count", 0), ids)

    def needjobs(self, src: int, since: float = 0, broadcast: bool | None = None) -> list[Wire]:
        """NEEDJOBS sent by ``src``; broadcast ones ask for 1 job, ad hoc ones for >= 5."""
        out = [w for w in self.sent if w.type == "NEEDJOBS" and w.src == src and w.time >= since]
        if broadcast is not None:
            out = [w for w in out if (w.count == 1) == broadcast]
        return out

    def yourjobs(self, src: int | None = None, since: float = 0) -> list[Wire]:
        return [w for w in self.sent if w.type == "YOURJOBS" and w.time >= since
                and (src is None or w.src == src)]

    def in_transit_losses(self) -> set[bytes]:
        """Job IDs put in a YOURJOBS more often than a YOURJOBS brought them,
        not counting YOURJOBS that may still be on their way."""
        landed_by = self.sim.now - LATENCY[1] - 1  # FIFO links: nothing older is in flight
        sent: dict[bytes, int] = {}
        for wire in self.sent:
            if wire.time < landed_by:
                for job_id in wire.ids:
                    sent[job_id] = sent.get(job_id, 0) + 1
        for wire in self.arrived:
            for job_id in wire.ids:
                sent[job_id] = sent.get(job_id, 0) - 1
        return {job_id for job_id, missing in sent.items() if missing > 0}


def ready(size: int, seed: int, **kwargs) -> Sim:
    sim = Sim(size, seed, net=NetParams(latency=LATENCY), **kwargs)
    sim.join()
    sim.run_for(500)
    return sim


def add(sim: Sim, i: int, queue: str, body: str, *options) -> bytes:
    request = sim.command(i, "ADDJOB", queue, body, 5000, *options)
    assert sim.run_until(lambda: request.done, 5000), request
    return job_id_of(request)


def distinct_times(wires: list[Wire]) -> list[int]:
    """One time per sending round (a broadcast is one message per peer)."""
    return sorted({w.time for w in wires})


def gaps(times: list[int]) -> list[int]:
    return [b - a for a, b in zip(times, times[1:])]


def assert_backoff(times: list[int], base: int, cap: int) -> None:
    """The k-th gap (k >= 1) exceeds min(base * 2^k, cap) by at most one cron period."""
    for k, gap in enumerate(gaps(times), 1):
        delay = min(base << k, cap)
        assert delay < gap <= delay + CRON_MS, (k, delay, gaps(times))


def batch(count: int, qlen: int) -> int:
    """How many jobs a NEEDJOBS(count) gets from a queue of ``qlen``."""
    return max(1, min(count if qlen >= 2 * count else qlen // 2, 100))


# ------------------------------------------------------------ backoff schedules

@pytest.mark.parametrize("seed", seeds("test_broadcast_backoff_schedule", 3))
def test_broadcast_backoff_schedule(seed):
    """A consumer waits on a queue nobody has: NEEDJOBS(count 1) goes to every
    other node at once, then after more than 2000 x 2^k ms (k = broadcasts so
    far), capped at 30 s: gaps of 4 s, 8 s, 16 s, 30 s, 30 s (spec §6.7 step 4)."""
    sim = ready(4, seed)
    log = BusLog(sim)
    t0 = int(sim.now)
    consumer = sim.command(0, "GETJOB", "FROM", "q")
    sim.run_for(95_000)
    assert not consumer.done
    sent = log.needjobs(0)
    assert all(w.count == 1 and w.queue == b"q" for w in sent), sent  # no responders: no ad hoc
    times = distinct_times(sent)
    assert times[0] == t0  # the first evaluation broadcasts at once (from GETJOB itself)
    for t in times:  # every round reaches every other node
        assert sorted(w.dst for w in sent if w.time == t) == [1, 2, 3]
    assert len(times) == 6, gaps(times)
    assert_backoff(times, BCAST_MS, BCAST_MAX_MS)
    assert all(gap > BCAST_MAX_MS for gap in gaps(times)[-2:])  # capped, never faster
    # Other nodes have nothing and ask for nothing themselves.
    assert all(not log.needjobs(i) for i in (1, 2, 3))
    assert not log.yourjobs()


@pytest.mark.parametrize("seed", seeds("test_adhoc_backoff_schedule_and_reset", 3))
def test_adhoc_backoff_schedule_and_reset(seed):
    """Once a node supplied jobs, the importer asks it directly: at once when
    the blocked consumer drained the queue (reached zero with an import rate),
    then after more than 25 x 2^k ms, capped at 2 s; received jobs reset the
    backoff; a new responder resets the broadcast backoff; a responder silent
    for 5 s is no longer asked (spec §6.7 step 3-5, YOURJOBS step 4)."""
    sim = ready(3, seed)
    log = BusLog(sim)
    got: list[tuple[int, bytes]] = []

    def consume(request=None):
        if request is not None:
            got.extend((int(sim.now), job_id) for job_id in getjob_ids(request.value))
        sim.command(0, "GETJOB", "FROM", "q", on_reply=consume)

    consume()
    sim.run_for(200)
    first = add(sim, 1, "q", "j1", "REPLICATE", 1, "RETRY", 30)
    assert sim.run_until(lambda: got, 100)
    # The YOURJOBS that brought it (the ad hoc NEEDJOBS it triggered may
    # have arrived at node 1 since: ``got`` is only polled every 10 ms).
    brought = [w for w in log.arrived if w.type == "YOURJOBS"]
    assert [(w.src, w.dst, w.ids) for w in brought] == [(1, 0, (first,))]
    t1 = brought[0].time
    assert got == [(t1, first)]
    sim.run_for(3000)
    adhoc = log.needjobs(0, broadcast=False)
    assert all(w.dst == 1 for w in adhoc), adhoc  # only the responder is asked directly
    times = distinct_times(adhoc)
    assert times[0] == t1  # reached zero while importing: immediately
    assert len(times) >= 6, gaps(times)  # 3 s of 100, 200, 300, 500, 900 ms gaps
    assert_backoff(times, ADHOC_MS, ADHOC_MAX_MS)
    # count = import rate / responders, clamped to [5, 100].
    for index, wire in enumerate(log.sent):
        if wire in adhoc:
            assert wire.count == min(100, max(5, log.rate_at_send[index])), wire
    # A new responder reset the broadcast backoff: the broadcast after the
    # first one came after 2 s, not 4 s.
    bcast = distinct_times(log.needjobs(0, broadcast=True))
    assert BCAST_MS < bcast[1] - bcast[0] <= BCAST_MS + CRON_MS, gaps(bcast)

    # New jobs at the responder: pushed at once (it remembers the last ad hoc
    # request), and the backoff starts again from 25 ms. They land early in a
    # Unix second, so the responder (kept by whole seconds) is still asked when
    # the delay reaches its 2 s cap, 5.2 to 5.9 s later.
    assert sim.run_until(lambda: int(sim.now) % 1000 == 10, 1000, step_ms=1)
    second = add(sim, 1, "q", "j2", "REPLICATE", 1, "RETRY", 30)
    assert sim.run_until(lambda: len(got) == 2, 100, step_ms=1)
    t2 = got[1][0]
    assert got[1][1] == second and t2 % 1000 < 100
    sim.run_for(12_000)
    times = distinct_times(log.needjobs(0, since=t2, broadcast=False))
    assert times[0] == t2
    # Gaps just over 50, 100, 200, 400, 800, 1600 and 2000 (not 3200) ms.
    assert len(times) == 8, gaps(times)
    assert_backoff(times, ADHOC_MS, ADHOC_MAX_MS)
    # The responder is forgotten once its last jobs are more than 5 s old
    # (whole seconds): nothing is asked of it afterwards.
    assert times[-1] // 1000 - t2 // 1000 == 5, gaps(times)
    assert sim.node(0).state.queues[b"q"].responders == {}
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_reached_zero_asks_at_once_only_when_importing", 3))
def test_reached_zero_asks_at_once_only_when_importing(seed):
    """Taking the last job of a queue asks the responders at once, bypassing the
    ad hoc backoff, but only while the queue imports (spec §6.7 step 2, 5)."""
    sim = ready(3, seed)
    log = BusLog(sim)
    # Local jobs only (import rate 0): taking the last one asks nobody.
    add(sim, 0, "local", "a", "REPLICATE", 1)
    assert len(getjob_ids(sim.call(0, "GETJOB", "NOHANG", "FROM", "local"))) == 1
    sim.run_for(1000)
    assert not log.needjobs(0)
    # Imported jobs (import rate > 0): taking the last one asks the responder at
    # once, whatever the backoff says.
    for n in range(20):
        add(sim, 1, "q", "j%d" % n, "REPLICATE", 1, "RETRY", 30)
    consumer = sim.command(0, "GETJOB", "FROM", "q")
    assert sim.run_until(lambda: consumer.done, 100)
    # The ad hoc batch its reached-zero request brought (taken as it lands).
    assert sim.run_until(lambda: sim.call(0, "QLEN", "q") > 0, 100, step_ms=1)
    queued = sim.call(0, "QLEN", "q")
    before = len(log.needjobs(0))
    now = int(sim.now)
    last_adhoc = log.needjobs(0, broadcast=False)[-1].time
    # The batch reset the ad hoc backoff to 25 ms, and less has passed since the
    # last request: only reached-zero may ask now.
    assert sim.node(0).state.queues[b"q"].needjobs_adhoc_attempt == 0
    assert now - last_adhoc <= ADHOC_MS
    taken = sim.call(0, "GETJOB", "NOHANG", "COUNT", queued, "FROM", "q")
    assert len(taken) == queued and sim.call(0, "QLEN", "q") == 0
    asked = log.needjobs(0)[before:]
    assert [(w.time, w.dst, w.count >= 5) for w in asked] == [(now, 1, True)], asked
    # Each request was answered with count jobs, or half of the queue when it
    # holds fewer than twice that (§6.7 receiver step 2).
    sim.run_for(200)
    first_count, second_count = [w.count for w in log.needjobs(0, broadcast=False)]
    sizes = [len(w.ids) for w in log.yourjobs()]
    assert sizes == [1, batch(first_count, 19), batch(second_count, 19 - sizes[1])], sizes
    assert queued == sizes[1] and sim.call(0, "QLEN", "q") == sizes[2]
    assert sim.call(1, "QLEN", "q") == 19 - sizes[1] - sizes[2]
    check_cluster(sim)


# ----------------------------------------------------------------- interest push

@pytest.mark.parametrize("seed", seeds("test_push_to_a_waiting_consumer_within_one_delay", 4))
@pytest.mark.parametrize("retry", [0, 30])
def test_push_to_a_waiting_consumer_within_one_delay(seed, retry):
    """NEEDJOBS reached a node with nothing to give; a job queued there
    afterwards reaches the consumer within one network delay."""
    sim = ready(3, seed)
    log = BusLog(sim)
    consumer = sim.command(0, "GETJOB", "FROM", "q")
    sim.run_for(500)  # the broadcast arrived long ago; the next one is 4 s away
    assert not consumer.done
    start = sim.now
    job_id = add(sim, 2, "q", "pushed", "REPLICATE", 1, "RETRY", retry)
    assert sim.run_until(lambda: consumer.done, 20, step_ms=0.5)
    assert getjob_ids(consumer.value) == [job_id]
    assert consumer.done_at - start <= LATENCY[1] + 1
    assert [(w.src, w.dst, w.ids) for w in log.yourjobs()] == [(2, 0, (job_id,))]
    where = states(sim, job_id)
    if retry == 0:
        assert where == {0: "active"}  # handed over: it exists in one place only
    else:
        assert where == {0: "active", 2: "active"}
        holders = set(sim.node(2).state.jobs[job_id].delivered)
        assert holders == {sim.nodes[0].node_id, sim.nodes[2].node_id}
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_a_partly_served_request_stays_open", 3))
def test_a_partly_served_request_stays_open(seed):
    """What a NEEDJOBS could not get stays asked for: jobs queued at the
    responder afterwards keep going to the requester, up to its count."""
    sim = ready(3, seed)
    log = BusLog(sim)
    consumer = sim.command(0, "GETJOB", "FROM", "q")
    sim.run_for(500)
    first = add(sim, 2, "q", "first", "REPLICATE", 1)
    assert sim.run_until(lambda: consumer.done, 20, step_ms=0.5)
    assert getjob_ids(consumer.value) == [first]
    # The pop emptied node 0's queue while jobs arrive: it asked node 2 for
    # more at once (ad hoc, count >= 5), and node 2 had none to give yet.
    sim.run_for(20)
    asked = [w for w in log.needjobs(0) if w.dst == 2 and w.count >= 5]
    assert asked, log.needjobs(0)
    later = []
    for body in ("second", "third", "fourth"):
        later.append(add(sim, 2, "q", body, "REPLICATE", 1))
        sim.run_for(20)
    assert [w.ids for w in log.yourjobs(2)] == [(first,)] + [(job_id,) for job_id in later]
    # RETRY > 0: node 2 keeps an active copy for the requeue timer (§6.7 step 4).
    assert all(states(sim, job_id) == {0: "queued", 2: "active"} for job_id in later)
    assert sim.call(0, "GETJOB", "NOHANG", "COUNT", 10, "FROM", "q") is not None
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_pushed_only_to_recent_requests", 3))
def test_pushed_only_to_recent_requests(seed):
    """Local consumers come first, and a request is remembered for 2.5 s only."""
    sim = ready(3, seed)
    log = BusLog(sim)
    remote = sim.command(0, "GETJOB", "TIMEOUT", 1500, "FROM", "q")
    sim.run_for(50)
    local = sim.command(2, "GETJOB", "FROM", "q")
    sim.run_for(50)
    job_id = add(sim, 2, "q", "mine", "REPLICATE", 1)
    assert local.done and getjob_ids(local.value) == [job_id]
    assert sim.run_until(lambda: remote.done, 2000) and remote.value is None
    assert not log.yourjobs()
    # The consumer left 1.5 s after its only broadcast; 2.5 s after that
    # broadcast its request is forgotten and new jobs stay where they are.
    sim.run_for(INTEREST_TTL_MS)
    late = add(sim, 1, "q", "late", "REPLICATE", 1)
    sim.run_for(5000)
    assert not log.yourjobs() and states(sim, late) == {1: "queued"}
    assert sim.node(1).state.interest.wants == {} and sim.node(2).state.interest.wants == {}


# ------------------------------------------------------------------ paused queues

@pytest.mark.parametrize("seed", seeds("test_paused_out_queue_never_gives_jobs", 3))
def test_paused_out_queue_never_gives_jobs(seed):
    """A queue paused in output answers no NEEDJOBS and pushes nothing, whatever
    the jobs' retry; unpaused, it gives like any other (spec §6.7 receiver step 1)."""
    sim = ready(3, seed)
    log = BusLog(sim)
    kept = [add(sim, 1, "q", "once", "REPLICATE", 1, "RETRY", 0),
            add(sim, 1, "q", "twice", "REPLICATE", 1, "RETRY", 5)]
    assert sim.call(1, "PAUSE", "q", "out") == b"out"
    consumer = sim.command(0, "GETJOB", "FROM", "q")
    sim.run_for(1000)
    # Node 2 has no queue: it remembers the request; the queue it then pauses
    # in output and fills must not be pushed either.
    assert sim.node(2).state.interest.wants
    assert sim.call(2, "PAUSE", "q", "out") == b"out"
    parked = add(sim, 2, "q", "parked", "REPLICATE", 1, "RETRY", 5)
    sim.run_for(40_000)  # broadcasts at 0, 4, 12 and 28 s
    assert len(distinct_times(log.needjobs(0))) == 4
    assert not consumer.done and not log.yourjobs()
    assert sim.call(1, "QLEN", "q") == 2 and sim.call(2, "QLEN", "q") == 1
    for i in (1, 2):  # nor locally
        assert sim.call(i, "GETJOB", "NOHANG", "FROM", "q") is None
    # Unpaused: the next broadcast (58 s) moves one job, then ad hoc requests the rest.
    assert sim.call(1, "PAUSE", "q", "none") == b"none"
    assert sim.run_until(lambda: consumer.done, 20_000)
    got = getjob_ids(consumer.value)
    assert got[0] in kept and log.yourjobs()[0].src == 1
    assert all(w.src == 1 for w in log.yourjobs())
    assert states(sim, parked) == {2: "queued"}
    check_cluster(sim)


# ----------------------------------------------------------------- leaving nodes

@pytest.mark.parametrize("seed", seeds("test_leaving_node_never_asks_but_still_gives", 3))
def test_leaving_node_never_asks_but_still_gives(seed):
    """A leaving node sends no NEEDJOBS (its waiting consumers are sent away)
    but still answers NEEDJOBS with the jobs it had queued (spec §7)."""
    sim = ready(3, seed)
    log = BusLog(sim)
    once = add(sim, 0, "q", "once", "REPLICATE", 1, "RETRY", 0)
    twice = add(sim, 0, "q", "twice", "REPLICATE", 2, "RETRY", 30)
    blocked = sim.command(0, "GETJOB", "FROM", "elsewhere")
    sim.run_for(200)
    assert log.needjobs(0)  # it was asking for "elsewhere"
    assert sim.call(0, "CLUSTER", "LEAVING", "yes") == b"OK"
    left = int(sim.now)
    assert sim.run_until(lambda: blocked.done, CRON_MS + 1)
    assert str(blocked.value) == LEAVING_ERR
    assert sim.call(0, "GETJOB", "NOHANG", "FROM", "elsewhere", "other") is None
    assert str(sim.call(0, "GETJOB", "TIMEOUT", 100, "FROM", "other")) == LEAVING_ERR
    got = []
    consumer = sim.command(1, "GETJOB", "FROM", "q")
    for _ in range(2):
        assert sim.run_until(lambda: consumer.done, 3000), consumer
        got += getjob_ids(consumer.value)
        consumer = sim.command(1, "GETJOB", "TIMEOUT", 3000, "FROM", "q")
    assert sorted(got) == sorted([once, twice])
    assert states(sim, once) == {1: "active"}
    sim.run_for(10_000)
    assert not log.needjobs(0, since=left)
    assert all(w.src == 0 for w in log.yourjobs())
    check_cluster(sim)


# ------------------------------------------------------------------- import rate

def model_rate(arrivals: list[int], now: int) -> tuple[int, bool]:
    """Import rate by the jobs-and-ids.md §7 windows; also whether a previous
    window exists (the first window's divisor is implementation-specific)."""
    cur_start = cur = prev_start = prev = 0
    for t in arrivals:
        if t - cur_start > 1000:
            prev_start, prev, cur_start, cur = cur_start, cur, t, 0
        cur += 1
    if not cur or now - cur_start > 5000:
        return 0, True
    return ceil((prev + cur) * 1000 / max(50, now - prev_start)), prev_start != 0


@pytest.mark.parametrize("seed", seeds("test_import_rate_and_import_from", 3))
def test_import_rate_and_import_from(seed):
    """QSTAT import-rate follows the 1 s windows of jobs-and-ids.md §7 and drops
    to 0 after 5 s; QSCAN IMPORTRATE filters on it; import-from lists each
    source until its last jobs are more than 5 s old (cluster-bus.md §6.7)."""
    sim = ready(4, seed)
    log = BusLog(sim)
    got = []

    def consume(request=None):
        if request is not None:
            got.extend(getjob_ids(request.value))
        sim.command(0, "GETJOB", "FROM", "q", on_reply=consume)

    consume()
    sim.run_for(100)
    for n in range(12):
        add(sim, 1, "q", "a%d" % n, "REPLICATE", 1)
    sim.run_for(1500)
    for n in range(12):
        add(sim, 2, "q", "b%d" % n, "REPLICATE", 1)
    assert sim.run_until(lambda: len(got) == 24, 3000), len(got)
    imported = [w for w in log.arrived if w.type == "YOURJOBS"]
    arrivals = [w.time for w in imported for _ in w.ids]
    assert len(arrivals) == 24
    # Unix second of each source's last delivery (the responder map's value).
    last_second = {w.src: w.time // 1000 for w in imported}
    assert sorted(last_second) == [1, 2]
    node_ids = {i: sim.nodes[i].node_id for i in range(4)}
    checked = 0
    listed_both = listed_one = False
    for _ in range(70):
        sim.run_for(100)
        now = int(sim.now)
        stats = sim.call(0, "QSTAT", "q")
        fields = dict(zip(stats[0::2], stats[1::2]))
        rate, exact = model_rate(arrivals, now)
        if exact:
            assert fields[b"import-rate"] == rate, (now - arrivals[0], arrivals)
            checked += 1
        if rate:
            assert fields[b"import-rate"] > 0
            assert sim.call(0, "QSCAN", "BUSYLOOP", "IMPORTRATE", rate)[1] == [b"q"]
            assert sim.call(0, "QSCAN", "BUSYLOOP", "IMPORTRATE", rate + 1)[1] == []
        else:
            assert fields[b"import-rate"] == 0
            assert sim.call(0, "QSCAN", "BUSYLOOP", "IMPORTRATE", 1)[1] == []
        # import-from: a source is listed until its last jobs are more than 5 s
        # old (whole seconds), and purged by the next evaluation after that (the
        # blocked consumer makes one every cron pass), independently of the
        # rate, which lasts 5 s after the current window started.
        listed = set(fields[b"import-from"])
        assert listed <= {node_ids[1], node_ids[2]}, listed
        for i, last in last_second.items():
            if now // 1000 - last <= 5:
                assert node_ids[i] in listed, (i, now // 1000 - last)
            elif (now - CRON_MS) // 1000 - last > 5:
                assert node_ids[i] not in listed, (i, now // 1000 - last)
        listed_both |= len(listed) == 2
        listed_one |= len(listed) == 1
    assert checked >= 60 and model_rate(arrivals, int(sim.now))[0] == 0
    assert listed_both and listed_one  # node 1 was forgotten before node 2
    assert dict(zip(*[iter(sim.call(0, "QSTAT", "q"))] * 2))[b"import-from"] == []
    for i in (1, 2, 3):  # sources and bystanders import nothing
        assert sim.call(i, "QSCAN", "BUSYLOOP", "IMPORTRATE", 1)[1] == []


@pytest.mark.parametrize("seed", seeds("test_an_importing_node_gives_nothing", 3))
def test_an_importing_node_gives_nothing(seed):
    """A node importing a queue (import rate > 0) ignores NEEDJOBS for it even
    with jobs queued there: jobs are not passed on from importer to importer
    (§6.7 receiver step 1)."""
    sim = ready(3, seed)
    log = BusLog(sim)
    for n in range(20):
        add(sim, 1, "q", "j%d" % n, "REPLICATE", 1, "RETRY", 30)
    consumer = sim.command(0, "GETJOB", "FROM", "q")
    assert sim.run_until(lambda: consumer.done, 100)
    assert sim.run_until(lambda: sim.call(0, "QLEN", "q") > 0, 100)  # the ad hoc batch
    held = sim.call(0, "QLEN", "q")
    assert sim.node(0).state.queues[b"q"].import_rate(sim.node(0).state.now) > 0
    remote = sim.command(2, "GETJOB", "FROM", "q")
    assert sim.run_until(lambda: remote.done, 100)
    sim.run_for(1000)
    assert sorted(w.dst for w in log.needjobs(2, broadcast=True)) == [0, 1]  # node 0 too
    assert {w.src for w in log.yourjobs()} == {1}
    assert sim.call(0, "QLEN", "q") == held
    check_cluster(sim)


# --------------------------------------------------------------- YOURJOBS receiver

@pytest.mark.parametrize("seed", seeds("test_yourjobs_never_requeues_an_acked_job", 3))
def test_yourjobs_never_requeues_an_acked_job(seed):
    """Node 0 acked its copy but the ACK never reached node 1, which still has
    the job queued and hands it over on NEEDJOBS: node 0 ignores it instead of
    delivering an acknowledged job again (cluster-bus.md §6.7, index.md item 5)."""
    sim = ready(2, seed)
    log = BusLog(sim)
    job_id = add(sim, 1, "q", "done", "REPLICATE", 2, "RETRY", 30)
    assert states(sim, job_id) == {0: "active", 1: "queued"}

    def ack_lost(conn, to_dst, msg):
        src = conn.src if to_dst else conn.dst
        return src.index == 0 and msg.get("type") in ("SETACK", "DELJOB")

    sim.net.filters.append(ack_lost)
    assert sim.call(0, "ACKJOB", job_id) == 1
    consumer = sim.command(0, "GETJOB", "TIMEOUT", 1000, "FROM", "q")
    assert sim.run_until(lambda: consumer.done, 1500) and consumer.value is None
    brought = [(w.src, w.dst, w.ids) for w in log.arrived if w.type == "YOURJOBS"]
    assert brought == [(1, 0, (job_id,))]
    assert states(sim, job_id) == {0: "acked", 1: "active"}
    assert not sim.node(0).state.queues[b"q"].responders  # an ignored job imports nothing
    # Once the ACK gets through, garbage collection removes both copies.
    sim.net.filters.remove(ack_lost)
    assert sim.run_until(lambda: not states(sim, job_id), 20_000), states(sim, job_id)
    check_cluster(sim)


# ------------------------------------------------------------------------ faults

class Consumer:
    """A worker looping on GETJOB at one node, ACKing at-least-once jobs."""

    def __init__(self, sim: Sim, node: int, queue: str, deliveries: list) -> None:
        self.sim = sim
        self.node = node
        self.queue = queue
        self.deliveries = deliveries  # (time, node, job id), shared by all consumers
        self.next()

    def next(self, request=None) -> None:
        sim = self.sim
        if request is not None and request.ok:
            for entry in request.value or ():
                self.deliveries.append((sim.now, self.node, entry[1]))
                if not entry[1].endswith((b"0", b"2", b"4", b"6", b"8", b"a", b"c", b"e")):
                    sim.command(self.node, "ACKJOB", entry[1])  # odd TTL field: retry > 0
        sim.command(self.node, "GETJOB", "TIMEOUT", 1000, "COUNT", 3, "FROM", self.queue,
                    on_reply=self.next)


def chaos(sim: Sim, rng: random.Random, until: float) -> None:
    """Lose messages, and now and then cut the network for a few seconds."""
    size = len(sim.nodes)

    def cut():
        if sim.now >= until:
            sim.net.heal()
            return
        nodes = list(range(size))
        rng.shuffle(nodes)
        split = rng.randint(1, size - 1)
        sim.net.partition([nodes[:split], nodes[split:]], blackhole=rng.random() < 0.5)
        sim.after(rng.uniform(500, 4000), heal)

    def heal():
        sim.net.heal()
        sim.after(rng.uniform(1000, 5000), cut)

    sim.net.params.drop = rng.choice((0.01, 0.03))
    sim.after(rng.uniform(500, 3000), cut)


def produce(sim: Sim, rng: random.Random, nodes: list[int], count: int, span_ms: float,
            options, requests: list) -> None:
    for n in range(count):
        node = rng.choice(nodes)
        opts = options(rng)
        sim.after(rng.uniform(0, span_ms), lambda node=node, n=n, opts=opts: requests.append(
            sim.command(node, "ADDJOB", "fq", "job-%d" % n, 2000, *opts)))


@pytest.mark.parametrize("seed", seeds("test_every_job_reaches_a_remote_consumer_under_faults", 6))
def test_every_job_reaches_a_remote_consumer_under_faults(seed):
    """Jobs produced on four nodes, one consumer on the fifth, lossy network
    and partitions: every job whose ADDJOB succeeded is delivered there."""
    rng = random.Random(seed)
    sim = ready(5, seed)
    deliveries: list = []
    requests: list = []
    Consumer(sim, 0, "fq", deliveries)
    chaos(sim, rng, sim.now + 20_000)
    produce(sim, rng, [1, 2, 3, 4], 60, 20_000,
            lambda r: ("REPLICATE", r.choice((1, 2)), "RETRY", r.choice((2, 3))), requests)
    sim.run_for(22_000)
    sim.net.heal()
    sim.net.params.calm()
    ids = {job_id_of(r) for r in requests if r.ok}
    assert len(ids) >= 40, [r for r in requests if not r.ok]

    def all_delivered():
        return ids <= {job_id for _, _, job_id in deliveries}
    assert sim.run_until(all_delivered, 60_000, step_ms=100), (
        {sim.name_of(sim.nodes[0].node_id)}, [sim.holders(j) for j in ids - {
            job_id for _, _, job_id in deliveries}])
    assert {node for _, node, _ in deliveries} == {0}
    # Every ACK is garbage collected everywhere. GC attempts that failed during
    # the chaos back off (1 s x 2^k, §6.6): the next one may be half a minute away.
    assert sim.run_until(lambda: all(not states(sim, job_id) for job_id in ids), 60_000,
                         step_ms=100), [sim.holders(j) for j in ids if states(sim, j)]
    check_cluster(sim)


@pytest.mark.parametrize("seed", seeds("test_retry0_jobs_move_exactly_once_under_faults", 6))
def test_retry0_jobs_move_exactly_once_under_faults(seed):
    """At-most-once jobs handed around by federation under loss and partitions:
    none is delivered twice, and each is delivered exactly once unless the
    YOURJOBS carrying it was lost on the wire (the hand-off deletes the
    sender's copy, spec §6.7 step 4). Decision 1: every one that arrives is
    queued."""
    rng = random.Random(seed)
    sim = ready(5, seed)
    log = BusLog(sim)
    deliveries: list = []
    requests: list = []
    for node in (0, 1):
        Consumer(sim, node, "fq", deliveries)
    chaos(sim, rng, sim.now + 20_000)
    produce(sim, rng, [1, 2, 3, 4], 80, 20_000, lambda r: ("REPLICATE", 1, "RETRY", 0),
            requests)
    sim.run_for(22_000)
    sim.net.heal()
    sim.net.params.calm()
    ids = {job_id_of(r) for r in requests}
    assert len(ids) == 80  # REPLICATE 1 never needs the network

    def settled():
        lost = log.in_transit_losses()
        done = {job_id for _, _, job_id in deliveries}
        return ids <= done | lost
    assert sim.run_until(settled, 60_000, step_ms=100), [
        sim.holders(j) for j in ids - log.in_transit_losses()
        - {job_id for _, _, job_id in deliveries}]
    counts: dict[bytes, int] = {}
    for _, _, job_id in deliveries:
        counts[job_id] = counts.get(job_id, 0) + 1
    assert all(n == 1 for n in counts.values()), {j: n for j, n in counts.items() if n > 1}
    lost = log.in_transit_losses()
    assert ids - set(counts) <= lost
    moved = {job_id for w in log.arrived if w.type == "YOURJOBS" for job_id in w.ids}
    assert len(moved) >= 20 and moved <= ids
    for job_id in ids:  # one copy at most, where it was delivered
        where = states(sim, job_id)
        assert len(where) <= 1 and set(where.values()) <= {"active"}, where
    sim.run_for(40_000)  # consumers keep asking: nothing comes back
    assert len(deliveries) == len(counts)
    check_cluster(sim)
