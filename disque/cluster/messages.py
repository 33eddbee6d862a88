"""Cluster bus message types and field names (spec: cluster-bus.md §1, §5).

A message is a dict of its type and body fields. On the wire a frame holds
the sender's header (protocol version, node ID, ports, flags) once,
followed by the messages it carries (see ``disque.net.bus``). The
node core builds and reads these dicts and never sees bytes on a socket.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable
from typing import Final

from disque.jobs.job import is_nack_reason

PROTOCOL_VERSION: Final = 1

PING: Final = "PING"
PONG: Final = "PONG"
MEET: Final = "MEET"
FAIL: Final = "FAIL"
REPLJOB: Final = "REPLJOB"
GOTJOB: Final = "GOTJOB"
ENQUEUE: Final = "ENQUEUE"
QUEUED: Final = "QUEUED"
WORKING: Final = "WORKING"
WILLQUEUE: Final = "WILLQUEUE"
SETACK: Final = "SETACK"
GOTACK: Final = "GOTACK"
DELJOB: Final = "DELJOB"
NEEDJOBS: Final = "NEEDJOBS"
YOURJOBS: Final = "YOURJOBS"
PAUSE: Final = "PAUSE"
# Extensions: periodic jobs (cluster/schedules.py, docs/schedules.md), and
# the digests that keep cluster-wide tables alike (cluster/tablesync.py).
SCHEDULE: Final = "SCHEDULE"
SCHEDFIRED: Final = "SCHEDFIRED"
# Extensions: the cluster's dashboard (docs/cluster.md "The dashboard's
# messages"). STATSWANT asks a peer for its NODESTATS summary for the next
# seconds (cluster/peerstats.py); QUEUEPEEK, JOBPEEK and REDRIVE are requests
# a peer answers with one ANSWER carrying the same REQ (cluster/inspection.py).
STATSWANT: Final = "STATSWANT"
NODESTATS: Final = "NODESTATS"
QUEUEPEEK: Final = "QUEUEPEEK"
JOBPEEK: Final = "JOBPEEK"
REDRIVE: Final = "REDRIVE"
ANSWER: Final = "ANSWER"
TABLESYNC: Final = "TABLESYNC"
TABLEDONE: Final = "TABLEDONE"
# Extension: an ACL user's record, sent only by nodes with a cluster secret
# (cluster/usertable.py, docs/security.md "Users across the cluster").
ACLUSER: Final = "ACLUSER"

ALL_TYPES: Final = frozenset((PING, PONG, MEET, FAIL, REPLJOB, GOTJOB, ENQUEUE, QUEUED, WORKING,
                              WILLQUEUE, SETACK, GOTACK, DELJOB, NEEDJOBS, YOURJOBS, PAUSE,
                              SCHEDULE, SCHEDFIRED, TABLESYNC, TABLEDONE, STATSWANT, NODESTATS,
                              QUEUEPEEK, JOBPEEK, REDRIVE, ANSWER, ACLUSER))

# Header keys.
VERSION: Final = "v"
TYPE: Final = "type"
SENDER: Final = "sender"
PORT: Final = "port"
FLAGS: Final = "flags"
MFLAGS: Final = "mflags"
BPORT: Final = "bport"  # sender's bus port when it is not port + 10000 (optional)
TPORT: Final = "tport"  # sender's TLS client port, when it has one (optional)
# Only in the frames without messages that agree a link's bus format
# (disque.net.busformat): the formats the sender speaks, and the one its
# frames use from the next one on.
FORMATS: Final = "formats"
FORMAT: Final = "format"

# Per-message flags.
MFLAG_NOREPLY: Final = 1
MFLAG_INCR_NACKS: Final = 2
MFLAG_INCR_DELIV: Final = 4

# Body keys.
ID: Final = "id"
JOB: Final = "job"
JOBS: Final = "jobs"
DELAY: Final = "delay"
MAY_HAVE: Final = "may_have"
HOLDERS: Final = "holders"  # SETACK, optional: the sender's nodes-delivered (extension, see acks.py)
KNOWN: Final = "known"
NODE: Final = "node"
QUEUE: Final = "queue"
COUNT: Final = "count"
PAUSE_STATE: Final = "pause"
GOSSIP: Final = "gossip"
# Optional fields of QUEUED, WILLQUEUE and WORKING about a job with
# extensions (docs/dead-letters.md, "How copies agree"). MOVES, the copy's
# generation (dead-letter moves and redrives so far), is in every such
# message of a job with JobExtras: a receiver knowing a newer generation
# answers with it, one knowing an older one takes the sender's. When the
# generation is above 0 (or the job backs off) the state that a generation
# decides comes along: QUEUE, ORIGIN and REASON (absent: None), NACKS,
# ADELIV and RETRY. WORKING may carry DELAY (seconds): a NACK ... DELAY,
# whose requeue the holders wait for before their own retry period.
MOVES: Final = "moves"
ORIGIN: Final = "origin"
REASON: Final = "reason"
NACKS: Final = "nacks"
ADELIV: Final = "adeliv"
RETRY: Final = "retry"
# The job's last NACK ... REASON (1 to MAX_NACK_REASON bytes), optional: in
# the QUEUED of a NACK that gave one and the WORKING of a delayed one, which
# each holder takes as its copy's (as the NACK's count travels with the
# QUEUED), and with a generation's state, which a holder taking that
# generation takes it with.
NACK_REASON: Final = "nack_reason"
# SCHEDULE: one schedule record (schedulerecord.Schedule.to_wire). SCHEDFIRED:
# ticks fired, each [name, tick, node that fired it].
SCHED: Final = "sched"
SCHED_TICKS: Final = "ticks"
# TABLESYNC: a table's name, the sender's digest of it, and whether it asks
# for the receiver's (1) or answers an ask (0). TABLEDONE: the table's name.
TABLE: Final = "table"
DIGEST: Final = "digest"
ASK: Final = "ask"
# ACLUSER: [name, version, origin node, deleted, rules] (passwords as hashes).
ACL_RECORD: Final = "acl"
# NODESTATS: the node's figures (peerstats.STATS_FIELDS, in that order) and
# its longest queues (peerstats.QueueShare's fields, each a list). The
# requests: REQ (an int the asker chose), COUNT jobs of QUEUE, the job ID, or
# the dead letters of QUEUE to redrive on behalf of USER (for the log); ANSWER:
# REQ and the answer's VALUE (inspection.py says its shape per request).
STATS: Final = "stats"
QUEUES: Final = "queues"
REQ: Final = "req"
USER: Final = "user"
VALUE: Final = "value"


def job_message(kind: str, job_id: bytes, mflags: int = 0) -> dict:
    """A message about one job ID (QUEUED, WORKING, WILLQUEUE, GOTJOB, DELJOB)."""
    if mflags:
        return {TYPE: kind, ID: job_id, MFLAGS: mflags}
    return {TYPE: kind, ID: job_id}

# What a message says of a job's generation (see MOVES): queue, origin,
# reason, moves, nacks, additional deliveries, retry, last NACK's reason.
JobState = tuple[bytes, bytes | None, bytes | None, int, int, int, int, bytes | None]


def _optional_name(value: object) -> bytes | None | bool:
    """A name that may be absent: the name, None, or False when malformed."""
    if value is None:
        return None
    if type(value) is bytes and value:
        return value
    return False


def _count_field(value: object) -> int:
    """A non-negative integer, or -1."""
    if type(value) is int and value >= 0:
        return value
    return -1


def job_state(msg: dict) -> JobState | None:
    """The generation state a QUEUED/WILLQUEUE/WORKING carries (see MOVES),
    checked field by field; None when it carries none or a malformed one
    (but for the NACK's reason, which only informs: malformed, it is None)."""
    queue = msg.get(QUEUE)
    origin = _optional_name(msg.get(ORIGIN))
    reason = _optional_name(msg.get(REASON))
    moves = _count_field(msg.get(MOVES))
    nacks = _count_field(msg.get(NACKS))
    adeliv = _count_field(msg.get(ADELIV))
    retry = _count_field(msg.get(RETRY))
    if (type(queue) is not bytes or not queue or origin is False or reason is False
            or moves < 0 or nacks < 0 or adeliv < 0 or retry < 0):
        return None
    assert not isinstance(origin, bool) and not isinstance(reason, bool)  # for mypy: see above
    return (queue, origin, reason, moves, nacks & 0xFFFF, adeliv & 0xFFFF, retry,
            nack_reason_field(msg))


def nack_reason_field(msg: dict) -> bytes | None:
    """The message's NACK_REASON, or None when it has none or a malformed one."""
    value = msg.get(NACK_REASON)
    return value if is_nack_reason(value) else None


def count_field(msg: dict, key: str) -> int:
    """An optional non-negative integer field (-1 when absent or malformed)."""
    return _count_field(msg.get(key))


# Gossip entry keys.
G_ID: Final = "id"
G_PING: Final = "ping"
G_PONG: Final = "pong"
G_IP: Final = "ip"
G_PORT: Final = "port"
G_FLAGS: Final = "flags"
G_BPORT: Final = "bport"

_JOB_ID: Final = "job id"  # a 40-byte job ID (validated with is_valid_job_id)
_NODE_ID: Final = "node id"  # 40 bytes

BODY_SCHEMAS: Final[dict[str, dict[str, object]]] = {
           PING: {GOSSIP: list},
           PONG: {GOSSIP: list},
           MEET: {GOSSIP: list},
           FAIL: {NODE: _NODE_ID},
           REPLJOB: {JOB: list},
           GOTJOB: {ID: _JOB_ID},
           ENQUEUE: {ID: _JOB_ID, DELAY: int},
           QUEUED: {ID: _JOB_ID},
           WORKING: {ID: _JOB_ID},
           WILLQUEUE: {ID: _JOB_ID},
           SETACK: {ID: _JOB_ID, MAY_HAVE: int},
           GOTACK: {ID: _JOB_ID, KNOWN: int},
           DELJOB: {ID: _JOB_ID},
           NEEDJOBS: {QUEUE: bytes, COUNT: int},
           YOURJOBS: {JOBS: list},
           PAUSE: {QUEUE: bytes, PAUSE_STATE: bytes},
           SCHEDULE: {SCHED: list},
           SCHEDFIRED: {SCHED_TICKS: list},
           TABLESYNC: {TABLE: bytes, DIGEST: bytes, ASK: int},
           TABLEDONE: {TABLE: bytes},
           STATSWANT: {},
           NODESTATS: {STATS: list, QUEUES: list},
           QUEUEPEEK: {REQ: int, QUEUE: bytes, COUNT: int},
           JOBPEEK: {REQ: int, ID: _JOB_ID},
           REDRIVE: {REQ: int, QUEUE: bytes, USER: bytes},
           ANSWER: {REQ: int},
           ACLUSER: {ACL_RECORD: list},
       }


_HEX: Final = b"0123456789abcdefABCDEF"


@functools.lru_cache(maxsize=1024)  # a cluster gossips about few addresses
def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def is_node_id(value: object) -> bool:
    """A node ID: 40 hex characters."""
    # Anything else would corrupt nodes.conf
    # and CLUSTER NODES (spec: cluster-bus.md §2). Every message carries its
    # sender's ID, so IDs already seen valid are remembered (a cluster has few).
    if type(value) is not bytes:
        return False
    if value in _VALID_IDS:
        return True
    if len(value) == 40 and not value.translate(None, _HEX):
        if len(_VALID_IDS) < 4096:
            _VALID_IDS.add(value)
        return True
    return False


_VALID_IDS: Final[set[bytes]] = set()


def is_job_id(value: object) -> bool:
    """A job ID as the bus checks it: 40 bytes, D-xxxxxxxx-...-xxxx."""
    return (type(value) is bytes and len(value) == 40 and value[0] == 68 and value[1] == 45
            and value[10] == 45 and value[35] == 45)


def _is_list(value: object) -> bool:
    return type(value) is list


def _is_int(value: object) -> bool:
    return type(value) is int


def _is_bytes(value: object) -> bool:
    return type(value) is bytes


_CHECKS: Final[dict[object, Callable[[object], bool]]] = {
           _JOB_ID: is_job_id, _NODE_ID: is_node_id, list: _is_list, int: _is_int, bytes: _is_bytes}


def _fields_validator(schema: dict[str, object]) -> Callable[[dict], str | None]:
    checks = tuple((key, _CHECKS[what]) for key, what in schema.items())

    def validate(body: dict) -> str | None:
        for key, check in checks:
            if not check(body.get(key)):
                return "bad %s" % key
        return None
    return validate


# Per type, one function checking its body fields, made once from BODY_SCHEMAS.
_BODY_VALIDATORS: Final = {kind: _fields_validator(schema)
                           for kind, schema in BODY_SCHEMAS.items()}


def header_problem(header: object) -> str | None:
    """Why a frame's header cannot be trusted, or None if it is well formed.

    Handlers trust what passes this check and ``body_problem``, so a peer
    sending garbage is logged and ignored instead of reaching the state
    machine. Written for the valid case: ``x >> 16`` is 0 exactly for the
    integers 0..65535.
    """
    if not isinstance(header, dict) or type(header) is not dict:
        return "not a map"
    if header.get(VERSION) != PROTOCOL_VERSION:
        return "unsupported bus protocol version %r" % (header.get(VERSION),)
    sender = header.get(SENDER)
    if type(sender) is not bytes or (sender not in _VALID_IDS and not is_node_id(sender)):
        return "bad sender"
    port = header.get(PORT)
    if type(port) is not int or port >> 16:
        return "bad port"
    if type(header.get(FLAGS, 0)) is not int:
        return "bad flags"
    bport = header.get(BPORT, 0)
    if type(bport) is not int or bport >> 16:
        return "bad bus port"
    tport = header.get(TPORT, 0)
    if type(tport) is not int or tport >> 16:
        return "bad TLS port"
    return None


# The per-job messages: a job ID alone, or a job ID and one integer. Their
# check runs once per message of every job moved, so it is written out in
# body_problem rather than reached through a call of a validator.
_ID_ONLY: Final = frozenset((GOTJOB, QUEUED, WORKING, WILLQUEUE, DELJOB))
_ID_AND_INT: Final = {ENQUEUE: DELAY, SETACK: MAY_HAVE, GOTACK: KNOWN}


def body_problem(body: object) -> str | None:
    """Why one message of a frame cannot be processed, or None (runs per message).
    ``body.get`` is called on the narrowed dict each time: compiled, that is a
    direct dict lookup, where a bound ``get`` would be a generic call."""
    if not isinstance(body, dict) or type(body) is not dict:
        return "not a map"
    kind = body.get(TYPE)
    if type(kind) is not str:  # maps are unhashable
        return "unknown message type %r" % (kind,)
    if type(body.get(MFLAGS, 0)) is not int:
        return "bad flags" if kind in _BODY_VALIDATORS else "unknown message type %r" % (kind,)
    if kind in _ID_ONLY or kind in _ID_AND_INT:
        value = body.get(ID)
        if not (type(value) is bytes and len(value) == 40 and value[0] == 68
                and value[1] == 45 and value[10] == 45 and value[35] == 45):
            return "bad %s" % ID
        key = _ID_AND_INT.get(kind)
        if key is not None and type(body.get(key)) is not int:
            return "bad %s" % key
        return None
    validate = _BODY_VALIDATORS.get(kind)
    if validate is None:
        return "unknown message type %r" % (kind,)
    return validate(body)


# Bus format 2 (disque.cluster.wire) carries the messages about jobs that
# a peer gets in a row, of one type and the same MFLAGS, as one batch: a
# msgpack array [code, mflags, then each message's fields in a fixed order]:
#   REPLJOB                                  job, job, ...
#   GOTJOB, QUEUED, WORKING, WILLQUEUE, DELJOB   id, id, ...
#   ENQUEUE (DELAY), GOTACK (KNOWN)          id, int, id, int, ...
#   SETACK                                   id, may_have, holders or nil, ...
# A message with another field (a job's generation, say) travels as a map,
# as in format 1, and so does every other type. The codes are format 2's:
# never reused nor renumbered.
BATCH_CODES: Final[dict[str, int]] = {
    REPLJOB: 1, GOTJOB: 2, ENQUEUE: 3, QUEUED: 4, WORKING: 5, WILLQUEUE: 6, SETACK: 7,
    GOTACK: 8, DELJOB: 9}
BATCH_KINDS: Final[dict[int, str]] = {code: kind for kind, code in BATCH_CODES.items()}
REPLJOB_CODE: Final = 1
SETACK_CODE: Final = 7
# The types whose messages are a job ID and one integer: that integer's field.
BATCH_INT_FIELD: Final[dict[int, str]] = {3: DELAY, 8: KNOWN}


def batch_messages(batch: list) -> list[dict] | str:
    """The messages a format-2 batch carries, each as its map would decode
    (an MFLAGS of 0 left out), or why the batch cannot be used (then none
    of it is)."""
    size = len(batch)
    if size < 2:
        return "short batch"
    code = batch[0]
    kind = BATCH_KINDS.get(code) if type(code) is int else None
    if kind is None:
        return "unknown batch type %r" % (code,)
    mflags = batch[1]
    if type(mflags) is not int:
        return "bad flags"
    msgs: list[dict] = []
    if code == REPLJOB_CODE:
        for i in range(2, size):
            job = batch[i]
            if type(job) is not list:
                return "bad %s" % JOB
            msgs.append({TYPE: kind, JOB: job, MFLAGS: mflags} if mflags
                        else {TYPE: kind, JOB: job})
        return msgs
    if code == SETACK_CODE:
        if (size - 2) % 3:
            return "batch of %s cut short" % kind
        for i in range(2, size, 3):
            job_id, may_have, holders = batch[i], batch[i + 1], batch[i + 2]
            if not is_job_id(job_id):
                return "bad %s" % ID
            if type(may_have) is not int:
                return "bad %s" % MAY_HAVE
            msg = {TYPE: kind, ID: job_id, MAY_HAVE: may_have}
            if holders is not None:
                if type(holders) is not list:
                    return "bad %s" % HOLDERS
                msg[HOLDERS] = holders
            if mflags:
                msg[MFLAGS] = mflags
            msgs.append(msg)
        return msgs
    field = BATCH_INT_FIELD.get(code)
    if field is not None:
        if (size - 2) % 2:
            return "batch of %s cut short" % kind
        for i in range(2, size, 2):
            job_id, value = batch[i], batch[i + 1]
            if not is_job_id(job_id):
                return "bad %s" % ID
            if type(value) is not int:
                return "bad %s" % field
            msgs.append({TYPE: kind, ID: job_id, field: value, MFLAGS: mflags} if mflags
                        else {TYPE: kind, ID: job_id, field: value})
        return msgs
    for i in range(2, size):
        job_id = batch[i]
        if not is_job_id(job_id):
            return "bad %s" % ID
        msgs.append({TYPE: kind, ID: job_id, MFLAGS: mflags} if mflags
                    else {TYPE: kind, ID: job_id})
    return msgs


def gossip_problem(entry: object) -> str | None:
    """Why one gossip entry cannot be used, or None."""
    if type(entry) is not dict:
        return "not a map"
    node_id = entry.get(G_ID)
    if not is_node_id(node_id):
        return "bad node id"
    ip = entry.get(G_IP)
    port = entry.get(G_PORT)
    if type(ip) is not str or type(port) is not int or not 0 <= port <= 65535:
        return "bad address"
    if ip and not _is_ip(ip):
        return "bad address"  # a handshake with it could never succeed, nor be saved
    for key in (G_PING, G_PONG, G_FLAGS):
        if type(entry.get(key)) is not int:
            return "bad %s" % key
    bport = entry.get(G_BPORT, 0)
    if type(bport) is not int or not 0 <= bport <= 65535:
        return "bad bus port"
    return None
