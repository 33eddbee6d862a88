"""Server replies as Python values: ``Job`` (GETJOB / QPEEK) and ``job_info`` (SHOW / JSCAN)."""

from __future__ import annotations

from typing import Any, NamedTuple


class Job(NamedTuple):
    """A job as GETJOB / QPEEK return it; counters are None without WITHCOUNTERS."""

    queue: str
    id: str
    body: bytes
    nacks: int | None = None
    additional_deliveries: int | None = None


def text(value: bytes | str) -> str:
    """A reply string as str; bytes that are not UTF-8 survive as surrogate escapes."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


def job_from_entry(entry: list) -> Job:
    """One GETJOB / QPEEK entry: queue, id, body (and the counters WITHCOUNTERS adds)."""
    if len(entry) >= 7:
        return Job(text(entry[0]), text(entry[1]), entry[2], int(entry[4]), int(entry[6]))
    return Job(text(entry[0]), text(entry[1]), entry[2])


def job_info(flat: list) -> dict[str, Any]:
    """SHOW / JSCAN REPLY all: the 30-element key/value array as a dict with str keys."""
    info: dict[str, Any] = {}
    for i in range(0, len(flat) - 1, 2):
        key = text(flat[i])
        value = flat[i + 1]
        if key in ("id", "queue", "state") and value is not None:
            value = text(value)
        elif key in ("nodes-delivered", "nodes-confirmed"):
            value = [text(v) for v in value]
        info[key] = value
    return info
