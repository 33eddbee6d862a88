"""Job serialisation for the cluster bus and the AOF (spec: jobs-and-ids.md §10).

A serialised job is a list of fields, packed by msgpack on the bus and in
the AOF payloads of earlier versions; ``disque.jobs.record_reader`` hands
the values of its packed payloads to ``from_checked_storage`` directly. On the
bus the expire time travels as seconds remaining (+1) so clocks need not
agree; in the AOF it is absolute. Node IDs the receiver does not know are
dropped.
"""

from __future__ import annotations

import struct
from collections.abc import Container, Sequence
from typing import Any, Final

from disque.config.table import MAX_DELIVERIES
from disque.jobs.job import (ACTIVE, DEFAULT_PRIORITY, DELIVERED, HEADERS_VALID, MAX_PRIORITY,
                             QUEUED, Job, JobExtras, check_headers, dedup_token, extras_of,
                             is_nack_reason, set_extras)

MAX_ETIME: Final = 2**63 - 1  # unix seconds: what the largest ADDJOB TTL reaches
# An AOF LOADJOB payload (docs/aof-format.md) starts with this byte; the
# layout unpacks its fixed part (the byte, state, flags, repl, ctime, etime,
# delay, retry, nacks, additional deliveries, queue length, body length,
# number of nodes delivered, job id), which the queue, the body and the
# 40-byte node IDs follow.
STORED_FORMAT: Final = 1
STORED_LAYOUT: Final = struct.Struct("<BBBHQQQQQQIIH40s")
FIELDS: Final = 12  # id, queue, body, repl, ctime, etime, delay, retry, nacks, adeliv, flags, delivered
# A job with extensions (a priority, or JobExtras) is stored with this byte
# first: the v1 layout, then after the node IDs a msgpack map of
# EXTENSION_KEYS (docs/aof-format.md). On the bus the same map is a 13th field.
STORED_FORMAT_EXTENDED: Final = 2

# The extensions' keys, in bus messages and stored payloads alike.
EXT_PRIORITY: Final = "pri"
EXT_MAXDELIVER: Final = "maxdeliver"
EXT_DEADLETTER: Final = "deadletter"
EXT_ORIGIN: Final = "origin"
EXT_REASON: Final = "reason"
EXT_MOVES: Final = "moves"
EXT_BACKOFF: Final = "backoff"
EXT_MAXRETRY: Final = "maxretry"
EXT_BASE_RETRY: Final = "base-retry"
EXT_DEDUPID: Final = "dedupid"
EXT_HEADERS: Final = "headers"  # an array: name, value, name, value, ...
EXT_NACK_REASON: Final = "nack-reason"  # what the last NACK ... REASON said
_MAX_COUNT: Final = 2**32


class BadJobPayload(ValueError):
    """A serialised job that cannot be decoded."""


def _fields(job: Job, etime: int, flags: int) -> list[object]:
    fields: list[object] = [job.id, job.queue, job.body, job.repl, job.ctime, etime, job.delay,
                            job.retry, job.nacks, job.adeliv, flags, list(job.delivered)]
    if has_extensions(job):
        fields.append(extension_fields(job))
    return fields


def has_extensions(job: Job) -> bool:
    """The job has fields Disque 1.0 did not (a stored form needs them)."""
    return job.ext is not None or job.priority != DEFAULT_PRIORITY


def extension_fields(job: Job) -> dict[str, object]:
    """The map of what a job has beyond Disque 1.0's fields (defaults left out)."""
    fields: dict[str, object] = {}
    if job.priority != DEFAULT_PRIORITY:
        fields[EXT_PRIORITY] = job.priority
    if job.ext is None:
        return fields
    ext = extras_of(job)
    if ext is None:  # a DEDUPID token alone: the defaults' fields
        fields[EXT_MAXDELIVER] = 0
        fields[EXT_DEDUPID] = dedup_token(job)
    else:
        fields[EXT_MAXDELIVER] = ext.maxdeliver
        if ext.deadletter is not None:
            fields[EXT_DEADLETTER] = ext.deadletter
        if ext.origin is not None:
            fields[EXT_ORIGIN] = ext.origin
        if ext.reason is not None:
            fields[EXT_REASON] = ext.reason
        if ext.moves:
            fields[EXT_MOVES] = ext.moves
        if ext.backoff:
            fields[EXT_BACKOFF] = ext.backoff
        if ext.maxretry:
            fields[EXT_MAXRETRY] = ext.maxretry
        if ext.base_retry:
            fields[EXT_BASE_RETRY] = ext.base_retry
        if ext.dedupid is not None:
            fields[EXT_DEDUPID] = ext.dedupid
        if ext.headers is not None:
            fields[EXT_HEADERS] = list(ext.headers)
        if ext.nack_reason is not None:
            fields[EXT_NACK_REASON] = ext.nack_reason
    return fields


def _count(fields: dict, key: str, high: int) -> int:
    value = fields.get(key, 0)
    if type(value) is not int or not 0 <= value <= high:
        raise BadJobPayload("bad %s" % key)
    return value


def _name(fields: dict, key: str) -> bytes | None:
    value = fields.get(key)
    if value is not None and (type(value) is not bytes or not value):
        raise BadJobPayload("bad %s" % key)
    return value


def apply_extension_fields(job: Job, fields: object) -> None:
    """Set the job's extensions from a map ``extension_fields`` made (from
    the bus or a file: every value is checked). Raises BadJobPayload."""
    if type(fields) is not dict:
        raise BadJobPayload("bad job extensions")
    job.priority = _count(fields, EXT_PRIORITY, MAX_PRIORITY) if EXT_PRIORITY in fields \
        else DEFAULT_PRIORITY
    if EXT_MAXDELIVER not in fields:
        return  # a priority alone: no JobExtras
    ext = JobExtras(_count(fields, EXT_MAXDELIVER, MAX_DELIVERIES), _name(fields, EXT_DEADLETTER))
    ext.origin = _name(fields, EXT_ORIGIN)
    ext.reason = _name(fields, EXT_REASON)
    ext.moves = _count(fields, EXT_MOVES, _MAX_COUNT)
    backoff = fields.get(EXT_BACKOFF, 0.0)
    if type(backoff) is int:
        backoff = float(backoff)
    if type(backoff) is not float or not (backoff == 0.0 or 1.0 <= backoff <= 1000.0):
        raise BadJobPayload("bad %s" % EXT_BACKOFF)
    ext.backoff = backoff
    ext.maxretry = _count(fields, EXT_MAXRETRY, _MAX_COUNT)
    ext.base_retry = _count(fields, EXT_BASE_RETRY, _MAX_COUNT)
    ext.dedupid = _name(fields, EXT_DEDUPID)
    if EXT_HEADERS in fields:
        ext.headers = _headers(fields[EXT_HEADERS])
    if EXT_NACK_REASON in fields:
        reason = fields[EXT_NACK_REASON]
        if not is_nack_reason(reason):
            raise BadJobPayload("bad %s" % EXT_NACK_REASON)
        ext.nack_reason = reason
    set_extras(job, ext)  # held as the origin holds it


def _headers(value: object) -> tuple[bytes, ...]:
    """A job's headers from a map ``extension_fields`` made: names and values
    as ADDJOB's HEADER limits them."""
    if not isinstance(value, (list, tuple)) or not value or len(value) & 1:
        raise BadJobPayload("bad %s" % EXT_HEADERS)
    flat: list[bytes] = []
    for item in value:
        if type(item) is not bytes:
            raise BadJobPayload("bad %s" % EXT_HEADERS)
        flat.append(item)
    if check_headers(flat) != HEADERS_VALID:
        raise BadJobPayload("bad %s" % EXT_HEADERS)
    return tuple(flat)



def to_bus(job: Job, now_ms: int) -> list[object]:
    """Bus form: relative TTL, DELIVERED cleared."""
    remaining = max(1, job.etime - now_ms // 1000 + 1)
    return _fields(job, remaining, job.flags & ~DELIVERED)


def _check_types(fields: Sequence[object]) -> None:
    """Raise BadJobPayload unless the first 12 decoded fields have the types
    of a job: bytes, a list of node IDs and non-negative integers."""
    if isinstance(fields, list):  # compiled: direct reads, no slice
        job_id, queue, body, repl, ctime, etime, delay, retry, nacks, adeliv, flags = (
            fields[0], fields[1], fields[2], fields[3], fields[4], fields[5], fields[6],
            fields[7], fields[8], fields[9], fields[10])
        delivered = fields[11]
    else:
        (job_id, queue, body, repl, ctime, etime, delay, retry, nacks, adeliv, flags,
         delivered) = fields[:FIELDS]
    if not (type(job_id) is bytes and type(queue) is bytes and type(body) is bytes
            and type(delivered) in (list, tuple)):
        raise BadJobPayload("bad job fields")
    # Spelled out: for eight values, cheaper than any C-level pass over a tuple.
    if not (type(repl) is int and type(ctime) is int and type(etime) is int
            and type(delay) is int and type(retry) is int and type(nacks) is int
            and type(adeliv) is int and type(flags) is int) or (
            ctime | etime | delay | retry | nacks | adeliv | flags) < 0:
        raise BadJobPayload("bad job numbers")


def _job(job_id: bytes, queue: bytes, body: bytes, repl: int, ctime: int, etime: int,
         delay: int, retry: int, nacks: int, adeliv: int, delivered: Sequence[object],
         known_nodes: Container[bytes] | None, own: tuple[bytes, ...] | None) -> Job:
    """Make the Job of values of the right types (non-negative integers).

    A job held only by ``own[0]`` (this node) shares the tuple ``own``, as
    jobs created here do: a million loaded jobs then need no million tuples.
    """
    if not (len(job_id) == 40 and job_id[0] == 68 and job_id[1] == 45 and job_id[10] == 45
            and job_id[35] == 45):
        raise BadJobPayload("bad job ID")
    if not 1 <= repl <= 65535:
        raise BadJobPayload("bad replication factor")
    job = Job(job_id, queue, body, repl, ctime, etime, delay, retry)
    job.nacks = nacks & 0xFFFF
    job.adeliv = adeliv & 0xFFFF
    if len(delivered) == 1 and own is not None and delivered[0] == own[0]:
        job.delivered = own
    elif len(delivered) == 1 and type(delivered[0]) is bytes and (
            known_nodes is None or delivered[0] in known_nodes):
        job.delivered = (delivered[0],)
    else:
        # A few node IDs: a list's own scan drops repeats for less than a dict.
        holders: list[bytes] = []
        for n in delivered:
            if (isinstance(n, bytes) and type(n) is bytes and n not in holders
                    and (known_nodes is None or n in known_nodes)):
                holders.append(n)
        job.delivered = tuple(holders)
    return job


def from_bus(payload: Sequence[Any], now_ms: int, known_nodes: Container[bytes] | None) -> Job:
    """Decode a bus job; the caller sets qtime. Raises BadJobPayload."""
    if type(payload) not in (list, tuple) or len(payload) < FIELDS:
        raise BadJobPayload("not a job")
    # A list, as msgpack decodes it: compiled, indexing it is a direct read.
    fields: list[Any] = payload if isinstance(payload, list) else list(payload)
    _check_types(fields)
    # Each field by index: a call with *payload[:10] would go through the
    # generic calling convention (argument parsing per call, per job copied).
    job = _job(fields[0], fields[1], fields[2], fields[3], fields[4], fields[5], fields[6],
               fields[7], fields[8], fields[9], fields[11], known_nodes, None)
    # Sent as seconds remaining; capped so that it stays a 64-bit number (AOF).
    job.etime = min(now_ms // 1000 + job.etime, MAX_ETIME)
    job.flags = fields[10] & ~DELIVERED & 0x7
    job.state = ACTIVE
    if len(fields) > FIELDS:
        apply_extension_fields(job, fields[FIELDS])  # later fields: a newer version's
    return job


def from_storage(payload: Sequence[Any], known_nodes: Container[bytes] | None,
                 own: tuple[bytes, ...] | None = None) -> tuple[Job, bool]:
    """Decode an AOF job; returns (job in state active, was it stored as queued).

    ``payload``: id, queue, body, repl, ctime, absolute etime, delay, retry,
    nacks, adeliv, flags, nodes delivered, state. ``own`` is the loading
    node's shared nodes-delivered of local-only jobs."""
    if type(payload) not in (list, tuple) or len(payload) != FIELDS + 1:
        raise BadJobPayload("not a stored job")
    _check_types(payload)
    if type(payload[FIELDS]) is not int:  # the compiled core would raise TypeError
        raise BadJobPayload("bad stored state")
    # The length is checked above; mypy counts arguments after a *sequence as extra.
    return from_checked_storage(*payload, known_nodes, own)  # type: ignore[call-arg]


def from_checked_storage(job_id: bytes, queue: bytes, body: bytes, repl: int, ctime: int,
                         etime: int, delay: int, retry: int, nacks: int, adeliv: int, flags: int,
                         delivered: Sequence[object], state: int,
                         known_nodes: Container[bytes] | None,
                         own: tuple[bytes, ...] | None = None) -> tuple[Job, bool]:
    """``from_storage`` for fields of the right types. A packed AOF payload's
    are, by its layout, so the loader calls this directly: loading a job
    then skips the type checks."""
    if state != ACTIVE and state != QUEUED:
        raise BadJobPayload("bad stored state")
    job = _job(job_id, queue, body, repl, ctime, etime, delay, retry, nacks, adeliv, delivered,
               known_nodes, own)
    job.flags = flags & 0x7
    return job, state == QUEUED
