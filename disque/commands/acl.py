"""Who the client is and what users exist: AUTH (and HELLO's AUTH through
``authenticate``) and ACL (docs/security.md).

Users and their rules are settings (``disque.config.users``); the check of
each command against them, protected mode and redaction are the command
interface's (``commands.access``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disque.protocol import errors
from disque.config.users import (CATEGORIES, DEFAULT_USER, RuleError, User, user_with_rules,
                                 users_have_quotas, users_restrict, valid_user_name)
from disque.config.values import encode as config_bytes
from disque.context.log import logger
from disque.protocol.resp import OK, bulk, encode, error, integer

if TYPE_CHECKING:
    from disque.context.clients import ClientState
    from disque.state.nodestate import NodeState

MAX_PASSWORD_LEN: Final = 512

WRONGPASS: Final = error("WRONGPASS invalid username-password pair or user is disabled.")
CANT_DELETE_DEFAULT: Final = error("ERR The 'default' user cannot be removed")
BAD_USER_NAME: Final = error("ERR Usernames can't contain spaces or null characters")


# ------------------------------------------------------------------ AUTH

def authenticate(node: NodeState, client: ClientState, name: bytes | None,
                 password: bytes) -> bytes:
    """AUTH [user] password. Without a user (or as ``default``) it is
    Disque 1.0's AUTH, byte for byte: requirepass (or the default user's
    own passwords), and a failure logs the client out."""
    import hmac  # loaded at the first AUTH, not by every start
    config = node.config
    if name is None or name == DEFAULT_USER:
        default = config.users[DEFAULT_USER]
        requirepass = config.requirepass
        if not requirepass and default.nopass:
            return errors.AUTH_NOT_SET
        ok = default.enabled and len(password) <= MAX_PASSWORD_LEN and (
            (bool(requirepass) and hmac.compare_digest(password, config_bytes(requirepass)))
            or (not default.nopass and default.check_password(password)))
        client.authenticated = ok
        client.user = None  # logged in as the default user, or out
        if ok:
            return OK
        _auth_failed(node, client, DEFAULT_USER)
        return errors.INVALID_PASSWORD
    user = config.users.get(name)
    if (user is None or not user.enabled or len(password) > MAX_PASSWORD_LEN
            or not user.check_password(password)):
        _auth_failed(node, client, name)
        return WRONGPASS
    client.user = user
    client.authenticated = True
    return OK


def _auth_failed(node: NodeState, client: ClientState, name: bytes) -> None:
    """Count a failed AUTH, and log it (never the password), at most once a
    second so that guessing cannot flood the log."""
    stats = node.access_stats
    stats.auth_failures += 1
    held = stats.auth_log.admit(node.runtime.now)
    if held >= 0:
        logger.warning("AUTH failed for user '%s' from %s (%d more failures not logged since "
                       "the last report)", name.decode("utf-8", "backslashreplace"),
                       client.addr, held)


# ------------------------------------------------------------------- ACL

def _setuser(node: NodeState, argv: list[bytes]) -> bytes:
    name = argv[2]
    if not valid_user_name(name):
        return BAD_USER_NAME
    users = node.config.users
    current = users.get(name)
    try:
        user = user_with_rules(current if current is not None else User(name), argv[3:])
    except RuleError as exc:
        return error("ERR " + str(exc))
    if current is None:
        users[name] = user
    else:
        if current.revokes(user):
            current.credentials += 1
        current.assign(user)  # connections logged in as it see the change at once
    # Only ever turned on at run time: a connection may still be logged in as
    # a user deleted earlier, and check_access must meet it to close it.
    if not node.guarded:
        node.guarded = users_restrict(users)
    node.quotas.active = users_have_quotas(users)
    return OK


def _deluser(node: NodeState, argv: list[bytes]) -> bytes:
    users = node.config.users
    if DEFAULT_USER in argv[2:]:
        return CANT_DELETE_DEFAULT
    deleted = 0
    for name in argv[2:]:
        user = users.pop(name, None)
        if user is not None:
            user.removed = True  # its connections are closed at their next command
            deleted += 1
            # Its schedules go too, on every node (SCHEDULE DEL's tombstones):
            # nothing it set keeps adding jobs.
            gone = node.schedules.delete_owned_by(name)
            if gone:
                logger.warning("ACL DELUSER %s: its %d schedules deleted",
                               name.decode("utf-8", "backslashreplace"), gone)
    # NodeState.guarded stays on: connections logged in as a deleted user must
    # still meet check_access, which closes them.
    node.quotas.active = users_have_quotas(users)
    return integer(deleted)


def _cat(argv: list[bytes]) -> bytes:
    if len(argv) == 2:
        return encode([name.encode() for name in CATEGORIES])
    units = CATEGORIES.get(argv[2].decode("latin-1").lower())
    if units is None:
        return error("ERR Unknown category '%s'" % argv[2].decode("utf-8", "backslashreplace"))
    return encode([unit.encode() for unit in units])


def acl(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """ACL SETUSER | DELUSER | LIST | USERS | WHOAMI | CAT."""
    sub = argv[1].upper()
    n = len(argv)
    if sub == b"SETUSER" and n >= 3:
        return _setuser(node, argv)
    if sub == b"DELUSER" and n >= 3:
        return _deluser(node, argv)
    if sub == b"LIST" and n == 2:
        return encode([b"user " + config_bytes(u.describe()) for u in node.config.users.values()])
    if sub == b"USERS" and n == 2:
        return encode(sorted(node.config.users))
    if sub == b"WHOAMI" and n == 2:
        return bulk(client.user.name if client.user is not None else DEFAULT_USER)
    if sub == b"CAT" and n in (2, 3):
        return _cat(argv)
    return error("ERR unknown subcommand or wrong number of arguments for '%s'. Try SETUSER, "
                 "DELUSER, LIST, USERS, WHOAMI or CAT." % argv[1].decode("utf-8", "backslashreplace"))


TABLE: Final = (
           ("acl", -2, "al", acl),
       )
