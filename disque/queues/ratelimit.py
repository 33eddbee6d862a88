"""A queue's delivery limit (docs/rate-limits.md): a token bucket of
``rate`` jobs per second holding at most ``burst``, which GETJOB on this
node takes one token from per job it hands out.

Times are the node's injected clock (unix ms); the bucket counts in
millionths of a job, so a rate in thousandths of a job per second is
exactly that many units per millisecond and every step is an integer.
A limit is persisted as one record of the tables file beside nodes.conf
(``limit_record``; docs/rate-limits.md "Kept across restarts"); versions
before it kept them in nodes.conf as ``vars`` lines, read once to move them.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

UNITS_PER_JOB: Final = 1_000_000
MAX_RATE_MILLI: Final = 1_000_000_000  # 1,000,000 jobs per second
MAX_BURST: Final = 1_000_000
CONF_KEYWORD: Final = "vars"
CONF_NAME: Final = "queue-rate-limit"


class RateLimit:
    """One queue's token bucket. ``rate_milli`` is the rate in thousandths
    of a job per second, which is also the units it gains per ms."""

    __slots__ = ("rate_milli", "burst", "level", "stamp")

    def __init__(self, rate_milli: int, burst: int, now: int) -> None:
        self.rate_milli = rate_milli
        self.burst = burst
        self.level = burst * UNITS_PER_JOB  # a new limit starts full
        self.stamp = now

    def refill(self, now: int) -> None:
        """Add what the time since the last refill earned, up to ``burst``."""
        elapsed = now - self.stamp
        if elapsed <= 0:
            if elapsed < 0:
                self.stamp = now  # the clock went back: earn from now on
            return
        self.stamp = now
        full = self.burst * UNITS_PER_JOB
        room = full - self.level
        if room <= 0:
            return
        # Past the time the room takes to fill, the product is not needed
        # (and a long idle time would make it a large one).
        if elapsed > room // self.rate_milli:
            self.level = full
        else:
            self.level += elapsed * self.rate_milli

    def take(self, now: int) -> bool:
        """Take one job's token; False when there is none now."""
        if self.level < UNITS_PER_JOB:
            self.refill(now)
            if self.level < UNITS_PER_JOB:
                return False
        self.level -= UNITS_PER_JOB
        return True

    def tokens(self, now: int) -> int:
        """Jobs that may be handed out now."""
        self.refill(now)
        return self.level // UNITS_PER_JOB

    def next_token_at(self) -> int:
        """The ms at which a token will be there (the last refill's time
        when one already is)."""
        missing = UNITS_PER_JOB - self.level
        if missing <= 0:
            return self.stamp
        return self.stamp + -(-missing // self.rate_milli)

    def change(self, rate_milli: int, burst: int, now: int) -> None:
        """A new rate and burst: what was earned under the old rate is kept,
        up to the new burst."""
        self.refill(now)
        self.rate_milli = rate_milli
        self.burst = burst
        full = burst * UNITS_PER_JOB
        if self.level > full:
            self.level = full


def parse_rate(text: bytes) -> int | None:
    """A rate in jobs per second, with up to three decimals, as thousandths
    (``b"2.5"`` -> 2500); None when it is not one or is out of range (0,
    which removes a limit, is in range)."""
    whole, dot, fraction = text.partition(b".")
    if (not whole and not fraction) or len(fraction) > 3 or (dot and not fraction):
        return None
    if not (whole or b"0").isdigit() or (fraction and not fraction.isdigit()) or len(whole) > 10:
        return None
    milli = int(whole or b"0") * 1000 + int(fraction.ljust(3, b"0") or b"0")
    return milli if milli <= MAX_RATE_MILLI else None


def format_rate(rate_milli: int) -> bytes:
    """Thousandths of a job per second as the shortest decimal (2500 -> ``2.5``)."""
    whole, fraction = divmod(rate_milli, 1000)
    if not fraction:
        return b"%d" % whole
    return (b"%d.%03d" % (whole, fraction)).rstrip(b"0")


def default_burst(rate_milli: int) -> int:
    """One second's worth of jobs, at least one."""
    burst = -(-rate_milli // 1000)
    return burst if burst <= MAX_BURST else MAX_BURST


def limit_record(limit: RateLimit) -> list:
    """The tables file's record of a limit: ``[rate in thousandths, burst]``."""
    return [limit.rate_milli, limit.burst]


def limit_from_record(value: object, now: int) -> RateLimit | None:
    """A limit from its record (starting full at ``now``); None when malformed."""
    if type(value) is not list or len(value) != 2:
        return None
    rate, burst = value
    if (type(rate) is not int or not 0 < rate <= MAX_RATE_MILLI or type(burst) is not int
            or not 1 <= burst <= MAX_BURST):
        return None
    return RateLimit(rate, burst, now)


def parse_conf(text: str) -> list[tuple[bytes, int, int]]:
    """``(queue, rate_milli, burst)`` of each limit line of a cluster config
    file written before the tables file; raise ValueError naming a
    malformed one's line."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if len(fields) < 2 or fields[0] != CONF_KEYWORD or fields[1] != CONF_NAME:
            continue
        rate = burst = 0
        name = b""
        if len(fields) == 5 and fields[4].isdigit():
            try:
                name = base64.b64decode(fields[2], validate=True)
            except (binascii.Error, ValueError):
                name = b""
            rate = parse_rate(fields[3].encode()) or 0
            burst = int(fields[4])
        if not name or not rate or not 1 <= burst <= MAX_BURST:
            raise ValueError("Invalid queue rate limit in cluster config file, line %d" % number)
        found.append((name, rate, burst))
    return found
