"""Who the client is and what users exist: AUTH (and HELLO's AUTH through
``authenticate``) and ACL (docs/security.md).

Users and their rules are settings (``disque.config.users``); their
changes, persisted and told to the other nodes, are the users' table's
(``cluster.usertable``); the check of each command against them,
protected mode and redaction are the command interface's
(``commands.access``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disque.protocol import errors
from disque.config.aclfile import AclFileError, parse_acl_file
from disque.config.users import (CATEGORIES, DEFAULT_USER, RuleError, User, user_with_rules,
                                 valid_user_name)
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
NO_ACL_FILE: Final = error("ERR This Disque instance is not configured to use an ACL file. Users "
                           "changed with ACL SETUSER are saved automatically in the tables file "
                           "beside nodes.conf; set aclfile (at startup) to keep them in a file "
                           "of user lines as well.")
SAVE_FAILED: Final = error("ERR There was an error trying to save the ACLs. Please check the "
                           "server logs for more information")


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
    current = node.config.users.get(name)
    try:
        user = user_with_rules(current if current is not None else User(name), argv[3:])
    except RuleError as exc:
        return error("ERR " + str(exc))
    node.user_table.put(user)
    return OK


def _deluser(node: NodeState, argv: list[bytes]) -> bytes:
    if DEFAULT_USER in argv[2:]:
        return CANT_DELETE_DEFAULT
    deleted = 0
    for name in argv[2:]:
        if node.user_table.delete(name):
            deleted += 1
    return integer(deleted)


def _save(node: NodeState) -> bytes:
    if not node.config.aclfile:
        return NO_ACL_FILE
    problem = node.host.save_acl_file()
    if problem is not None:
        logger.warning("ACL SAVE: can't write the aclfile %s: %s", node.config.aclfile, problem)
        return SAVE_FAILED
    return OK


def _load(node: NodeState) -> bytes:
    path = node.config.aclfile
    if not path:
        return NO_ACL_FILE
    try:
        data = node.host.read_acl_file()
    except OSError as exc:
        return error("ERR Error loading ACLs, opening file '%s': %s" % (path, exc.strerror))
    try:
        users = parse_acl_file(data, path)
    except AclFileError as exc:
        return error("ERR " + str(exc))
    node.user_table.load(users)
    return OK


def _cat(argv: list[bytes]) -> bytes:
    if len(argv) == 2:
        return encode([name.encode() for name in CATEGORIES])
    units = CATEGORIES.get(argv[2].decode("latin-1").lower())
    if units is None:
        return error("ERR Unknown category '%s'" % argv[2].decode("utf-8", "backslashreplace"))
    return encode([unit.encode() for unit in units])


def acl(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """ACL SETUSER | DELUSER | LIST | USERS | WHOAMI | CAT | SAVE | LOAD."""
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
    if sub == b"SAVE" and n == 2:
        return _save(node)
    if sub == b"LOAD" and n == 2:
        return _load(node)
    return error("ERR unknown subcommand or wrong number of arguments for '%s'. Try SETUSER, "
                 "DELUSER, LIST, USERS, WHOAMI, CAT, SAVE or LOAD."
                 % argv[1].decode("utf-8", "backslashreplace"))


TABLE: Final = (
           ("acl", -2, "al", acl),
       )
