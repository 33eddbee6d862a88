"""Users kept on disk by a real server (docs/security.md "Users across the
cluster", "The aclfile"): ACL SETUSER survives a restart with no CONFIG
REWRITE; the aclfile follows every change with hashes only, ACL SAVE
writes it, ACL LOAD reads it back (all or nothing), an edit made while the
node is down is taken at the next start; aclfile and user lines together
refuse the start, as in Redis."""

from __future__ import annotations

import hashlib

import pytest
import redis

from tests.support.process import DisqueProcess, wait_until

TIMEOUT = 10.0


def pw_hash(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def test_a_user_set_at_run_time_survives_a_restart_without_config_rewrite(server_factory):
    proc = server_factory()
    admin = proc.client()
    assert admin.execute_command("ACL", "SETUSER", "reader", "on", ">reader-pw", "~q*",
                                 "+@read") == b"OK"
    assert admin.execute_command("ACL", "SETUSER", "gone", "on", ">x") == b"OK"
    assert admin.execute_command("ACL", "DELUSER", "gone") == 1
    proc.kill()  # not even a clean shutdown
    proc.start()
    reader = proc.client(username="reader", password="reader-pw")
    assert reader.execute_command("QLEN", "q1") == 0
    assert proc.client().execute_command("ACL", "USERS") == [b"default", b"reader"]
    assert b"reader-pw" not in (proc.dir / "nodes.tables").read_bytes()


def test_the_aclfile_follows_each_change_with_hashes_and_save_load_work(server_factory):
    proc = server_factory("aclfile users.acl\nrequirepass admin-pw\n")
    path = proc.dir / "users.acl"
    admin = proc.client(password="admin-pw")
    assert admin.execute_command("ACL", "SETUSER", "worker", "on", ">worker-pw", "~orders:*",
                                 "+@consume") == b"OK"
    expected = "user worker on #%s ~orders:* -@all +@consume" % pw_hash("worker-pw")
    wait_until(lambda: path.exists() and expected in path.read_text().splitlines(), TIMEOUT,
               message="the change in the aclfile")
    assert "worker-pw" not in path.read_text() and "admin-pw" not in path.read_text()
    assert path.stat().st_mode & 0o077 == 0
    assert admin.execute_command("ACL", "SAVE") == b"OK"
    # An edit, taken by ACL LOAD: a user added, one removed, the default kept.
    path.write_text("user default on nopass ~* +@all\n"
                    "user reader on #%s ~* +@read\n" % pw_hash("reader-pw"))
    assert admin.execute_command("ACL", "LOAD") == b"OK"
    assert admin.execute_command("ACL", "USERS") == [b"default", b"reader"]
    reader = proc.client(username="reader", password="reader-pw")
    assert reader.execute_command("QLEN", "q") == 0
    # A bad line: nothing changes, and the error names the line, not its rules.
    path.write_text("user reader on >not-shown\nuser x on +nosuch\n")
    with pytest.raises(redis.ResponseError) as info:
        admin.execute_command("ACL", "LOAD")
    assert str(info.value) == "users.acl:2: Unknown command or category name in ACL."
    assert admin.execute_command("ACL", "USERS") == [b"default", b"reader"]
    # CONFIG REWRITE leaves the users to the aclfile (Redis).
    assert admin.execute_command("CONFIG", "REWRITE") == b"OK"
    assert "user " not in proc.config_path.read_text()


def test_an_aclfile_edited_while_the_node_is_down_is_taken_at_start(server_factory):
    proc = server_factory("aclfile users.acl\n")
    path = proc.dir / "users.acl"
    admin = proc.client()
    assert admin.execute_command("ACL", "SETUSER", "w", "on", ">old-pw", "~*", "+@all") == b"OK"
    wait_until(lambda: path.exists() and pw_hash("old-pw") in path.read_text(), TIMEOUT)
    proc.stop()
    path.write_text(path.read_text().replace(pw_hash("old-pw"), pw_hash("new-pw")))
    proc.start()
    assert proc.client(username="w", password="new-pw").execute_command("PING") is True
    with pytest.raises(redis.AuthenticationError):
        proc.client(username="w", password="old-pw").execute_command("PING")
    # The edit became records of the tables file: kept after a crash too.
    proc.kill()
    proc.start()
    assert proc.client(username="w", password="new-pw").execute_command("PING") is True
    assert "changed since this node wrote it" in proc.log_path.read_text()


def test_user_lines_and_an_aclfile_together_refuse_the_start(tmp_path):
    proc = DisqueProcess(tmp_path / "node", config="aclfile users.acl\nuser w on >pw\n")
    proc.start(wait=False)
    assert proc.wait_exit() == 1
    assert "users defined in the config file and at the same time an ACL file" in (
        proc.dir / "stderr.log").read_text()


def test_a_bad_aclfile_refuses_the_start_naming_the_line(tmp_path):
    proc = DisqueProcess(tmp_path / "node", config="aclfile users.acl\n")
    (proc.dir / "users.acl").write_text("user w on >pw\nuser w on\n")
    proc.start(wait=False)
    assert proc.wait_exit() == 1
    log = proc.log_path.read_text()
    assert "Aborting startup because of ACL errors: Duplicate user 'w' found on line 2." in log
