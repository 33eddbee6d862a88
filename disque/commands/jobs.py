"""Job commands but ADDJOB (``commands.addjob``): GETJOB, ACKJOB, FASTACK,
WORKING, NACK, ENQUEUE, DEQUEUE, DELJOB, SHOW, LOADJOB (spec: commands.md §1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Final

from disque.protocol import errors
from disque.cluster import messages as m
from disque.commands.args import option_name, parse_int, parse_timeout
from disque.commands.deadletter import nack_delayed
from disque.jobs.ids import id_ttl_minutes, is_at_most_once_id, is_valid_job_id
from disque.jobs.job import ACKED, ACTIVE, BCAST_WILLQUEUE, Job, is_nack_reason
from disque.jobs.journal import REASON_ACKED
from disque.jobs.replies import encode_job_info, job_entry, job_info
from disque.commands.streams import (INLINE_BYTES, INLINE_IDS, INLINE_JOBS, LARGE_BODY,
                                     GatheredEntries, IdsStream, PartsStream, RoundRobin,
                                     entry_size)
from disque.protocol.resp import NIL, NIL_ARRAY, encode_parts, error, integer

if TYPE_CHECKING:
    from disque.context.clients import ClientState
    from disque.state.nodestate import NodeState

_DELAY: Final = b"DELAY"
_NOHANG: Final = b"NOHANG"
_TIMEOUT: Final = b"TIMEOUT"
_COUNT: Final = b"COUNT"
_WITHCOUNTERS: Final = b"WITHCOUNTERS"
_WITHHEADERS: Final = b"WITHHEADERS"
_FROM: Final = b"FROM"
_REASON: Final = b"REASON"
TOO_MANY_QUEUES: Final = "ERR GETJOB names %d queues, more than getjob-max-queues (%d)"


def getjob(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes | None:
    """GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] [WITHHEADERS] FROM queue..."""
    nohang = withcounters = withheaders = False
    timeout = 0
    count = 1
    names: list[bytes] | None = None
    i = 1
    n = len(argv)
    while i < n:
        opt = option_name(argv[i])
        if opt == _FROM:
            names = argv[i + 1:]
            break
        if opt == _NOHANG:
            nohang = True
        elif opt == _WITHCOUNTERS:
            withcounters = True
        elif opt == _WITHHEADERS:
            withheaders = True
        elif opt == _TIMEOUT and i + 1 < n:
            i += 1
            parsed = parse_timeout(argv[i])
            if isinstance(parsed, bytes):
                return parsed
            timeout = parsed
        elif opt == _COUNT and i + 1 < n:
            i += 1
            value = parse_int(argv[i])
            if value is None or value <= 0:
                return errors.COUNT_RANGE
            count = value
        else:
            return errors.SYNTAX
        i += 1
    if not names:
        return errors.SYNTAX
    if len(names) > node.config.getjob_max_queues:
        node.stats.getjob_queues_refused += 1
        return error(TOO_MANY_QUEUES % (len(names), node.config.getjob_max_queues))
    found: list[Job] = []
    position = node.consumers.collect_more(names, min(count, INLINE_JOBS), found, 0)
    if found:
        size = 0
        for job in found:
            size += entry_size(job)
        if size > INLINE_BYTES or (position >= 0 and len(found) < count):
            rounds = RoundRobin(node.consumers, names, count, position)
            return client.reply_in_steps(b"", GatheredEntries(rounds, found, withcounters,
                                                              withheaders, False, size))
        return b"*%d\r\n" % len(found) + b"".join([job_entry(j, withcounters, withheaders)
                                                      for j in found])
    if nohang:
        return NIL_ARRAY
    if node.membership.leaving:
        return errors.LEAVING
    node.blocked.block_for_jobs(client, names, node.runtime.now + timeout if timeout else 0,
                                count, withcounters, withheaders)
    return None


def _all_valid(ids: list[bytes]) -> bool:
    for job_id in ids:
        if not is_valid_job_id(job_id):
            return False
    return True


def _each_id(client: ClientState, ids: list[bytes], act: Callable[[bytes], bool]) -> bytes:
    """Validate every ID first, then apply ``act`` to each and reply with how
    many times it returned True; many IDs are done in steps."""
    if len(ids) > INLINE_IDS:
        return client.reply_in_steps(b"", IdsStream(ids, act))
    if not _all_valid(ids):
        return errors.BADID
    count = 0
    for job_id in ids:
        if act(job_id):
            count += 1
    return integer(count)


def _ack(node: NodeState, job_id: bytes) -> bool:
    """ACKJOB of one valid ID: True when a known job moved to acked."""
    job = node.jobs.by_id.get(job_id)
    acked = False
    if job is None:
        membership = node.membership
        if membership.size == 1 or membership.leaving or is_at_most_once_id(job_id):
            return False
        job = Job(job_id, None, None, 0, 0,
                  node.runtime.now // 1000 + id_ttl_minutes(job_id) * 60, 0, 0)
        job.state = ACKED
        node.lifecycle.register_job(job)
    elif node.lifecycle.ack_job(job, schedule=False):
        node.counters.acked += 1
        acked = True
    node.lifecycle.gc_attempt(job)  # sets the GC timer
    return acked


def ackjob(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """ACKJOB id...: count of jobs moved to acked."""
    return _each_id(client, argv[1:], lambda job_id: _ack(node, job_id))


def _fastack(node: NodeState, job_id: bytes) -> bool:
    """FASTACK of one valid ID: True when the job was known here."""
    job = node.jobs.by_id.get(job_id)
    msg = m.job_message(m.DELJOB, job_id)
    if job is None:
        node.outbox.broadcast(msg)
        return False
    node.outbox.send_to_holders(job, msg)
    node.lifecycle.delete_job(job, reason=REASON_ACKED)
    node.counters.acked += 1
    return True


def fastack(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """FASTACK id...: delete everywhere, best effort."""
    return _each_id(client, argv[1:], lambda job_id: _fastack(node, job_id))


def working(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """WORKING id: postpone the next requeue, reply with the retry period."""
    job_id = argv[1]
    if not is_valid_job_id(job_id):
        return errors.BADID
    job = node.jobs.by_id.get(job_id)
    if job is None:
        return errors.NOJOB
    now = node.runtime.now
    created_ms = job.ctime // 1_000_000
    life = job.etime * 1000 - created_ms
    if life > 0 and now - created_ms > life / 2:
        return errors.TOOLATE
    node.lifecycle.dequeue_job(job)
    job.flags |= BCAST_WILLQUEUE
    if job.retry and job.qtime:
        job.qtime = now + job.retry * 1000 + node.runtime.jitter()
    if job.state != ACKED:
        node.lifecycle.schedule_job(job)
    # With the job's generation: holders of an older one catch up (dead letters).
    node.outbox.send_to_holders(job, node.lifecycle.job_message(m.WORKING, job))
    return integer(job.retry)


def _count_known(node: NodeState, client: ClientState, argv: list[bytes],
                 action: Callable[[Job], bool]) -> bytes:
    """Validate every ID first, then apply ``action`` to each known job and
    reply with how many times it returned True."""
    jobs = node.jobs.by_id

    def act(job_id: bytes) -> bool:
        job = jobs.get(job_id)
        return job is not None and action(job)
    return _each_id(client, argv[1:], act)


def nack(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """NACK id... [DELAY seconds] [REASON text]: put back in the queue now
    (or after the delay, commands/deadletter.py), counting a failed
    delivery; the reason is kept with each job NACKed."""
    n = len(argv)
    if n > 2:
        word = argv[n - 2]
        if len(word) == 6 and n > 3 and option_name(word) == _REASON:
            return _nack_with_reason(node, client, argv[:n - 2], argv[n - 1])
        if len(word) == 5 and option_name(word) == _DELAY:
            return nack_delayed(node, argv)
    return _count_known(node, client, argv, lambda job: job.state == ACTIVE and node.lifecycle.enqueue_job(job, True))


def _nack_with_reason(node: NodeState, client: ClientState, argv: list[bytes],
                      reason: bytes) -> bytes:
    """NACK with its ``REASON`` taken off ``argv`` (at least one word is left
    before it: a Disque 1.0 client's ``NACK REASON <id>`` stays a -BADID)."""
    if not is_nack_reason(reason):
        return errors.NACK_REASON_SIZE
    n = len(argv)
    if n > 2 and len(argv[n - 2]) == 5 and option_name(argv[n - 2]) == _DELAY:
        return nack_delayed(node, argv, reason)
    lifecycle = node.lifecycle
    return _count_known(node, client, argv, lambda job: job.state == ACTIVE
                        and lifecycle.enqueue_job(job, True, reason=reason))


def enqueue(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """ENQUEUE id...: put active jobs back in their queue."""
    return _count_known(node, client, argv, lambda job: job.state == ACTIVE and node.lifecycle.enqueue_job(job))


def dequeue(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """DEQUEUE id...: take queued jobs out of their queue."""
    return _count_known(node, client, argv, node.lifecycle.dequeue_job)


def _delete_here(node: NodeState, job: Job) -> bool:
    node.lifecycle.delete_job(job)
    return True


def deljob(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """DELJOB id...: forget jobs on this node only."""
    return _count_known(node, client, argv, lambda job: _delete_here(node, job))


def show(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """SHOW id: the job's fields, or nil."""
    job_id = argv[1]
    if not is_valid_job_id(job_id):
        return errors.BADID
    job = node.jobs.by_id.get(job_id)
    if job is None:
        return NIL
    if len(job.body or b"") < LARGE_BODY:
        return encode_job_info(job, node.runtime.now)
    # The body is written as it is, not copied into the reply.
    parts = encode_parts(job_info(job, node.runtime.now), LARGE_BODY)
    return client.reply_in_steps(parts[0], PartsStream(parts[1:]))


def loadjob(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """LOADJOB exists only inside the AOF."""
    return errors.LOADJOB_FROM_CLIENT


TABLE: Final = (
           ("getjob", -2, "wF", getjob),
           ("ackjob", -1, "wF", ackjob),
           ("fastack", -1, "wF", fastack),
           ("deljob", -1, "wF", deljob),
           ("show", 2, "rF", show),
           ("loadjob", 2, "w", loadjob),
           ("enqueue", -1, "mwF", enqueue),
           ("nack", -1, "mwF", nack),
           ("dequeue", -1, "wF", dequeue),
           ("working", 2, "wF", working),
       )
