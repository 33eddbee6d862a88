"""Queue commands: QLEN, QPEEK, QSTAT, QSCAN, JSCAN, PAUSE (spec: commands.md §2),
QPURGE (docs/commands.md "Extensions") and QLIMIT (docs/rate-limits.md).

QSCAN and JSCAN show a user limited to queue patterns only its queues
(``commands.access``); the other commands' queues are checked at the table."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from disque.protocol import errors
from disque.cluster import messages as m
from disque.commands.access import restricted_queues
from disque.commands.args import parse_int, parse_uint
from disque.jobs.job import DEFAULT_PRIORITY, STATES_BY_NAME
from disque.jobs.replies import job_entry, job_info, priority_entry
from disque.commands.streams import (INLINE_BYTES, INLINE_JOBS, LARGE_BODY, GatheredEntries,
                                     PartsStream, PurgeStream, QueueWalk, entry_size)
from disque.queues.queue import PAUSE_ALL, PAUSE_IN, PAUSE_NAMES, PAUSE_NONE, PAUSE_OUT
from disque.context.tablelog import LIMIT_TABLE
from disque.queues.ratelimit import (MAX_BURST, RateLimit, default_burst, format_rate,
                                     limit_record, parse_rate)
from disque.protocol.resp import (EMPTY_ARRAY, NIL_ARRAY, OK, Status, encode, encode_parts, error,
                                  integer, status)

if TYPE_CHECKING:
    from disque.context.clients import ClientState
    from disque.jobs.job import Job
    from disque.state.nodestate import NodeState
    from disque.queues.queue import Queue
    from disque.jobs.scanindex import ScanIndex, Sequenced

DEFAULT_SCAN_COUNT: Final = 100
# COUNT is a hint (spec: commands.md QSCAN): a larger one is served in
# calls of this many, each returning the cursor to go on from, so that one
# call never holds the node (and every other client) for long. 1,000 jobs
# of JSCAN REPLY all take about 15 ms of pure Python.
MAX_SCAN_COUNT: Final = 1000
SCAN_EFFORT: Final = 10  # slots visited per requested element before returning

_BUSYLOOP: Final = b"BUSYLOOP"
_COUNT: Final = b"COUNT"
_MINLEN: Final = b"MINLEN"
_MAXLEN: Final = b"MAXLEN"
_IMPORTRATE: Final = b"IMPORTRATE"
_QUEUE: Final = b"QUEUE"
_STATE: Final = b"STATE"
_REPLY: Final = b"REPLY"
_REPLY_ALL: Final = b"ALL"
_REPLY_ID: Final = b"ID"
_PAUSE_OPTIONS: Final = {b"IN": PAUSE_IN, b"OUT": PAUSE_OUT, b"ALL": PAUSE_ALL, b"NONE": PAUSE_NONE}
_PAUSE_STATE: Final = b"STATE"
_PAUSE_BCAST: Final = b"BCAST"
_WITHPRIORITY: Final = b"WITHPRIORITY"
_QPEEK_ARITY: Final = errors.wrong_arity("qpeek")
_RATE: Final = b"RATE"
_BURST: Final = b"BURST"
RATE_RANGE: Final = error("ERR RATE must be a number of jobs per second from 0.001 to 1000000, "
                          "with at most three decimals (0 removes the limit)")
BURST_RANGE: Final = error("ERR BURST must be between 1 and %d" % MAX_BURST)
BURST_WITHOUT_RATE: Final = error("ERR BURST goes with RATE: QLIMIT <queue> RATE <n> BURST <n>")
LIMIT_NOT_SAVED: Final = ("ERR the limit is in force but the tables file could not be "
                          "written (it is lost at a restart): %s")

# Words beyond a command's Disque 1.0 arity that its extensions take: the
# command table keeps 1.0's arity (COMMAND shows it) and lets these through.
MAX_ARGS: Final = {"qpeek": 4}


def qlen(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """QLEN queue."""
    queue = node.queues.by_name.get(argv[1])
    return integer(len(queue.jobs) if queue is not None else 0)


def qpeek(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """QPEEK queue count [WITHPRIORITY]: first served first, or last first for
    a negative count. WITHPRIORITY adds ``"priority", <n>`` to each entry."""
    withpriority = False
    if len(argv) > 3:
        if len(argv) > 4 or argv[3].upper() != _WITHPRIORITY:
            return _QPEEK_ARITY  # what Disque 1.0 answers to any fourth word
        withpriority = True
    count = parse_int(argv[2])
    if count is None:
        return errors.NOT_INTEGER
    queue = node.queues.by_name.get(argv[1])
    if queue is None or count == 0:
        return EMPTY_ARRAY
    source = queue.jobs.iter_from_head() if count > 0 else queue.jobs.iter_from_tail()
    wanted = abs(count)
    first = min(wanted, INLINE_JOBS)
    jobs: list[Job] = []
    size = 0
    for job in source:
        jobs.append(job)
        size += entry_size(job)
        if len(jobs) == first:
            break
    if size > INLINE_BYTES or (len(jobs) < wanted and len(queue.jobs) > len(jobs)):
        walk = QueueWalk(queue, wanted, count < 0)
        return client.reply_in_steps(b"", GatheredEntries(walk, jobs, False, False, withpriority,
                                                          size))
    if withpriority:
        return b"*%d\r\n" % len(jobs) + b"".join([priority_entry(job) for job in jobs])
    return b"*%d\r\n" % len(jobs) + b"".join([job_entry(job) for job in jobs])


def priority_counts(queue: Queue) -> list[int] | None:
    """``[priority, jobs, ...]``, highest first, for the priorities the queue
    holds; None when every job has the default priority (then QSTAT shows
    1.0's fields only). Queues are ordered by priority, so this walks only
    the jobs whose priority is not the default, from both ends."""
    jobs = queue.jobs
    first = jobs.first()
    if first is None:
        return None
    last = jobs.last()
    assert last is not None  # not empty
    if first.priority == DEFAULT_PRIORITY and last.priority == DEFAULT_PRIORITY:
        return None
    counts: dict[int, int] = {}
    others = 0
    for job in jobs.iter_from_head():
        priority = job.priority
        if priority <= DEFAULT_PRIORITY:
            break
        counts[priority] = counts.get(priority, 0) + 1
        others += 1
    for job in jobs.iter_from_tail():
        priority = job.priority
        if priority >= DEFAULT_PRIORITY:
            break
        counts[priority] = counts.get(priority, 0) + 1
        others += 1
    if others < len(jobs):
        counts[DEFAULT_PRIORITY] = len(jobs) - others
    reply: list[int] = []
    for priority in sorted(counts, reverse=True):
        reply += (priority, counts[priority])
    return reply


def qstat(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """QSTAT queue: the queue's counters, or a null array. A queue holding a
    job whose priority is not the default gets a last pair, ``priorities``."""
    queue = node.queues.by_name.get(argv[1])
    if queue is None:
        return NIL_ARRAY
    now_s = node.runtime.now // 1000
    responders = list(queue.responders) if queue.responders else []
    fields: list[object] = [
        b"name", queue.name,
        b"len", len(queue.jobs),
        b"age", max(0, now_s - queue.ctime),
        b"idle", max(0, now_s - queue.atime),
        b"blocked", queue.blocked_count,
        b"import-from", responders,
        b"import-rate", queue.import_rate(node.runtime.now),
        b"jobs-in", queue.jobs_in,
        b"jobs-out", queue.jobs_out,
        b"pause", PAUSE_NAMES[queue.paused],
    ]
    counts = priority_counts(queue)
    if counts is not None:
        fields += (b"priorities", counts)
    return encode(fields)


T = TypeVar("T", bound="Sequenced")


def _scan(index: ScanIndex[T], cursor: int, count: int, busyloop: bool,
          keep: Callable[[T], bool]) -> tuple[int, list[T]]:
    """Walk a scan index from ``cursor`` collecting items accepted by ``keep``."""
    found: list[T] = []
    effort = count * SCAN_EFFORT
    while True:
        cursor, items = index.scan(cursor, count)
        effort -= count
        found.extend(item for item in items if keep(item))
        if cursor == 0 or (not busyloop and (len(found) >= count or effort <= 0)):
            return cursor, found


def _scan_reply(cursor: int, elements: list[object]) -> bytes:
    return encode([str(cursor).encode(), elements])


class _OptionError(Exception):
    def __init__(self, reply: bytes) -> None:
        super().__init__()
        self.reply = reply


# Each option's parser decides the type of its values, hence Any.
_ScanOptions = dict[bytes, Callable[[bytes], Any]]
_ScanArgs = tuple[int, int, bool, dict[bytes, list[Any]]]  # cursor, count, busyloop, values


def _parse_scan_args(argv: list[bytes], options: _ScanOptions) -> _ScanArgs | bytes:
    """Common QSCAN/JSCAN parsing: a cursor anywhere, COUNT, BUSYLOOP and
    the command's own ``options`` (keyword -> parser returning a value or
    an error reply). Values of repeatable options are collected in lists."""
    cursor = None
    count: int | None
    count = DEFAULT_SCAN_COUNT
    busyloop = False
    values: dict[bytes, list[Any]] = {}
    i = 1
    n = len(argv)
    while i < n:
        opt = argv[i].upper()
        has_value = i + 1 < n
        if opt == _BUSYLOOP:
            busyloop = True
            i += 1
            continue
        if opt == _COUNT and has_value:
            count = parse_int(argv[i + 1])
            if count is None:
                return errors.NOT_INTEGER
            count = min(max(count, 1), MAX_SCAN_COUNT)
            i += 2
            continue
        parser = options.get(opt)
        if parser is not None and has_value:
            try:
                value = parser(argv[i + 1])
            except _OptionError as exc:
                return exc.reply
            values.setdefault(opt, []).append(value)
            i += 2
            continue
        if cursor is not None:
            return errors.SYNTAX
        cursor = parse_uint(argv[i])
        if cursor is None:
            return errors.INVALID_CURSOR
        i += 1
    return cursor or 0, count, busyloop, values


def _int_option(arg: bytes) -> int:
    value = parse_int(arg)
    if value is None:
        raise _OptionError(errors.NOT_INTEGER)
    return value


_QSCAN_OPTIONS: Final[_ScanOptions] = {_MINLEN: _int_option, _MAXLEN: _int_option,
                                        _IMPORTRATE: _int_option}


def qscan(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """QSCAN [cursor] [COUNT n] [BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE n]."""
    parsed = _parse_scan_args(argv, _QSCAN_OPTIONS)
    if isinstance(parsed, bytes):  # narrows the union, unlike type() (not a hot path)
        return parsed
    cursor, count, busyloop, values = parsed
    minlen = values.get(_MINLEN, [None])[-1]
    maxlen = values.get(_MAXLEN, [None])[-1]
    rate = values.get(_IMPORTRATE, [None])[-1]
    now = node.runtime.now

    user = restricted_queues(node, client)

    def keep(queue: Queue) -> bool:
        size = len(queue.jobs)
        return ((minlen is None or size >= minlen) and (maxlen is None or size <= maxlen)
                and (rate is None or queue.import_rate(now) >= rate)
                and (user is None or user.may_access(queue.name)))

    cursor, queues = _scan(node.queues.scan, cursor, count, busyloop, keep)
    return _scan_reply(cursor, [q.name for q in queues])


def _state_option(arg: bytes) -> int:
    state = STATES_BY_NAME.get(arg.lower())
    if state is None:
        raise _OptionError(errors.INVALID_STATE)
    return state


def _reply_option(arg: bytes) -> bytes:
    kind = arg.upper()
    if kind not in (_REPLY_ALL, _REPLY_ID):
        raise _OptionError(errors.INVALID_REPLY_TYPE)
    return kind


_JSCAN_OPTIONS: Final[_ScanOptions] = {_QUEUE: bytes, _STATE: _state_option, _REPLY: _reply_option}


def jscan(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """JSCAN [cursor] [COUNT n] [BUSYLOOP] [QUEUE q] [STATE s]... [REPLY all|id]."""
    parsed = _parse_scan_args(argv, _JSCAN_OPTIONS)
    if isinstance(parsed, bytes):  # narrows the union, unlike type() (not a hot path)
        return parsed
    cursor, count, busyloop, values = parsed
    queue = values.get(_QUEUE, [None])[-1]
    states = frozenset(values.get(_STATE, ()))
    reply_all = values.get(_REPLY, [_REPLY_ID])[-1] == _REPLY_ALL

    user = restricted_queues(node, client)

    def keep(job: Job) -> bool:
        return (job.queue is not None and (queue is None or job.queue == queue)
                and (not states or job.state in states)
                and (user is None or user.may_access(job.queue)))

    cursor, jobs = _scan(node.jobs.scan, cursor, count, busyloop, keep)
    if not reply_all:
        return _scan_reply(cursor, [Status(job.id) for job in jobs])
    # A large body is written as it is, not copied into the reply.
    parts = encode_parts([str(cursor).encode(), [job_info(job, node.runtime.now) for job in jobs]],
                         LARGE_BODY)
    if len(parts) == 1:
        return parts[0]
    return client.reply_in_steps(parts[0], PartsStream(parts[1:]))


def pause(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """PAUSE queue option...: set or read a queue's pause state."""
    name = argv[1]
    flags = PAUSE_NONE
    changed = False
    bcast = False
    for arg in argv[2:]:
        opt = arg.upper()
        bits = _PAUSE_OPTIONS.get(opt)
        if bits is not None:
            flags = flags | bits if bits else PAUSE_NONE
            changed = True
        elif opt == _PAUSE_BCAST:
            bcast = True
        elif opt != _PAUSE_STATE:
            return errors.SYNTAX
    if changed:
        node.queues.set_pause(name, flags)
    queue = node.queues.by_name.get(name)
    current = queue.paused if queue is not None else PAUSE_NONE
    if bcast:
        node.outbox.broadcast({m.TYPE: m.PAUSE, m.QUEUE: name, m.PAUSE_STATE: PAUSE_NAMES[current]})
    return status(PAUSE_NAMES[current])


def qpurge(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """QPURGE queue: delete the jobs queued here in ``queue`` and their
    copies on other nodes; reply with how many were queued here."""
    queue = node.queues.by_name.get(argv[1])
    if queue is None:
        return integer(0)
    if len(queue.jobs) > INLINE_JOBS:
        return client.reply_in_steps(b"", PurgeStream(node.lifecycle, queue))
    return integer(node.lifecycle.purge(queue, INLINE_JOBS))


def qlimit(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """QLIMIT queue [RATE jobs-per-second [BURST n]]: set (RATE 0 removes)
    or read the queue's delivery limit on this node, kept in the tables
    file (written now, so that a failure is answered). The read form replies rate (a decimal string, "0" when
    there is none), burst and the tokens available now."""
    name = argv[1]
    rate: int | None = None
    burst = 0
    i = 2
    n = len(argv)
    while i < n:
        opt = argv[i].upper()
        if i + 1 >= n:
            return errors.SYNTAX
        if opt == _RATE:
            rate = parse_rate(argv[i + 1])
            if rate is None:
                return RATE_RANGE
        elif opt == _BURST:
            value = parse_int(argv[i + 1])
            if value is None or not 1 <= value <= MAX_BURST:
                return BURST_RANGE
            burst = value
        else:
            return errors.SYNTAX
        i += 2
    queues = node.queues
    limit = queues.limits.get(name)
    now = node.runtime.now
    if rate is None:
        if burst:
            return BURST_WITHOUT_RATE
        if limit is None:
            return encode([b"rate", b"0", b"burst", 0, b"tokens", 0])
        return encode([b"rate", format_rate(limit.rate_milli), b"burst", limit.burst,
                       b"tokens", limit.tokens(now)])
    if not burst:
        burst = default_burst(rate)
    if not rate:
        queues.set_limit(name, None)
        node.table_log.drop(LIMIT_TABLE, name)
    else:
        if limit is None:
            limit = RateLimit(rate, burst, now)
        else:
            limit.change(rate, burst, now)
        queues.set_limit(name, limit)
        node.table_log.put(LIMIT_TABLE, name, limit_record(limit))
    problem = node.host.flush_tables()
    return OK if problem is None else error(LIMIT_NOT_SAVED % problem)


TABLE: Final = (
           ("qlen", 2, "rF", qlen),
           ("qpeek", 3, "r", qpeek),
           ("qstat", 2, "rF", qstat),
           ("qscan", -1, "r", qscan),
           ("jscan", -1, "r", jscan),
           ("pause", -3, "rF", pause),
           ("qpurge", 2, "w", qpurge),
           ("qlimit", -2, "r", qlimit),
       )
