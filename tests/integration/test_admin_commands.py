"""Admin commands whose effect is on the process, tested on a real one:
CLIENT PAUSE, CLIENT SETINFO, the HELLO handshake, DEBUG RESTART and
CRASH-AND-RECOVER, the Unix socket listener, CLUSTER SAVECONFIG's error.

spec: commands.md (CLIENT, DEBUG, CLUSTER SAVECONFIG), config.md
(unixsocket, unixsocketperm); HELLO <protover> is the Redis 6 handshake
that disque/commands/cluster.py accepts for modern clients.
"""

from __future__ import annotations

import shutil
import socket
import stat

import redis

from disque import __version__
from tests.support.cluster import _Reader, encode_command, parse_show, raw_command
from tests.support.process import DisqueProcess, wait_until

TIMEOUT = 10.0
NOAUTH = b"-NOAUTH Authentication required.\r\n"
NOT_INTEGER = b"-ERR value is not an integer or out of range\r\n"


class Wire:
    """One raw connection: send requests, read exact reply bytes one at a time."""

    def __init__(self, port: int | None = None, unix_path=None) -> None:
        if unix_path is not None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(TIMEOUT)
            self.sock.connect(str(unix_path))
        else:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.reader = _Reader(self.sock)

    def send(self, *args) -> None:
        """Send one request."""
        self.sock.sendall(encode_command(*args))

    def reply(self) -> bytes:
        """The exact bytes of the next reply."""
        start = self.reader.pos
        self.reader.reply()
        return self.reader.data[start:self.reader.pos]

    def call(self, *args) -> bytes:
        """Send a request and return its reply's bytes."""
        self.send(*args)
        return self.reply()

    def close(self) -> None:
        self.sock.close()


def server_time_us(reply: bytes) -> int:
    """A TIME reply's bytes → microseconds."""
    parts = reply.split(b"\r\n")
    assert parts[0] == b"*2" and len(parts) == 6, reply
    return int(parts[2]) * 1_000_000 + int(parts[4])


def info_field(proc: DisqueProcess, section: str, name: str) -> str:
    """One field of INFO <section>."""
    text = raw_command(proc.port, "INFO", section).decode()
    return next(line.split(":", 1)[1] for line in text.split("\r\n")
                if line.startswith(name + ":"))


# ---------------------------------------------------------------- CLIENT

def test_client_pause_holds_connected_clients_for_the_pause(server):
    waiting = Wire(server.port)
    assert waiting.call("PING") == b"+PONG\r\n"  # connected and known to the server
    pauser = Wire(server.port)
    pauser.sock.sendall(encode_command("TIME") + encode_command("CLIENT", "PAUSE", "400"))
    before = server_time_us(pauser.reply())
    assert pauser.reply() == b"+OK\r\n"
    # Read by the server only once the pause is over: its own clock says when.
    after = server_time_us(waiting.call("TIME"))
    assert after - before >= 400_000, after - before
    assert pauser.call("PING") == b"+PONG\r\n"
    assert pauser.call("CLIENT", "PAUSE", "x") == (
        b"-ERR timeout is not an integer or out of range\r\n")
    assert pauser.call("CLIENT", "PAUSE", "-1") == (
        b"-ERR timeout is not an integer or out of range\r\n")
    waiting.close()
    pauser.close()


def test_client_pause_holds_connections_made_during_the_pause(server):
    pauser = Wire(server.port)
    pauser.sock.sendall(encode_command("TIME") + encode_command("CLIENT", "PAUSE", "400"))
    before = server_time_us(pauser.reply())
    assert pauser.reply() == b"+OK\r\n"
    late = Wire(server.port)  # connects while the pause is in force
    after = server_time_us(late.call("TIME"))
    assert after - before >= 400_000, after - before
    late.close()
    pauser.close()


def test_a_shorter_pause_does_not_end_a_longer_one(server):
    waiting = Wire(server.port)
    assert waiting.call("PING") == b"+PONG\r\n"
    pauser = Wire(server.port)
    pauser.sock.sendall(encode_command("TIME") + encode_command("CLIENT", "PAUSE", "600")
                        + encode_command("CLIENT", "PAUSE", "100"))
    before = server_time_us(pauser.reply())
    assert pauser.reply() == b"+OK\r\n"  # both PAUSEs were read together: both ran at once
    after = server_time_us(waiting.call("TIME"))
    assert after - before >= 600_000, after - before
    waiting.close()
    pauser.close()


def test_client_setinfo_is_accepted_for_library_fields_only(server):
    wire = Wire(server.port)
    assert wire.call("CLIENT", "SETINFO", "LIB-NAME", "disque-tests") == b"+OK\r\n"
    assert wire.call("CLIENT", "SETINFO", "lib-ver", "1.2.3") == b"+OK\r\n"
    assert wire.call("CLIENT", "SETINFO", "LIB-COLOUR", "red") == b"-ERR syntax error\r\n"
    assert wire.call("CLIENT", "SETINFO", "LIB-NAME") == (
        b"-ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | "
        b"SETNAME connection-name)\r\n")
    wire.close()
    # redis-py announces itself with CLIENT SETINFO on every new connection.
    client = server.client()
    assert client.execute_command("QLEN", "q") == 0


# ----------------------------------------------------------------- HELLO

def hello_fields(protover: int, client_id: int) -> bytes:
    """The handshake reply's fields, each key followed by its value."""
    version = __version__.encode()
    return (b"$6\r\nserver\r\n$6\r\ndisque\r\n"
            b"$7\r\nversion\r\n$%d\r\n%s\r\n" % (len(version), version)
            + b"$5\r\nproto\r\n:%d\r\n" % protover
            + b"$2\r\nid\r\n:%d\r\n" % client_id
            + b"$4\r\nmode\r\n$7\r\ncluster\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
            b"$7\r\nmodules\r\n*0\r\n")


def test_hello_handshake_protocol_versions(server):
    wire = Wire(server.port)
    client_id = int(wire.call("CLIENT", "ID")[1:-2])
    assert wire.call("HELLO", "3") == b"%7\r\n" + hello_fields(3, client_id)
    assert wire.call("HELLO", "2") == b"*14\r\n" + hello_fields(2, client_id)
    for protover in ("1", "4", "-3"):
        assert wire.call("HELLO", protover) == (
            b"-NOPROTO sorry, this protocol version is not supported\r\n"), protover
    assert wire.call("HELLO", "3", "BOGUS") == b"-ERR Syntax error in HELLO option 'BOGUS'\r\n"
    assert wire.call("HELLO", "3", "SETNAME") == (
        b"-ERR Syntax error in HELLO option 'SETNAME'\r\n")  # the name is missing
    assert wire.call("HELLO", "3", "SETNAME", "two words") == (
        b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n")
    assert wire.call("CLIENT", "GETNAME") == b"$-1\r\n"
    assert wire.call("PING") == b"+PONG\r\n"  # replies stay RESP2 after HELLO 3
    wire.close()
    # redis-py speaking RESP3 opens with HELLO 3 and reads the RESP2 replies.
    client = server.client(protocol=3)
    assert client.execute_command("ADDJOB", "q", "body", 0).startswith(b"D-")
    assert client.execute_command("QLEN", "q") == 1


def test_config_get_answers_a_map_after_hello_3(server):
    wire = Wire(server.port)
    expected = b"$10\r\nappendonly\r\n$2\r\nno\r\n"
    assert wire.call("CONFIG", "GET", "appendonly") == b"*2\r\n" + expected
    wire.call("HELLO", "3")
    assert wire.call("CONFIG", "GET", "appendonly") == b"%1\r\n" + expected
    assert wire.call("CONFIG", "GET", "no-such-*") == b"%0\r\n"
    wire.call("HELLO", "2")
    assert wire.call("CONFIG", "GET", "appendonly") == b"*2\r\n" + expected
    wire.close()
    # redis-py 8 speaks RESP3 by default; config_get reads the map.
    for protocol in (2, 3):
        assert server.client(protocol=protocol).config_get("appendonly") == {"appendonly": "no"}


def test_hello_handshake_auth_and_setname(server_factory):
    proc = server_factory("requirepass secret\n")
    wire = Wire(proc.port)
    assert wire.call("HELLO", "3") == NOAUTH
    assert wire.call("HELLO") == NOAUTH
    assert wire.call("HELLO", "3", "AUTH", "alice", "secret") == (
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n")
    assert wire.call("HELLO", "3", "AUTH", "default", "wrong") == b"-ERR invalid password\r\n"
    assert wire.call("PING") == NOAUTH
    reply = wire.call("HELLO", "2", "AUTH", "default", "secret", "SETNAME", "worker-1")
    assert wire.call("PING") == b"+PONG\r\n"
    client_id = int(wire.call("CLIENT", "ID")[1:-2])
    assert reply == b"*14\r\n" + hello_fields(2, client_id)
    assert wire.call("CLIENT", "GETNAME") == b"$8\r\nworker-1\r\n"
    assert b"name=worker-1 " in wire.call("CLIENT", "LIST")
    assert wire.call("HELLO").startswith(b"*3\r\n:1\r\n$40\r\n")  # the node list, now allowed
    wire.close()
    client = proc.client(protocol=3, password="secret")
    assert client.execute_command("QLEN", "q") == 0
    wrong = redis.Redis(host="127.0.0.1", port=proc.port, protocol=3, password="nope",
                        socket_timeout=TIMEOUT)
    try:
        try:
            wrong.execute_command("QLEN", "q")
        except redis.AuthenticationError as exc:
            assert str(exc) == "invalid password"
        else:
            raise AssertionError("a wrong password was accepted")
    finally:
        wrong.close()


# ----------------------------------------------------------------- DEBUG

def restarted(proc: DisqueProcess, pid: int, run_id: str) -> None:
    """Wait until the same process answers again with a new run ID."""
    proc.wait_ready()
    assert proc.proc.pid == pid and proc.proc.poll() is None
    wait_until(lambda: info_field(proc, "server", "run_id") != run_id,
               message="a new run_id after the re-exec")


def assert_reloaded(proc: DisqueProcess, job_id: bytes) -> None:
    """The job came back from the AOF (active: a restart queues nothing, spec:
    persistence.md §5)."""
    job = parse_show(proc.call("SHOW", job_id))
    assert (job["queue"], job["state"], job["body"]) == ("q", "active", b"kept"), job


def test_debug_restart_rewrites_the_config_and_reexecs(server_factory):
    proc = server_factory("appendonly yes\n")
    pid, node_id = proc.proc.pid, proc.call("CLUSTER", "MYID")
    run_id = info_field(proc, "server", "run_id")
    job_id = proc.call("ADDJOB", "q", "kept", 0)
    assert proc.call("CONFIG", "SET", "cluster-node-timeout", "4321") == b"OK"
    # No reply: the process is replaced before it could answer.
    assert proc.raw(encode_command("DEBUG", "RESTART"), timeout=TIMEOUT,
                    until_close=True) == b"<EOF>"
    restarted(proc, pid, run_id)
    assert "cluster-node-timeout 4321" in proc.config_path.read_text().splitlines()
    assert proc.call("CONFIG", "GET", "cluster-node-timeout") == {b"cluster-node-timeout": b"4321"}
    assert proc.call("CLUSTER", "MYID") == node_id
    assert_reloaded(proc, job_id)
    assert "Restarting the server with" in proc.log_path.read_text()


def test_debug_crash_and_recover_reexecs_without_saving(server_factory):
    proc = server_factory("appendonly yes\n")
    pid, node_id = proc.proc.pid, proc.call("CLUSTER", "MYID")
    run_id = info_field(proc, "server", "run_id")
    job_id = proc.call("ADDJOB", "q", "kept", 0)
    config_text = proc.config_path.read_text()
    assert proc.call("CONFIG", "SET", "cluster-node-timeout", "4321") == b"OK"
    assert proc.raw(encode_command("DEBUG", "CRASH-AND-RECOVER", "50"), timeout=TIMEOUT,
                    until_close=True) == b"<EOF>"
    restarted(proc, pid, run_id)
    assert proc.config_path.read_text() == config_text  # nothing was rewritten
    assert proc.call("CONFIG", "GET", "cluster-node-timeout") == {b"cluster-node-timeout": b"15000"}
    assert proc.call("CLUSTER", "MYID") == node_id
    assert_reloaded(proc, job_id)  # the AOF had it


def test_debug_restart_errors_leave_the_server_running(server_factory):
    proc = server_factory()
    pid = proc.proc.pid
    for sub in ("RESTART", "CRASH-AND-RECOVER"):
        assert raw_command(proc.port, "DEBUG", sub, "soon") == NOT_INTEGER
        assert raw_command(proc.port, "DEBUG", sub, "-5") == NOT_INTEGER
    # A graceful restart must rewrite the config first; when it cannot, no restart.
    proc.config_path.unlink()
    proc.config_path.mkdir()
    assert raw_command(proc.port, "DEBUG", "RESTART") == (
        b"-ERR failed to restart the server. Check server logs.\r\n")
    assert "DEBUG RESTART: config rewrite failed" in proc.log_path.read_text()
    assert raw_command(proc.port, "PING") == b"+PONG\r\n"
    assert proc.proc.pid == pid and proc.proc.poll() is None


def test_debug_loadaof_without_an_aof_file_fails(server):
    assert raw_command(server.port, "DEBUG", "LOADAOF") == (
        b"-ERR Error loading the AOF file. Check server logs.\r\n")
    assert raw_command(server.port, "PING") == b"+PONG\r\n"


# ------------------------------------------------------------ unixsocket

def test_unixsocket_listens_with_its_permissions_and_is_unlinked_on_exit(server_factory,
                                                                          tmp_path):
    path = tmp_path / "disque.sock"
    proc = server_factory("unixsocket %s\nunixsocketperm 700\n" % path)
    mode = path.stat().st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o700
    wire = Wire(unix_path=path)
    assert wire.call("PING") == b"+PONG\r\n"
    job_id = wire.call("ADDJOB", "uq", "via unix", "0")[1:-2]
    listing = wire.call("CLIENT", "LIST").decode()
    mine = [line for line in listing.split("\n") if "cmd=client" in line]
    assert len(mine) == 1 and " flags=U " in mine[0], listing
    wire.close()
    assert proc.call("GETJOB", "FROM", "uq") == [[b"uq", job_id, b"via unix"]]  # over TCP
    client = redis.Redis(unix_socket_path=str(path), socket_timeout=TIMEOUT)
    try:
        assert client.execute_command("QLEN", "uq") == 0
    finally:
        client.close()
    assert proc.stop() == 0
    assert not path.exists()


def test_unixsocket_left_by_a_killed_server_is_replaced(server_factory, tmp_path):
    path = tmp_path / "disque.sock"
    proc = server_factory("unixsocket %s\n" % path)
    proc.kill()
    assert stat.S_ISSOCK(path.stat().st_mode)  # nobody removed it
    proc.start()
    wire = Wire(unix_path=path)
    assert wire.call("PING") == b"+PONG\r\n"
    wire.close()


# ------------------------------------------------------ CLUSTER SAVECONFIG

def test_cluster_saveconfig_reports_a_failed_write(tmp_path):
    proc = DisqueProcess(tmp_path / "node", config="cluster-config-file conf/nodes.conf\n")
    conf_dir = proc.dir / "conf"
    conf_dir.mkdir()
    proc.start()
    node_id = proc.call("CLUSTER", "MYID")
    assert raw_command(proc.port, "CLUSTER", "SAVECONFIG") == b"+OK\r\n"
    # Root ignores permissions: a regular file where the directory was cannot
    # hold nodes.conf for anyone.
    shutil.rmtree(conf_dir)
    conf_dir.write_text("not a directory\n")
    assert raw_command(proc.port, "CLUSTER", "SAVECONFIG") == (
        b"-ERR error saving the cluster node config: Not a directory\r\n")
    assert "Could not save the cluster config file" in proc.log_path.read_text()
    conf_dir.unlink()
    conf_dir.mkdir()
    assert raw_command(proc.port, "CLUSTER", "SAVECONFIG") == b"+OK\r\n"
    saved = (conf_dir / "nodes.conf").read_text()
    assert any(line.startswith(node_id.decode() + " ") and "myself" in line
               for line in saved.splitlines()), saved
