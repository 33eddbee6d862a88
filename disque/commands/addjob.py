"""ADDJOB (spec: commands.md §1 ADDJOB) and its extensions' options
(docs/commands.md "Extensions").

The options and the timeout are parsed first, in the spec's order, into an
``AddjobOptions``; ``_addjob`` then holds every other rule of the command,
in the spec's order: the defaults and their errors, NOREPL, MAXLEN, PAUSED,
the user's quota, and the path the new job takes, each refusal through
``_refused`` (a DEDUPID that names a job is answered with it first). The
entry points only find the options: ``addjob`` for one command and
``addjob_run`` for a pipelined run on a lone node pass the plain form and
the one-option PRIORITY and DEDUPID forms straight to it with a shared
options object, without the parser (the common producers' commands, see
docs/benchmarks.md), and parse any other form once (per run of equal ones);
``addjobs`` (ADDJOBS, many jobs of one queue) parses its options once for
all of its jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disque.protocol import errors
from disque.commands.access import DEDUPIDS, addjobs_options_end
from disque.commands.args import option_name, parse_float, parse_int, parse_timeout
from disque.config.table import MAX_DELIVERIES
from disque.config.users import DEFAULT_USER
from disque.context.clients import ReplyBatch
from disque.jobs.job import (DEFAULT_PRIORITY, HEADER_NAME_SIZE, HEADER_REPEATED, HEADERS_TOO_LARGE,
                             HEADERS_TOO_MANY, HEADERS_VALID, MAX_PRIORITY,
                             WAIT_REPL, Job, JobExtras, check_headers, set_extras)
from disque.jobs.quotas import QuotaAccount
from disque.protocol.resp import error
from disque.queues.queue import PAUSE_IN

if TYPE_CHECKING:
    from disque.context.clients import ClientState
    from disque.config.users import User
    from disque.state.nodestate import NodeState

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
_HEADER: Final = b"HEADER"
MAX_DEDUPID_LEN: Final = 256
MAX_BACKOFF: Final = 1000.0
_NO_TIMEOUT: Final = b"0"  # the usual timeout, which needs no parsing
MAXDELIVER_UNSET: Final = -1  # in parsed extras: the server's maxdeliver-default applies
QUOTA_JOBS_REACHED: Final = "QUOTA User %s has %d jobs pending on this node, its quota-jobs is %d"
QUOTA_BYTES_REACHED: Final = ("QUOTA User %s has %d bytes pending on this node, %d more would "
                              "pass its quota-bytes of %d")
# ADDJOBS's jobs per call: one call holds the node (and every other client)
# for about a millisecond per thousand jobs.
MAX_BULK_JOBS: Final = 10000
_HEADER_ERRORS: Final = {HEADER_NAME_SIZE: errors.HEADER_NAME_SIZE,
                         HEADERS_TOO_MANY: errors.HEADERS_TOO_MANY,
                         HEADERS_TOO_LARGE: errors.HEADERS_TOO_LARGE,
                         HEADER_REPEATED: errors.HEADER_REPEATED}


class AddjobOptions:
    """What an ADDJOB's words after its body say (ADDJOBS's after its queue),
    found once per command: once for every job of an ADDJOBS, once for a run
    of pipelined ADDJOBs with the same words. Never changed once made, so
    that one object serves all those jobs (and the module's shared ones
    every plain ADDJOB). Values not given are held as ints, not None: the
    compiled core reads an int field without unboxing it."""

    __slots__ = ("timeout", "replicate", "ttl", "retry", "delay", "maxlen", "asynchronous",
                 "priority", "dedupid", "extras")

    def __init__(self, priority: int = DEFAULT_PRIORITY) -> None:
        self.timeout = 0  # ms the producer waits for the replicas; 0: no limit
        self.replicate = 0  # 0: not given, the node's default number of copies
        self.ttl = DEFAULT_TTL
        self.retry = MAX_DEFAULT_RETRY  # RETRY's value, or the default for the TTL
        self.delay = 0
        self.maxlen = 0  # 0: no limit
        self.asynchronous = False
        self.priority = priority
        self.dedupid: bytes | None = None
        # The other extensions' fields when any was given: a template each job copies.
        self.extras: JobExtras | None = None


_NO_OPTIONS: Final = AddjobOptions()  # the plain form: ADDJOB queue body 0
# ADDJOB queue body 0 PRIORITY p, by p.
_PRIORITY_ALONE: Final = tuple([AddjobOptions(p) for p in range(MAX_PRIORITY + 1)])


def _priority_value(value: int | None) -> int:
    """PRIORITY's argument as a priority, or -1 when it is not one."""
    return value if value is not None and 0 <= value <= MAX_PRIORITY else -1


def _is_dedupid(arg: bytes) -> bool:
    """DEDUPID's argument is a token (1 to 256 bytes)."""
    return 0 < len(arg) <= MAX_DEDUPID_LEN


def _default_retry(ttl: int) -> int:
    """The retry period of a job given a TTL and no RETRY: a tenth of the
    TTL, at most MAX_DEFAULT_RETRY, at least a second."""
    if ttl >= 10 * MAX_DEFAULT_RETRY:
        return MAX_DEFAULT_RETRY
    return ttl // 10 or 1


def _parse_extension(opt: bytes, arg: bytes, value: int | None, extras: JobExtras) -> bytes | None:
    """Set one of the extensions' job options (not PRIORITY nor DEDUPID) in
    ``extras``; an error reply, or None."""
    if opt == _MAXDELIVER:
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


def _parse_options(argv: list[bytes], start: int, stop: int) -> AddjobOptions | bytes:
    """The options in ``argv[start:stop]``, left to right (the spec checks
    them before the timeout, which is left at 0 here): an error reply, or
    what they say."""
    options = AddjobOptions()
    ttl = 0  # not given
    retry = -1  # not given
    extras: JobExtras | None = None
    headers: list[bytes] | None = None
    i = start
    while i < stop:
        opt = option_name(argv[i])
        if opt == _ASYNC:
            options.asynchronous = True
            i += 1
            continue
        if opt == _HEADER:
            if i + 2 >= stop:
                return errors.SYNTAX
            if headers is None:
                headers = []
            headers.append(argv[i + 1])
            headers.append(argv[i + 2])
            i += 3
            continue
        if i + 1 >= stop:
            return errors.SYNTAX
        arg = argv[i + 1]
        value = parse_int(arg)
        if opt == _REPLICATE:
            if value is None or not 0 < value <= MAX_REPLICATE:
                return errors.REPLICATE_RANGE
            options.replicate = value
        elif opt == _DELAY:
            if value is None or value < 0:
                return errors.DELAY_RANGE
            options.delay = value
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
            options.maxlen = value
        elif opt == _PRIORITY:
            priority = _priority_value(value)
            if priority < 0:
                return errors.PRIORITY_RANGE
            options.priority = priority
        elif opt == _DEDUPID:
            if not _is_dedupid(arg):
                return errors.DEDUPID_RANGE
            options.dedupid = arg
        else:
            if extras is None:
                extras = JobExtras(MAXDELIVER_UNSET)
            error = _parse_extension(opt, arg, value, extras)
            if error is not None:
                return error
        i += 2
    if extras is not None and extras.maxretry and not extras.backoff:
        return errors.MAXRETRY_WITHOUT_BACKOFF
    if headers is not None:
        fault = check_headers(headers)
        if fault != HEADERS_VALID:
            return _HEADER_ERRORS[fault]
        if extras is None:
            extras = JobExtras(MAXDELIVER_UNSET)
        extras.headers = tuple(headers)
    options.extras = extras
    if ttl:
        options.ttl = ttl
        options.retry = retry if retry >= 0 else _default_retry(ttl)
    elif retry >= 0:
        options.retry = retry
    return options


def _set_timeout(options: AddjobOptions, timeout: bytes) -> bytes | None:
    """Give ``options`` the command's ``timeout`` argument, checked after
    them as the spec does: its error reply, or None."""
    value = parse_timeout(timeout)
    if isinstance(value, bytes):
        return value
    options.timeout = value
    return None


def _parse_addjob(argv: list[bytes]) -> AddjobOptions | bytes:
    """ADDJOB's options and timeout: an error reply, or what they say."""
    options = _parse_options(argv, 4, len(argv))
    if isinstance(options, AddjobOptions):
        problem = _set_timeout(options, argv[3])
        if problem is not None:
            return problem
    return options


def check_options(options: list[bytes]) -> tuple[bytes | None, bool]:
    """What ADDJOB says of these words after its timeout: its error reply
    (None if they are valid), and whether REPLICATE is among them
    (SCHEDULE SET and the ADDJOBs of the schedules' ticks)."""
    parsed = _parse_options(options, 0, len(options))
    if isinstance(parsed, AddjobOptions):
        return None, parsed.replicate != 0
    return parsed, False


def _same_words(argv: list[bytes], other: list[bytes]) -> bool:
    """The two ADDJOBs have the same timeout and options."""
    n = len(argv)
    if len(other) != n:
        return False
    i = 3
    while i < n:
        if argv[i] != other[i]:
            return False
        i += 1
    return True


def addjob(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes | None:
    """ADDJOB queue body ms-timeout [options]."""
    if argv[3] == _NO_TIMEOUT:
        size = len(argv)
        if size == 4:
            return _addjob(node, client, argv[1], argv[2], _NO_OPTIONS)
        if size == 6:
            opt = argv[4]
            if opt == _PRIORITY or opt == _DEDUPID:
                return _addjob_one_option(node, client, argv, opt)
    return _addjob_parsed(node, client, argv, _parse_addjob(argv))


def addjob_run(node: NodeState, client: ClientState, commands: list[list[bytes]], start: int,
               out: list[bytes]) -> int:
    """Pipelined ADDJOBs on a lone node (see ``Node.call_run``), each answered
    as ``addjob`` answers it, errors included, with the timeout and options
    parsed once per run of equal ones. A lone node never blocks an ADDJOB (it
    cannot have the replicas a synchronous one waits for), so every command
    of the run gets its reply here. The run stops when memory passes the
    eviction threshold, where ``Node.call``'s OOM gate must act."""
    if node.membership.size != 1:
        return start
    name = commands[start][0]
    append = out.append
    memory = node.memory
    ready = node.ready_queues
    wanted = node.wanted_queues
    parsed_argv: list[bytes] | None = None  # the command whose words ``parsed`` holds
    parsed: AddjobOptions | bytes = _NO_OPTIONS
    i = start
    n = len(commands)
    while i < n:
        argv = commands[i]
        size = len(argv)
        if size < 4 or argv[0] != name or memory.used > memory.evict_threshold:
            break  # an arity error, another spelling, or memory: Node.call answers
        if size == 4 and argv[3] == _NO_TIMEOUT:
            reply = _addjob(node, client, argv[1], argv[2], _NO_OPTIONS)
        elif (size == 6 and ((opt := argv[4]) == _PRIORITY or opt == _DEDUPID)
              and argv[3] == _NO_TIMEOUT):
            reply = _addjob_one_option(node, client, argv, opt)
        else:
            # A producer repeats its options: parsed once per run of equal ones.
            if parsed_argv is None or not _same_words(argv, parsed_argv):
                parsed = _parse_addjob(argv)
                parsed_argv = argv
            reply = _addjob_parsed(node, client, argv, parsed)
        assert reply is not None  # see above: never blocked here
        append(reply)
        if ready or wanted:  # what Node.call does after each command: blocked consumers first
            node.after_input()
        i += 1
    return i


def _addjob_one_option(node: NodeState, client: ClientState, argv: list[bytes],
                       opt: bytes) -> bytes | None:
    """``ADDJOB queue body 0 PRIORITY n`` or ``... DEDUPID token`` (``opt``,
    spelt in upper case): the option's value checked as the options parser
    checks it, without the parser and without a new options object (its
    cost over the plain ADDJOB is the option's own)."""
    if opt == _DEDUPID:
        token = argv[5]
        if not _is_dedupid(token):
            return errors.DEDUPID_RANGE
        return _addjob(node, client, argv[1], argv[2], _NO_OPTIONS, token)
    priority = _priority_value(parse_int(argv[5]))
    if priority < 0:
        return errors.PRIORITY_RANGE
    return _addjob(node, client, argv[1], argv[2], _PRIORITY_ALONE[priority])


def _addjob_parsed(node: NodeState, client: ClientState, argv: list[bytes],
                   parsed: AddjobOptions | bytes) -> bytes | None:
    """ADDJOB with what ``_parse_addjob`` gave: its error, or its options."""
    if isinstance(parsed, AddjobOptions):
        return _addjob(node, client, argv[1], argv[2], parsed, parsed.dedupid)
    return parsed


def _addjob(node: NodeState, client: ClientState, name: bytes, body: bytes,
            options: AddjobOptions, token: bytes | None = None,
            batch: ReplyBatch | None = None) -> bytes | None:
    """ADDJOB of ``body`` to queue ``name`` once its timeout and options are
    known: the reply, or None while the producer waits for its replicas.
    ``token`` is the job's DEDUPID (``options`` may be shared by an ADDJOBS's
    jobs, each with its own). Every refusal goes through ``_refused``: a
    DEDUPID that names a job is answered with it first. ``batch`` gathers an
    ADDJOBS's replies: a job that waits for replicas is recorded there, and
    its producer is parked once every job of the command has been added."""
    membership = node.membership
    copies = options.replicate
    if not copies:
        size = membership.size
        copies = size if size < 3 else 3
    retry = options.retry
    if copies > 1 and retry == 0:  # only a RETRY 0 given is 0
        return _refused(node, name, token, errors.RETRY0_REPLICATE)
    ttl = options.ttl
    delay = options.delay
    if delay >= ttl:
        return _refused(node, name, token, errors.DELAY_TTL)
    # A node leaving the cluster or past the memory warning level holds no
    # copy: every copy goes to other nodes (spec: commands.md ADDJOB).
    leaving = membership.leaving
    memory = node.memory
    extrepl = leaving or memory.used > memory.warn_threshold
    additional = copies if extrepl else copies - 1
    if additional > len(membership.reachable):
        if extrepl and additional - 1 == len(membership.reachable):
            return _refused(node, name, token,
                            errors.NOREPL_LEAVING if leaving else errors.NOREPL_OOM)
        return _refused(node, name, token, errors.NOREPL_UNREACHABLE)
    queue = node.queues.by_name.get(name)
    if queue is not None:
        if options.maxlen and len(queue.jobs) >= options.maxlen:
            return _refused(node, name, token, errors.MAXLEN_EXCEEDED)
        if queue.paused & PAUSE_IN:
            return _refused(node, name, token, errors.PAUSED)
        name = queue.name  # one name object shared by every job of the queue
    account: QuotaAccount | None = None
    if node.quotas.active:  # some user has a quota
        user = client.user
        if user is None:
            user = node.config.users[DEFAULT_USER]
        if user.has_quota():
            account = node.quotas.account(user.name)
            refusal = _over_quota(user, account, len(body))
            if refusal is not None:
                node.stats.quota_refused += 1
                return _refused(node, name, token, refusal)

    # The job (spec: commands.md ADDJOB, execution).
    now = node.runtime.now
    job_id = node.ids.new_id(ttl, retry)
    if token is not None:
        # Finding the token and taking it for this job is one lookup.
        known = node.dedup.claim(name, token, job_id, now, node.config.dedup_window * 1000)
        if known is not None:
            node.counters.added -= 1  # the ID was handed out, the job is dropped unseen
            return _known_job(node, known)
    job = Job(job_id, name, body, copies, node.jobs.new_ctime(now), now // 1000 + ttl, delay,
              retry)
    job.qtime = now + (delay or retry) * 1000
    if options.priority != DEFAULT_PRIORITY:
        job.priority = options.priority
    if options.extras is not None or node.config.maxdeliver_default:
        _extend(node, job, options.extras, token)
    elif token is not None:
        job.ext = token  # a DEDUPID alone is held as the token (Job.ext)
    reply = b"+" + job_id + b"\r\n"
    if not extrepl:
        job.delivered = node.runtime.self_delivered
        if copies == 1 or options.asynchronous:
            if delay == 0:
                node.jobs.add_new(job)
                node.lifecycle.queue_job(job)
            else:
                node.lifecycle.register_job(job)
            if account is not None:
                node.quotas.charge(job, account)
            if copies > 1:
                node.replication.replicate(job, copies - 1, True)
            if node.journaling:
                node.journal.job_stored(job)  # spec decision 14: after replication, real holders
            return reply
    if options.asynchronous:
        # Externally replicated and asynchronous: never registered here.
        node.replication.hand_off(job, copies, delay)
        return reply
    if account is not None:
        node.quotas.charge(job, account)  # held here from now on, released as any job is
    if batch is None:
        timeout = options.timeout
        node.replication.wait_for_replicas(client, job, extrepl, additional,
                                           now + timeout if timeout else 0)
    else:
        node.replication.ask_replicas(job, extrepl, additional)
        batch.waiting[job_id] = len(batch.replies)
    return None


def _over_quota(user: User, account: QuotaAccount, size: int) -> bytes | None:
    """The QUOTA refusal of one more job of ``size`` body bytes, or None."""
    if user.quota_jobs and account.jobs >= user.quota_jobs:
        return error(QUOTA_JOBS_REACHED % (user.name.decode("utf-8", "backslashreplace"),
                                           account.jobs, user.quota_jobs))
    if user.quota_bytes and account.bytes + size > user.quota_bytes:
        return error(QUOTA_BYTES_REACHED % (user.name.decode("utf-8", "backslashreplace"),
                                            account.bytes, size, user.quota_bytes))
    return None


def _refused(node: NodeState, queue: bytes, token: bytes | None, error: bytes) -> bytes:
    """``error``, unless the ADDJOB's DEDUPID names a job already: a
    repeated ADDJOB is answered with its job whatever the node's state."""
    if token is not None:
        job_id = node.dedup.find(queue, token, node.config.dedup_window * 1000)
        if job_id is not None:
            return _known_job(node, job_id)
    return error


def _known_job(node: NodeState, job_id: bytes) -> bytes:
    """The reply to an ADDJOB whose DEDUPID names ``job_id``."""
    job = node.jobs.by_id.get(job_id)
    if job is not None and job.state == WAIT_REPL:
        # The first ADDJOB may still fail: this one cannot say the job exists.
        return errors.dedup_pending(job_id)
    return b"+" + job_id + b"\r\n"


def _extend(node: NodeState, job: Job, extras: JobExtras | None, token: bytes | None) -> None:
    """Give a new job its extensions' fields: those ADDJOB parsed (or its
    DEDUPID ``token`` alone), with the server's maxdeliver-default where
    MAXDELIVER was not given."""
    if extras is not None:
        ext = extras.copy()
        ext.dedupid = token
    else:
        ext = JobExtras(MAXDELIVER_UNSET, dedupid=token)
    if ext.maxdeliver == MAXDELIVER_UNSET:
        ext.maxdeliver = node.config.maxdeliver_default
    ext.base_retry = job.retry
    set_extras(job, ext)


def addjobs(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes | None:
    """ADDJOBS queue ms-timeout [options] BODIES body [body ...], or
    ... DEDUPIDS token body [token body ...]: one ADDJOB per body, with the
    options they share (docs/commands.md "Bulk add"). The reply is an array
    of what each ADDJOB would have answered; a synchronous one is sent once
    every job has its replicas or has failed. An error in the options (or
    a token) refuses the command before any job is added."""
    start = addjobs_options_end(argv)
    n = len(argv)
    if start >= n - 1:
        return errors.ADDJOBS_NO_JOBS
    paired = option_name(argv[start]) == DEDUPIDS
    start += 1
    count = n - start
    if paired:
        if count & 1:
            return errors.SYNTAX
        count >>= 1
    if count > MAX_BULK_JOBS:
        return errors.ADDJOBS_TOO_MANY
    options = _parse_options(argv, 3, start - 1)
    if not isinstance(options, AddjobOptions):
        return options
    if options.dedupid is not None:
        return errors.ADDJOBS_DEDUPID
    problem = _set_timeout(options, argv[2])
    if problem is not None:
        return problem
    if paired:
        i = start
        while i < n:
            if not _is_dedupid(argv[i]):
                return errors.DEDUPID_RANGE
            i += 2
    name = argv[1]
    batch = ReplyBatch()
    replies = batch.replies
    memory = node.memory
    token: bytes | None = None
    full = False  # memory past the eviction threshold that eviction cannot free
    i = start
    while i < n:
        if paired:
            token = argv[i]
            i += 1
        body = argv[i]
        i += 1
        if full:
            replies.append(errors.OOM)
            continue
        reply = _addjob(node, client, name, body, options, token, batch)
        replies.append(b"" if reply is None else reply)  # None: in batch.waiting
        # Node.call's OOM gate let the command in; each job after the first
        # meets it again, as its own ADDJOB would, since every job takes memory.
        if i < n and memory.used > memory.evict_threshold:
            full = not node.eviction.free_memory()
    if batch.waiting:
        timeout = options.timeout
        node.blocked.block_for_batch(client, batch, node.runtime.now + timeout if timeout else 0)
        return None
    return batch.reply(errors.NOREPL_TIMEOUT)


RUN_HANDLERS: Final = {"addjob": addjob_run}

TABLE: Final = (
           ("addjob", -4, "wmF", addjob),
           ("addjobs", -5, "wm", addjobs),
       )
