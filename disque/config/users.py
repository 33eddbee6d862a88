"""Users and their rules (docs/security.md "Users and permissions").

A user is a name, on/off, password hashes, the commands it may run and
the queues it may touch. Rules are Redis 7's ACL words, so operators'
habits carry over: ``on``, ``off``, ``>password``, ``<password``,
``#<sha256 hex>``, ``!<sha256 hex>``, ``nopass``, ``resetpass``,
``+command``, ``-command``, ``+@category``, ``-@category``,
``allcommands``, ``nocommands``, ``~queue-pattern``, ``allqueues``,
``resetqueues``, ``reset``, and this server's quotas on what the user may
have pending, ``quota-jobs=<n>`` and ``quota-bytes=<n>`` (docs/rate-limits.md;
0: none). The same words come from ``user`` lines of
the config file and from ACL SETUSER; CONFIG REWRITE writes each user back
as one ``user`` line (``User.describe``), passwords as their hashes.

Permissions are on command names as the command table first names them
(rename-command does not change them). CLIENT and ACL are split into
subcommands (``client|kill``, ``acl|whoami``) so that a worker may name its
connection without being able to kill others'.
"""

from __future__ import annotations

from typing import Final

from disque.protocol.argsplit import quote_arg
from disque.config.globmatch import MAX_PATTERN_LEN, stringmatch
from disque.config.values import format_memory, parse_memory

DEFAULT_USER: Final = b"default"
MAX_CACHED_QUEUES: Final = 4096  # a user's queue-pattern answers kept (cleared when full)
# Longer names are matched each time: the cache keeps at most 4096 x 1 KB of
# client-chosen names alive, where 4096 names of 100 MB each would be 400 GB.
MAX_CACHED_NAME_LEN: Final = 1024
QUOTA_JOBS: Final = "quota-jobs="
QUOTA_BYTES: Final = "quota-bytes="
MAX_QUOTA: Final = 2 ** 62
QUEUE_PATTERN_TOO_LONG: Final = "A queue pattern may be at most %d bytes" % MAX_PATTERN_LEN

# Commands that are permitted subcommand by subcommand (``+client`` permits them all).
SUBCOMMANDS: Final[dict[str, tuple[str, ...]]] = {
    "client": ("list", "kill", "setname", "getname", "id", "pause", "reply", "setinfo"),
    "acl": ("setuser", "deluser", "list", "users", "whoami", "cat", "save", "load"),
    "schedule": ("set", "del", "list"),
}

# Every command of the table is in at least one category (tests/unit/test_acl.py
# checks it against the command table). Order is ACL CAT's and ACL LIST's.
CATEGORIES: Final[dict[str, tuple[str, ...]]] = {
    "produce": ("addjob", "addjobs", "schedule|set", "schedule|del"),
    "consume": ("getjob", "ackjob", "fastack", "nack", "working"),
    "read": ("qlen", "qpeek", "qstat", "show", "qscan", "jscan", "schedule|list"),
    "manage": ("deljob", "enqueue", "dequeue", "qredrive", "pause", "qpurge", "qlimit"),
    "connection": ("auth", "hello", "ping", "time", "command", "client|setname",
                   "client|getname", "client|id", "client|reply", "client|setinfo",
                   "acl|whoami", "acl|cat"),
    "admin": ("config", "cluster", "debug", "shutdown", "bgrewriteaof", "monitor", "slowlog",
              "latency", "loadjob", "client|list", "client|kill", "client|pause",
              "acl|setuser", "acl|deluser", "acl|list", "acl|users", "acl|save", "acl|load",
              "info"),
    # INFO reports the whole node (every queue's counts, the users, the
    # denials), which key patterns cannot limit: a queue-scoped user must
    # not get it with @read. Redis 7 likewise files INFO under @dangerous.
    # Here a metrics reader gets it without the rest of @admin.
    "monitoring": ("info",),
}


def _all_units() -> frozenset[str]:
    units: set[str] = set()
    for names in CATEGORIES.values():
        units.update(names)
    for command, subs in SUBCOMMANDS.items():
        units.add(command)  # the whole command: held when every subcommand is
        units.update(command + "|" + sub for sub in subs)
    return frozenset(units)


ALL_UNITS: Final = _all_units()


class RuleError(Exception):
    """A rule that cannot be applied; ``str()`` is the reason."""


class User:
    """One user. Its ``allowed`` set holds permission units: command names,
    and ``command|sub`` for the commands in SUBCOMMANDS."""

    __slots__ = ("name", "enabled", "nopass", "passwords", "allowed", "all_commands",
                 "patterns", "all_queues", "removed", "queue_cache", "quota_jobs",
                 "quota_bytes", "credentials")

    def __init__(self, name: bytes) -> None:
        # A new user is off, with no password, no command and no queue (Redis 7).
        self.name = name
        self.enabled = False
        self.nopass = False
        self.passwords: list[str] = []  # SHA-256 hex digests
        self.allowed: set[str] = set()
        self.all_commands = False
        self.patterns: list[bytes] = []
        self.all_queues = False
        self.removed = False  # ACL DELUSER: connections logged in as it are closed
        self.queue_cache: dict[bytes, bool] = {}
        # Jobs and body bytes the user may have pending on a node (0: no quota).
        self.quota_jobs = 0
        self.quota_bytes = 0
        # Counts changes of its passwords and its turning off (``revokes``):
        # what a login proved no longer holds, so the dashboard's sessions end.
        self.credentials = 0

    @classmethod
    def default(cls) -> User:
        """The user every connection starts as: on, no password, everything."""
        user = cls(DEFAULT_USER)
        user.enabled = True
        user.nopass = True
        user.allowed = set(ALL_UNITS)
        user.all_commands = True
        user.all_queues = True
        return user

    def copy(self) -> User:
        """A copy to apply rules to (ACL SETUSER applies all of them or none)."""
        other = User(self.name)
        other.assign(self)
        return other

    def assign(self, other: User) -> None:
        """Take ``other``'s rules, keeping this object (connections hold it)."""
        self.enabled = other.enabled
        self.nopass = other.nopass
        self.passwords = list(other.passwords)
        self.allowed = set(other.allowed)
        self.all_commands = other.all_commands
        self.patterns = list(other.patterns)
        self.all_queues = other.all_queues
        self.queue_cache = {}
        self.quota_jobs = other.quota_jobs
        self.quota_bytes = other.quota_bytes

    def revokes(self, new: User) -> bool:
        """Taking ``new``'s rules changes the passwords or turns the user off:
        logins made before must end."""
        return (new.passwords != self.passwords or new.nopass != self.nopass
                or (self.enabled and not new.enabled))

    # ----------------------------------------------------------- checks

    def has_quota(self) -> bool:
        """ADDJOB counts what this user has pending (``quota-jobs``, ``quota-bytes``)."""
        return bool(self.quota_jobs or self.quota_bytes)

    def unrestricted(self) -> bool:
        """On, every command and every queue (passwords aside)."""
        return self.enabled and self.all_commands and self.all_queues

    def may_run(self, unit: str) -> bool:
        """Whether the command (or ``command|sub``) is permitted."""
        return self.all_commands or unit in self.allowed

    def may_access(self, queue: bytes) -> bool:
        """Whether ``queue`` matches one of the user's queue patterns."""
        if self.all_queues:
            return True
        cache = self.queue_cache
        known = cache.get(queue)
        if known is not None:
            return known
        allowed = False
        for pattern in self.patterns:
            if stringmatch(pattern, queue):
                allowed = True
                break
        if len(queue) <= MAX_CACHED_NAME_LEN:
            if len(cache) >= MAX_CACHED_QUEUES:
                cache.clear()
            cache[queue] = allowed
        return allowed

    def check_password(self, password: bytes) -> bool:
        """``password`` is one of the user's (any password when ``nopass``);
        every stored hash is compared in constant time."""
        if self.nopass:
            return True
        import hmac  # loaded at the first password check, not by every start
        digest = password_hash(password)
        found = False
        for stored in self.passwords:
            if hmac.compare_digest(stored, digest):
                found = True
        return found

    # ------------------------------------------------------------ rules

    def apply(self, rule: bytes) -> None:
        """Apply one rule word; raise RuleError (the user may be half
        changed then: apply rules to a ``copy``)."""
        word = rule.decode("utf-8", "surrogateescape")
        lower = word.lower()
        if lower == "on":
            self.enabled = True
        elif lower == "off":
            self.enabled = False
        elif lower == "nopass":
            self.nopass = True
            self.passwords = []
        elif lower == "resetpass":
            self.nopass = False
            self.passwords = []
        elif lower in ("allcommands", "+@all"):
            self.allowed = set(ALL_UNITS)
            self.all_commands = True
        elif lower in ("nocommands", "-@all"):
            self.allowed = set()
            self.all_commands = False
        elif lower in ("allqueues", "allkeys", "~*"):
            self.all_queues = True
            self.patterns = []
            self.queue_cache = {}
        elif lower in ("resetqueues", "resetkeys"):
            self.all_queues = False
            self.patterns = []
            self.queue_cache = {}
        elif lower == "reset":
            self.assign(User(self.name))
        elif word.startswith(">"):
            self._add_hash(password_hash(rule[1:]))
        elif word.startswith("<"):
            self._remove_hash(password_hash(rule[1:]))
        elif word.startswith("#"):
            self._add_hash(_checked_hash(word[1:]))
        elif word.startswith("!"):
            self._remove_hash(_checked_hash(word[1:]))
        elif word.startswith("~"):
            if len(rule) - 1 > MAX_PATTERN_LEN:
                raise RuleError(QUEUE_PATTERN_TOO_LONG)
            if not self.all_queues and rule[1:] not in self.patterns:
                self.patterns.append(rule[1:])
                self.queue_cache = {}
        elif lower.startswith(QUOTA_JOBS):
            self.quota_jobs = _quota(word[len(QUOTA_JOBS):], False)
        elif lower.startswith(QUOTA_BYTES):
            self.quota_bytes = _quota(word[len(QUOTA_BYTES):], True)
        elif lower in ("quota-jobs", "quota-bytes"):
            raise RuleError("A quota is one word: %s=<n>" % lower)
        elif word.startswith("+@") or word.startswith("-@"):
            units = CATEGORIES.get(lower[2:])
            if units is None:
                raise RuleError("Unknown command or category name in ACL")
            self._permit(units, word[0] == "+")
        elif word.startswith("+") or word.startswith("-"):
            self._permit(_command_units(lower[1:]), word[0] == "+")
        else:
            raise RuleError("Syntax error")

    def _add_hash(self, digest: str) -> None:
        self.nopass = False
        if digest not in self.passwords:
            self.passwords.append(digest)

    def _remove_hash(self, digest: str) -> None:
        if digest not in self.passwords:
            raise RuleError("The password you are trying to remove from the user does not exist")
        self.passwords.remove(digest)

    def _permit(self, units: tuple[str, ...], grant: bool) -> None:
        allowed = self.allowed
        for unit in units:
            if grant:
                allowed.add(unit)
            else:
                allowed.discard(unit)
            subs = SUBCOMMANDS.get(unit)
            if subs is not None:  # the whole command: each of its subcommands
                for sub in subs:
                    if grant:
                        allowed.add(unit + "|" + sub)
                    else:
                        allowed.discard(unit + "|" + sub)
        for command, subs in SUBCOMMANDS.items():
            if all(command + "|" + sub in allowed for sub in subs):
                allowed.add(command)
            else:
                allowed.discard(command)
        self.all_commands = allowed == ALL_UNITS

    # ---------------------------------------------------------- reports

    def describe(self) -> str:
        """The user as rules (ACL LIST without ``user``, CONFIG REWRITE's line):
        applied to a new user, they give this one back."""
        return " ".join([_quoted(word) for word in [_text(self.name)] + self.rule_words()])

    def rule_words(self) -> list[str]:
        """The rules that make a new user of this name into this one,
        passwords as their hashes (what a user record carries)."""
        words = ["on" if self.enabled else "off"]
        if self.nopass:
            words.append("nopass")
        words.extend("#" + digest for digest in self.passwords)
        if self.all_queues:
            words.append("~*")
        else:
            words.extend("~" + _text(pattern) for pattern in self.patterns)
        words.extend(_command_rules(self.allowed))
        if self.quota_jobs:
            words.append("%s%d" % (QUOTA_JOBS, self.quota_jobs))
        if self.quota_bytes:
            words.append(QUOTA_BYTES + format_memory(self.quota_bytes))
        return words


def _quota(text: str, memory: bool) -> int:
    """A quota's value: a count, or for bytes a size with a unit (``10mb``)."""
    try:
        value = parse_memory(text) if memory else int(text) if text.isdigit() else -1
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_QUOTA:
        raise RuleError("A quota must be a number from 0 (none) to %d%s"
                        % (MAX_QUOTA, ", with an optional unit (kb, mb, gb)" if memory else ""))
    return value


def _command_rules(allowed: set[str]) -> list[str]:
    """``+@all``, or ``-@all`` then whole categories, then single commands."""
    if allowed == ALL_UNITS:
        return ["+@all"]
    rules = ["-@all"]
    covered: set[str] = set()
    for category, units in CATEGORIES.items():
        # A category held whole but already covered (@monitoring inside
        # @admin) would only repeat itself.
        if all(unit in allowed for unit in units) and not covered.issuperset(units):
            rules.append("+@" + category)
            covered.update(units)
    rest = allowed - covered
    for command, subs in SUBCOMMANDS.items():
        if command in rest:
            parts = {command + "|" + sub for sub in subs}
            rest.discard(command)
            if not parts <= covered:
                rules.append("+" + command)
                rest -= parts
    rules.extend("+" + unit for unit in sorted(rest))
    return rules


def _command_units(name: str) -> tuple[str, ...]:
    if name not in ALL_UNITS:
        raise RuleError("Unknown command or category name in ACL")
    return (name,)


def _checked_hash(text: str) -> str:
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise RuleError("The password hash must be exactly 64 characters and contain only "
                        "lowercase hexadecimal characters")
    return text


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _quoted(word: str) -> str:
    """A word as the config file reads it back (quoted when it must be)."""
    if word and all(33 <= ord(c) <= 126 and c not in "\"'\\" for c in word):
        return word
    return quote_arg(word.encode("utf-8", "surrogateescape"))


def password_hash(password: bytes) -> str:
    """How passwords are stored: SHA-256, hex (as Redis)."""
    import hashlib  # loaded with the first password: OpenSSL's digests are slow to load
    return hashlib.sha256(password).hexdigest()


def valid_user_name(name: bytes) -> bool:
    """Printable ASCII without spaces (names go into config lines and replies)."""
    return bool(name) and all(33 <= c <= 126 for c in name)


def user_with_rules(base: User, rules: list[bytes]) -> User:
    """A copy of ``base`` with ``rules`` applied; raise RuleError naming the rule."""
    user = base.copy()
    for rule in rules:
        try:
            user.apply(rule)
        except RuleError as exc:
            raise RuleError("Error in ACL SETUSER modifier '%s': %s"
                            % (rule.decode("utf-8", "backslashreplace"), exc)) from None
    return user


def users_restrict(users: dict[bytes, User]) -> bool:
    """Whether any connection can be refused a command for its user: a named
    user exists, or the default user is off, has a password of its own or
    lacks a command or queue. (requirepass alone does not count: Node.call
    checks it as Disque 1.0 did.)"""
    if len(users) != 1:
        return True
    default = users.get(DEFAULT_USER)
    return default is None or not (default.unrestricted() and default.nopass)


def users_have_quotas(users: dict[bytes, User]) -> bool:
    """Some user has a quota: ADDJOB then counts what its user has pending."""
    for user in users.values():
        if user.has_quota():
            return True
    return False
