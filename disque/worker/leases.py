"""When each job a worker holds needs its next WORKING.

A delivered job goes back to its queue when its retry period runs out
(spec: commands.md WORKING), and GETJOB does not restart that period: the
clock runs from when the job was queued. A job still held ``working_after``
seconds after it was fetched gets a WORKING, which restarts the period and
answers its length R; the next WORKING follows R/3 later, which leaves two
thirds of R as margin, less the server's jitter of up to 250 ms.
"""

from __future__ import annotations

# The share of the retry period between two WORKINGs of one job.
RENEW_FRACTION = 1 / 3


class LeaseBook:
    """Held jobs and the time (monotonic seconds) each needs a WORKING; no I/O."""

    def __init__(self, working_after: float) -> None:
        self.working_after = working_after
        self._due: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._due

    def hold(self, job_id: str, now: float) -> None:
        """The job was fetched at ``now``."""
        self._due[job_id] = now + self.working_after

    def release(self, job_id: str) -> None:
        """The job is settled (acked, nacked, abandoned): no more WORKING."""
        self._due.pop(job_id, None)

    def due(self, now: float) -> list[str]:
        """Jobs whose WORKING is due at ``now``."""
        return [job_id for job_id, at in self._due.items() if at <= now]

    def renewed(self, job_id: str, retry: int, now: float) -> None:
        """WORKING answered ``retry`` seconds at ``now``; a job with RETRY 0 is never
        requeued, so it needs no more."""
        if job_id not in self._due:
            return  # settled while the WORKING was on its way
        if retry > 0:
            self._due[job_id] = now + retry * RENEW_FRACTION
        else:
            del self._due[job_id]

    def next_due(self) -> float | None:
        """The earliest time a WORKING is due, or None when none is."""
        return min(self._due.values(), default=None)
