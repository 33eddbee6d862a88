"""The aclfile's text (docs/security.md "The aclfile"): the users as Redis
writes them, one ``user <name> <rules>`` line each, passwords as their
hashes. Reading is all or nothing: a file with any bad line gives no
user, and the error names every bad line without repeating its rules
(a rule may be a password).
"""

from __future__ import annotations

from typing import Final

from disque.config.users import RuleError, User, valid_user_name
from disque.config.values import encode
from disque.protocol.argsplit import UnbalancedQuotes, split_args

USER_KEYWORD: Final = b"user"


class AclFileError(Exception):
    """The file cannot be read as users; ``str()`` names each bad line."""


def parse_acl_file(data: bytes, path: str) -> dict[bytes, User]:
    """The users of an aclfile's content, in the order of its lines; raise
    AclFileError (Redis' texts: ``<path>:<line>: <reason>.``)."""
    users: dict[bytes, User] = {}
    problems: list[str] = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        line = raw.strip(b" \t\r\n")
        if not line:
            continue
        try:
            argv = split_args(line)
        except UnbalancedQuotes:
            problems.append("%s:%d: Unbalanced quotes." % (path, number))
            continue
        if len(argv) < 2 or argv[0] != USER_KEYWORD:
            problems.append("%s:%d should start with user keyword." % (path, number))
            continue
        name = argv[1]
        if not valid_user_name(name):
            problems.append("%s:%d: username '%s' contains invalid characters."
                            % (path, number, name.decode("utf-8", "backslashreplace")))
            continue
        if name in users:
            problems.append("Duplicate user '%s' found on line %d."
                            % (name.decode("utf-8", "backslashreplace"), number))
            continue
        user = User(name)
        try:
            for rule in argv[2:]:
                user.apply(rule)
        except RuleError as exc:
            problems.append("%s:%d: %s." % (path, number, exc))
            continue
        users[name] = user
    if problems:
        raise AclFileError(" ".join(problems))
    return users


def render_acl_file(users: dict[bytes, User]) -> bytes:
    """The aclfile holding ``users`` (the default user included, as Redis'
    ACL SAVE writes it)."""
    return b"".join([USER_KEYWORD + b" " + encode(user.describe()) + b"\n"
                     for user in users.values()])
