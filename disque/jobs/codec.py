"""Job serialisation for the cluster bus and the AOF (spec: jobs-and-ids.md §10).

A serialised job is a list, packed by msgpack at the bus or AOF layer.
On the bus the expire time travels as seconds remaining (+1) so clocks
need not agree; in the AOF it is absolute. Node IDs the receiver does not
know are dropped.
"""

from __future__ import annotations

from disque.jobs.ids import is_valid_job_id
from disque.jobs.job import ACTIVE, DELIVERED, QUEUED, Job

_FIELDS = 12  # id, queue, body, repl, ctime, etime, delay, retry, nacks, adeliv, flags, delivered


class BadJobPayload(ValueError):
    """A serialised job that cannot be decoded."""


def _fields(job: Job, etime: int, flags: int) -> list:
    return [job.id, job.queue, job.body, job.repl, job.ctime, etime, job.delay, job.retry,
            job.nacks, job.adeliv, flags, list(job.delivered)]


def to_bus(job: Job, now_ms: int) -> list:
    """Bus form: relative TTL, DELIVERED cleared."""
    remaining = max(1, job.etime - now_ms // 1000 + 1)
    return _fields(job, remaining, job.flags & ~DELIVERED)


def to_storage(job: Job) -> list:
    """AOF form: absolute etime, local flags and the state."""
    return _fields(job, job.etime, job.flags) + [job.state]


def _decode(payload, known_nodes) -> tuple[Job, int, int]:
    if not isinstance(payload, (list, tuple)) or len(payload) < _FIELDS:
        raise BadJobPayload("not a job")
    (job_id, queue, body, repl, ctime, etime, delay, retry, nacks, adeliv, flags,
     delivered) = payload[:_FIELDS]
    if not (type(job_id) is bytes and is_valid_job_id(job_id) and type(queue) is bytes
            and type(body) is bytes and isinstance(delivered, (list, tuple))):
        raise BadJobPayload("bad job fields")
    for value in (repl, ctime, etime, delay, retry, nacks, adeliv, flags):
        if type(value) is not int or value < 0:
            raise BadJobPayload("bad job numbers")
    if not 1 <= repl <= 65535:
        raise BadJobPayload("bad replication factor")
    job = Job(job_id, queue, body, repl, ctime, 0, delay, retry)
    job.nacks = nacks & 0xFFFF
    job.adeliv = adeliv & 0xFFFF
    job.delivered = tuple(dict.fromkeys(
        n for n in delivered if type(n) is bytes and (known_nodes is None or n in known_nodes)))
    return job, etime, flags


def from_bus(payload, now_ms: int, known_nodes) -> Job:
    """Decode a bus job; the caller sets qtime. Raises BadJobPayload."""
    job, remaining, flags = _decode(payload, known_nodes)
    job.etime = now_ms // 1000 + remaining
    job.flags = flags & ~DELIVERED & 0x7
    job.state = ACTIVE
    return job


def from_storage(payload, known_nodes) -> tuple[Job, bool]:
    """Decode an AOF job; returns (job in state active, was it stored as queued)."""
    job, etime, flags = _decode(payload, known_nodes)
    if len(payload) <= _FIELDS or payload[_FIELDS] not in (ACTIVE, QUEUED):
        raise BadJobPayload("bad stored state")
    job.etime = etime
    job.flags = flags & 0x7
    job.state = ACTIVE
    return job, payload[_FIELDS] == QUEUED
