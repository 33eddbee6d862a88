"""The command interface's access rules (docs/security.md): what
``Node.call`` checks while ``NodeState.guarded`` (the user's commands, and
through ``KEY_SPECS`` the queues and jobs a command names), protected
mode's decisions, and what MONITOR and the slow log show of a command
(secrets redacted).

Users and their rules are settings (``disque.config.users``); this module
applies them to commands. The AUTH and ACL commands are in ``commands.acl``.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Final

from disque.protocol import errors
from disque.protocol.argsplit import quote_arg
from disque.commands.args import option_name
from disque.config.users import ALL_UNITS, DEFAULT_USER, User
from disque.context.log import logger
from disque.jobs.ids import is_valid_job_id
from disque.protocol.resp import error

if TYPE_CHECKING:
    from disque.state.command import Command
    from disque.config import Config
    from disque.context.clients import ClientState
    from disque.state.nodestate import NodeState

# Where a command's queue names or job IDs are (Command.acl_keys).
KEYS_NONE: Final = 0
KEYS_QUEUE: Final = 1     # argv[1] is a queue
KEYS_ADDJOB: Final = 2    # argv[1], and the queue of DEADLETTER <queue>
KEYS_GETJOB: Final = 3    # the queues after FROM
KEYS_JOBS: Final = 4      # job IDs: a job held here must be of a permitted queue
KEYS_ACKS: Final = 5      # job IDs as KEYS_JOBS; IDs of jobs not held here are dropped
KEYS_SCHEDULE: Final = 6  # SCHEDULE SET's queue (and DEADLETTER's), DEL's and a replaced schedule's queue
KEYS_ADDJOBS: Final = 7   # argv[1], and DEADLETTER <queue> among the options
KEY_SPECS: Final[dict[str, int]] = {
    "addjob": KEYS_ADDJOB, "addjobs": KEYS_ADDJOBS, "getjob": KEYS_GETJOB,
    "qlen": KEYS_QUEUE, "qpeek": KEYS_QUEUE, "qstat": KEYS_QUEUE, "pause": KEYS_QUEUE,
    "qredrive": KEYS_QUEUE, "qpurge": KEYS_QUEUE, "qlimit": KEYS_QUEUE,
    "show": KEYS_JOBS, "working": KEYS_JOBS, "nack": KEYS_JOBS, "enqueue": KEYS_JOBS,
    "dequeue": KEYS_JOBS, "deljob": KEYS_JOBS,
    "ackjob": KEYS_ACKS, "fastack": KEYS_ACKS,
    "schedule": KEYS_SCHEDULE,
}
SUBCOMMAND_PERMS: Final = frozenset(("client", "acl", "schedule"))  # permitted per subcommand

_FROM: Final = b"FROM"
_TIMEOUT: Final = b"TIMEOUT"
_COUNT: Final = b"COUNT"
_DEADLETTER: Final = b"DEADLETTER"
_ASYNC: Final = b"ASYNC"
_HEADER: Final = b"HEADER"
BODIES: Final = b"BODIES"
DEDUPIDS: Final = b"DEDUPIDS"
_AUTH: Final = b"AUTH"
_SETUSER: Final = b"SETUSER"
REDACTED: Final = b"(redacted)"
# Directives whose CONFIG SET value MONITOR and the slow log never show.
SECRET_CONFIGS: Final = frozenset({b"requirepass", b"tls-key-file-pass", b"cluster-secret",
                                   b"cluster-secret-old"})
_SET: Final = b"SET"
_DEL: Final = b"DEL"
SCHEDULE_SET_UNIT: Final = "schedule|set"
SCHEDULE_DEL_UNIT: Final = "schedule|del"
USER_GONE: Final = error("NOAUTH this connection's user was deleted or turned off")
DEBUG_NOT_ALLOWED: Final = error(
    "ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", "
    "you can run it from a local connection, otherwise you need to set this option in the "
    "configuration file, and then restart the server.")
PROTECTED_MODE_DENIED: Final = error(
    "DENIED Disque is running in protected mode because protected mode is enabled and no "
    "password is set for the default user. In this mode connections are only accepted from "
    "the loopback interface and the unix socket. To connect from other computers, do one of "
    "these: 1) Set a password for the default user (requirepass, or 'user default on "
    ">password'), or turn the default user off and add users with passwords, then bind the "
    "interfaces clients reach. 2) Disable protected mode with 'CONFIG SET protected-mode no' "
    "from the loopback interface, and CONFIG REWRITE to keep it; MAKE SURE the node is not "
    "reachable from the internet if you do so. 3) Set 'protected-mode no' in the "
    "configuration file and restart, or start the server with '--protected-mode no'.")


PROTECTED_MODE_BUS: Final = (
    "protected mode is on and no cluster secret is set, so this node links only with "
    "nodes on the loopback interface. To form a cluster across machines, set the same "
    "cluster-secret (or cluster-secret-file) on every node, or turn protected-mode off on "
    "nodes no one else can reach (docs/security.md)")
MEET_PROTECTED: Final = error("ERR Cannot meet a node beyond loopback: " + PROTECTED_MODE_BUS)
# An HTTP request's first line is "POST / HTTP/1.1" and a browser's first
# header "Host: ...": a command by that name is a web page or a proxy
# speaking to the node (cross-protocol scripting), and the connection is
# closed before the rest of the request runs, as Redis does.
CROSS_PROTOCOL_NAMES: Final = frozenset((b"POST", b"HOST:"))
CROSS_PROTOCOL_LOG: Final = (
    "Possible SECURITY ATTACK detected from %s. It looks like somebody is sending POST or "
    "Host: commands to Disque. This is likely due to an attacker attempting to use Cross "
    "Protocol Scripting to compromise your Disque instance. Connection aborted. "
    "(%d more not logged since the last report)")


# ------------------------------------------------------------- the check

def refuse_cross_protocol(node: NodeState, client: ClientState) -> bytes:
    """Close a connection that sent HTTP (``CROSS_PROTOCOL_NAMES``) without
    a reply or running what follows; counted in INFO security and logged
    at most once a minute."""
    stats = node.access_stats
    stats.cross_protocol += 1
    client.close_after_reply = True
    held = stats.cross_protocol_log.admit(node.runtime.now)
    if held >= 0:
        logger.warning(CROSS_PROTOCOL_LOG, client.addr, held)
    return b""


def check_access(node: NodeState, client: ClientState, cmd: Command,
                 argv: list[bytes]) -> bytes | None:
    """The reply refusing the command to this client's user, or None.

    ``Node.call`` calls it only while ``NodeState.guarded`` (a named user
    exists or the default user is restricted), so a node without users pays
    one attribute test per command."""
    if cmd.is_auth:
        return None
    user = _user_of(node, client)
    if not isinstance(user, User):
        return user
    if not user.all_commands:
        unit = cmd.name
        if unit in SUBCOMMAND_PERMS:
            # A subcommand the node does not have only gets the handler's syntax
            # error (clients probe, as redis-py's CLIENT MAINT_NOTIFICATIONS).
            unit = unit + "|" + argv[1].decode("latin-1").lower()
            if unit not in ALL_UNITS:
                return None
        if unit not in user.allowed:
            return _command_denied(node, user, unit)
        if (unit == SCHEDULE_SET_UNIT and SCHEDULE_DEL_UNIT not in user.allowed
                and len(argv) > 2 and node.schedules.get(argv[2]) is not None):
            # Replacing a schedule removes the one there: SCHEDULE DEL's right.
            node.access_stats.denied_commands += 1
            return error("NOPERM User %s has no permissions to replace the schedule '%s': SET "
                         "of an existing name needs the '%s' command too"
                         % (_name(user), argv[2].decode("utf-8", "backslashreplace"),
                            SCHEDULE_DEL_UNIT))
    if not user.all_queues and cmd.acl_keys:
        return _check_keys(node, user, cmd.acl_keys, argv)
    return None


def _user_of(node: NodeState, client: ClientState) -> User | bytes:
    """The user the client acts as, or the reply refusing it any command
    (NOAUTH; USER_GONE for a user deleted or turned off, which logs it out)."""
    user = client.user
    if user is None:
        user = node.config.users[DEFAULT_USER]
        if not user.enabled or (not client.authenticated
                                and (bool(node.config.requirepass) or not user.nopass)):
            return errors.NOAUTH
        return user
    if user.removed or not user.enabled:
        client.user = None
        client.authenticated = False
        client.close_after_reply = True
        return USER_GONE
    return user


def _command_denied(node: NodeState, user: User, unit: str) -> bytes:
    node.access_stats.denied_commands += 1
    return error("NOPERM User %s has no permissions to run the '%s' command" % (_name(user), unit))


def check_on_queue(node: NodeState, client: ClientState, command: str,
                   queue: bytes) -> bytes | None:
    """The reply refusing ``client``'s user ``command`` on ``queue``, or None:
    check_access's decision where the queue is another node's, which
    ``KEY_SPECS`` cannot find here (the dashboard looking inside a queue or
    a job, redriving or deleting there). A command disabled here is refused."""
    if not any(cmd.name == command for cmd in node.commands.values()):
        return errors.unknown_command(command.encode())
    if not node.guarded:
        if node.config.requirepass and not client.authenticated:
            return errors.NOAUTH
        return None
    user = _user_of(node, client)
    if not isinstance(user, User):
        return user
    if not user.may_run(command):
        return _command_denied(node, user, command)
    return _check_queue(node, user, queue)


def _check_producer(node: NodeState, user: User, argv: list[bytes], first: int,
                    end: int) -> bytes | None:
    """ADDJOB's and ADDJOBS's queues: ``argv[1]``, and the queue after each
    DEADLETTER among the option words ``argv[first:end]``."""
    denied = _check_queue(node, user, argv[1])
    for i in range(first, end - 1):
        if denied is None and option_name(argv[i]) == _DEADLETTER:
            denied = _check_queue(node, user, argv[i + 1])
    return denied


def _check_keys(node: NodeState, user: User, kind: int, argv: list[bytes]) -> bytes | None:
    if kind == KEYS_QUEUE:
        return _check_queue(node, user, argv[1])
    if kind == KEYS_ADDJOB:
        return _check_producer(node, user, argv, 4, len(argv))
    if kind == KEYS_SCHEDULE:
        for queue in _schedule_queues(node, argv):
            denied = _check_queue(node, user, queue)
            if denied is not None:
                return denied
        return None
    if kind == KEYS_ADDJOBS:
        # Every word before the jobs that follows a DEADLETTER: never fewer
        # queues than the options' parser reads there.
        return _check_producer(node, user, argv, 3, addjobs_options_end(argv))
    if kind == KEYS_GETJOB:
        for queue in getjob_queues(argv):
            denied = _check_queue(node, user, queue)
            if denied is not None:
                return denied
        return None
    jobs = node.jobs.by_id
    held: list[bytes] | None = None
    for i in range(1, len(argv)):
        job = jobs.get(argv[i])
        if job is None or job.queue is None:
            if kind == KEYS_ACKS and is_valid_job_id(argv[i]):
                # The node cannot tell this job's queue: acknowledging it would
                # reach other nodes' copies, whatever their queue.
                if held is None:
                    held = argv[1:i]
                continue
        elif not user.may_access(job.queue):
            node.access_stats.denied_queues += 1
            return error("NOPERM User %s has no permissions to access the queue of job %s"
                         % (_name(user), argv[i].decode("latin-1")))
        if held is not None:
            held.append(argv[i])
    if held is not None:
        argv[1:] = held
    return None


def _check_queue(node: NodeState, user: User, queue: bytes) -> bytes | None:
    if user.may_access(queue):
        return None
    node.access_stats.denied_queues += 1
    return error("NOPERM User %s has no permissions to access the queue '%s'"
                 % (_name(user), queue.decode("utf-8", "backslashreplace")))


def _schedule_queues(node: NodeState, argv: list[bytes]) -> list[bytes]:
    """The queues a SCHEDULE command names: SET's (argv[5]) and its
    DEADLETTER's, and the queue of the schedule it replaces (as DEL would);
    DEL's schedule's; LIST filters its reply instead."""
    sub = argv[1].upper()
    if sub == _SET and len(argv) >= 7:
        replaced = node.schedules.get(argv[2])
        queues = [argv[5]] if replaced is None else [replaced.queue, argv[5]]
        for i in range(7, len(argv) - 1):
            if option_name(argv[i]) == _DEADLETTER:
                queues.append(argv[i + 1])
        return queues
    if sub == _DEL and len(argv) == 3:
        s = node.schedules.get(argv[2])
        return [] if s is None else [s.queue]
    return []


def getjob_queues(argv: list[bytes]) -> list[bytes]:
    """The queues GETJOB names: the words after FROM (options before it
    take a value only for TIMEOUT and COUNT)."""
    i = 1
    n = len(argv)
    while i < n:
        opt = option_name(argv[i])
        if opt == _FROM:
            return argv[i + 1:]
        i += 2 if opt in (_TIMEOUT, _COUNT) else 1
    return []


def addjobs_options_end(argv: list[bytes]) -> int:
    """Where ADDJOBS's jobs start: the index of its BODIES or DEDUPIDS word
    (``len(argv)`` without one). Its options, from argv[3], take one value
    each but ASYNC (none) and HEADER (two), as ADDJOB's parser reads them:
    the ACL check and the command find the same options."""
    i = 3
    n = len(argv)
    while i < n:
        opt = option_name(argv[i])
        if opt == BODIES or opt == DEDUPIDS:
            return i
        i += 1 if opt == _ASYNC else 3 if opt == _HEADER else 2
    return n


def restricted_queues(node: NodeState, client: ClientState) -> User | None:
    """The client's user when it sees only some queues (QSCAN, JSCAN filter
    with it), else None."""
    if not node.guarded:
        return None
    user = client.user
    if user is None:
        user = node.config.users[DEFAULT_USER]
    return None if user.all_queues else user


def _name(user: User) -> str:
    return user.name.decode("latin-1")


# ---------------------------------------------------------- who is asking

def default_user_open(config: Config) -> bool:
    """Anyone may use the node as the default user, without a password."""
    default = config.users[DEFAULT_USER]
    return default.enabled and default.nopass and not config.requirepass


def needs_auth(config: Config, client: ClientState) -> bool:
    """The client must AUTH before running commands (HELLO's check, and the
    connection's limit on what an unauthenticated client may send)."""
    user = client.user
    if user is not None:
        return user.removed or not user.enabled
    default = config.users[DEFAULT_USER]
    return not default.enabled or (not client.authenticated
                                   and (bool(config.requirepass) or not default.nopass))


def is_loopback(host: str) -> bool:
    """A peer address protected mode lets in (127.0.0.0/8, ::1, mapped)."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def protected_mode_refuses(config: Config, local: bool) -> bool:
    """Protected mode turns this connection away: it is not local and the
    default user needs no password (decided when the connection is made)."""
    return config.protected_mode and not local and default_user_open(config)


def cluster_secret_set(config: Config) -> bool:
    """A cluster secret is configured: bus links prove it (``net/busauth``)."""
    return bool(config.cluster_secret or config.cluster_secret_file)


def protected_mode_refuses_bus(config: Config, peer_local: bool, secured: bool) -> bool:
    """Protected mode keeps this bus link out: the peer is not on loopback and
    no cluster secret authenticates the link (``secured``). A password does
    not count: the bus never asks for one, so without a secret anyone who
    reaches the bus port could join the cluster and read or delete jobs."""
    return config.protected_mode and not peer_local and not secured


def allowed_from(setting: str, client: ClientState) -> bool:
    """enable-debug-command / enable-protected-configs for this client."""
    return setting == "yes" or (setting == "local" and client.local)


def redact(cmd: Command, argv: list[bytes]) -> list[bytes]:
    """What MONITOR and the slow log show of AUTH, HELLO ... AUTH, ACL
    SETUSER and CONFIG SET of a secret: ``(redacted)`` for the user name and
    password, SETUSER's rules and the secret's value (as Redis 7)."""
    if cmd.name == "auth":
        return argv[:1] + [REDACTED] * (len(argv) - 1)
    if cmd.name == "config":
        if len(argv) < 4 or argv[1].upper() != _SET:
            return argv
        shown = list(argv)
        for i in range(2, len(shown) - 1, 2):
            if shown[i].lower() in SECRET_CONFIGS:
                shown[i + 1] = REDACTED
        return shown
    if cmd.name == "acl":
        if argv[1].upper() != _SETUSER:
            return argv
        return argv[:3] + [REDACTED] * (len(argv) - 3)
    shown = list(argv)
    for i in range(2, len(shown) - 2):
        if shown[i].upper() == _AUTH:
            shown[i + 1] = shown[i + 2] = REDACTED
            break
    return shown


# --------------------------------------------------------------- MONITOR

def format_monitor_line(now_us: int, client: ClientState, argv: list[bytes]) -> bytes:
    """``+<sec>.<usec> [<addr>] "arg" ...`` as a status reply."""
    args = " ".join(quote_arg(a) for a in argv)
    return ("+%d.%06d [%s] %s\r\n" % (now_us // 1_000_000, now_us % 1_000_000, client.addr,
                                      args)).encode()
