"""The original's own replication test, end to end: a node restarted and
killed again at once is still waited for by a synchronous ADDJOB.

spec: commands.md ADDJOB (NOREPL when fewer nodes are reachable than
requested, or when the job expires before it is replicated),
cluster-bus.md §4 (PFAIL after a ping unanswered for node-timeout) and §6.1
(a blocked ADDJOB re-sends REPLJOB to a node that comes back).

The history, with the original test suite's timings (7 nodes,
cluster-node-timeout 3000): node 1 is killed; ``ADDJOB ... REPLICATE 7 TTL
1`` on node 0 waits for it until the job expires (NOREPL); node 1 is
restarted and, as soon as it answers PING, killed again; then ``ADDJOB ...
30000 REPLICATE 7`` on node 0 must wait for it instead of failing at once,
and succeeds once node 1 is restarted 2 s later.

Node 0's ping to node 1's first process is never answered. Node 0 would
flag node 1 PFAIL (unreachable: NOREPL at once) 3 s after that ping unless
the restarted process spoke to it since: a node that starts quickly, opens
its links as it starts, and a failure detector that counts any frame as a
sign of life (docs/cluster.md "Failure detection") keep it reachable.
"""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.cluster import encode_command
from tests.support.process import wait_until

pytestmark = pytest.mark.cluster

SIZE = 7
ORIGIN = 0
VICTIM = 1
RESTART_DELAY_S = 2.0  # the original test's `after 2000`


def read_reply(conn: socket.socket, timeout: float) -> bytes:
    """One line of reply (a status or an error), within ``timeout`` seconds."""
    conn.settimeout(timeout)
    reply = b""
    while not reply.endswith(b"\r\n"):
        chunk = conn.recv(200)
        assert chunk, "connection closed, got %r" % reply
        reply += chunk
    return reply


def test_sync_addjob_waits_for_a_node_restarted_and_killed_again(cluster_factory):
    cluster = cluster_factory(SIZE)
    victim_id = cluster.ids[VICTIM]

    # "Replicating job expires before reaching the replication level".
    cluster.kill(VICTIM)
    reply = cluster.raw(ORIGIN, "ADDJOB", "q", "j", 15000, "REPLICATE", SIZE, "TTL", 1)
    assert reply.startswith(b"-NOREPL"), reply
    restarted_at = time.monotonic()
    cluster.restart(VICTIM)  # returns once it answers PING
    answered_s = time.monotonic() - restarted_at
    cluster.kill(VICTIM)

    # "Sync REPLJOB messages are retried against old nodes".
    with socket.create_connection(("127.0.0.1", cluster.port(ORIGIN)), timeout=30) as pending:
        pending.sendall(encode_command("ADDJOB", "q", "j", 30000, "REPLICATE", SIZE))
        try:
            early = read_reply(pending, RESTART_DELAY_S)
        except socket.timeout:
            early = None  # still waiting, as it must
        assert early is None, (
            "ADDJOB answered %r before node 1 came back (node 1 answered PING %.2f s after "
            "its restart); node 0 saw it as %s" % (
                early, answered_s, sorted(cluster.cluster_nodes(ORIGIN)[victim_id].flags)))
        cluster.restart(VICTIM)
        reply = read_reply(pending, 30)
    assert reply.startswith(b"+D-"), reply
    job_id = reply[1:-2]
    wait_until(lambda: cluster.holders(job_id) == list(range(SIZE)), 5, interval=0.05,
               message="a copy of the job on every node")
