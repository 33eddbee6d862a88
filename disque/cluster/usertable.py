"""ACL users across the cluster (docs/security.md "Users across the
cluster"): each change of a user made at run time is a versioned record,
kept in the tables file and, over an authenticated bus, on every node.

A record is a user's whole definition as rules (passwords as their
SHA-256 hashes, never in clear), or a tombstone for a deleted user, with
a version: the time of the change in ms and the node that made it. On
every node the record with the highest (version, node ID) wins: last
writer wins, a tombstone like any change. A change is always newer than
the record it replaces on its node, even when that node's clock is
behind. Tombstones are kept for good, so no node that was away, however
long, can bring a deleted user back.

A change travels as one ACLUSER message; what a node missed comes back
through ``cluster/tablesync``'s digests. Both only while this node has a
cluster secret: the bus then authenticates every link (``net/busauth``;
the bus closes the others when a secret is set), and a change arriving by
it is trusted as the admin's who made it. Without a secret the records
stay on this node and those that arrive are refused.

A record wins over the config file's ``user`` line of the same name: the
lines are read first at startup, the records then.
"""

from __future__ import annotations

from typing import Final, Protocol

from disque.cluster import messages as m
from disque.cluster.membership import Membership
from disque.cluster.outbox import Outbox
from disque.cluster.schedules import Schedules
from disque.cluster.tablesync import BucketDigest, TableSync, fingerprint
from disque.cluster.transport import Link
from disque.config.users import DEFAULT_USER, RuleError, User, valid_user_name
from disque.config.values import encode
from disque.context.log import LogThrottle, logger
from disque.context.runtime import Runtime
from disque.context.tablelog import USER_TABLE, TableLog

TABLE_NAME: Final = b"users"  # in TABLESYNC messages
BUCKETS: Final = 32  # a 256-byte digest
MAX_VERSION: Final = 1 << 62
_FIELDS: Final = 5
_RECORD_SIZE: Final = 96  # bytes of an ACLUSER message besides its names and rules (about)
LOCAL_LOG_INTERVAL_MS: Final = 60_000  # "users stay on this node" at most this often


class UserSettings(Protocol):
    """The configuration the users' table reads: the users, and whether the
    bus is authenticated."""

    users: dict[bytes, User]
    cluster_secret: str
    cluster_secret_file: str


class UsersListener(Protocol):
    """Told after the users changed (the node's access and quota switches)."""

    def users_changed(self, had_quota: bool, has_quota: bool) -> None:
        """The users dict changed: a user added, changed or removed, which
        had a quota before or has one now (``User.has_quota``)."""


class UserRecord:
    """One user's definition (or tombstone) and version, and where the
    digest files it."""

    __slots__ = ("name", "version", "origin", "deleted", "rules", "bucket", "print_")

    def __init__(self, name: bytes, version: int, origin: bytes, deleted: bool,
                 rules: list[bytes]) -> None:
        self.name = name
        self.version = version  # unix ms of the change (see UserTable._version)
        self.origin = origin  # the node that made it: breaks ties between equal versions
        self.deleted = deleted
        self.rules = rules  # what makes a new user of this name into it; [] when deleted
        self.bucket = 0
        self.print_ = 0  # in the digest

    def newer_than(self, other: UserRecord) -> bool:
        """This record wins over ``other`` (last writer wins)."""
        return (self.version, self.origin) > (other.version, other.origin)

    def to_wire(self) -> list:
        """The record as ACLUSER messages and the tables file carry it."""
        return [self.name, self.version, self.origin, int(self.deleted), self.rules]

    def size(self) -> int:
        """The record's size in a message, about."""
        return _RECORD_SIZE + len(self.name) + sum([len(rule) + 2 for rule in self.rules])


def record_from_wire(value: object) -> UserRecord | None:
    """A record of an ACLUSER message or the tables file, checked field by
    field; None when malformed (a password in clear included: records carry
    hashes only)."""
    if type(value) is not list or len(value) != _FIELDS:
        return None
    name, version, origin, deleted, rules = value
    if (type(name) is not bytes or not valid_user_name(name) or type(version) is not int
            or not 0 <= version < MAX_VERSION or not m.is_node_id(origin)
            or type(deleted) is not int or deleted not in (0, 1) or type(rules) is not list):
        return None
    words: list[bytes] = []
    for rule in rules:
        if type(rule) is not bytes or rule[:1] in (b">", b"<"):
            return None
        words.append(rule)
    if deleted and (words or name == DEFAULT_USER):
        return None
    return UserRecord(name, version, origin, bool(deleted), words)


class UserTable:
    """The versioned records of the users changed at run time, and the
    users dict (``config.users``) kept to them."""

    def __init__(self, runtime: Runtime, membership: Membership, outbox: Outbox,
                 settings: UserSettings, sync: TableSync, log: TableLog, schedules: Schedules,
                 listener: UsersListener) -> None:
        self.runtime = runtime
        self.membership = membership
        self.outbox = outbox
        self.settings = settings
        self.log = log
        self.schedules = schedules
        self.listener = listener
        self.records: dict[bytes, UserRecord] = {}  # tombstones included
        self.buckets: list[dict[bytes, UserRecord]] = [{} for _ in range(BUCKETS)]
        self.digest = BucketDigest(BUCKETS)
        self.sync = sync
        sync.register(TABLE_NAME, self)
        self.refused = 0  # records peers sent while this node had no secret
        self.local_log = LogThrottle(LOCAL_LOG_INTERVAL_MS)
        self.refused_log = LogThrottle(LOCAL_LOG_INTERVAL_MS)

    # ------------------------------------------------------- SyncedTable

    def shared(self) -> bool:
        """Users cross the bus only when it is authenticated: this node has a
        cluster secret (every link it keeps then proved it)."""
        settings = self.settings
        return bool(settings.cluster_secret or settings.cluster_secret_file)

    def in_use(self) -> bool:
        """A record exists and may be sent."""
        return bool(self.records) and self.shared()

    def bucket_messages(self, bucket: int) -> list[tuple[dict, int]]:
        """Each record filed in ``bucket``, in an ACLUSER message of its own."""
        return [({m.TYPE: m.ACLUSER, m.ACL_RECORD: rec.to_wire()}, rec.size())
                for rec in self.buckets[bucket].values()]

    # ---------------------------------------------------- local changes

    def put(self, user: User) -> None:
        """ACL SETUSER (or LOAD): ``user`` becomes the user of its name here,
        and its new version goes to every node."""
        rec = UserRecord(user.name, self._version(user.name), self.runtime.node_id, False,
                         [encode(word) for word in user.rule_words()])
        self._file(rec)
        self._install(user)
        self._tell(rec)

    def delete(self, name: bytes) -> bool:
        """ACL DELUSER of one user (never the default one); False if unknown.
        Its schedules go first, so their deletions leave before its own."""
        if name not in self.settings.users:
            return False
        rec = UserRecord(name, self._version(name), self.runtime.node_id, True, [])
        self._file(rec)
        self._remove(name, True)
        self._tell(rec)
        return True

    def load(self, users: dict[bytes, User]) -> int:
        """ACL LOAD: ``users`` become the users here (a default user missing
        from them is reset to its initial rules, as Redis does); each
        difference is a change. How many."""
        current = self.settings.users
        changes = 0
        for name, user in users.items():
            known = current.get(name)
            if known is None or known.describe() != user.describe():
                self.put(user)
                changes += 1
        for name in list(current):
            if name in users:
                continue
            if name == DEFAULT_USER:
                initial = User.default()
                if current[name].describe() != initial.describe():
                    self.put(initial)
                    changes += 1
            else:
                self.delete(name)
                changes += 1
        return changes

    def _version(self, name: bytes) -> int:
        # Later than the record it replaces even if this clock is behind.
        known = self.records.get(name)
        now = self.runtime.now
        return now if known is None or known.version < now else known.version + 1

    def _tell(self, rec: UserRecord) -> None:
        """Send the record to every node, or say once in a while why not."""
        if self.shared():
            self.outbox.broadcast({m.TYPE: m.ACLUSER, m.ACL_RECORD: rec.to_wire()})
            return
        if self.membership.size > 1:
            held = self.local_log.admit(self.runtime.now)
            if held >= 0:
                logger.warning("ACL user '%s' changed on this node only: users spread to the "
                               "other nodes only over an authenticated bus, and no "
                               "cluster-secret is set (docs/security.md, \"Users across the "
                               "cluster\")%s", _text(rec.name),
                               " (%d more changes since the last report)" % held if held else "")

    # -------------------------------------------------------------- bus

    def on_user(self, sender: bytes, msg: dict, link: Link) -> None:
        """ACLUSER: a record to merge, from an authenticated peer."""
        if not self.shared():
            self.refused += 1
            held = self.refused_log.admit(self.runtime.now)
            if held >= 0:
                logger.warning("ACL user record from %s refused: this node has no cluster "
                               "secret, and users are taken only over an authenticated bus "
                               "(docs/security.md, \"Users across the cluster\")%s",
                               sender.decode("latin-1"),
                               " (%d more since the last report)" % held if held else "")
            return
        rec = record_from_wire(msg[m.ACL_RECORD])
        if rec is None:
            logger.warning("Bad ACL user record from %s", sender.decode("latin-1"))
            return
        self._merge(rec, False)

    def restore_record(self, key: bytes, value: object) -> bool:
        """A record of the tables file at startup (after the config file's
        users); False when malformed."""
        rec = record_from_wire(value)
        if rec is None or rec.name != key:
            return False
        self._merge(rec, True)
        return True

    def _merge(self, rec: UserRecord, restoring: bool) -> None:
        """Take ``rec`` if it is newer than the record known."""
        known = self.records.get(rec.name)
        if known is not None and not rec.newer_than(known):
            return
        self._file(rec)
        if rec.deleted:
            # A user's schedules are deleted where the deletion is made, and
            # again here for those that node did not know of; at startup they
            # come back deleted from their own table.
            self._remove(rec.name, not restoring)
        else:
            self._install(self._user_of(rec))

    # ------------------------------------------------------------ users

    def _file(self, rec: UserRecord) -> None:
        """File ``rec`` in the table and the digest, and persist it."""
        name = rec.name
        known = self.records.get(name)
        if known is not None:
            rec.bucket = known.bucket
            self.digest.toggle(known.bucket, known.print_)
        else:
            rec.bucket = fingerprint(name) % BUCKETS
        rec.print_ = fingerprint(b"%s\0%d\0%s" % (name, rec.version, rec.origin))
        self.digest.toggle(rec.bucket, rec.print_)
        if known is None:
            self.sync.wake()
        self.records[name] = rec
        self.buckets[rec.bucket][name] = rec
        self.log.put(USER_TABLE, name, rec.to_wire())

    def _user_of(self, rec: UserRecord) -> User:
        """The user a record defines; off, with nothing allowed, when one of
        its rules means nothing here (a newer version's): refused rather
        than half allowed."""
        user = User(rec.name)
        try:
            for rule in rec.rules:
                user.apply(rule)
        except RuleError as exc:
            logger.warning("ACL user '%s' from node %s has a rule this node cannot apply (%s): "
                           "the user is off here", _text(rec.name), rec.origin.decode("latin-1"),
                           exc)
            return User(rec.name)
        return user

    def _install(self, user: User) -> None:
        """``user``'s rules become those of the user of its name; logins
        made with what it no longer allows end (``User.credentials``)."""
        users = self.settings.users
        current = users.get(user.name)
        had_quota = current is not None and current.has_quota()
        if current is None:
            users[user.name] = user
        else:
            if current.revokes(user):
                current.credentials += 1
            current.assign(user)  # connections logged in as it see the change at once
        self.listener.users_changed(had_quota, user.has_quota())

    def _remove(self, name: bytes, schedules: bool) -> None:
        """The user of ``name`` is gone: its connections are closed at their
        next command, and (``schedules``) the schedules it set are deleted."""
        user = self.settings.users.pop(name, None)
        if user is None:
            return
        user.removed = True
        if schedules:
            gone = self.schedules.delete_owned_by(name)
            if gone:
                logger.warning("ACL user '%s' deleted: its %d schedules deleted",
                               _text(name), gone)
        self.listener.users_changed(user.has_quota(), False)


def _text(name: bytes) -> str:
    return name.decode("utf-8", "backslashreplace")
