"""ADDJOB (spec: commands.md §1 ADDJOB) and its extensions' options
(docs/commands.md "Extensions"): the plain form's fast path on a lone node,
pipelined runs, the options parser, DEDUPID's answers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disque.protocol import errors
from disque.commands.args import option_name, parse_float, parse_int
from disque.jobs.job import (DEFAULT_PRIORITY, MAX_DELIVERIES, MAX_PRIORITY, WAIT_REPL, Job,
                             JobExtras)
from disque.queues.queue import PAUSE_IN

if TYPE_CHECKING:
    from disque.context.clients import ClientState
    from disque.node import Node

DEFAULT_TTL: Final = 86400
MAX_DEFAULT_RETRY: Final = 300
MAX_REPLICATE: Final = 65535

_REPLICATE: Final = b"REPLICATE"
_DELAY: Final = b"DELAY"
_RETRY: Final = b"RETRY"
_TTL: Final = b"TTL"
_MAXLEN: Final = b"MAXLEN"
_ASYNC: Final = b"ASYNC"
# Extensions (docs/commands.md).
_PRIORITY: Final = b"PRIORITY"
_DEDUPID: Final = b"DEDUPID"
_MAXDELIVER: Final = b"MAXDELIVER"
_DEADLETTER: Final = b"DEADLETTER"
_BACKOFF: Final = b"BACKOFF"
_MAXRETRY: Final = b"MAXRETRY"
MAX_DEDUPID_LEN: Final = 256
MAX_BACKOFF: Final = 1000.0
MAXDELIVER_UNSET: Final = -1  # in parsed extras: the server's maxdeliver-default applies


# repl, ttl, retry, delay, maxlen, async (None: not given), priority, and the
# extensions' fields when any was given (a template: each job gets a copy).
_AddjobOptions = tuple[int | None, int | None, int | None, int, int | None, bool, int,
                       JobExtras | None]
_NO_OPTIONS: Final[_AddjobOptions] = (None, None, None, 0, None, False, DEFAULT_PRIORITY, None)


def _parse_extension(opt: bytes, arg: bytes, value: int | None, extras: JobExtras) -> bytes | None:
    """Set one of the extensions' job options (not PRIORITY) in ``extras``;
    an error reply, or None."""
    if opt == _DEDUPID:
        if not 0 < len(arg) <= MAX_DEDUPID_LEN:
            return errors.DEDUPID_RANGE
        extras.dedupid = arg
    elif opt == _MAXDELIVER:
        if value is None or not 0 <= value <= MAX_DELIVERIES:
            return errors.MAXDELIVER_RANGE
        extras.maxdeliver = value
    elif opt == _DEADLETTER:
        if not arg:
            return errors.DEADLETTER_EMPTY
        extras.deadletter = arg
    elif opt == _BACKOFF:
        factor = parse_float(arg)
        if factor is None or not 1.0 <= factor <= MAX_BACKOFF:
            return errors.BACKOFF_RANGE
        extras.backoff = factor
    elif opt == _MAXRETRY:
        if value is None or value <= 0:
            return errors.MAXRETRY_RANGE
        extras.maxretry = value
    else:
        return errors.SYNTAX
    return None


def _parse_addjob_options(argv: list[bytes]) -> _AddjobOptions | bytes:
    """Options after the timeout; returns an error reply or the values."""
    repl = ttl = retry = maxlen = None
    delay = 0
    async_ = False
    priority = DEFAULT_PRIORITY
    extras: JobExtras | None = None
    i = 4
    n = len(argv)
    while i < n:
        opt = option_name(argv[i])
        if opt == _ASYNC:
            async_ = True
            i += 1
            continue
        if i + 1 >= n:
            return errors.SYNTAX
        value = parse_int(argv[i + 1])
        if opt == _REPLICATE:
            if value is None or not 0 < value <= MAX_REPLICATE:
                return errors.REPLICATE_RANGE
            repl = value
        elif opt == _DELAY:
            if value is None or value < 0:
                return errors.DELAY_RANGE
            delay = value
        elif opt == _RETRY:
            if value is None or value < 0:
                return errors.RETRY_RANGE
            retry = value
        elif opt == _TTL:
            if value is None or value <= 0:
                return errors.TTL_RANGE
            ttl = value
        elif opt == _MAXLEN:
            if value is None or value <= 0:
                return errors.MAXLEN_RANGE
            maxlen = value
        elif opt == _PRIORITY:
            if value is None or not 0 <= value <= MAX_PRIORITY:
                return errors.PRIORITY_RANGE
            priority = value
        else:
            if extras is None:
                extras = JobExtras(MAXDELIVER_UNSET)
            error = _parse_extension(opt, argv[i + 1], value, extras)
            if error is not None:
                return error
        i += 2
    if extras is not None and extras.maxretry and not extras.backoff:
        return errors.MAXRETRY_WITHOUT_BACKOFF
    return repl, ttl, retry, delay, maxlen, async_, priority, extras


def _same_options(argv: list[bytes], other: list[bytes]) -> bool:
    """The two ADDJOBs have the same words after the timeout."""
    n = len(argv)
    if len(other) != n:
        return False
    i = 4
    while i < n:
        if argv[i] != other[i]:
            return False
        i += 1
    return True


def _new_job(node: Node, queue_name: bytes, body: bytes, repl: int, ttl: int, delay: int,
             retry: int) -> Job:
    """A job created by this node (spec: commands.md ADDJOB, execution)."""
    now = node.runtime.now
    job = Job(node.ids.new_id(ttl, retry), queue_name, body, repl, node.jobs.new_ctime(now),
              now // 1000 + ttl, delay, retry)
    job.qtime = now + (delay or retry) * 1000
    return job


def _addjob_defaults(node: Node, argv: list[bytes], priority: int = DEFAULT_PRIORITY,
                     token: bytes | None = None) -> bytes:
    """``ADDJOB queue body timeout`` on a lone node: REPLICATE 1, TTL one day,
    RETRY 300 s, queued at once. The common case, kept free of option logic;
    ``_addjob_one_option`` adds a PRIORITY or a DEDUPID ``token`` to it."""
    timeout = argv[3]
    if timeout != b"0":
        value = parse_int(timeout)
        if value is None:
            return errors.TIMEOUT_NOT_INTEGER
        if value < 0:
            return errors.TIMEOUT_NEGATIVE
    name = argv[1]
    leaving = node.membership.leaving
    if leaving or node.memory.used > node.memory.warn_threshold:
        return _refused(node, name, token, errors.NOREPL_LEAVING if leaving else errors.NOREPL_OOM)
    queue = node.queues.by_name.get(name)
    if queue is not None:
        if queue.paused & PAUSE_IN:
            return _refused(node, name, token, errors.PAUSED)
        name = queue.name  # one name object shared by every job of the queue
    job = _new_job(node, name, argv[2], 1, DEFAULT_TTL, 0, MAX_DEFAULT_RETRY)
    if token is not None:
        known = node.dedup.claim(name, token, job.id, node.runtime.now,
                                 node.config.dedup_window * 1000)
        if known is not None:
            node.counters.added -= 1  # the ID was handed out, the job is dropped unseen
            return _known_job(node, known)
        job.ext = token
    job.delivered = node.runtime.self_delivered
    if priority != DEFAULT_PRIORITY:
        job.priority = priority
    node.jobs.add_new(job)
    node.lifecycle.queue_job(job)
    if node.journaling:
        node.journal.job_stored(job)
    return b"+" + job.id + b"\r\n"


def _refused(node: Node, queue: bytes, token: bytes | None, error: bytes) -> bytes:
    """``error``, unless the ADDJOB's DEDUPID names a job already: a
    repeated ADDJOB is answered with its job whatever the node's state."""
    if token is not None:
        known = _deduplicated(node, queue, token)
        if known is not None:
            return known
    return error


def _addjob_one_option(node: Node, argv: list[bytes]) -> bytes | None:
    """``ADDJOB queue body timeout PRIORITY n`` or ``... DEDUPID token`` on a
    lone node, option words in upper case: the plain form's path plus the
    option (their cost over the plain ADDJOB is the option's own: issue
    19's benchmark), with the errors ``_parse_addjob_options`` gives. None
    for any other option."""
    opt = argv[4]
    value = argv[5]
    if opt == _DEDUPID:
        if not 0 < len(value) <= MAX_DEDUPID_LEN:
            return errors.DEDUPID_RANGE
        return _addjob_defaults(node, argv, DEFAULT_PRIORITY, value)
    if opt == _PRIORITY:
        priority = parse_int(value)
        if priority is None or not 0 <= priority <= MAX_PRIORITY:
            return errors.PRIORITY_RANGE
        return _addjob_defaults(node, argv, priority)
    return None


def addjob_run(node: Node, client: ClientState, commands: list[list[bytes]], start: int,
               out: list[bytes]) -> int:
    """Pipelined ADDJOBs on a lone node (see ``Node.call_run``): each is
    answered by ``_addjob_defaults``, or by ``addjob`` when it has options,
    errors included. A lone node never blocks an ADDJOB (it cannot have the
    replicas a synchronous one waits for), so every command of the run gets
    its reply here. The run stops when memory passes the eviction
    threshold, where ``Node.call`` must act."""
    if node.membership.size != 1:
        return start
    name = commands[start][0]
    append = out.append
    memory = node.memory
    ready = node.ready_queues
    wanted = node.wanted_queues
    maxdeliver_default = node.config.maxdeliver_default
    parsed_argv: list[bytes] | None = None  # the command whose options ``parsed`` holds
    parsed: _AddjobOptions | bytes = _NO_OPTIONS
    i = start
    n = len(commands)
    while i < n:
        argv = commands[i]
        if len(argv) < 4 or argv[0] != name or memory.used > memory.evict_threshold:
            break  # an arity error, another spelling, or memory: Node.call answers
        size = len(argv)
        if size == 4 and not maxdeliver_default:
            append(_addjob_defaults(node, argv))
        elif size == 6 and not maxdeliver_default and (
                reply := _addjob_one_option(node, argv)) is not None:
            append(reply)
        else:
            # A producer repeats its options: parsed once per run of equal ones.
            if parsed_argv is None or not _same_options(argv, parsed_argv):
                parsed = _parse_addjob_options(argv)
                parsed_argv = argv
            if type(parsed) is bytes:
                append(parsed)
            else:
                reply = _addjob_with(node, client, argv, parsed)  # type: ignore[arg-type]
                assert reply is not None  # see above: never blocked here
                append(reply)
        if ready or wanted:  # what Node.call does after each command: blocked consumers first
            node.after_input()
        i += 1
    return i


def addjob(node: Node, client: ClientState, argv: list[bytes]) -> bytes | None:
    """ADDJOB queue body ms-timeout [options]."""
    lone = node.membership.size == 1 and not node.config.maxdeliver_default
    if len(argv) == 4:
        if lone:
            return _addjob_defaults(node, argv)
        return _addjob_with(node, client, argv, _NO_OPTIONS)
    if lone and len(argv) == 6:
        reply = _addjob_one_option(node, argv)
        if reply is not None:
            return reply
    parsed = _parse_addjob_options(argv)
    if type(parsed) is bytes:
        return parsed
    # mypy keeps bytes in the union after `type(...) is bytes` (bytes can be
    # subclassed); isinstance would narrow it but costs ADDJOB more.
    return _addjob_with(node, client, argv, parsed)  # type: ignore[arg-type]


def _addjob_with(node: Node, client: ClientState, argv: list[bytes],
                 options: _AddjobOptions) -> bytes | None:
    """ADDJOB once its options are parsed (``_parse_addjob_options``)."""
    repl, ttl, retry, delay, maxlen, async_, priority, extras = options
    timeout = parse_int(argv[3])
    if timeout is None:
        return errors.TIMEOUT_NOT_INTEGER
    if timeout < 0:
        return errors.TIMEOUT_NEGATIVE
    if extras is not None and extras.dedupid is not None:
        known = _deduplicated(node, argv[1], extras.dedupid)
        if known is not None:
            return known
    membership = node.membership
    if repl is None:
        repl = membership.size if membership.size < 3 else 3
    if repl > 1 and retry == 0:
        return errors.RETRY0_REPLICATE
    if ttl is None:
        ttl = DEFAULT_TTL
        if retry is None:
            retry = MAX_DEFAULT_RETRY
    if delay >= ttl:
        return errors.DELAY_TTL
    if retry is None:
        retry = ttl // 10 if ttl < 10 * MAX_DEFAULT_RETRY else MAX_DEFAULT_RETRY
        if not retry:
            retry = 1
    leaving = membership.leaving
    extrepl = leaving or node.memory.used > node.memory.warn_threshold
    additional = repl if extrepl else repl - 1
    if additional > len(membership.reachable):
        if extrepl and additional - 1 == len(membership.reachable):
            return errors.NOREPL_LEAVING if leaving else errors.NOREPL_OOM
        return errors.NOREPL_UNREACHABLE
    queue_name = argv[1]
    queue = node.queues.by_name.get(queue_name)
    if queue is not None:
        if maxlen is not None and len(queue.jobs) >= maxlen:
            return errors.MAXLEN_EXCEEDED
        if queue.paused & PAUSE_IN:
            return errors.PAUSED
        queue_name = queue.name  # one name object shared by every job of the queue
    job = _new_job(node, queue_name, argv[2], repl, ttl, delay, retry)
    job.priority = priority
    if extras is not None or node.config.maxdeliver_default:
        _extend(node, job, extras)
    reply = b"+" + job.id + b"\r\n"
    if not extrepl:
        job.delivered = node.runtime.self_delivered
        if async_ or repl == 1:
            if delay == 0:
                node.jobs.add_new(job)
                node.lifecycle.queue_job(job)
            else:
                node.lifecycle.register_job(job)
            if repl > 1:
                node.replication.replicate(job, repl - 1, True)
            node.journal.job_stored(job)  # spec decision 14: after replication, real holders
            return reply
    if async_:
        # Externally replicated and asynchronous: never registered here.
        node.replication.hand_off(job, repl, delay)
        return reply
    node.replication.wait_for_replicas(client, job, extrepl, additional,
                                       node.runtime.now + timeout if timeout else 0)
    return None


def _deduplicated(node: Node, queue: bytes, token: bytes) -> bytes | None:
    """The reply to an ADDJOB whose DEDUPID named a job in the window, or None."""
    job_id = node.dedup.find(queue, token, node.config.dedup_window * 1000)
    return None if job_id is None else _known_job(node, job_id)


def _known_job(node: Node, job_id: bytes) -> bytes:
    """The reply to an ADDJOB whose DEDUPID names ``job_id``."""
    job = node.jobs.by_id.get(job_id)
    if job is not None and job.state == WAIT_REPL:
        # The first ADDJOB may still fail: this one cannot say the job exists.
        return errors.dedup_pending(job_id)
    return b"+" + job_id + b"\r\n"


def _extend(node: Node, job: Job, extras: JobExtras | None) -> None:
    """Give a new job its extensions' fields: those ADDJOB parsed, with the
    server's maxdeliver-default where MAXDELIVER was not given. The job's
    DEDUPID is remembered now (the job is found by it from this ADDJOB on)."""
    ext = extras.copy() if extras is not None else JobExtras(MAXDELIVER_UNSET)
    if ext.maxdeliver == MAXDELIVER_UNSET:
        ext.maxdeliver = node.config.maxdeliver_default
    ext.base_retry = job.retry
    token = ext.dedupid
    job.ext = token if token is not None and ext.token_only() else ext
    if token is not None:
        queue = job.queue
        assert queue is not None
        # ADDJOB found no job of the token (_deduplicated): this one takes it.
        node.dedup.claim(queue, token, job.id, node.runtime.now,
                         node.config.dedup_window * 1000)


RUN_HANDLERS: Final = {"addjob": addjob_run}

TABLE: Final = (
           ("addjob", -4, "wmF", addjob),
       )
