"""Server replies as Python values: ``Job`` (GETJOB / QPEEK) and ``job_info`` (SHOW / JSCAN)."""

from __future__ import annotations

from typing import Any, NamedTuple


class Job(NamedTuple):
    """A job as GETJOB / QPEEK return it; counters are None without WITHCOUNTERS,
    headers (name -> value) None without WITHHEADERS."""

    queue: str
    id: str
    body: bytes
    nacks: int | None = None
    additional_deliveries: int | None = None
    headers: dict[str, bytes] | None = None


def text(value: bytes | str) -> str:
    """A reply string as str; bytes that are not UTF-8 survive as surrogate escapes."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


_NACKS = (b"nacks", "nacks")
_ADELIV = (b"additional-deliveries", "additional-deliveries")
_HEADERS = (b"headers", "headers")


def job_from_entry(entry: list) -> Job:
    """One GETJOB / QPEEK entry: queue, id, body, then the pairs WITHCOUNTERS
    and WITHHEADERS add (QPEEK's WITHPRIORITY pair is not kept)."""
    if len(entry) == 3:
        return Job(text(entry[0]), text(entry[1]), entry[2])
    nacks = adeliv = headers = None
    for i in range(3, len(entry) - 1, 2):
        key, value = entry[i], entry[i + 1]
        if key in _NACKS:
            nacks = int(value)
        elif key in _ADELIV:
            adeliv = int(value)
        elif key in _HEADERS:
            headers = headers_dict(value)
    return Job(text(entry[0]), text(entry[1]), entry[2], nacks, adeliv, headers)


def headers_dict(flat: list) -> dict[str, bytes]:
    """A flat headers array (name, value, ...) as a dict with str names."""
    return {text(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}


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
        elif key == "headers":
            value = headers_dict(value)
        info[key] = value
    return info
