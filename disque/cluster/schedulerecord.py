"""A schedule's record (docs/schedules.md): its definition, version and
last tick, as the SCHEDULE message and the tables file carry it, checked
field by field when read, and as the nodes.conf lines of versions that
kept schedules there wrote it. ``cluster/schedules`` keeps the table."""

from __future__ import annotations

import base64
import binascii
from typing import Final

from disque.cluster.messages import is_node_id
from disque.config.users import DEFAULT_USER

NEVER: Final = 1 << 62  # next_tick of a schedule that will not fire again
MAX_NAME: Final = 200  # bytes: the tick's DEDUPID (name and time) stays within 256
MAX_EVERY: Final = 10 * 366 * 86400  # seconds
# Bytes of a schedule's queue, options and spec together (its body has its
# own bound, schedule-max-body): a record stays well within a bus frame.
MAX_DEFINITION: Final = 65536
_RECORD_SIZE: Final = 128  # bytes of a SCHEDULE message besides its fields' data (about)
_FIELDS: Final = 12  # a record's fields on the wire and in the tables file
CONF_LINE: Final = "schedule"  # nodes.conf lines of versions that kept schedules there
_CONF_FIELDS: Final = 11  # such a line's fields after the keyword (no owner)


class Schedule:
    """One schedule: its definition, version and last fired tick, and what
    this node derives from them (``next_tick``, the retry time, its digest
    bucket and fingerprints)."""

    __slots__ = ("name", "every", "cron", "queue", "body", "options", "owner", "version",
                 "origin", "deleted", "last_tick", "last_by", "next_tick", "retry_at", "failing",
                 "bucket", "definition_print", "tick_print", "ranked_in", "place")

    def __init__(self, name: bytes, every: int, cron: bytes, queue: bytes, body: bytes,
                 options: list[bytes], version: int, origin: bytes, deleted: bool = False,
                 last_tick: int = 0, last_by: bytes = b"", owner: bytes = DEFAULT_USER) -> None:
        self.name = name
        self.every = every  # seconds; 0 for a CRON schedule
        self.cron = cron  # the expression (with its TZ= prefix); b"" for an EVERY schedule
        self.queue = queue
        self.body = body
        self.options = options  # ADDJOB's words after the timeout
        self.owner = owner  # the user who set it: its jobs count against that user's quota
        self.version = version  # unix ms when set (or deleted), see Schedules.set
        self.origin = origin  # the node that set it: breaks ties between equal versions
        self.deleted = deleted
        self.last_tick = last_tick  # unix ms of the last tick fired, 0: none yet
        self.last_by = last_by  # the node that fired it
        self.next_tick = NEVER
        self.retry_at = 0
        self.failing = False  # its last tick was refused (logged once per streak)
        self.bucket = 0
        self.definition_print = 0  # in the digest: 0 until filed
        self.tick_print = 0
        self.ranked_in: list[bytes] | None = None  # the view ``place`` was computed under
        self.place = 0  # this node's rank for it under that view

    def spec(self) -> bytes:
        """``EVERY <seconds>`` or ``CRON <expression>``, as SCHEDULE LIST shows it."""
        return b"EVERY %d" % self.every if self.every else b"CRON " + self.cron

    def newer_than(self, other: Schedule) -> bool:
        """This definition wins over ``other``'s (last writer wins)."""
        return (self.version, self.origin) > (other.version, other.origin)

    def to_wire(self) -> list:
        """The record as SCHEDULE messages and the tables file carry it."""
        return [self.name, self.version, self.origin, int(self.deleted), self.every, self.cron,
                self.queue, self.body, self.options, self.last_tick, self.last_by, self.owner]

    def size(self) -> int:
        """The record's size in a message, about."""
        return (_RECORD_SIZE + len(self.name) + len(self.body) + len(self.queue)
                + len(self.cron) + len(self.owner) + sum([len(word) for word in self.options]))


def definition_size(queue: bytes, cron: bytes, options: list[bytes]) -> int:
    """What counts against ``MAX_DEFINITION``."""
    return len(queue) + len(cron) + sum([len(word) + 1 for word in options])


def from_wire(record: object) -> Schedule | None:
    """A record of a SCHEDULE message or the tables file, checked field by
    field; None when malformed."""
    if type(record) is not list or len(record) != _FIELDS:
        return None
    (name, version, origin, deleted, every, cron, queue, body, options, last_tick,
     last_by, owner) = record
    if (type(name) is not bytes or not 0 < len(name) <= MAX_NAME or type(version) is not int
            or not 0 <= version < NEVER or not is_node_id(origin) or type(deleted) is not int
            or type(every) is not int or not 0 <= every <= MAX_EVERY
            or type(cron) is not bytes or type(queue) is not bytes or type(body) is not bytes
            or type(options) is not list or type(last_tick) is not int
            or not 0 <= last_tick < NEVER
            or type(last_by) is not bytes or (last_by and not is_node_id(last_by))
            or type(owner) is not bytes or not owner):
        return None
    words: list[bytes] = []
    for word in options:
        if type(word) is not bytes:
            return None
        words.append(word)
    if not deleted and (not queue or (every > 0) == bool(cron)):
        return None
    return Schedule(name, every, cron, queue, body, words, version, origin, bool(deleted),
                    last_tick, last_by, owner)


def tick_from_record(value: object) -> tuple[int, bytes] | None:
    """A last tick as the tables file keeps it, ``[tick, node]``; None when malformed."""
    if type(value) is not list or len(value) != 2:
        return None
    tick, by = value
    if type(tick) is not int or not 0 < tick < NEVER or not is_node_id(by):
        return None
    return tick, by


# -------------------------------------------- nodes.conf, before the tables file

def _data(text: str) -> bytes:
    return b"" if text == "-" else base64.b64decode(text, validate=True)


def parse_line(fields: list[str]) -> Schedule | None:
    """A schedule from the words of a nodes.conf ``schedule`` line, as
    versions that kept them there wrote it (binary fields in base64, ``-``
    when empty; no owner: the default user's); None when malformed."""
    if len(fields) != _CONF_FIELDS + 1 or fields[0] != CONF_LINE:
        return None
    try:
        options = [] if fields[9] == "-" else [_data(w) for w in fields[9].split(",")]
        record = [_data(fields[1]), int(fields[2]), fields[3].encode(), int(fields[4]),
                  int(fields[5]), _data(fields[6]), _data(fields[7]), _data(fields[8]),
                  options, int(fields[10]), b"" if fields[11] == "-" else fields[11].encode(),
                  DEFAULT_USER]
    except (ValueError, binascii.Error):
        return None
    return from_wire(record)
