"""Small helpers over client commands and node internals used by scenarios."""

from __future__ import annotations

from disque.jobs.job import STATE_NAMES

from tests.sim.harness.clients import SimFailure, is_error


def show(sim, i: int, job_id: bytes) -> dict | None:
    """SHOW on node ``i`` as a dict (None when the node has no such job)."""
    reply = sim.call(i, "SHOW", job_id)
    if reply is None:
        return None
    if is_error(reply) or len(reply) != 30:
        raise SimFailure("bad SHOW reply %r" % (reply,))
    return {reply[k].decode(): reply[k + 1] for k in range(0, 30, 2)}


def states(sim, job_id: bytes) -> dict[int, str]:
    """State of ``job_id`` on every live node that holds it (no client traffic)."""
    out = {}
    for sn in sim.nodes:
        if sn.node is not None:
            job = sn.node.state.jobs.get(job_id)
            if job is not None:
                out[sn.index] = STATE_NAMES[job.state].decode()
    return out


def queued_on(sim, job_id: bytes) -> list[int]:
    """Nodes where ``job_id`` is currently queued."""
    return [i for i, state in states(sim, job_id).items() if state == "queued"]


def addjob(sim, i: int, queue: str, body: str, timeout: int = 0, *options):
    """Issue ADDJOB on node ``i``; returns the Request (it may block)."""
    return sim.command(i, "ADDJOB", queue, body, timeout, *options)


def job_id_of(request) -> bytes:
    """The ID an ADDJOB request succeeded with."""
    if not request.done or request.lost or is_error(request.value):
        raise SimFailure("ADDJOB did not succeed: %r" % (request,))
    if not request.raw.startswith(b"+D-"):
        raise SimFailure("ADDJOB reply is not a status job ID: %r" % (request.raw,))
    return request.value


def getjob_ids(value) -> list[bytes]:
    """Job IDs in a GETJOB reply (empty for the null reply)."""
    if value is None:
        return []
    return [entry[1] for entry in value]
