"""Dead letters and delayed NACKs (docs/dead-letters.md): QREDRIVE, and
the ``DELAY`` form of NACK (``commands.jobs.nack`` hands it here).

A job whose MAXDELIVER-th delivery failed is moved to its dead-letter
queue by ``JobLifecycle.enqueue_job``; QREDRIVE moves such jobs back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disque.protocol import errors
from disque.commands.args import option_name, parse_int
from disque.jobs.ids import is_valid_job_id
from disque.jobs.job import ACTIVE, DELIVERED
from disque.protocol.resp import integer

if TYPE_CHECKING:
    from disque.context.clients import ClientState
    from disque.state.nodestate import NodeState

_COUNT: Final = b"COUNT"


def qredrive(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """QREDRIVE deadqueue [COUNT n]: the dead letters queued here in
    ``deadqueue`` (at most ``n``, in queue order) go back to their origin
    queue with their counters reset; replies how many moved."""
    count = 0  # 0: all of them
    i = 2
    n = len(argv)
    while i < n:
        if option_name(argv[i]) == _COUNT and i + 1 < n:
            value = parse_int(argv[i + 1])
            if value is None or value <= 0:
                return errors.COUNT_RANGE
            count = value
            i += 2
        else:
            return errors.SYNTAX
    return integer(node.lifecycle.redrive_queued(argv[1], count))


def nack_delayed(node: NodeState, argv: list[bytes], reason: bytes | None = None) -> bytes:
    """NACK id... DELAY seconds (the last two words): each known active job
    is requeued ``seconds`` from now, counted as a NACK then; DELAY 0 is a
    plain NACK. A REASON (taken off ``argv``) is each job's at once.
    Replies how many jobs were NACKed."""
    n = len(argv)
    delay = parse_int(argv[n - 1])
    if delay is None or delay < 0:
        return errors.DELAY_RANGE
    ids = argv[1:n - 2]
    for job_id in ids:
        if not is_valid_job_id(job_id):
            return errors.BADID
    count = 0
    jobs = node.jobs.by_id
    lifecycle = node.lifecycle
    now_s = node.runtime.now // 1000
    for job_id in ids:
        job = jobs.get(job_id)
        if job is None or job.state != ACTIVE:
            continue
        if delay == 0:
            if lifecycle.enqueue_job(job, True, reason=reason):
                count += 1
            continue
        if not job.qtime or (job.retry == 0 and job.flags & DELIVERED):
            continue  # what a NACK could not requeue either
        # Past its TTL the job is gone anyway: the requeue time need not be later.
        lifecycle.nack_later(job, min(delay, max(0, job.etime - now_s)), reason)
        count += 1
    return integer(count)


TABLE: Final = (
           ("qredrive", -2, "w", qredrive),
       )
