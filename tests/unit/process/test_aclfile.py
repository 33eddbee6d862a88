"""The aclfile on disk (process/aclfile.py): written in a thread after the
users change, with hashes only; at startup the tables file's records win
over a file this node wrote (which may lag), and a file edited while the
node was down wins over them (as ACL LOAD)."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest

from disque.context.tablelog import USER_TABLE
from disque.process.aclfile import AclFile, take_marker
from disque.process.startup import StartupError
from disque.process.tablefile import TableFile
from tests.support.process import wait_until
from tests.unit.commands.test_acl import client
from tests.unit.helpers import Cmd, advance, make_node

PW_HASH = hashlib.sha256(b"pw").hexdigest().encode()


class Machine:
    """One node's files across restarts, started as the server starts it:
    the tables file's records, then the aclfile."""

    def __init__(self, directory, acl_directory=None) -> None:
        self.tables_path = str(directory / "nodes.tables")
        self.acl_path = str((acl_directory or directory) / "users.acl")
        self.node = None
        self.tables: TableFile | None = None
        self.aclfile: AclFile | None = None

    def start(self):
        self.tables = TableFile(self.tables_path)
        records = self.tables.load()
        marker = take_marker(records)
        node = self.node = make_node(aclfile=self.acl_path)
        for table, key, value in records:
            assert node.state.restore_table_record(table, key, value)
        node.state.table_log.enabled = True
        self.aclfile = AclFile(self.acl_path, self.tables)
        self.aclfile.load_at_startup(marker, node.state)
        self.flush()
        return node

    def flush(self) -> None:
        """What the server does before output leaves: the records appended."""
        records = self.node.state.table_log.take()
        if any(table == USER_TABLE for table, _, _ in records):
            self.aclfile.changed()
        assert self.tables.write(records) is None

    def cron(self) -> None:
        """Cron passes until the write they start is done."""
        self.flush()
        users = self.node.state.config.users
        self.aclfile.cron(users)
        if self.aclfile.task is not None:
            wait_until(self.aclfile.task.done, 10)
            self.aclfile.cron(users)

    def crash(self) -> None:
        """The process killed: what was written stays, nothing more is."""
        self.tables.close()

    def stop(self) -> None:
        self.flush()
        self.aclfile.close(self.node.state.config.users)
        self.tables.close()

    def text(self) -> bytes:
        with open(self.acl_path, "rb") as f:
            return f.read()

    def write(self, text: bytes) -> None:
        with open(self.acl_path, "wb") as f:
            f.write(text)


def auth(node, name: str, password: str) -> bool:
    return Cmd(node, client()).raw("AUTH", name, password) == b"+OK\r\n"


def test_a_first_start_takes_the_file_and_rewrites_it_with_hashes(tmp_path):
    machine = Machine(tmp_path)
    machine.write(b"user w on >pw ~* +@all\n")
    node = machine.start()
    assert auth(node, "w", "pw")
    assert node.state.user_table.records[b"w"].version > 0  # a change, told to the cluster
    machine.cron()
    assert machine.text() == (b"user default on nopass ~* +@all\nuser w on #" + PW_HASH
                              + b" ~* +@all\n")
    assert b">pw" not in machine.text()


def test_a_missing_file_is_written_owner_only_after_a_change(tmp_path):
    machine = Machine(tmp_path)
    node = machine.start()
    Cmd(node).ok("ACL", "SETUSER", "w", "on", ">pw")
    machine.cron()
    assert b"user w on #" + PW_HASH in machine.text()
    assert stat.S_IMODE(os.stat(machine.acl_path).st_mode) == 0o600


def password_changed_after_the_file_caught_up(machine: Machine) -> None:
    """w's password was "old" when the file last caught up; it is "pw" in the records."""
    node = machine.start()
    Cmd(node).ok("ACL", "SETUSER", "w", "on", ">old")
    machine.cron()
    Cmd(node).ok("ACL", "SETUSER", "w", "resetpass", ">pw")
    machine.flush()


def test_a_file_that_lags_behind_the_records_is_this_nodes_and_rewritten(tmp_path):
    machine = Machine(tmp_path)
    password_changed_after_the_file_caught_up(machine)
    machine.crash()  # before the file caught up
    assert b"#" + PW_HASH not in machine.text()
    node = machine.start()
    assert auth(node, "w", "pw") and not auth(node, "w", "old")
    machine.cron()
    assert b"#" + PW_HASH in machine.text()


def test_a_crash_between_the_mark_and_the_rename_leaves_the_file_this_nodes(tmp_path):
    machine = Machine(tmp_path)
    password_changed_after_the_file_caught_up(machine)
    machine.aclfile._mark(b"d" * 16)  # a write begun, its rename never done
    machine.crash()
    node = machine.start()
    assert auth(node, "w", "pw")


def test_an_edit_made_while_the_node_was_down_is_taken_as_acl_load(tmp_path, caplog):
    machine = Machine(tmp_path)
    node = machine.start()
    cmd = Cmd(node)
    cmd.ok("ACL", "SETUSER", "w", "on", ">old", "~*", "+@all")
    cmd.ok("ACL", "SETUSER", "gone", "on", ">x")
    machine.cron()
    machine.stop()
    machine.write(machine.text().replace(b"user gone", b"user new").replace(
        hashlib.sha256(b"old").hexdigest().encode(), PW_HASH))
    advance(node, 1000)
    node = machine.start()
    assert auth(node, "w", "pw") and auth(node, "new", "x")
    assert b"gone" not in node.state.config.users
    assert node.state.user_table.records[b"gone"].deleted
    assert "changed since this node wrote it" in caplog.text


def test_a_bad_file_stops_the_start_naming_the_line(tmp_path):
    machine = Machine(tmp_path)
    machine.write(b"user w on >pw\nuser x on +nosuch\n")
    with pytest.raises(StartupError, match=r"users.acl:2: Unknown command or category name"):
        machine.start()


def test_acl_save_writes_now_and_a_failed_write_is_retried(tmp_path, caplog):
    machine = Machine(tmp_path, tmp_path / "missing")
    os.makedirs(tmp_path / "missing")
    node = machine.start()
    os.rmdir(tmp_path / "missing")  # the directory vanished: writes fail
    Cmd(node).ok("ACL", "SETUSER", "w", "on", ">pw")
    machine.cron()
    assert machine.aclfile.dirty and "Can't write the aclfile" in caplog.text
    os.makedirs(tmp_path / "missing")
    machine.aclfile.retry_at = 0
    machine.cron()
    assert b"user w on" in machine.text() and "is written again" in caplog.text
    os.unlink(machine.acl_path)
    assert machine.aclfile.save_now(node.state.config.users, True) is None  # ACL SAVE
    assert b"user w on" in machine.text()
