"""Periodic jobs (docs/schedules.md): SCHEDULE SET, DEL and LIST, and the
jobs of the ticks this node fires (``fire_due``, from ``Node.cron``).

The table, how nodes agree on it and which node fires a tick are
``cluster/schedules.py``'s; a tick's job is made by ADDJOB's own handler,
asynchronously replicated, with a DEDUPID naming the schedule and the tick
(so a second firer holding a copy of the first one's job makes none), as
the user who set the schedule: the job counts against that user's quota,
and a schedule whose user is gone fires no more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disque.protocol import errors
from disque.commands.access import restricted_queues
from disque.commands.addjob import addjob, check_options
from disque.commands.args import option_name, parse_int
from disque.cluster.schedulerecord import (MAX_DEFINITION, MAX_EVERY, MAX_NAME, NEVER, Schedule,
                                           definition_size)
from disque.config.users import DEFAULT_USER
from disque.context.clients import ClientState
from disque.protocol.resp import NIL, OK, bulk, error, integer

if TYPE_CHECKING:
    from disque.state.nodestate import NodeState

_SET: Final = b"SET"
_DEL: Final = b"DEL"
_LIST: Final = b"LIST"
_EVERY: Final = b"EVERY"
_CRON: Final = b"CRON"
_ADDJOB: Final = b"ADDJOB"
_NO_TIMEOUT: Final = b"0"
_REPLICATE: Final = b"REPLICATE"
_DEDUPID: Final = b"DEDUPID"
_ASYNC: Final = b"ASYNC"
TOKEN_PREFIX: Final = b"schedule:"  # a tick's DEDUPID: schedule:<name>:<tick ms>
# SCHEDULE LIST's field names, each followed by its value.
_FIELD_NAME: Final = bulk(b"name")
_FIELD_SPEC: Final = bulk(b"spec")
_FIELD_QUEUE: Final = bulk(b"queue")
_FIELD_OPTIONS: Final = bulk(b"options")
_FIELD_NEXT: Final = bulk(b"next")
_FIELD_LAST: Final = bulk(b"last")
_FIELD_FIREDBY: Final = bulk(b"firedby")
_FIELD_OWNER: Final = bulk(b"owner")
_QUOTA: Final = b"-QUOTA"  # the start of ADDJOB's quota refusal

SCHEDULE_SYNTAX: Final = error(
    "ERR Unknown SCHEDULE subcommand or wrong number of arguments. Try SET name EVERY "
    "seconds|CRON \"min hour dom month dow\" queue body [ADDJOB options], DEL name, LIST.")
NAME_RANGE: Final = error("ERR schedule name must be 1 to %d bytes" % MAX_NAME)
EVERY_RANGE: Final = error("ERR EVERY must be a number of seconds from 1 to %d" % MAX_EVERY)
EMPTY_QUEUE: Final = error("ERR the queue name is empty")
OWN_DEDUPID: Final = error("ERR DEDUPID is set by the schedule: one per tick")
BODY_TOO_LARGE: Final = "ERR the schedule's body is %d bytes, more than schedule-max-body (%d)"
DEFINITION_TOO_LARGE: Final = error(
    "ERR the schedule's queue, options and CRON expression take more than %d bytes"
    % MAX_DEFINITION)
OWNER_GONE: Final = b"-ERR its owner is not an enabled user on this node\r\n"  # logged, not sent


def schedule(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """SCHEDULE SET|DEL|LIST."""
    sub = argv[1].upper()
    n = len(argv)
    if sub == _SET and n >= 7:
        return _set(node, client, argv)
    if sub == _DEL and n == 3:
        return integer(1 if node.schedules.delete(argv[2]) else 0)
    if sub == _LIST and n == 2:
        return _list(node, client)
    return SCHEDULE_SYNTAX


def _set(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """SET name EVERY seconds|CRON expr queue body [options]: the schedule
    belongs to the client's user."""
    name, kind, spec, queue, body = argv[2], option_name(argv[3]), argv[4], argv[5], argv[6]
    if not 0 < len(name) <= MAX_NAME:
        return NAME_RANGE
    limit = node.config.schedule_max_body
    if len(body) > limit:
        return error(BODY_TOO_LARGE % (len(body), limit))
    every = 0
    cron = b""
    if kind == _EVERY:
        value = parse_int(spec)
        if value is None or not 0 < value <= MAX_EVERY:
            return EVERY_RANGE
        every = value
    elif kind == _CRON:
        problem = node.host.cron_problem(spec)
        if problem is not None:
            return error("ERR " + problem)
        cron = b" ".join(spec.split())
    else:
        return errors.SYNTAX
    if not queue:
        return EMPTY_QUEUE
    options = argv[7:]
    if definition_size(queue, cron, options) > MAX_DEFINITION:
        return DEFINITION_TOO_LARGE
    for word in options:
        if option_name(word) == _DEDUPID:
            return OWN_DEDUPID
    problem_reply, _ = check_options(options)
    if problem_reply is not None:
        return problem_reply
    user = client.user
    node.schedules.set(name, every, cron, queue, body, options,
                       user.name if user is not None else DEFAULT_USER)
    return OK


def _list(node: NodeState, client: ClientState) -> bytes:
    """LIST: one entry per schedule (of the queues the user may see), by
    name: field names and values."""
    user = restricted_queues(node, client)
    entries = [s for s in node.schedules.listing() if user is None or user.may_access(s.queue)]
    out = [b"*%d\r\n" % len(entries)]
    for s in entries:
        out.append(b"*16\r\n")
        out.append(_FIELD_NAME + bulk(s.name))
        out.append(_FIELD_SPEC + bulk(s.spec()))
        out.append(_FIELD_QUEUE + bulk(s.queue))
        out.append(_FIELD_OPTIONS + bulk(b" ".join(s.options)))
        out.append(_FIELD_NEXT + (integer(s.next_tick) if s.next_tick < NEVER else NIL))
        out.append(_FIELD_LAST + (integer(s.last_tick) if s.last_tick else NIL))
        out.append(_FIELD_FIREDBY + (bulk(s.last_by) if s.last_by else NIL))
        out.append(_FIELD_OWNER + bulk(s.owner))
    return b"".join(out)


# ---------------------------------------------------------------- firing

def fire_due(node: NodeState) -> None:
    """Make the jobs of the ticks this node must fire now (``Node.cron``,
    while schedules exist), each as its schedule's owner, then tell the
    other nodes (the process writes the ticks' records before the
    messages leave)."""
    schedules = node.schedules
    schedules.cron()
    if node.loading or node.aof_error is not None:
        return  # no ADDJOB now: the ticks wait (or another node fires them)
    due = schedules.due()
    if not due:
        return
    client = ClientState(0, "schedule", node.runtime.now)
    users = node.config.users
    fired: dict[bytes, Schedule] = {}
    stopped: set[bytes] = set()
    for s, tick in due:
        if s.name in stopped:
            continue
        owner = users.get(s.owner)
        if owner is None or not owner.enabled:
            # A deleted user's schedules are deleted with it (ACL DELUSER); one
            # unknown here (users differ between nodes) is left to the others.
            schedules.refused_here(s, tick, OWNER_GONE)
            stopped.add(s.name)
            continue
        client.user = None if owner.name == DEFAULT_USER else owner
        reply = addjob(node, client, _tick_argv(node, s, tick))
        if reply is not None and reply[:1] == b"+":
            schedules.fired_here(s, tick)
            fired[s.name] = s
        elif reply is not None and reply.startswith(_QUOTA):
            schedules.over_quota_here(s, tick, reply)
            fired[s.name] = s
        else:
            schedules.refused_here(s, tick, reply or b"-blocked")
            stopped.add(s.name)  # its later ticks wait for this one
    if fired:
        schedules.announce(list(fired.values()))


def _tick_argv(node: NodeState, s: Schedule, tick: int) -> list[bytes]:
    """The ADDJOB of one tick: the schedule's options, as many copies as
    can be made now when REPLICATE is not given (ADDJOB's default, at most
    the reachable nodes and this one), the tick's DEDUPID, ASYNC."""
    argv = [_ADDJOB, s.queue, s.body, _NO_TIMEOUT]
    argv.extend(s.options)
    _, replicate_given = check_options(s.options)
    if not replicate_given:
        membership = node.membership
        copies = min(3, membership.size, len(membership.reachable) + 1)
        argv.append(_REPLICATE)
        argv.append(b"%d" % copies)
    argv.append(_DEDUPID)
    argv.append(b"%s%s:%d" % (TOKEN_PREFIX, s.name, tick))
    argv.append(_ASYNC)
    return argv


TABLE: Final = (
           ("schedule", -2, "w", schedule),
       )
