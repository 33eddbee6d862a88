"""Command arguments on their way out: argument encoding, pipelined packing, ADDJOB's argv."""

from __future__ import annotations

from typing import Any, Sequence

import redis

try:  # redis-py packs with hiredis too; calling it directly skips per-argument checks
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is a dependency
    _hiredis_pack = None


def encode_arg(value: Any) -> Any:
    """One command argument, with str encoded so that binary-safe names round-trip."""
    # Queue names are binary-safe: strings we decoded with surrogateescape go back unchanged.
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return value


def pack_commands(conn: redis.Connection, commands: Sequence[tuple]) -> list[bytes]:
    """The RESP encoding of ``commands``, ready for send_packed_command."""
    if _hiredis_pack is not None:
        try:
            return [b"".join([_hiredis_pack(cmd) for cmd in commands])]
        except UnicodeEncodeError:
            pass  # a surrogate-escaped queue name: encode it ourselves below
    return conn.pack_commands([tuple(encode_arg(a) for a in cmd) for cmd in commands])


def addjob_args(queue: str | bytes, body: bytes | str, timeout_ms: int = 0, *,
                replicate: int | None = None, delay: int | None = None,
                retry: int | None = None, ttl: int | None = None,
                maxlen: int | None = None, async_: bool = False) -> tuple:
    """The argv of one ADDJOB (spec: commands.md ADDJOB)."""
    return ("ADDJOB", encode_arg(queue), encode_arg(body), timeout_ms) + addjob_options(
        replicate=replicate, delay=delay, retry=retry, ttl=ttl, maxlen=maxlen, async_=async_)


def addjob_options(*, replicate: int | None = None, delay: int | None = None,
                   retry: int | None = None, ttl: int | None = None,
                   maxlen: int | None = None, async_: bool = False) -> tuple:
    """The option words that follow ``ADDJOB queue body timeout``."""
    opts: list[Any] = []
    for word, value in (("REPLICATE", replicate), ("DELAY", delay), ("RETRY", retry),
                        ("TTL", ttl), ("MAXLEN", maxlen)):
        if value is not None:
            opts += [word, int(value)]
    if async_:
        opts.append("ASYNC")
    return tuple(opts)
