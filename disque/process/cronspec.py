"""The CRON calendar of ``SCHEDULE SET ... CRON`` (docs/schedules.md): five
fields (minute, hour, day of month, month, day of week), in UTC, read by
croniter. The core asks it through ``Host.cron_problem`` and
``Host.cron_next`` and never imports croniter (docs/architecture.md,
"Periodic jobs")."""

from __future__ import annotations

from datetime import datetime, timezone

from croniter import CroniterError, croniter  # type: ignore[import-untyped]  # no stubs

FIELDS = 5


def cron_problem(expr: bytes) -> str | None:
    """Why ``expr`` is not a five-field CRON expression that ever fires, or None."""
    try:
        text = expr.decode("ascii")
    except UnicodeDecodeError:
        return "CRON expression is not ASCII"
    if len(text.split()) != FIELDS:
        return "CRON expression needs five fields: minute hour day-of-month month day-of-week"
    if not croniter.is_valid(text):
        return "invalid CRON expression '%s'" % text
    if cron_next(expr, 0) < 0:
        return "CRON expression '%s' names no date" % text
    return None


def cron_next(expr: bytes, after_ms: int) -> int:
    """The first time (unix ms, UTC) after ``after_ms`` that ``expr`` names, or -1."""
    try:
        start = datetime.fromtimestamp(after_ms / 1000, tz=timezone.utc)
        return int(croniter(expr.decode("ascii"), start).get_next(float) * 1000)
    except (CroniterError, ValueError, ArithmeticError, LookupError, OSError):
        # An expression from a peer may be anything; none may stop the cron.
        return -1
