"""NACK ... REASON on a real 3-node cluster (docs/commands.md "Why a job
failed"): the replicas' SHOW shows the reason the NACKing node was given,
a replica restarted from its AOF still does, and the dead-letter move of
the last failure carries the last reason to every copy."""

from __future__ import annotations

import pytest

from tests.support.process import wait_until

pytestmark = pytest.mark.cluster


def _fields(cluster, i: int, job_id: bytes) -> dict:
    reply = cluster.call(i, "SHOW", job_id)
    return dict(zip(reply[0::2], reply[1::2]))


def _reason(cluster, i: int, job_id: bytes) -> bytes | None:
    return _fields(cluster, i, job_id).get(b"nack-reason")


def _fail(cluster, job_id: bytes, reason: bytes, queue: bytes = b"q") -> None:
    assert cluster.call(0, "GETJOB", "TIMEOUT", 10000, "FROM", queue) == [[queue, job_id,
                                                                           b"body"]]
    assert cluster.call(0, "NACK", job_id, "REASON", reason) == 1


def test_replicas_show_the_reason(cluster_factory):
    cluster = cluster_factory(3, appendonly=True)
    job_id = cluster.call(0, "ADDJOB", "q", "body", 5000, "REPLICATE", 3, "RETRY", 60,
                          "MAXDELIVER", 2)
    first = b"ValueError: row 7\r\n\x00"
    _fail(cluster, job_id, first)
    wait_until(lambda: [_reason(cluster, i, job_id) for i in range(3)] == [first] * 3, 10,
               interval=0.05, message="every copy's SHOW shows the reason")
    cluster.kill(2)
    cluster.restart(2)
    cluster.wait_joined(20)
    cluster.wait_linked(20)  # the move below reaches a copy only over a link
    assert _reason(cluster, 2, job_id) == first
    # The second failure moves the job: every copy follows, with the last reason.
    last = b"TimeoutError: upstream"
    _fail(cluster, job_id, last)

    def moved_with_reason() -> bool:
        shown = [_fields(cluster, i, job_id) for i in range(3)]
        return all((f[b"queue"], f.get(b"nack-reason")) == (b"q:dead", last) for f in shown)
    wait_until(moved_with_reason, 10, interval=0.05,
               message="the move and its reason reach every copy")
