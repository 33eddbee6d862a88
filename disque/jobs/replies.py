"""RESP encodings of jobs: queue entries and the SHOW / JSCAN job info."""

from __future__ import annotations

from typing import Final

from disque.jobs.job import (DEFAULT_PRIORITY, STATE_NAMES, Job, dedup_token, extras_of,
                             job_headers, nack_reason_of)
from disque.protocol.resp import encode

_NACKS: Final = b"$5\r\nnacks\r\n"
_ADELIV: Final = b"$21\r\nadditional-deliveries\r\n"
_HEADERS: Final = b"$7\r\nheaders\r\n"
DEAD_SUFFIX: Final = b":dead"  # a dead-letter queue's default name: the queue's + this


def job_entry(job: Job, withcounters: bool = False, withheaders: bool = False) -> bytes:
    """``[queue, id, body]``, the 7-element WITHCOUNTERS form, and either
    followed by ``"headers", [name, value, ...]`` with WITHHEADERS."""
    # Only queued or delivered jobs get here, never a dummy ACK (the one job
    # without queue and body); an assert would run once per delivered job.
    queue: bytes = job.queue  # type: ignore[assignment]
    body: bytes = job.body  # type: ignore[assignment]
    if withheaders:
        return _entry_with_headers(job, queue, body, withcounters)
    if withcounters:
        return b"*7\r\n$%d\r\n%b\r\n$40\r\n%b\r\n$%d\r\n%b\r\n%b:%d\r\n%b:%d\r\n" % (
            len(queue), queue, job.id, len(body), body, _NACKS, job.nacks, _ADELIV, job.adeliv)
    return b"*3\r\n$%d\r\n%b\r\n$40\r\n%b\r\n$%d\r\n%b\r\n" % (
        len(queue), queue, job.id, len(body), body)


def priority_entry(job: Job) -> bytes:
    """``[queue, id, body, "priority", n]``: QPEEK WITHPRIORITY's entry."""
    queue: bytes = job.queue  # type: ignore[assignment]  # queued jobs have both
    body: bytes = job.body  # type: ignore[assignment]
    return b"*5\r\n$%d\r\n%b\r\n$40\r\n%b\r\n$%d\r\n%b\r\n$8\r\npriority\r\n:%d\r\n" % (
        len(queue), queue, job.id, len(body), body, job.priority)


def entry_value(job: Job, withcounters: bool, withheaders: bool, withpriority: bool) -> list[object]:
    """The entry of ``job_entry`` (or ``priority_entry``) as a value for
    ``resp.encode_parts``: a large body then reaches the transport uncopied."""
    entry: list[object] = [job.queue, job.id, job.body]
    if withpriority:
        entry += [b"priority", job.priority]
    if withcounters:
        entry += [b"nacks", job.nacks, b"additional-deliveries", job.adeliv]
    if withheaders:
        entry += [b"headers", list(job_headers(job) or ())]
    return entry


def _entry_with_headers(job: Job, queue: bytes, body: bytes, withcounters: bool) -> bytes:
    """A GETJOB entry with WITHHEADERS (docs/commands.md "Job headers")."""
    headers = job_headers(job) or ()
    entry = b"*%d\r\n$%d\r\n%b\r\n$40\r\n%b\r\n$%d\r\n%b\r\n" % (
        9 if withcounters else 5, len(queue), queue, job.id, len(body), body)
    if withcounters:
        entry += b"%b:%d\r\n%b:%d\r\n" % (_NACKS, job.nacks, _ADELIV, job.adeliv)
    return entry + _HEADERS + encode(headers)


def job_info(job: Job, now_ms: int) -> list[object]:
    """The 30-element SHOW array as a value for ``resp.encode``."""
    now_s = now_ms // 1000
    qtime = job.qtime
    awake = job.awakeme
    return [
        b"id", job.id,
        b"queue", job.queue,
        b"state", STATE_NAMES[job.state],
        b"repl", job.repl,
        b"ttl", max(0, job.etime - now_s),
        b"ctime", job.ctime,
        b"delay", job.delay,
        b"retry", job.retry,
        b"nacks", job.nacks,
        b"additional-deliveries", job.adeliv,
        b"nodes-delivered", list(job.delivered),
        b"nodes-confirmed", sorted(job.confirmed) if job.confirmed else [],
        b"next-requeue-within", max(0, qtime - now_ms) if qtime else None,
        b"next-awake-within", max(0, awake - now_ms) if awake else None,
        b"body", job.body,
    ] + extension_info(job)


def dead_letter_queue(job: Job) -> bytes | None:
    """Where the job goes when it has been delivered too often (None: it
    has no such limit)."""
    if job.ext is None or job.queue is None:
        return None
    ext = extras_of(job)
    if ext is None:  # a DEDUPID token only
        return job.queue + DEAD_SUFFIX
    if ext.deadletter is not None:
        return ext.deadletter
    return (ext.origin if ext.origin is not None else job.queue) + DEAD_SUFFIX


def extension_info(job: Job) -> list[object]:
    """SHOW's pairs after Disque 1.0's 15, for what the job has of the
    extensions (docs/commands.md): nothing for a plain job; ``nack-reason``
    last, only once a NACK gave one."""
    info: list[object] = []
    if job.priority != DEFAULT_PRIORITY:
        info += [b"priority", job.priority]
    if job.ext is not None:
        ext = extras_of(job)
        if ext is None:  # a DEDUPID token only: the defaults' pairs
            info += [b"maxdeliver", 0, b"deadletter", dead_letter_queue(job),
                     b"origin-queue", None, b"dead-reason", None]
        else:
            info += [b"maxdeliver", ext.maxdeliver, b"deadletter", dead_letter_queue(job),
                     b"origin-queue", ext.origin, b"dead-reason", ext.reason]
            if ext.backoff:
                info += [b"backoff", repr(ext.backoff).encode(), b"maxretry", ext.maxretry,
                         b"base-retry", ext.base_retry]
        token = dedup_token(job)
        if token is not None:
            info += [b"dedupid", token]
        headers = job_headers(job)
        if headers is not None:
            info += [b"headers", list(headers)]
        reason = nack_reason_of(job)
        if reason is not None:
            info += [b"nack-reason", reason]
    return info


def encode_job_info(job: Job, now_ms: int) -> bytes:
    """SHOW reply bytes."""
    return encode(job_info(job, now_ms))

