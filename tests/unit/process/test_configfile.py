"""The config file on disk (disque/process/configfile.py): reading it, `include`
and `dir` on the real file system, and CONFIG REWRITE's durable replace
(spec: config.md §1, §3). The parsing and rendering are tested in memory in
tests/unit/test_config.py."""

from __future__ import annotations

import os
import stat

import pytest

from disque.config import REWRITE_SIGNATURE, ConfigError, ConfigSetError
from disque.process.configfile import OsFileSystem, load_config


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path, monkeypatch):
    """Every test runs in its own directory; `dir` changes are undone afterwards."""
    monkeypatch.chdir(tmp_path)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path / "nope.conf"))
    assert str(info.value) == (f"Fatal error, can't open config file '{tmp_path / 'nope.conf'}': "
                               "No such file or directory")


def test_missing_include_names_the_path_as_written(tmp_path):
    (tmp_path / "disque.conf").write_text("\ninclude missing.conf\n")
    with pytest.raises(ConfigError) as info:
        load_config("disque.conf")
    assert (info.value.line_number, info.value.reason) == (
        2, "Fatal error, can't open config file 'missing.conf': No such file or directory")


def test_dir_applies_immediately_and_include_is_relative_to_it(tmp_path):
    sub = tmp_path / "data"
    sub.mkdir()
    (sub / "inc.conf").write_text("port 9001\n")
    (tmp_path / "main.conf").write_text("dir data\ninclude inc.conf\n")
    config = load_config(str(tmp_path / "main.conf"), ["--hz", "20"])
    assert os.getcwd() == str(sub)
    assert config.dir == str(sub)
    assert (config.port, config.hz) == (9001, 20)


def test_bad_dir_is_fatal(tmp_path):
    (tmp_path / "disque.conf").write_text("# header\ndir /nonexistent/disque-test-dir\n")
    with pytest.raises(ConfigError) as info:
        load_config("disque.conf")
    assert (info.value.line_number, info.value.reason) == (
        2, "Can't chdir to '/nonexistent/disque-test-dir': No such file or directory")


def test_config_file_is_made_absolute_before_dir(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "conf" / "n.conf").write_text(f"dir {tmp_path / 'data'}\n")
    config = load_config("conf/n.conf")
    assert config.config_file == str(tmp_path / "conf" / "n.conf")
    assert os.getcwd() == str(tmp_path / "data")


def test_without_a_file_dir_is_the_working_directory(tmp_path):
    config = load_config(None, ["--port", "7000"])
    assert (config.config_file, config.port, config.dir) == (None, 7000, str(tmp_path))


def test_set_dir_changes_directory(tmp_path):
    (tmp_path / "d").mkdir()
    config = load_config(None)
    config.set(b"dir", b"d")
    assert os.getcwd() == str(tmp_path / "d")
    assert config.get(b"dir") == [b"dir", str(tmp_path / "d").encode()]


def test_set_dir_failure(tmp_path):
    config = load_config(None)
    with pytest.raises(ConfigSetError) as info:
        config.set(b"dir", b"missing")
    assert str(info.value) == "ERR Changing directory: No such file or directory"
    assert os.getcwd() == str(tmp_path)


def test_rewrite_writes_the_file(tmp_path):
    path = tmp_path / "disque.conf"
    path.write_text("# keep me\nport 7000\n")
    config = load_config(str(path))
    config.set(b"hz", b"25")
    config.rewrite()
    assert path.read_text() == (f'# keep me\nport 7000\n{REWRITE_SIGNATURE}\n'
                                f'dir "{tmp_path}"\nhz 25\n')
    assert load_config(str(path)).hz == 25


def test_rewrite_keeps_permissions_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "disque.conf"
    path.write_text("port 1\n")
    config = load_config(str(path))
    os.chmod(path, 0o600)
    config.rewrite()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disque.conf"]


def test_rewrite_creates_a_missing_file(tmp_path):
    path = tmp_path / "disque.conf"
    path.write_text("port 1\n")
    config = load_config(str(path))
    path.unlink()
    config.rewrite()
    assert path.read_text().splitlines() == [REWRITE_SIGNATURE, "port 1", f'dir "{tmp_path}"']
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # not mkstemp's 0600


def test_rewrite_follows_symlink(tmp_path):
    real = tmp_path / "real.conf"
    link = tmp_path / "link.conf"
    real.write_text("port 1\n")
    link.symlink_to(real)
    config = load_config(str(link))
    config.set(b"hz", b"11")
    config.rewrite()
    assert link.is_symlink()
    assert "hz 11" in real.read_text().splitlines()


def test_rewrite_io_error(tmp_path):
    config = load_config(None)
    config.config_file = str(tmp_path / "missing-dir" / "disque.conf")
    with pytest.raises(ConfigSetError) as info:
        config.rewrite()
    assert str(info.value) == "ERR Rewriting config file: No such file or directory"


def test_rewrite_read_error(tmp_path):
    config = load_config(None)
    (tmp_path / "conf.d").mkdir()
    config.config_file = str(tmp_path / "conf.d")
    with pytest.raises(ConfigSetError) as info:
        config.rewrite()
    assert str(info.value) == "ERR Rewriting config file: Is a directory"


def test_working_dir_is_empty_when_the_directory_is_gone(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    os.chdir(gone)
    gone.rmdir()
    assert OsFileSystem().working_dir() == ""
