"""Access control through Node.call (docs/security.md): users' rules, AUTH,
the command and queue checks at the table, ACL, protected mode's decision,
the DEBUG and protected-config gates, and what MONITOR shows of secrets."""

from __future__ import annotations

import hashlib

import pytest

from disque.context.clients import ClientState
from disque.state.command import unique_commands
from disque.commands.table import build_command_table
from disque.commands.access import (KEY_SPECS, check_on_queue, is_loopback,
                                    protected_mode_refuses)
from disque.commands.admin import PROTECTED_CONFIGS
from disque.config import DIRECTIVES, Config
from disque.config.globmatch import MAX_PATTERN_LEN
from disque.process.configfile import load_config
from disque.config.users import (ALL_UNITS, CATEGORIES, MAX_CACHED_NAME_LEN, SUBCOMMANDS,
                                 RuleError, User, user_with_rules)
from tests.unit.helpers import START_MS, Cmd, make_node

NOAUTH = b"-NOAUTH Authentication required.\r\n"
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
WORKER_RULES = ("on", ">pw", "~orders:*", "+@consume", "+@connection")


def client(n: int = 2, addr: str = "127.0.0.1:40000", local: bool = False) -> ClientState:
    state = ClientState(n, addr)
    state.local = local
    return state


def worker_node(**settings):
    """A node with a consumer user: @consume (+@connection) on orders:*."""
    node = make_node(**settings)
    assert Cmd(node).raw("ACL", "SETUSER", "worker", *WORKER_RULES) == b"+OK\r\n"
    return node


def logged_in(node, name: str = "worker", password: str = "pw") -> Cmd:
    cmd = Cmd(node, client())
    assert cmd.raw("AUTH", name, password) == b"+OK\r\n"
    return cmd


# ------------------------------------------------------------ the tables

def test_every_command_is_in_a_category():
    names = {cmd.name for cmd in unique_commands(build_command_table())}
    categorized = {unit.split("|")[0] for units in CATEGORIES.values() for unit in units}
    assert names == categorized
    assert set(KEY_SPECS) <= names


def test_every_subcommand_is_in_a_category():
    categorized = {unit for units in CATEGORIES.values() for unit in units}
    for command, subs in SUBCOMMANDS.items():
        for sub in subs:
            assert command + "|" + sub in categorized


def test_settable_paths_are_protected():
    for directive in DIRECTIVES.values():
        if "S" in directive.flags and directive.name.endswith(("dir", "file", "socket")):
            assert directive.name in PROTECTED_CONFIGS, directive.name


# ----------------------------------------------------------------- rules

def test_rules_round_trip_through_describe():
    user = user_with_rules(User(b"alice"), [b"on", b">secret", b"~orders:*", b"~mail",
                                            b"+@consume", b"+qlen", b"+client|setname"])
    line = user.describe()
    assert line == ("alice on #%s ~orders:* ~mail -@all +@consume +client|setname +qlen"
                    % hashlib.sha256(b"secret").hexdigest())
    again = user_with_rules(User(b"alice"), [w.encode() for w in line.split()[1:]])
    assert again.describe() == line
    assert User.default().describe() == "default on nopass ~* +@all"


def test_rules_apply_in_order_like_redis():
    user = user_with_rules(User(b"u"), [b"allcommands", b"-@admin", b"+debug", b"-client|kill"])
    assert user.may_run("addjob") and user.may_run("debug") and not user.may_run("config")
    assert user.may_run("client|setname") and not user.may_run("client|kill")
    assert not user.may_run("client")  # not every subcommand: CLIENT is not whole
    user = user_with_rules(user, [b"+client"])
    assert user.may_run("client|kill") and user.may_run("client")
    assert user_with_rules(user, [b"reset"]).describe() == "u off -@all"
    assert user_with_rules(User(b"u"), [b"+@all"]).allowed == ALL_UNITS


@pytest.mark.parametrize("rule, reason", [
    (b"+nosuch", "Unknown command or category name in ACL"),
    (b"-@nosuch", "Unknown command or category name in ACL"),
    (b"#abc", "The password hash must be exactly 64 characters and contain only lowercase "
              "hexadecimal characters"),
    (b"<never-added", "The password you are trying to remove from the user does not exist"),
    (b"sideways", "Syntax error"),
])
def test_bad_rules_name_the_modifier(rule, reason):
    with pytest.raises(RuleError) as info:
        user_with_rules(User(b"u"), [b"on", rule])
    assert str(info.value) == "Error in ACL SETUSER modifier '%s': %s" % (rule.decode(), reason)


def test_passwords_are_stored_hashed_and_hash_rules_work():
    digest = hashlib.sha256(b"pw").hexdigest()
    user = user_with_rules(User(b"u"), [b">pw"])
    assert user.passwords == [digest] and "pw" not in user.describe().split()
    assert user.check_password(b"pw") and not user.check_password(b"px")
    assert user_with_rules(User(b"u"), [("#" + digest).encode()]).check_password(b"pw")
    assert not user_with_rules(user, [b"<pw"]).check_password(b"pw")
    assert user_with_rules(user, [b"nopass"]).check_password(b"anything")
    assert not user_with_rules(user, [b"resetpass"]).check_password(b"pw")


def test_queue_patterns_are_globs():
    user = user_with_rules(User(b"u"), [b"~orders:*", b"~mail?"])
    assert user.may_access(b"orders:eu") and user.may_access(b"mail1")
    assert not user.may_access(b"payments") and not user.may_access(b"mail12")
    assert user.may_access(b"orders:eu")  # from the cache, same answer
    assert user_with_rules(user, [b"allqueues"]).may_access(b"payments")
    assert not user_with_rules(user, [b"resetqueues"]).may_access(b"orders:eu")


def test_long_queue_names_are_not_cached():
    user = user_with_rules(User(b"u"), [b"~app:*"])
    long_name = b"app:" + b"x" * MAX_CACHED_NAME_LEN
    assert user.may_access(long_name) and user.may_access(b"app:eu")
    assert not user.may_access(b"x" * (MAX_CACHED_NAME_LEN + 1))
    assert user.queue_cache == {b"app:eu": True}


def test_queue_patterns_are_bounded():
    longest = b"~" + b"*" * MAX_PATTERN_LEN
    assert user_with_rules(User(b"u"), [longest]).may_access(b"anything")
    with pytest.raises(RuleError) as info:
        user_with_rules(User(b"u"), [longest + b"x"])
    assert str(info.value).endswith(": A queue pattern may be at most 1024 bytes")
    node = make_node()
    reply = Cmd(node).raw("ACL", "SETUSER", "u", "on", longest + b"x")
    assert reply.startswith(b"-ERR Error in ACL SETUSER modifier '~***")
    assert reply.endswith(b"': A queue pattern may be at most 1024 bytes\r\n")


# ----------------------------------------------------- the default user

def test_no_users_means_no_check(node, cmd):
    assert not node.state.guarded
    node.state.config.requirepass = "secret"
    assert not node.state.guarded  # requirepass alone keeps Disque 1.0's check
    assert cmd.raw("PING") == NOAUTH
    assert cmd.raw("AUTH", "secret") == b"+OK\r\n"
    assert cmd.raw("PING") == b"+PONG\r\n"


def test_auth_password_is_disque_1_byte_for_byte(node, cmd):
    assert cmd.raw("AUTH", "x") == b"-ERR Client sent AUTH, but no password is set\r\n"
    node.state.config.requirepass = "secret"
    assert cmd.raw("AUTH", "wrong") == b"-ERR invalid password\r\n"
    assert cmd.raw("AUTH", "default", "wrong") == b"-ERR invalid password\r\n"
    assert cmd.raw("AUTH", "default", "secret") == b"+OK\r\n"
    assert cmd.raw("AUTH", "wrong") == b"-ERR invalid password\r\n"
    assert cmd.raw("PING") == NOAUTH  # a failed AUTH logs out, as in Disque 1.0
    assert Cmd(node, client()).raw("AUTH", "secret") == b"+OK\r\n"
    assert cmd.raw("AUTH", "user", "pass", "more") == (
        b"-ERR wrong number of arguments for 'auth' command\r\n")
    cmd.raw("AUTH", "secret")
    assert cmd.raw("COMMAND", "INFO", "auth") == b"*1\r\n*6\r\n$4\r\nauth\r\n:2\r\n" \
        b"*3\r\n+readonly\r\n+loading\r\n+fast\r\n:0\r\n:0\r\n:0\r\n"


def test_default_user_password_and_off(node, cmd):
    assert cmd.raw("ACL", "SETUSER", "default", ">pw") == b"+OK\r\n"
    assert node.state.guarded
    other = Cmd(node, client())
    assert other.raw("QLEN", "q") == NOAUTH
    assert other.raw("AUTH", "pw") == b"+OK\r\n"
    assert other.raw("QLEN", "q") == b":0\r\n"
    assert other.raw("ACL", "SETUSER", "default", "off") == b"+OK\r\n"
    assert other.raw("QLEN", "q") == NOAUTH  # nobody is the default user any more
    assert Cmd(node, client()).raw("AUTH", "pw") == b"-ERR invalid password\r\n"


# ------------------------------------------------------------ named users

def test_auth_user_and_whoami():
    node = worker_node()
    cmd = Cmd(node, client())
    assert cmd.ok("ACL", "WHOAMI") == b"default"
    assert cmd.raw("AUTH", "worker", "nope") == WRONGPASS
    assert cmd.raw("AUTH", "nobody", "pw") == WRONGPASS
    assert cmd.raw("AUTH", "worker", "pw") == b"+OK\r\n"
    assert cmd.ok("ACL", "WHOAMI") == b"worker"
    assert node.state.access_stats.auth_failures == 2


def test_failed_auth_password_logs_a_named_user_out():
    node = worker_node()
    node.state.config.requirepass = "secret"
    worker = logged_in(node)
    assert worker.raw("AUTH", "wrong") == b"-ERR invalid password\r\n"
    assert worker.raw("GETJOB", "NOHANG", "FROM", "orders:a") == NOAUTH
    assert worker.raw("AUTH", "worker", "wrong") == WRONGPASS
    assert worker.raw("AUTH", "worker", "pw") == b"+OK\r\n"
    assert worker.raw("AUTH", "worker", "wrong") == WRONGPASS
    assert worker.ok("ACL", "WHOAMI") == b"worker"  # WRONGPASS leaves the login as it was


def test_hello_auth_with_a_user():
    node = worker_node()
    cmd = Cmd(node, client())
    assert cmd.raw("HELLO", "3", "AUTH", "worker", "nope") == WRONGPASS
    reply = cmd.ok("HELLO", "3", "AUTH", "worker", "pw")
    assert reply[b"server"] == b"disque"
    assert cmd.ok("ACL", "WHOAMI") == b"worker"


def test_consumer_cannot_add_jobs_or_take_from_other_queues():
    """A user limited to @consume ~orders:* takes and acknowledges jobs of
    its queues only: commands outside its categories, other queues and their
    jobs are refused with NOPERM and counted."""
    node = worker_node()
    admin = Cmd(node)
    mine = admin.addjob("orders:eu", "o1")
    theirs = admin.addjob("payments", "p1")
    worker = logged_in(node)
    assert worker.raw("ADDJOB", "orders:eu", "x", 0) == (
        b"-NOPERM User worker has no permissions to run the 'addjob' command\r\n")
    assert worker.raw("GETJOB", "NOHANG", "FROM", "payments") == (
        b"-NOPERM User worker has no permissions to access the queue 'payments'\r\n")
    assert worker.raw("GETJOB", "FROM", "orders:eu", "payments") == (
        b"-NOPERM User worker has no permissions to access the queue 'payments'\r\n")
    assert admin.ok("QLEN", "payments") == 1  # nothing was taken
    got = worker.ok("GETJOB", "COUNT", 5, "FROM", "orders:eu")
    assert got == [[b"orders:eu", mine, b"o1"]]
    assert worker.raw("WORKING", theirs) == (
        b"-NOPERM User worker has no permissions to access the queue of job %s\r\n" % theirs)
    assert worker.raw("ACKJOB", mine, theirs).startswith(b"-NOPERM")
    assert worker.ok("ACKJOB", mine) == 1
    assert worker.raw("QLEN", "orders:eu") == (
        b"-NOPERM User worker has no permissions to run the 'qlen' command\r\n")
    assert worker.raw("CLIENT", "SETNAME", "w1") == b"+OK\r\n"
    assert worker.raw("CLIENT", "KILL", "1.2.3.4:5") == (
        b"-NOPERM User worker has no permissions to run the 'client|kill' command\r\n")
    assert worker.raw("CONFIG", "GET", "*").startswith(b"-NOPERM")
    assert worker.raw("CLIENT", "NOSUCH").startswith(b"-ERR Syntax error, try CLIENT")
    assert node.state.access_stats.denied_commands == 4
    assert node.state.access_stats.denied_queues == 4


def test_addjob_deadletter_queue_is_checked():
    node = make_node()
    Cmd(node).raw("ACL", "SETUSER", "p", "on", "nopass", "~orders:*", "+@produce")
    producer = logged_in(node, "p", "any")
    assert producer.raw("ADDJOB", "orders:a", "x", 0, "DEADLETTER", "elsewhere") == (
        b"-NOPERM User p has no permissions to access the queue 'elsewhere'\r\n")
    assert producer.raw("ADDJOB", "orders:a", "x", 0, "DEADLETTER", "orders:dead").startswith(
        b"+D-")


def test_acks_of_jobs_not_held_here_are_dropped_for_a_restricted_user():
    node = worker_node()
    node.state.membership.size = 3  # as in a cluster, where an unknown ID would be broadcast
    unknown = b"D-a1b2c3d4-" + b"x" * 24 + b"-05a1"
    worker = logged_in(node)
    node.state.outbox.transport.clear()
    assert worker.raw("FASTACK", unknown) == b":0\r\n"
    assert worker.raw("ACKJOB", unknown) == b":0\r\n"
    assert node.state.outbox.transport == []  # no DELJOB or SETACK went out
    assert worker.raw("ACKJOB", "not-an-id") == b"-BADID Invalid Job ID format.\r\n"


def test_scans_show_only_permitted_queues_and_jobs():
    node = worker_node()
    admin = Cmd(node)
    mine = admin.addjob("orders:eu")
    admin.addjob("payments")
    Cmd(node).raw("ACL", "SETUSER", "reader", "on", "nopass", "~orders:*", "+@read")
    reader = logged_in(node, "reader", "x")
    assert reader.ok("QSCAN", "BUSYLOOP")[1] == [b"orders:eu"]
    assert reader.ok("JSCAN", "BUSYLOOP")[1] == [mine]
    assert reader.ok("JSCAN", "BUSYLOOP", "QUEUE", "payments")[1] == []
    assert sorted(admin.ok("QSCAN", "BUSYLOOP")[1]) == [b"orders:eu", b"payments"]


def test_deleted_or_disabled_user_is_logged_out_and_closed():
    node = worker_node()
    worker = logged_in(node)
    admin = Cmd(node)
    assert admin.raw("ACL", "DELUSER", "default") == (
        b"-ERR The 'default' user cannot be removed\r\n")
    assert admin.ok("ACL", "DELUSER", "worker", "nobody") == 1
    assert worker.raw("GETJOB", "NOHANG", "FROM", "orders:a") == (
        b"-NOAUTH this connection's user was deleted or turned off\r\n")
    assert worker.client.close_after_reply
    # Only the default user is left, but other clients may still be logged in
    # as the deleted user: the check stays on.
    assert node.state.guarded
    worker.client.close_after_reply = False
    assert worker.raw("PING") == b"+PONG\r\n"  # logged out: the (open) default user now
    node2 = worker_node()
    worker2 = logged_in(node2)
    Cmd(node2).raw("ACL", "SETUSER", "worker", "off")
    assert worker2.raw("PING").startswith(b"-NOAUTH this connection's user")


def test_deleted_user_stays_refused_after_the_default_user_is_opened_again():
    node = make_node()
    admin = Cmd(node)
    admin.raw("ACL", "SETUSER", "default", "-debug")
    admin.raw("ACL", "SETUSER", "w", "on", "nopass", "+@consume")
    worker = logged_in(node, "w", "x")
    admin.raw("ACL", "DELUSER", "w")
    admin.raw("ACL", "SETUSER", "default", "+debug")
    assert worker.raw("CONFIG", "GET", "hz").startswith(b"-NOAUTH this connection's user")


def test_setuser_changes_apply_to_logged_in_clients_at_once():
    node = worker_node()
    worker = logged_in(node)
    assert worker.raw("QLEN", "orders:a").startswith(b"-NOPERM")
    assert Cmd(node).raw("ACL", "SETUSER", "worker", "+qlen") == b"+OK\r\n"
    assert worker.raw("QLEN", "orders:a") == b":0\r\n"
    assert Cmd(node).raw("ACL", "SETUSER", "worker", "+qlen", "bogus") == (
        b"-ERR Error in ACL SETUSER modifier 'bogus': Syntax error\r\n")


@pytest.mark.parametrize("rules, revoked", [
    (("resetpass", ">new"), True), ((">another",), True), (("<pw",), True), (("nopass",), True),
    (("off",), True), (("reset",), True), ((">pw",), False), (("+qlen", "~mail"), False),
    (("on",), False)])
def test_a_password_change_or_turning_off_bumps_the_credentials(rules, revoked):
    node = worker_node()
    user = node.state.config.users[b"worker"]
    before = user.credentials
    assert Cmd(node).raw("ACL", "SETUSER", "worker", *rules) == b"+OK\r\n"
    assert node.state.config.users[b"worker"] is user
    assert user.credentials == before + revoked


def test_check_on_queue_decides_as_the_command_table_would():
    node = worker_node()
    worker = logged_in(node)
    state = node.state
    assert check_on_queue(state, worker.client, "getjob", b"orders:a") is None
    assert check_on_queue(state, worker.client, "getjob", b"payments").startswith(
        b"-NOPERM User worker has no permissions to access the queue 'payments'")
    assert check_on_queue(state, worker.client, "qpeek", b"orders:a").startswith(
        b"-NOPERM User worker has no permissions to run the 'qpeek' command")
    assert state.access_stats.denied_queues == 1 and state.access_stats.denied_commands == 1
    node.rename_command("GETJOB", "")
    assert check_on_queue(state, worker.client, "getjob", b"orders:a").startswith(
        b"-ERR unknown command")
    Cmd(node).raw("ACL", "DELUSER", "worker")
    assert check_on_queue(state, worker.client, "qlen", b"orders:a").startswith(b"-NOAUTH")


def test_check_on_queue_without_users_asks_only_for_requirepass():
    node = make_node(requirepass="secret")
    anonymous = client()
    assert check_on_queue(node.state, anonymous, "qpeek", b"q") == NOAUTH
    assert Cmd(node, anonymous).raw("AUTH", "secret") == b"+OK\r\n"
    assert check_on_queue(node.state, anonymous, "qpeek", b"q") is None


def test_acl_list_users_cat():
    node = worker_node()
    admin = Cmd(node)
    digest = hashlib.sha256(b"pw").hexdigest().encode()
    assert admin.ok("ACL", "LIST") == [
        b"user default on nopass ~* +@all",
        b"user worker on #" + digest + b" ~orders:* -@all +@consume +@connection"]
    assert admin.ok("ACL", "USERS") == [b"default", b"worker"]
    assert admin.ok("ACL", "CAT") == [c.encode() for c in CATEGORIES]
    assert admin.ok("ACL", "CAT", "produce") == [b"addjob", b"addjobs", b"schedule|set",
                                                 b"schedule|del"]
    assert admin.error("ACL", "CAT", "nope") == "ERR Unknown category 'nope'"
    assert admin.error("ACL", "SETUSER", "a b") == (
        "ERR Usernames can't contain spaces or null characters")
    assert admin.error("ACL", "FROB").startswith("ERR unknown subcommand")


def test_a_renamed_command_keeps_its_permission():
    node = worker_node()
    node.rename_command("GETJOB", "TAKE")
    worker = logged_in(node)
    assert worker.raw("TAKE", "NOHANG", "FROM", "payments").startswith(b"-NOPERM")
    assert worker.raw("TAKE", "NOHANG", "FROM", "orders:x") == b"*-1\r\n"


# ------------------------------------------------------- dangerous commands

@pytest.mark.parametrize("setting, local, allowed", [
    ("no", True, False), ("local", False, False), ("local", True, True), ("yes", False, True),
])
def test_debug_gate(setting, local, allowed):
    node = make_node(enable_debug_command=setting)
    reply = Cmd(node, client(local=local)).raw("DEBUG", "FLUSHALL")
    assert (reply == b"+OK\r\n") == allowed, reply
    if not allowed:
        assert reply.startswith(b"-ERR DEBUG command not allowed. If the enable-debug-command")


def test_protected_configs_gate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    node = make_node(enable_protected_configs="local")
    remote = Cmd(node, client(local=False))
    assert remote.raw("CONFIG", "SET", "dir", str(tmp_path / "d")) == (
        b"-ERR CONFIG SET failed (possibly related to argument 'dir') - can't set protected "
        b"config\r\n")
    assert remote.raw("CONFIG", "SET", "hz", "20") == b"+OK\r\n"  # not a path
    assert Cmd(node, client(local=True)).raw("CONFIG", "SET", "dir", "d") == b"+OK\r\n"


def test_an_immutable_path_is_named_immutable_before_protected():
    """A protected path read at startup only answers as Redis 7 does: immutable first."""
    remote = Cmd(make_node(enable_protected_configs="no"), client(local=False))
    assert remote.raw("CONFIG", "SET", "pidfile", "/tmp/x.pid") == (
        b"-ERR CONFIG SET failed (possibly related to argument 'pidfile') - can't set immutable "
        b"config\r\n")


def test_monitor_redacts_auth_and_hello_auth():
    node = worker_node()
    watcher = Cmd(node, client(9, "127.0.0.1:9"))
    watcher.raw("MONITOR")
    other = Cmd(node, client(3, "127.0.0.1:3"))
    other.raw("AUTH", "worker", "pw")
    other.raw("AUTH", "secret")
    other.raw("HELLO", "3", "AUTH", "worker", "pw", "SETNAME", "w")
    other.raw("ACL", "SETUSER", "x", ">hidden")  # admin: never shown
    lines = b"".join(watcher.client.sent)
    assert b"pw" not in lines and b"secret" not in lines and b"hidden" not in lines
    seconds = START_MS // 1000
    assert watcher.client.sent == [
        b'+%d.000000 [127.0.0.1:3] "AUTH" "(redacted)" "(redacted)"\r\n' % seconds,
        b'+%d.000000 [127.0.0.1:3] "AUTH" "(redacted)"\r\n' % seconds,
        b'+%d.000000 [127.0.0.1:3] "HELLO" "3" "AUTH" "(redacted)" "(redacted)" "SETNAME" '
        b'"w"\r\n' % seconds]


def test_info_security_only_by_name(node, cmd):
    cmd.raw("AUTH", "default", "x")  # no password set: not a failure
    node.state.config.requirepass = "s"
    cmd.raw("AUTH", "wrong")
    cmd.raw("AUTH", "s")
    text = cmd.ok("INFO", "security").decode()
    assert text == ("# Security\r\nprotected_mode:yes\r\nacl_users:1\r\n"
                    "acl_users_scope:node\r\nacl_user_records_refused:0\r\n"
                    "acl_access_denied_auth:1\r\nacl_access_denied_cmd:0\r\n"
                    "acl_access_denied_queue:0\r\nprotected_mode_denied_connections:0\r\n"
                    "cross_protocol_closed_connections:0\r\n"
                    "tls_client_handshake_failures:0\r\n")
    assert b"Security" not in cmd.ok("INFO", "all")


# ---------------------------------------------------------- protected mode

@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("10.0.0.1", False), ("::ffff:10.0.0.1", False), ("fe80::1%eth0", False), ("", False),
])
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) == loopback


def test_protected_mode_decision():
    config = Config()
    assert protected_mode_refuses(config, local=False)
    assert not protected_mode_refuses(config, local=True)
    config.requirepass = "x"
    assert not protected_mode_refuses(config, local=False)
    config.requirepass = ""
    config.users[b"default"] = user_with_rules(User.default(), [b">pw"])
    assert not protected_mode_refuses(config, local=False)
    config.users[b"default"] = User.default()
    config.users[b"w"] = user_with_rules(User(b"w"), [b"on", b">pw"])
    assert protected_mode_refuses(config, local=False)  # the default user is still open
    config.users[b"default"] = user_with_rules(User.default(), [b"off"])
    assert not protected_mode_refuses(config, local=False)
    config.protected_mode = False
    config.users[b"default"] = User.default()
    assert not protected_mode_refuses(config, local=False)


# ------------------------------------------------------- the config file

def test_users_load_from_the_file_and_rewrite_hashed(tmp_path):
    path = tmp_path / "disque.conf"
    path.write_text("port 7711\nuser worker on >pw ~orders:* +@consume\n"
                    "user default on nopass ~* +@all\n")
    config = load_config(str(path))
    assert config.users[b"worker"].check_password(b"pw")
    node = make_node(config=config)
    assert node.state.guarded
    Cmd(node).raw("ACL", "SETUSER", "ops", "on", ">x", "+@admin")
    config.rewrite()
    text = path.read_text()
    assert ">pw" not in text and "#" + hashlib.sha256(b"pw").hexdigest() in text
    assert "user default" not in text  # unchanged: not written
    again = load_config(str(path))
    assert [u.describe() for u in again.users.values()] == [
        u.describe() for u in config.users.values()]


def test_bad_user_line_is_a_fatal_config_error(tmp_path):
    from disque.config import ConfigError
    path = tmp_path / "disque.conf"
    path.write_text("user worker on +nosuch\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert info.value.reason == ("Error in ACL SETUSER modifier '+nosuch': Unknown command or "
                                 "category name in ACL")


def test_slow_log_redacts_auth_and_hello_auth():
    node = worker_node()
    node.state.stats.slowlog_threshold_us = 0  # log everything
    cmd = Cmd(node, client())
    cmd.raw("AUTH", "worker", "pw")
    cmd.raw("HELLO", "2", "AUTH", "worker", "pw")
    Cmd(node).raw("ACL", "SETUSER", "ops", "on", ">ops-pw")
    Cmd(node).raw("ACL", "WHOAMI")
    entries = Cmd(node).ok("SLOWLOG", "GET")
    assert [e[3] for e in entries] == [
        [b"ACL", b"WHOAMI"],
        [b"ACL", b"SETUSER", b"ops", b"(redacted)", b"(redacted)"],
        [b"HELLO", b"2", b"AUTH", b"(redacted)", b"(redacted)"],
        [b"AUTH", b"(redacted)", b"(redacted)"]]


def test_slow_log_redacts_the_value_of_a_secret_config_set():
    """CONFIG SET cluster-secret takes ~60 ms (PBKDF2): always a slow command."""
    node = worker_node()
    node.state.stats.slowlog_threshold_us = 0  # log everything
    admin = Cmd(node)
    admin.raw("CONFIG", "SET", "requirepass", "s3cret")
    admin.raw("AUTH", "s3cret")
    admin.raw("CONFIG", "SET", "cluster-secret", "bus-s3cret")
    admin.raw("CONFIG", "SET", "maxclients", "100")
    shown = [e[3] for e in admin.ok("SLOWLOG", "GET")]
    assert [b"CONFIG", b"SET", b"cluster-secret", b"(redacted)"] in shown
    assert [b"CONFIG", b"SET", b"requirepass", b"(redacted)"] in shown
    assert [b"CONFIG", b"SET", b"maxclients", b"100"] in shown
    assert not any(b"s3cret" in word for entry in shown for word in entry)
