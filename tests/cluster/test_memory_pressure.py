"""Memory pressure in a cluster: external replication above 75 %, no
replicas accepted there, -OOM once eviction cannot get under 95 %, and
eviction of idle queues and safe-to-lose jobs.

spec: jobs-and-ids.md §7 (queue GC) and §8, cluster-bus.md §6.2 step 2,
commands.md §0 step 5 and ADDJOB step 6.
"""

from __future__ import annotations

import pytest

from tests.support.process import wait_until

pytestmark = pytest.mark.cluster

OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
NOREPL_OOM = (b"-NOREPL Not enough reachable nodes for the requested replication level, "
              b"since I'm unable to hold a copy of the message for the following reason: "
              b"I'm out of memory\r\n")
NOREPL_TIMEOUT = (b"-NOREPL Timeout reached before replicating to the requested number of "
                  b"nodes\r\n")
NIL = b"$-1\r\n"
FULL = 0  # the node under memory pressure


def _thresholds(maxmemory: int) -> tuple[int, int]:
    """The 75 % and 95 % thresholds, in the spec's integer arithmetic."""
    return (maxmemory // 100) * 75, (maxmemory // 100) * 95


def _set_usage(cluster, i: int, percent: int) -> int:
    """CONFIG SET maxmemory so that node ``i`` uses about ``percent`` % of it."""
    maxmemory = cluster.used_memory(i) * 100 // percent
    assert cluster.call(i, "CONFIG", "SET", "maxmemory", maxmemory) == b"OK"
    assert cluster.call(i, "CONFIG", "GET", "maxmemory") == [b"maxmemory", b"%d" % maxmemory]
    return maxmemory


def _queued_on(cluster, job_id, among) -> int:
    """The one node of ``among`` where the job ends up queued."""
    found: list[int] = []

    def queued_once() -> bool:
        found[:] = [i for i in among
                    if (cluster.show(i, job_id) or {}).get("state") == "queued"]
        return len(found) == 1
    wait_until(queued_once, 5, interval=0.02, message="%s queued on one node" % job_id)
    return found[0]


def test_above_75_percent_jobs_live_elsewhere_and_replicas_are_refused(cluster_factory):
    cluster = cluster_factory(3)
    others = [1, 2]
    kept = cluster.call(FULL, "ADDJOB", "keepq", "kept", 0, "REPLICATE", 1)
    maxmemory = _set_usage(cluster, FULL, 85)
    warn, evict = _thresholds(maxmemory)
    memory = cluster.info_section(FULL, "memory")
    assert warn < memory["used_memory"] <= evict
    assert memory["used_memory_peak"] >= memory["used_memory"]
    assert memory["used_memory_human"].endswith("K")

    # ADDJOB still succeeds, through external replication: no local copy,
    # the job is queued on one of the nodes that confirmed it.
    for repl in (1, 2):
        job_id = cluster.call(FULL, "ADDJOB", "mq", "r%d" % repl, 0, "REPLICATE", repl)
        assert cluster.raw(FULL, "SHOW", job_id) == NIL
        target = _queued_on(cluster, job_id, others)
        holders = cluster.holders(job_id)
        assert FULL not in holders and len(holders) >= repl
        assert {cluster.ids[i] for i in holders} == \
            cluster.show(target, job_id)["nodes-delivered"]
        assert cluster.call(target, "GETJOB", "NOHANG", "FROM", "mq") == \
            [[b"mq", job_id, b"r%d" % repl]]
        assert cluster.call(target, "ACKJOB", job_id) == 1
    # Counting itself out, it cannot reach three copies with two peers.
    assert cluster.raw(FULL, "ADDJOB", "mq", "r3", 0, "REPLICATE", 3) == NOREPL_OOM
    assert cluster.call(FULL, "QLEN", "mq") == 0

    # REPLJOB is ignored above 75 %: an ASYNC job meant for every node gets
    # no copy there, and a synchronous one needing every node times out.
    async_job = cluster.call(1, "ADDJOB", "rq", "a", 0, "REPLICATE", 3, "ASYNC")
    assert cluster.show(1, async_job)["nodes-delivered"] == set(cluster.ids)
    assert cluster.raw(1, "ADDJOB", "rq", "s", 1000, "REPLICATE", 3) == NOREPL_TIMEOUT
    # The REPLJOBs of both went to FULL on one link before the second timed out.
    assert cluster.raw(FULL, "SHOW", async_job) == NIL
    assert cluster.holders(async_job) == others
    sync_job = cluster.call(1, "ADDJOB", "rq", "s2", 5000, "REPLICATE", 2)
    assert cluster.holders(sync_job) == others
    assert cluster.raw(FULL, "SHOW", sync_job) == NIL
    assert cluster.registered_jobs(FULL) == 1  # only the job it had before
    assert warn < cluster.used_memory(FULL) <= evict

    # At 97 % and above 100 %, nothing is safe to evict (a queued RETRY>0
    # job never is): commands that need memory get -OOM, reads still work.
    for percent in (97, 110):
        _set_usage(cluster, FULL, percent)
        assert cluster.raw(FULL, "ADDJOB", "mq", "x", 0, "REPLICATE", 1) == OOM
        assert cluster.raw(FULL, "ADDJOB", "mq", "x", 0, "REPLICATE", 2, "ASYNC") == OOM
        assert cluster.raw(FULL, "ENQUEUE", kept) == OOM
        assert cluster.raw(FULL, "NACK", kept) == OOM
        assert cluster.raw(FULL, "PING") == b"+PONG\r\n"
        assert cluster.call(FULL, "QLEN", "keepq") == 1
        assert cluster.show(FULL, kept)["state"] == "queued"
        assert cluster.jscan(FULL) == [kept]
        assert cluster.qscan(FULL) == [b"keepq"]
        assert cluster.hello(FULL)[1] == cluster.ids[FULL]
        assert int(cluster.info(FULL)["cluster_reachable_nodes"]) == 2
        assert cluster.registered_jobs(FULL) == 1
    assert cluster.call(FULL, "GETJOB", "FROM", "keepq") == [[b"keepq", kept, b"kept"]]
    assert cluster.call(FULL, "ACKJOB", kept) == 1
    assert cluster.raw(FULL, "SHOW", kept) == NIL

    # Back under 75 %: jobs are kept locally again (in a queue no other node
    # asked for: a NEEDJOBS for mq may still be remembered here).
    assert cluster.call(FULL, "CONFIG", "SET", "maxmemory", "1gb") == b"OK"
    local = cluster.call(FULL, "ADDJOB", "backq", "back", 0, "REPLICATE", 1)
    assert cluster.show(FULL, local)["state"] == "queued"


def test_maxmemory_1_evicts_idle_queues_and_acked_jobs(cluster_factory):
    cluster = cluster_factory(3)
    empty_queues = [b"e%d" % n for n in range(5)]
    for name in empty_queues:  # queues that had a job, now empty
        job_id = cluster.call(FULL, "ADDJOB", name, "x", 0, "REPLICATE", 1)
        assert cluster.call(FULL, "GETJOB", "FROM", name) == [[name, job_id, b"x"]]
        assert cluster.call(FULL, "ACKJOB", job_id) == 1
    assert cluster.call(FULL, "GETJOB", "NOHANG", "FROM", "never") is None  # created empty
    kept = cluster.call(FULL, "ADDJOB", "keepq", "kept", 0, "REPLICATE", 1)
    # An at-most-once job already delivered here is safe to lose too.
    amo = cluster.call(FULL, "ADDJOB", "amoq", "once", 0, "REPLICATE", 1, "RETRY", 0)
    assert cluster.call(FULL, "GETJOB", "FROM", "amoq") == [[b"amoq", amo, b"once"]]

    # Dummy ACKs on FULL for jobs held by a node that cannot answer: they
    # stay until collected, or evicted.
    held = [cluster.call(1, "ADDJOB", "heldq", "h%d" % n, 0, "REPLICATE", 1) for n in range(3)]
    cluster.freeze(1)
    assert cluster.call(FULL, "ACKJOB", *held) == 0
    for job_id in held:
        info = cluster.show(FULL, job_id)
        assert (info["state"], info["body"]) == ("acked", None)

    assert cluster.registered_jobs(FULL) == 2 + len(held)
    assert cluster.qscan(FULL) == sorted(empty_queues + [b"amoq", b"keepq", b"never"])
    before = cluster.used_memory(FULL)
    assert cluster.call(FULL, "CONFIG", "SET", "maxmemory", 1) == b"OK"
    # CONFIG SET ran the eviction: acked and delivered at-most-once jobs are gone.
    for job_id in held + [amo]:
        assert cluster.raw(FULL, "SHOW", job_id) == NIL
    assert cluster.jscan(FULL) == [kept]
    # Idle empty queues go within the 2 s idle limit of the highest level.
    wait_until(lambda: cluster.qscan(FULL) == [b"keepq"], 8, interval=0.1,
               message="idle empty queues evicted")
    assert cluster.call(FULL, "QLEN", "e0") == 0
    assert cluster.qstat(FULL, "e0") is None
    assert cluster.used_memory(FULL) < before
    # What must be kept is kept, and nothing else can be freed: -OOM.
    assert cluster.raw(FULL, "ADDJOB", "keepq", "more", 0, "REPLICATE", 1) == OOM
    assert cluster.show(FULL, kept)["state"] == "queued"
    assert cluster.call(FULL, "GETJOB", "FROM", "keepq") == [[b"keepq", kept, b"kept"]]
