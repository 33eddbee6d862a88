"""What the core tells persistence about its small tables: the schedules,
their last ticks, the queues' delivery limits and the ACL users, one
record per change.

A part puts the record of a key as it now is (a list of plain values,
which the process encodes) or drops the key; the records wait here until
the process writes them, before the replies and bus messages of the same
input leave (``process/tablefile.py``: an append-only file beside
nodes.conf, docs/persistence.md "Schedules and delivery limits"). Until
the process turns it on (unit tests, the simulator's nodes without a
disk), nothing is kept.
"""

from __future__ import annotations

from typing import Final

# The tables, as their records name them.
SCHEDULE_TABLE: Final = b"schedule"  # a schedule's definition (schedulerecord.Schedule.to_wire)
TICK_TABLE: Final = b"schedule-tick"  # a schedule's last tick: [tick ms, node ID]
LIMIT_TABLE: Final = b"queue-limit"  # a queue's QLIMIT: [rate in thousandths, burst]
USER_TABLE: Final = b"acl-user"  # an ACL user's record (usertable.UserRecord.to_wire)
# The process's own record (key b""), never the core's: the digests of what
# it last wrote to the aclfile, [being written, known written] (process/aclfile.py).
ACL_FILE_TABLE: Final = b"acl-file"
TABLES: Final = (SCHEDULE_TABLE, TICK_TABLE, LIMIT_TABLE, USER_TABLE, ACL_FILE_TABLE)

Record = tuple[bytes, bytes, list | None]  # table, key, value (None: the key is gone)


class TableLog:
    """The records not yet written, in the order they changed."""

    __slots__ = ("enabled", "pending")

    def __init__(self) -> None:
        self.enabled = False
        self.pending: list[Record] = []

    def put(self, table: bytes, key: bytes, value: list) -> None:
        """``key`` of ``table`` is now ``value``."""
        if self.enabled:
            self.pending.append((table, key, value))

    def drop(self, table: bytes, key: bytes) -> None:
        """``key`` of ``table`` is gone."""
        if self.enabled:
            self.pending.append((table, key, None))

    def take(self) -> list[Record]:
        """The records waiting, handed over; none are left."""
        pending = self.pending
        self.pending = []
        return pending
