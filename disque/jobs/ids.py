"""Job IDs: ``D-<8 hex node prefix>-<24 random chars>-<4 hex TTL minutes>``.

spec: jobs-and-ids.md §1. The low bit of the TTL field says whether the job
is at-least-once (odd, RETRY > 0) or at-most-once (even), so any node can
tell how to treat an ID it has never seen.
"""

from __future__ import annotations

import base64
import random
from typing import Final

from disque.context.stats import JobCounters

ID_LENGTH: Final = 40
_RANDOM_CHARS: Final = 24
_POOL_IDS: Final = 512


def is_valid_job_id(job_id: bytes) -> bool:
    """The only checks the original makes: length and the four fixed bytes."""
    return (len(job_id) == ID_LENGTH and job_id[0] == 68 and job_id[1] == 45
            and job_id[10] == 45 and job_id[35] == 45)


def ttl_field(ttl_seconds: int, retry: int) -> bytes:
    """The 4 hex digits encoding TTL minutes, odd when retry > 0."""
    minutes = min(ttl_seconds // 60, 65535)
    minutes = minutes | 1 if retry > 0 else minutes & ~1
    return b"%04x" % minutes


def id_ttl_minutes(job_id: bytes) -> int:
    """Decode the TTL field; invalid hex digits count as 0 like the original."""
    value = 0
    for c in job_id[36:40]:
        value <<= 4
        if 48 <= c <= 57:
            value |= c - 48
        elif 97 <= c <= 102:
            value |= c - 87
        elif 65 <= c <= 70:
            value |= c - 55
    return value


def is_at_most_once_id(job_id: bytes) -> bool:
    """An even TTL field marks a RETRY 0 job: never create a dummy ACK for it."""
    return id_ttl_minutes(job_id) & 1 == 0


class JobIdGenerator:
    """Makes unique job IDs for one node from an injected random source.

    Random bytes are drawn and base64-encoded 512 IDs at a time (18 bytes
    give exactly 24 characters of ``A-Za-z0-9+/``) into ready-made
    ``D-<node>-<random>-`` heads, so an ID costs one concatenation.
    """

    __slots__ = ("_rng", "_prefix", "_heads", "_suffixes", "counters")

    def __init__(self, node_id: bytes, rng: random.Random,
                 counters: JobCounters | None = None) -> None:
        self._rng = rng
        # ADDJOB asks one ID per job it creates: ``added`` is counted here,
        # the one step every way of creating a job goes through.
        self.counters = counters if counters is not None else JobCounters()
        self._prefix = b"D-" + node_id[:8] + b"-"
        self._heads: list[bytes] = []
        self._suffixes: dict[int, bytes] = {}

    def set_node_id(self, node_id: bytes) -> None:
        """Used after CLUSTER RESET HARD assigns a new node ID."""
        self._prefix = b"D-" + node_id[:8] + b"-"
        self._heads.clear()

    def _refill(self) -> None:
        chars = base64.b64encode(self._rng.randbytes(18 * _POOL_IDS))
        prefix = self._prefix
        heads = [prefix + chars[i:i + _RANDOM_CHARS] + b"-"
                 for i in range(0, len(chars), _RANDOM_CHARS)]
        heads.reverse()
        self._heads = heads

    def new_id(self, ttl_seconds: int, retry: int) -> bytes:
        """Return a fresh 40-byte job ID (one job created here: ``counters.added``)."""
        self.counters.added += 1
        key = ttl_seconds if retry else -ttl_seconds
        suffix = self._suffixes.get(key)
        if suffix is None:
            if len(self._suffixes) > 1024:
                self._suffixes.clear()
            suffix = self._suffixes[key] = ttl_field(ttl_seconds, retry)
        heads = self._heads
        if not heads:
            self._refill()
            heads = self._heads
        return heads.pop() + suffix
