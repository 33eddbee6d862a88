"""What the core tells persistence: a job now lives here, a job left.

The core reports facts to an injected journal and never sees a file
format (``disque.aof`` turns the facts into records). A node whose AOF is
off gets the null journal; tests use a recording one to assert a rule's
persistence without a file.
"""

from __future__ import annotations

from typing import Final, Protocol

from disque.jobs.job import Job

# Why a job left the node (written in DELJOB records, shown by disque-check-aof).
REASON_ACKED: Final = b"acked"
REASON_EXPIRED: Final = b"expired"
REASON_DELETED: Final = b"deleted"
REASON_EVICTED: Final = b"evicted"
REASON_MOVED: Final = b"moved"
# Not a departure: the job changed queues here (a dead-letter move or
# QREDRIVE). The loader keeps the first LOADJOB of a job ID, so the change
# is recorded as this DELJOB followed by a LOADJOB of the job as it is now.
REASON_QUEUE_CHANGED: Final = b"queue-changed"
# Not a departure either: a copy learned of more holders (a REPLJOB the
# origin re-sent to a wider set), recorded the same way, so that after a
# restart from the AOF an ACK here reaches every holder.
REASON_HOLDERS_CHANGED: Final = b"holders-changed"
# Not a departure either: a consumer said why the job failed (NACK ... REASON,
# here or on another holder), recorded the same way so the reason survives a
# restart.
REASON_NACK_REASON: Final = b"nack-reason"
# The reasons of DELJOB records that are not a departure: a LOADJOB of the
# same job follows (a reader of the AOF counts these as rewrites).
REWRITE_REASONS: Final = frozenset((REASON_QUEUE_CHANGED, REASON_HOLDERS_CHANGED,
                                    REASON_NACK_REASON))


class Journal(Protocol):
    """The persistence events of one node's jobs."""

    def job_stored(self, job: Job) -> None:
        """``job`` now lives on this node (created, replicated here, or its
        replication completed); its fields are read when it is written."""

    def job_removed(self, job: Job, reason: bytes) -> None:
        """``job`` left this node for ``reason`` (one of the REASON_ values)."""


class NullJournal:
    """The journal of a node that persists nothing."""

    def job_stored(self, job: Job) -> None:
        """Nothing is kept."""

    def job_removed(self, job: Job, reason: bytes) -> None:
        """Nothing is kept."""


NULL_JOURNAL: Final = NullJournal()
