"""The job record (spec: jobs-and-ids.md §3-§4)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

WAIT_REPL: Final = 0
ACTIVE: Final = 1
QUEUED: Final = 2
ACKED: Final = 3

STATE_NAMES: Final = {WAIT_REPL: b"wait-repl", ACTIVE: b"active", QUEUED: b"queued", ACKED: b"acked"}
STATES_BY_NAME: Final = {name: state for state, name in STATE_NAMES.items()}

# Local flags.
BCAST_QUEUED: Final = 1  # the next local queueing must announce itself with QUEUED
BCAST_WILLQUEUE: Final = 2  # send WILLQUEUE 500 ms before qtime
DELIVERED: Final = 4  # this node handed the job to a consumer at least once

# Job.counts: nacks in bits 0-15, additional deliveries 16-31, GC attempts 32-47.
COUNTER_MASK: Final = 0xFFFF
ADELIV_SHIFT: Final = 16
_GC_RETRY_SHIFT: Final = 32
_NACKS_AND_ADELIV: Final = 0xFFFF_FFFF

# A job's HEADERs (docs/commands.md "Job headers"): small metadata, bounded so
# that a copy on the bus and a record in the AOF stay small.
MAX_HEADERS: Final = 32
MAX_HEADER_NAME: Final = 256  # bytes; a name has at least one
MAX_HEADERS_SIZE: Final = 8192  # bytes of names and values together
# What check_headers finds wrong (HEADERS_VALID: nothing).
HEADERS_VALID: Final = 0
HEADER_NAME_SIZE: Final = 1
HEADERS_TOO_MANY: Final = 2
HEADERS_TOO_LARGE: Final = 3
HEADER_REPEATED: Final = 4
# NACK ... REASON (docs/commands.md): why a consumer gave the job back, any
# bytes, bounded so that the copies, messages and records carrying it stay small.
MAX_NACK_REASON: Final = 1024  # bytes; a reason has at least one

DEFAULT_PRIORITY: Final = 5
MAX_PRIORITY: Final = 9


class JobExtras:
    """What a job carries beyond Disque 1.0's fields (docs/commands.md,
    "Extensions"): a plain job has none, so it costs one empty slot.

    ``maxdeliver`` (0 = unlimited) and ``deadletter`` (None = the queue's
    name + ``:dead``) decide when a requeue becomes a dead letter;
    ``origin`` and ``reason`` are set while the job is one. ``moves``
    counts dead-letter moves and redrives, so that the copies of a job
    agree on its latest queue. ``backoff`` (0.0 = none) multiplies the retry
    period at each retry-timeout requeue, up to ``maxretry`` seconds (0 =
    the job's TTL), from ``base_retry``, the period ADDJOB gave it.
    ``dedupid`` is the producer's ADDJOB token. ``headers`` are ADDJOB's
    HEADERs as one flat tuple of names and values, in the order given.
    ``nack_reason`` is what the last NACK ... REASON said of the failure.
    """

    __slots__ = ("maxdeliver", "deadletter", "origin", "reason", "moves", "backoff",
                 "maxretry", "base_retry", "dedupid", "headers", "nack_reason")

    def __init__(self, maxdeliver: int = 0, deadletter: bytes | None = None,
                 backoff: float = 0.0, maxretry: int = 0, dedupid: bytes | None = None) -> None:
        self.maxdeliver = maxdeliver
        self.deadletter = deadletter
        self.origin: bytes | None = None
        self.reason: bytes | None = None
        self.moves = 0
        self.backoff = backoff
        self.maxretry = maxretry
        self.base_retry = 0
        self.dedupid = dedupid
        self.headers: tuple[bytes, ...] | None = None
        self.nack_reason: bytes | None = None

    def token_only(self) -> bool:
        """Every field but ``dedupid`` has its default (``base_retry`` counts
        only with a backoff): the job may hold the token alone."""
        return (not self.maxdeliver and self.deadletter is None and self.origin is None
                and self.reason is None and not self.moves and not self.backoff
                and self.headers is None and self.nack_reason is None)

    def copy(self) -> JobExtras:
        """A job's own extras, made from the ones ADDJOB parsed (shared by a run)."""
        other = JobExtras(self.maxdeliver, self.deadletter, self.backoff, self.maxretry,
                          self.dedupid)
        other.origin = self.origin
        other.reason = self.reason
        other.moves = self.moves
        other.base_retry = self.base_retry
        other.headers = self.headers
        other.nack_reason = self.nack_reason
        return other


# What ``Job.ext`` holds: None for a plain job; a DEDUPID token alone (bytes)
# for a job whose only extension is the token, so that the common producer's
# retry guard costs no JobExtras object (its other fields are the defaults);
# a JobExtras otherwise. Rules read it through ``extras_of`` and
# ``dedup_token`` and change it through ``own_extras`` and ``set_extras``;
# a rule about an extension starts with ``job.ext is not None``.
JobExt = JobExtras | bytes | None


class Job:
    """One job as held by one node.

    Times are integers: ``ctime`` in ms × 10^6 (+ tie counter), ``etime`` in
    unix seconds, ``qtime`` and ``awakeme`` in unix ms (0 = not set).
    ``delivered`` is a tuple of node IDs (tuples are small and shared by
    every single-node job); ``confirmed`` is a set only while it matters.
    ``priority`` (0-9, higher served first) orders the job in its queue
    before its ctime; ``ext`` is a ``JobExt``: the extensions' fields, or
    only a DEDUPID token, or None.
    ``counts`` packs three 16-bit counters (``nacks``, ``adeliv``,
    ``gc_retry``, read and set through properties): unsigned 16-bit like the
    original's, and one slot instead of three keeps a compiled job at 208
    bytes with ``priority`` and ``ext`` (docs/benchmarks.md, memory per job).
    The last four slots belong to the scan index and the queue skiplist.
    """

    __slots__ = (
        "id", "queue", "body", "state", "repl", "ctime", "etime", "delay",
        "retry", "counts", "delivered", "confirmed", "qtime",
        "awakeme", "flags", "seq", "priority", "ext", "_sl", "_slprev", "_slup",
    )

    def __init__(self, job_id: bytes, queue: bytes | None, body: bytes | None,
                 repl: int, ctime: int, etime: int, delay: int, retry: int) -> None:
        self.id = job_id
        self.queue = queue
        self.body = body
        self.state = ACTIVE
        self.repl = repl
        self.ctime = ctime
        self.etime = etime
        self.delay = delay
        self.retry = retry
        self.counts = 0
        self.delivered: tuple[bytes, ...] = ()
        self.confirmed: set[bytes] | None = None
        self.qtime = 0
        self.awakeme = 0
        self.flags = 0
        self.seq = -1
        self.priority = DEFAULT_PRIORITY
        self.ext: JobExt = None
        self._sl: Job | None = None
        self._slprev: Job | None = None
        self._slup: list[Job | None] | None = None

    @property
    def nacks(self) -> int:
        """NACKs seen so far (16 bits, wrapping)."""
        return self.counts & COUNTER_MASK

    @nacks.setter
    def nacks(self, value: int) -> None:
        self.counts = (self.counts & ~COUNTER_MASK) | (value & COUNTER_MASK)

    @property
    def adeliv(self) -> int:
        """Additional deliveries so far: requeues other than NACKs (16 bits, wrapping)."""
        return (self.counts >> ADELIV_SHIFT) & COUNTER_MASK

    @adeliv.setter
    def adeliv(self, value: int) -> None:
        self.counts = ((self.counts & ~(COUNTER_MASK << ADELIV_SHIFT))
                       | ((value & COUNTER_MASK) << ADELIV_SHIFT))

    @property
    def gc_retry(self) -> int:
        """GC attempts of an acked job so far."""
        return self.counts >> _GC_RETRY_SHIFT

    @gc_retry.setter
    def gc_retry(self, value: int) -> None:
        self.counts = ((self.counts & _NACKS_AND_ADELIV)
                       | ((value & COUNTER_MASK) << _GC_RETRY_SHIFT))

    def add_delivered(self, node_id: bytes) -> None:
        """Add one node to nodes-delivered."""
        if node_id not in self.delivered:
            self.delivered = self.delivered + (node_id,)

    def merge_delivered(self, node_ids: Iterable[bytes]) -> None:
        """Union nodes-delivered with ``node_ids``."""
        current = self.delivered
        extra = tuple(n for n in node_ids if n not in current)
        if extra:
            self.delivered = current + tuple(dict.fromkeys(extra))

    def __repr__(self) -> str:
        return "<Job %s %s>" % (self.id.decode("latin-1"), STATE_NAMES[self.state].decode())


def extras_of(job: Job) -> JobExtras | None:
    """The job's JobExtras, or None: a plain job, or a DEDUPID token alone
    (whose other fields are then all the defaults)."""
    ext = job.ext
    return ext if isinstance(ext, JobExtras) else None


def dedup_token(job: Job) -> bytes | None:
    """The job's ADDJOB DEDUPID token, or None."""
    ext = job.ext
    if ext is None:
        return None
    if isinstance(ext, JobExtras):
        return ext.dedupid
    return ext


def own_extras(job: Job) -> JobExtras:
    """The job's JobExtras, made (with its token, if any) when a rule first
    sets one of their fields."""
    ext = job.ext
    if isinstance(ext, JobExtras):
        return ext
    own = job.ext = JobExtras(dedupid=ext)
    return own


def set_extras(job: Job, ext: JobExtras) -> None:
    """Give the job ``ext``, held as its DEDUPID token alone when that is all
    it says (``JobExtras.token_only``)."""
    token = ext.dedupid
    job.ext = token if token is not None and ext.token_only() else ext


def check_headers(flat: list[bytes] | tuple[bytes, ...]) -> int:
    """Whether names and values (``flat``: name, value, ...) keep to the
    headers' limits: HEADERS_VALID, or the first limit they break."""
    count = len(flat) >> 1
    if count > MAX_HEADERS:
        return HEADERS_TOO_MANY
    size = 0
    i = 0
    while i < count:
        name = flat[2 * i]
        if not 0 < len(name) <= MAX_HEADER_NAME:
            return HEADER_NAME_SIZE
        size += len(name) + len(flat[2 * i + 1])
        j = 0
        while j < i:
            if flat[2 * j] == name:
                return HEADER_REPEATED
            j += 1
        i += 1
    return HEADERS_TOO_LARGE if size > MAX_HEADERS_SIZE else HEADERS_VALID


def is_nack_reason(value: object) -> bool:
    """Whether ``value`` (from a client, the bus or a file) is a reason a
    job may keep: 1 to MAX_NACK_REASON bytes."""
    return type(value) is bytes and 0 < len(value) <= MAX_NACK_REASON


def nack_reason_of(job: Job) -> bytes | None:
    """What the job's last NACK ... REASON said, or None."""
    ext = job.ext
    return ext.nack_reason if isinstance(ext, JobExtras) else None


def job_headers(job: Job) -> tuple[bytes, ...] | None:
    """The job's HEADERs (name, value, ...), or None."""
    ext = job.ext
    return ext.headers if isinstance(ext, JobExtras) else None
