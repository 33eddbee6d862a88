"""CLUSTER LEAVING: propagation, HELLO priority, external replication,
-LEAVING for consumers.

spec: cluster-bus.md §7, commands.md CLUSTER LEAVING / ADDJOB / GETJOB.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.cluster import parse_cluster_nodes, raw_command
from tests.support.process import wait_until

pytestmark = pytest.mark.cluster

LEAVING_ERR = b"-LEAVING This node is leaving the cluster, please connect to a different one\r\n"
NOREPL_LEAVING = (b"-NOREPL Not enough reachable nodes for the requested replication level, "
                  b"since I'm unable to hold a copy of the message for the following reason: "
                  b"I'm leaving the cluster\r\n")
NOREPL = b"-NOREPL Not enough reachable nodes for the requested replication level\r\n"


def test_leaving_node(cluster_factory):
    cluster = cluster_factory(3)
    leaver = 0
    leaver_id = cluster.ids[leaver]
    old_job = cluster.call(leaver, "ADDJOB", "lq", "old", 0, "REPLICATE", 1, "RETRY", 0)
    old_job2 = cluster.call(leaver, "ADDJOB", "lq", "old2", 0, "REPLICATE", 1)
    elsewhere = cluster.call(1, "ADDJOB", "eq", "e", 0, "REPLICATE", 1)  # retry>0: odd ID
    assert cluster.raw(leaver, "CLUSTER", "LEAVING") == b"+no\r\n"
    assert cluster.raw(leaver, "CLUSTER", "LEAVING", "maybe") == \
        b"-ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'\r\n"

    with ThreadPoolExecutor(1) as pool:
        blocked = pool.submit(raw_command, cluster.port(leaver), "GETJOB", "FROM", "emptyq")
        wait_until(lambda: cluster.call(leaver, "QSTAT", "emptyq") is not None, 2,
                   interval=0.02, message="consumer blocked")
        assert cluster.raw(leaver, "CLUSTER", "LEAVING", "yes") == b"+OK\r\n"
        # Blocked consumers are sent away by the next cron pass.
        assert blocked.result(5) == LEAVING_ERR
    assert cluster.raw(leaver, "CLUSTER", "LEAVING") == b"+yes\r\n"
    conf = parse_cluster_nodes((cluster.nodes[leaver].dir / "nodes.conf").read_text())
    assert conf[leaver_id].flags == {"myself", "leaving"}
    assert cluster.hello(leaver)[2][leaver_id].priority == "100"

    def everyone_knows() -> bool:
        return all("leaving" in cluster.flags(i, leaver)
                   and cluster.hello(i)[2][leaver_id].priority == "100" for i in (1, 2))
    wait_until(everyone_knows, 5, interval=0.05, message="leaving flag propagated")
    for i in (1, 2):
        assert cluster.cluster_nodes(i)[leaver_id].flags == {"leaving"}
        # Not a replication target (the reachable set lags by one cron pass, §4).
        cluster.wait_reachable(i, 1, timeout=2)
    assert cluster.raw(1, "ADDJOB", "lq", "x", 0, "REPLICATE", 3) == NOREPL

    # Jobs already queued there are still served; then consumers are sent away.
    assert cluster.call(leaver, "GETJOB", "FROM", "lq") == [[b"lq", old_job, b"old"]]
    assert cluster.call(leaver, "GETJOB", "NOHANG", "FROM", "lq") == [[b"lq", old_job2, b"old2"]]
    assert cluster.call(leaver, "ACKJOB", old_job2) == 1
    assert cluster.raw(leaver, "GETJOB", "TIMEOUT", 100, "FROM", "lq") == LEAVING_ERR
    assert cluster.raw(leaver, "GETJOB", "FROM", "emptyq") == LEAVING_ERR
    assert cluster.raw(leaver, "GETJOB", "NOHANG", "FROM", "emptyq") == b"*-1\r\n"

    # ACKJOB of a job it never had creates no dummy ACK (so no SETACK either).
    registered = cluster.registered_jobs(leaver)
    assert cluster.raw(leaver, "ACKJOB", elsewhere) == b":0\r\n"
    assert cluster.raw(leaver, "SHOW", elsewhere) == b"$-1\r\n"
    assert elsewhere not in cluster.jscan(leaver)
    assert cluster.registered_jobs(leaver) == registered

    # ADDJOB keeps no local copy: external replication to two other nodes.
    assert cluster.raw(leaver, "ADDJOB", "lq", "lv", 0, "REPLICATE", 3) == NOREPL_LEAVING
    job_id = cluster.call(leaver, "ADDJOB", "lq", "lv", 0, "REPLICATE", 2)
    assert cluster.raw(leaver, "SHOW", job_id) == b"$-1\r\n"
    assert cluster.holders(job_id) == [1, 2]
    wait_until(lambda: sum(cluster.call(i, "QLEN", "lq") for i in (1, 2)) == 1, 5,
               interval=0.02, message="queued on exactly one holder")
    for i in (1, 2):
        assert cluster.show(i, job_id)["nodes-delivered"] == {cluster.ids[1], cluster.ids[2]}
    getter = 1 if cluster.call(1, "QLEN", "lq") else 2
    assert cluster.call(getter, "GETJOB", "FROM", "lq") == [[b"lq", job_id, b"lv"]]
    assert cluster.call(getter, "ACKJOB", job_id) == 1
    cluster.wait_holders(job_id, 0, 10)

    # No SETACK reached its holder: the job is still there, queued.
    assert (cluster.show(1, elsewhere) or {}).get("state") == "queued"

    assert cluster.raw(leaver, "CLUSTER", "LEAVING", "no") == b"+OK\r\n"
    cluster.wait_flag(leaver, "leaving", [1, 2], present=False, timeout=5)
    cluster.wait_joined(5)
    assert all(cluster.hello(i)[2][leaver_id].priority == "1" for i in (1, 2))
    assert cluster.call(1, "ADDJOB", "lq", "x", 5000, "REPLICATE", 3).startswith(b"D-")
