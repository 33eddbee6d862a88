"""The CRON calendar of ``SCHEDULE SET ... CRON`` (docs/schedules.md): five
fields (minute, hour, day of month, month, day of week) or a macro
(``@hourly`` ...), in UTC or in the time zone a ``TZ=<IANA name>`` prefix
names, read by croniter and zoneinfo. The core asks it through
``Host.cron_problem`` and ``Host.cron_next`` and never imports croniter
(docs/architecture.md, "Periodic jobs").

Every node must compute the same ticks from the same expression: croniter's
random (``R``) and hashed (``H``) fields are refused.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter  # type: ignore[import-untyped]  # no stubs

FIELDS = 5
ZONE_PREFIX = "TZ="
MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
          "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@hourly": "0 * * * *"}
# An element of a field that croniter draws at random (R) or from a hash (H).
_DRAWN = re.compile(r"^[hr](\(\d+-\d+\))?(/\d+)?$", re.IGNORECASE)
_HOUR = 1  # the hour field's index


class _Spec:
    """An expression read: its five fields and its time zone."""

    __slots__ = ("fields", "zone")

    def __init__(self, fields: str, zone: tzinfo) -> None:
        self.fields = fields
        self.zone = zone


def _read(expr: bytes) -> _Spec | str:
    """The expression's fields (a macro expanded) and zone, or why it is not one."""
    try:
        text = expr.decode("ascii")
    except UnicodeDecodeError:
        return "CRON expression is not ASCII"
    words = text.split()
    zone: tzinfo = timezone.utc
    if words and words[0].startswith(ZONE_PREFIX):
        name = words.pop(0)[len(ZONE_PREFIX):]
        try:
            zone = ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            return "unknown time zone '%s' (an IANA name, such as Europe/Paris)" % name
    if len(words) == 1 and words[0].startswith("@"):
        fields = MACROS.get(words[0].lower())
        if fields is None:
            return "unknown CRON macro '%s' (%s)" % (words[0], ", ".join(MACROS))
        return _Spec(fields, zone)
    if len(words) != FIELDS:
        return ("CRON expression needs five fields: minute hour day-of-month month "
                "day-of-week (or a macro such as @daily)")
    for word in words:
        for element in word.split(","):
            if _DRAWN.match(element):
                return ("CRON expression '%s': R and H fields are not allowed (every node "
                        "must compute the same times)" % text)
    return _Spec(" ".join(words), zone)


@lru_cache(maxsize=1024)  # a node has few distinct expressions
def _spec(expr: bytes) -> _Spec | str:
    return _read(expr)


def cron_problem(expr: bytes) -> str | None:
    """Why ``expr`` is not a CRON expression that ever fires, or None."""
    spec = _spec(expr)
    if isinstance(spec, str):
        return spec
    if not croniter.is_valid(spec.fields):
        return "invalid CRON expression '%s'" % expr.decode("ascii")
    if cron_next(expr, 0) < 0:
        return "CRON expression '%s' names no date" % expr.decode("ascii")
    return None


def cron_next(expr: bytes, after_ms: int) -> int:
    """The first time (unix ms) after ``after_ms`` that ``expr`` names in its
    zone, or -1. In the hour repeated when clocks go back, a time at a fixed
    hour is named once (the first); an expression whose hour field is ``*``
    names the times of both passes."""
    spec = _spec(expr)
    if isinstance(spec, str):
        return -1
    try:
        start = datetime.fromtimestamp(after_ms / 1000, tz=spec.zone)
        times = croniter(spec.fields, start)
        moment = times.get_next(datetime)
        if moment.fold and spec.fields.split()[_HOUR] != "*" and _repeated(moment):
            moment = times.get_next(datetime)
        return int(moment.timestamp() * 1000)
    except (CroniterError, ValueError, ArithmeticError, LookupError, OSError):
        # An expression from a peer may be anything; none may stop the cron.
        return -1


def _repeated(moment: datetime) -> bool:
    """``moment`` (the second pass of a wall-clock time) was also the first
    pass's: the same time an offset earlier."""
    first = moment.replace(fold=0)
    return first.utcoffset() != moment.utcoffset()
