"""Tests for the disque/config/ package: file parsing, CONFIG GET/SET/REWRITE (spec: config.md).

The config does its file operations through a FileSystem; here it is one in
memory (``MemoryFiles``). The real one is tested in tests/unit/process/test_configfile.py.
"""

from __future__ import annotations

import errno
import posixpath
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disque.config import (
    DIRECTIVES,
    REWRITE_SIGNATURE,
    Config,
    ConfigError,
    ConfigSetError,
    format_memory,
    parse_memory,
)

KB, MB, GB = 1024, 1024 ** 2, 1024 ** 3
SHIPPED_CONF = Path(__file__).resolve().parents[2] / "conf" / "disque.conf"

DEFAULTS = {
    "port": 7711, "bind": [], "tcp_backlog": 511, "unixsocket": "", "unixsocketperm": 0,
    "timeout": 0, "tcp_keepalive": 0, "daemonize": False, "pidfile": "/var/run/disque.pid",
    "supervised": "no", "loglevel": "notice", "logfile": "", "syslog_enabled": False,
    "syslog_ident": "disque", "syslog_facility": "local0", "databases": 16,
    "maxclients": 10000, "maxmemory": GB, "maxmemory_policy": "acks", "maxmemory_samples": 5,
    "activerehashing": True, "hz": 10, "appendonly": False, "appendfilename": "disque.aof",
    "appendfsync": "everysec", "no_appendfsync_on_rewrite": False,
    "auto_aof_rewrite_percentage": 100, "auto_aof_rewrite_min_size": 64 * MB,
    "aof_rewrite_incremental_fsync": True, "aof_load_truncated": True,
    "aof_enqueue_jobs_once": False, "requirepass": "", "rename_commands": [],
    "cluster_config_file": "nodes.conf", "cluster_node_timeout": 15000, "cluster_bus_port": 0,
    "slowlog_log_slower_than": 10000, "slowlog_max_len": 128, "latency_monitor_threshold": 0,
    "client_output_buffer_limit": (0, 0, 0), "watchdog_period": 0,
    "proto_max_bulk_len": 512 * MB, "config_file": None,
}

GETTABLE = [
    "port", "bind", "tcp-backlog", "unixsocket", "unixsocketperm", "timeout", "tcp-keepalive",
    "daemonize", "pidfile", "supervised", "loglevel", "logfile", "syslog-facility", "dir",
    "databases", "maxclients", "maxmemory", "maxmemory-policy", "maxmemory-samples",
    "activerehashing", "hz", "appendonly", "appendfsync", "no-appendfsync-on-rewrite",
    "auto-aof-rewrite-percentage", "auto-aof-rewrite-min-size", "aof-rewrite-incremental-fsync",
    "aof-load-truncated", "aof-enqueue-jobs-once", "requirepass", "cluster-node-timeout",
    "cluster-bus-port", "slowlog-log-slower-than", "slowlog-max-len",
    "latency-monitor-threshold", "client-output-buffer-limit", "watchdog-period",
    "proto-max-bulk-len",
    # The extensions' directives come after the original's (docs/commands.md).
    "maxdeliver-default", "dedup-window", "schedule-max-body", "metrics-port", "metrics-max-queues",
    "dashboard-hosts", "tls-port", "tls-cert-file", "tls-key-file", "tls-ca-cert-file", "tls-ca-cert-dir",
    "tls-auth-clients", "tls-cluster", "tls-protocols", "tls-ciphers", "tls-ciphersuites",
    "tls-prefer-server-ciphers", "client-query-buffer-limit", "unauthenticated-query-buffer-limit",
    "maxmemory-clients",
    "getjob-max-queues", "client-request-timeout",
    "protected-mode", "enable-debug-command", "enable-protected-configs", "aclfile",
    "cluster-secret-file", "monitor-output-buffer-limit",
]


CWD = "/srv/disque"  # the working directory of MemoryFiles
CONF = CWD + "/disque.conf"


def as_bytes(text: str | bytes) -> bytes:
    return text.encode() if isinstance(text, str) else text


def missing(path: str) -> OSError:
    return FileNotFoundError(errno.ENOENT, "No such file or directory", path)


class MemoryFiles:
    """The config's FileSystem in memory: files by absolute path, and directories."""

    def __init__(self, files: dict[str, str | bytes] | None = None, dirs=(), cwd: str = CWD):
        self.cwd = cwd
        self.dirs = {"/", cwd, *(self.absolute(d) for d in dirs)}
        self.files = {self.absolute(path): as_bytes(text) for path, text in (files or {}).items()}

    def absolute(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.cwd, path))

    def read_file(self, path: str) -> bytes:
        full = self.absolute(path)
        if full in self.dirs:
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        if full not in self.files:
            raise missing(path)
        return self.files[full]

    def replace_file(self, path: str, data: bytes) -> None:
        full = self.absolute(path)
        if posixpath.dirname(full) not in self.dirs:
            raise missing(path)
        self.files[full] = data

    def change_dir(self, path: str) -> None:
        full = self.absolute(path)
        if full not in self.dirs:
            raise missing(path)
        self.cwd = full

    def working_dir(self) -> str:
        return self.cwd

    def text(self, path: str = CONF) -> str:
        return self.files[self.absolute(path)].decode()


def load_text(text: str | bytes, overrides=(), *, files: MemoryFiles | None = None,
              commands=None) -> Config:
    """Load ``text`` as the config file CONF of ``files``."""
    files = files if files is not None else MemoryFiles()
    data = as_bytes(text)
    files.files[CONF] = data
    return Config.load(data, list(overrides), config_file=CONF, files=files, commands=commands)


def fatal(text: str | bytes, overrides=(), *, files: MemoryFiles | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_text(text, overrides, files=files)
    return info.value


def as_dict(reply: list[bytes]) -> dict[str, str]:
    assert len(reply) % 2 == 0
    return {reply[i].decode(): reply[i + 1].decode() for i in range(0, len(reply), 2)}


def set_error(config: Config, name: str | bytes, value: str | bytes) -> str:
    raw_name = name.encode() if isinstance(name, str) else name
    raw_value = value.encode() if isinstance(value, str) else value
    with pytest.raises(ConfigSetError) as info:
        config.set(raw_name, raw_value)
    return str(info.value)


def stored_values(config: Config) -> dict[str, object]:
    return {d.attr: getattr(config, d.attr) for d in DIRECTIVES.values() if d.stored}


# ---------------------------------------------------------------------------
# Defaults
# ---------------------------------------------------------------------------

def test_defaults():
    config = Config()
    for attr, value in DEFAULTS.items():
        assert getattr(config, attr) == value, attr
    assert config.dir == ""  # no file system given: no working directory known


def test_mutable_defaults_are_not_shared():
    a, b = Config(), Config()
    a.bind.append("127.0.0.1")
    a.rename_commands.append(("GET", "x"))
    assert b.bind == [] and b.rename_commands == []


def test_load_without_file_gives_defaults():
    config = Config.load(None, [])
    assert config.config_file is None
    assert stored_values(config) == stored_values(Config())


# ---------------------------------------------------------------------------
# File syntax
# ---------------------------------------------------------------------------

def test_comments_blank_lines_whitespace_and_crlf():
    config = load_text("# a comment\n\n   \n\tport 7000\r\n  # indented comment\r\n"
                                 "   timeout    5   \n")
    assert config.port == 7000
    assert config.timeout == 5


def test_names_are_case_insensitive():
    config = load_text("PORT 7001\nMaxMemory-Policy NOEVICTION\nAppendOnly YES\n")
    assert config.port == 7001
    assert config.maxmemory_policy == "noeviction"
    assert config.appendonly is True


def test_last_occurrence_wins():
    assert load_text("port 1\nport 2\nport 3\n").port == 3


def test_quoting_and_escapes():
    config = load_text('requirepass "with space"\n'
                                 "pidfile '/tmp/a b'\n"
                                 'syslog-ident "a\\x41\\n\\"q\\""\n'
                                 "logfile ''\n")
    assert config.requirepass == "with space"
    assert config.pidfile == "/tmp/a b"
    assert config.syslog_ident == 'aA\n"q"'
    assert config.logfile == ""


def test_single_quote_escape():
    assert load_text("requirepass 'it\\'s'\n").requirepass == "it's"


def test_non_utf8_bytes_survive():
    config = load_text(b'requirepass "\\xff\\x00z"\nunixsocket /tmp/\xe9.sock\n')
    assert config.requirepass.encode("utf-8", "surrogateescape") == b"\xff\x00z"
    assert config.unixsocket.encode("utf-8", "surrogateescape") == b"/tmp/\xe9.sock"


def test_file_without_trailing_newline():
    assert load_text("port 1234").port == 1234


def test_fatal_error_message_format():
    error = fatal("port 7711\n\n# comment\nfoo bar\n")
    assert str(error) == ("\n*** FATAL CONFIG FILE ERROR ***\n"
                          "Reading the configuration file, at line 4\n"
                          ">>> 'foo bar'\n"
                          "Bad directive or wrong number of arguments\n")
    assert error.line_number == 4
    assert error.line == "foo bar"
    assert error.reason == "Bad directive or wrong number of arguments"


def test_fatal_error_shows_trimmed_line():
    error = fatal("   loglevel   loud  \r\n")
    assert error.line == "loglevel   loud"
    assert ">>> 'loglevel   loud'\n" in str(error)


@pytest.mark.parametrize("line, reason", [
    ("nosuchdirective 1", "Bad directive or wrong number of arguments"),
    ("port", "Bad directive or wrong number of arguments"),
    ("port 1 2", "Bad directive or wrong number of arguments"),
    ("bind", "Bad directive or wrong number of arguments"),
    ("rename-command GET", "Bad directive or wrong number of arguments"),
    ("rename-command GET a b", "Bad directive or wrong number of arguments"),
    ("include", "Bad directive or wrong number of arguments"),
    ("client-output-buffer-limit normal 0 0", "Bad directive or wrong number of arguments"),
    ("watchdog-period 100", "Bad directive or wrong number of arguments"),
    ('requirepass "abc', "Unbalanced quotes in configuration line"),
    ('requirepass "abc"def', "Unbalanced quotes in configuration line"),
    ("requirepass 'abc", "Unbalanced quotes in configuration line"),
    ("pidfile '/tmp/it''s'", "Unbalanced quotes in configuration line"),
    ("port abc", "argument couldn't be parsed into an integer"),
    ("port 1.5", "argument couldn't be parsed into an integer"),
    ("port 99999999999999999999", "argument couldn't be parsed into an integer"),
    ("port 65536", "Invalid port"),
    ("port -1", "Invalid port"),
    ("cluster-bus-port 65536", "Invalid cluster bus port"),
    ("bind " + " ".join(f"10.0.0.{i}" for i in range(17)), "Too many bind addresses specified"),
    ("dashboard-hosts evil.com/x", "dashboard-hosts takes host names, IP addresses or *, at "
     "most 64 of them"),
    ("dashboard-hosts " + " ".join(f"h{i}" for i in range(65)),
     "dashboard-hosts takes host names, IP addresses or *, at most 64 of them"),
    ("tcp-backlog -1", "Invalid backlog value"),
    ("unixsocketperm 1000", "Invalid socket file permissions"),
    ("unixsocketperm 789", "Invalid socket file permissions"),
    ("unixsocketperm rwx", "Invalid socket file permissions"),
    ("timeout -1", "Invalid timeout value"),
    ("tcp-keepalive -1", "Invalid tcp-keepalive value"),
    ("tcp-keepalive 2147483648", "Invalid tcp-keepalive value"),
    ("daemonize maybe", "argument must be 'yes' or 'no'"),
    ("syslog-enabled 1", "argument must be 'yes' or 'no'"),
    ("activerehashing true", "argument must be 'yes' or 'no'"),
    ("appendonly on", "argument must be 'yes' or 'no'"),
    ("no-appendfsync-on-rewrite y", "argument must be 'yes' or 'no'"),
    ("aof-rewrite-incremental-fsync", "Bad directive or wrong number of arguments"),
    ("aof-rewrite-incremental-fsync nope", "argument must be 'yes' or 'no'"),
    ("aof-load-truncated nope", "argument must be 'yes' or 'no'"),
    ("aof-enqueue-jobs-once nope", "argument must be 'yes' or 'no'"),
    ("supervised upstart",
     "Invalid option for 'supervised'. Allowed values: 'systemd', 'auto', or 'no'"),
    ("loglevel loud", "Invalid log level. Must be one of debug, verbose, notice, warning"),
    ("syslog-facility local8",
     "Invalid log facility. Must be one of USER or between LOCAL0-LOCAL7"),
    ("databases 0", "Invalid number of databases"),
    ("maxclients 0", "Invalid max clients limit"),
    ("maxmemory 0", "You need to specify a memory limit greater than zero"),
    ("maxmemory -1mb", "You need to specify a memory limit greater than zero"),
    ("maxmemory 1tb", "argument must be a memory value"),
    ("maxmemory mb", "argument must be a memory value"),
    ("maxmemory-policy allkeys-lru", "Invalid maxmemory policy"),
    ("maxmemory-samples 0", "maxmemory-samples must be 1 or greater"),
    ("appendfilename dir/x.aof", "appendfilename can't be a path, just a filename"),
    ("appendfilename dir\\x.aof", "appendfilename can't be a path, just a filename"),
    ("appendfsync sometimes", "argument must be 'no', 'always' or 'everysec'"),
    ("auto-aof-rewrite-percentage -1", "Invalid negative percentage for AOF auto rewrite"),
    ("auto-aof-rewrite-min-size -1", "auto-aof-rewrite-min-size can't be negative"),
    ("auto-aof-rewrite-min-size big", "argument must be a memory value"),
    ("requirepass " + "x" * 513, "Password is longer than DISQUE_AUTHPASS_MAX_LEN"),
    ("cluster-node-timeout 0", "cluster node timeout must be 1 or greater"),
    ("cluster-node-timeout -5", "cluster node timeout must be 1 or greater"),
    ("slowlog-max-len -1", "slowlog-max-len can't be negative"),
    ("latency-monitor-threshold -1", "The latency threshold can't be negative"),
    ("client-output-buffer-limit slave 0 0 0", "Unrecognized client limit class"),
    ("client-output-buffer-limit pubsub 0 0 0", "Unrecognized client limit class"),
    ("client-output-buffer-limit normal 0 0 -1",
     "Negative number of seconds in soft limit is invalid"),
    ("client-output-buffer-limit normal -1 0 0", "argument must be a memory value"),
    ("client-output-buffer-limit normal 0 lots 0", "argument must be a memory value"),
    ("proto-max-bulk-len 1000", "proto-max-bulk-len must be 1mb or greater"),
    ("dir /nonexistent/disque-test-dir",
     "Can't chdir to '/nonexistent/disque-test-dir': No such file or directory"),
])
def test_file_validation_errors(line, reason):
    error = fatal("# header\n" + line + "\n")
    assert error.reason == reason
    assert error.line_number == 2
    assert str(error).endswith(f"\n{reason}\n")


@pytest.mark.parametrize("line, attr, value", [
    ("port 0", "port", 0),
    ("port 65535", "port", 65535),
    ("port +7000", "port", 7000),
    ("port 007000", "port", 7000),
    ("bind 127.0.0.1 ::1", "bind", ["127.0.0.1", "::1"]),
    ("bind " + " ".join(f"10.0.0.{i}" for i in range(16)), "bind",
     [f"10.0.0.{i}" for i in range(16)]),
    ("dashboard-hosts Disque1.Example.com 10.0.0.5 [::1] *", "dashboard_hosts",
     ["disque1.example.com", "10.0.0.5", "[::1]", "*"]),
    ("tcp-backlog 0", "tcp_backlog", 0),
    ("unixsocket /tmp/d.sock", "unixsocket", "/tmp/d.sock"),
    ("unixsocketperm 700", "unixsocketperm", 0o700),
    ("unixsocketperm 0777", "unixsocketperm", 0o777),
    ("timeout 300", "timeout", 300),
    ("tcp-keepalive 60", "tcp_keepalive", 60),
    ("daemonize YES", "daemonize", True),
    ("pidfile /run/d.pid", "pidfile", "/run/d.pid"),
    ("supervised systemd", "supervised", "systemd"),
    ("supervised AUTO", "supervised", "auto"),
    ("loglevel VERBOSE", "loglevel", "verbose"),
    ("logfile /tmp/d.log", "logfile", "/tmp/d.log"),
    ("syslog-enabled yes", "syslog_enabled", True),
    ("syslog-ident dq", "syslog_ident", "dq"),
    ("syslog-facility USER", "syslog_facility", "user"),
    ("syslog-facility local7", "syslog_facility", "local7"),
    ("databases 1", "databases", 1),
    ("maxclients 1", "maxclients", 1),
    ("maxmemory 1", "maxmemory", 1),
    ("maxmemory 100mb", "maxmemory", 100 * MB),
    ("maxmemory-policy noeviction", "maxmemory_policy", "noeviction"),
    ("maxmemory-samples 3", "maxmemory_samples", 3),
    ("activerehashing no", "activerehashing", False),
    ("hz 100", "hz", 100),
    ("hz 0", "hz", 1),
    ("hz -7", "hz", 1),
    ("hz 501", "hz", 500),
    ("hz 100000", "hz", 500),
    ("appendonly yes", "appendonly", True),
    ("appendfilename my.aof", "appendfilename", "my.aof"),
    ("appendfsync ALWAYS", "appendfsync", "always"),
    ("appendfsync no", "appendfsync", "no"),
    ("no-appendfsync-on-rewrite yes", "no_appendfsync_on_rewrite", True),
    ("auto-aof-rewrite-percentage 0", "auto_aof_rewrite_percentage", 0),
    ("auto-aof-rewrite-min-size 1gb", "auto_aof_rewrite_min_size", GB),
    ("auto-aof-rewrite-min-size 0", "auto_aof_rewrite_min_size", 0),
    ("aof-rewrite-incremental-fsync no", "aof_rewrite_incremental_fsync", False),
    ("aof-load-truncated no", "aof_load_truncated", False),
    ("aof-enqueue-jobs-once yes", "aof_enqueue_jobs_once", True),
    ("requirepass " + "x" * 512, "requirepass", "x" * 512),
    ("cluster-config-file nodes-7711.conf", "cluster_config_file", "nodes-7711.conf"),
    ("cluster-node-timeout 1", "cluster_node_timeout", 1),
    ("cluster-bus-port 17000", "cluster_bus_port", 17000),
    ("slowlog-log-slower-than -1", "slowlog_log_slower_than", -1),
    ("slowlog-log-slower-than 0", "slowlog_log_slower_than", 0),
    ("slowlog-max-len 0", "slowlog_max_len", 0),
    ("latency-monitor-threshold 100", "latency_monitor_threshold", 100),
    ("client-output-buffer-limit NORMAL 1mb 256k 60", "client_output_buffer_limit",
     (MB, 256000, 60)),
    ("proto-max-bulk-len 1mb", "proto_max_bulk_len", MB),
    ("proto-max-bulk-len 2gb", "proto_max_bulk_len", 2 * GB),
])
def test_file_values(line, attr, value):
    assert getattr(load_text(line + "\n"), attr) == value


@pytest.mark.parametrize("text, value", [
    ("1", 1), ("1b", 1), ("1B", 1),
    ("1k", 1000), ("1K", 1000), ("1kb", 1024), ("1KB", 1024), ("1kB", 1024),
    ("3m", 3_000_000), ("3mb", 3 * MB), ("3Mb", 3 * MB),
    ("2g", 2_000_000_000), ("2gb", 2 * GB), ("2GB", 2 * GB), ("0", 0), ("-1k", -1000),
])
def test_memory_units(text, value):
    assert parse_memory(text) == value


@pytest.mark.parametrize("text", ["", "k", "1 kb", "1kbb", "1t", "1.5mb", "0x10", "+1"])
def test_memory_rejects(text):
    with pytest.raises(ValueError):
        parse_memory(text)


def test_memory_units_in_file():
    config = load_text("maxmemory 2Gb\nauto-aof-rewrite-min-size 10k\n")
    assert config.maxmemory == 2 * GB
    assert config.auto_aof_rewrite_min_size == 10_000


# ---------------------------------------------------------------------------
# include, dir, rename-command
# ---------------------------------------------------------------------------

def test_include_is_applied_in_place():
    files = MemoryFiles({"inc.conf": "port 8000\ntimeout 9\n"})
    config = load_text("port 7000\ninclude inc.conf\ntimeout 10\n", files=files)
    assert config.port == 8000  # the include comes after "port 7000"
    assert config.timeout == 10  # ... and before "timeout 10"


def test_nested_include():
    files = MemoryFiles({"a.conf": "include b.conf\nhz 20\n", "b.conf": "hz 30\nloglevel debug\n"})
    config = load_text("include a.conf\n", files=files)
    assert (config.hz, config.loglevel) == (20, "debug")


def test_error_in_included_file_reports_its_line():
    files = MemoryFiles({"inc.conf": "# one\n# two\nport banana\n"})
    error = fatal("port 1\ninclude inc.conf\n", files=files)
    assert error.line_number == 3
    assert error.line == "port banana"


def test_missing_include_is_fatal():
    error = fatal("\ninclude missing.conf\n")
    assert error.line_number == 2
    assert error.reason == ("Fatal error, can't open config file 'missing.conf': "
                            "No such file or directory")


def test_recursive_include_is_fatal():
    error = fatal("include loop.conf\n", files=MemoryFiles({"loop.conf": "include loop.conf\n"}))
    assert error.reason == "Too many nested include directives"


def test_dir_applies_immediately_and_include_is_relative_to_it():
    files = MemoryFiles({"data/inc.conf": "port 9001\n", "inc.conf": "port 1\n"}, dirs=["data"])
    config = load_text("dir data\ninclude inc.conf\n", files=files)
    assert files.cwd == CWD + "/data"
    assert config.dir == CWD + "/data"
    assert config.port == 9001
    assert config.config_file == CONF  # as given, whatever `dir` did


def test_rename_command_is_recorded_in_order():
    config = load_text("rename-command CONFIG s3cr3t\nrename-command DEBUG \"\"\n")
    assert config.rename_commands == [("CONFIG", "s3cr3t"), ("DEBUG", "")]


def test_rename_command_checked_against_command_table():
    config = load_text("rename-command config admin-config\n"
                       "rename-command ADMIN-CONFIG cfg\n"
                       "rename-command debug \"\"\n", commands=["CONFIG", "DEBUG", "PING"])
    assert config.rename_commands == [("config", "admin-config"), ("ADMIN-CONFIG", "cfg"),
                                      ("debug", "")]


@pytest.mark.parametrize("text, line_number, reason", [
    ("rename-command NOPE x\n", 1, "No such command in rename-command"),
    ("rename-command CONFIG ping\n", 1, "Target command name already exists"),
    ("rename-command DEBUG \"\"\nrename-command DEBUG x\n", 2,
     "No such command in rename-command"),
])
def test_rename_command_errors(text, line_number, reason):
    with pytest.raises(ConfigError) as info:
        load_text(text, commands=["CONFIG", "DEBUG", "PING"])
    assert (info.value.line_number, info.value.reason) == (line_number, reason)


# ---------------------------------------------------------------------------
# Command-line overrides
# ---------------------------------------------------------------------------

def test_overrides_follow_the_file():
    config = load_text("port 7000\nappendonly no\n",
                       ["--port", "7777", "--bind", "127.0.0.1", "::1", "--appendonly", "yes"])
    assert config.port == 7777
    assert config.bind == ["127.0.0.1", "::1"]
    assert config.appendonly is True


def test_overrides_without_file():
    config = Config.load(None, ["--loglevel", "debug", "--maxmemory", "3mb"])
    assert (config.loglevel, config.maxmemory) == ("debug", 3 * MB)
    assert config.config_file is None


def test_override_arguments_are_quoted():
    config = Config.load(None, ["--requirepass", 'a b"c\n', "--logfile", "",
                                "--slowlog-log-slower-than", "-1"])
    assert config.requirepass == 'a b"c\n'
    assert config.logfile == ""
    assert config.slowlog_log_slower_than == -1


def test_override_error_line_number():
    error = fatal("port 1\nport 2\n", ["--hz", "10", "--port", "x"])
    assert error.line_number == 4
    assert error.line == 'port "x"'
    assert error.reason == "argument couldn't be parsed into an integer"


def test_override_value_without_name_is_bad_directive():
    with pytest.raises(ConfigError) as info:
        Config.load(None, ["7777"])
    assert info.value.reason == "Bad directive or wrong number of arguments"


# ---------------------------------------------------------------------------
# CONFIG GET
# ---------------------------------------------------------------------------

def test_get_star_lists_exactly_the_visible_parameters():
    reply = Config().get(b"*")
    assert [reply[i].decode() for i in range(0, len(reply), 2)] == GETTABLE


def test_get_default_rendering():
    values = as_dict(Config().get(b"*"))
    assert values["requirepass"] == ""
    assert values["unixsocket"] == ""
    assert values["bind"] == ""
    assert values["tcp-keepalive"] == "0"
    assert values["activerehashing"] == "yes"
    assert values["appendonly"] == "no"
    assert values["maxmemory"] == str(GB)
    assert values["auto-aof-rewrite-min-size"] == str(64 * MB)
    assert values["client-output-buffer-limit"] == "normal 0 0 0"
    assert values["unixsocketperm"] == "0"
    assert values["dir"] == ""
    assert values["syslog-facility"] == "local0"


def test_get_rendering_of_loaded_values():
    config = load_text("bind 127.0.0.1 ::1\nunixsocketperm 755\ntcp-keepalive 60\n"
                                 "requirepass s3cr3t\nclient-output-buffer-limit normal 1mb 1kb 5\n"
                                 "daemonize yes\n")
    values = as_dict(config.get(b"*"))
    assert values["bind"] == "127.0.0.1 ::1"
    assert values["unixsocketperm"] == "755"
    assert values["tcp-keepalive"] == "60"
    assert values["requirepass"] == "s3cr3t"
    assert values["client-output-buffer-limit"] == f"normal {MB} 1024 5"
    assert values["daemonize"] == "yes"


@pytest.mark.parametrize("name", ["appendfilename", "syslog-enabled", "syslog-ident",
                                  "cluster-config-file", "include", "rename-command"])
def test_get_hides_non_visible_parameters(name):
    assert Config().get(name.encode()) == []


@pytest.mark.parametrize("pattern, names", [
    (b"maxmemory", ["maxmemory"]),
    (b"MAXMEMORY", ["maxmemory"]),
    (b"maxmemory*", ["maxmemory", "maxmemory-policy", "maxmemory-samples", "maxmemory-clients"]),
    (b"*timeout*", ["timeout", "cluster-node-timeout", "client-request-timeout"]),
    (b"?z", ["hz"]),
    (b"[ab]ind", ["bind"]),
    (b"[^a]ind", ["bind"]),
    (b"[^b]ind", []),
    (b"[a-c]ind", ["bind"]),
    (b"[c-a]ind", ["bind"]),
    (b"[A-C]IND", ["bind"]),
    (b"d\\ir", ["dir"]),
    (b"*port", ["port", "cluster-bus-port", "metrics-port", "tls-port"]),
    (b"nomatch", []),
    (b"", []),
    (b"appendf*", ["appendfsync"]),
])
def test_get_glob(pattern, names):
    reply = Config().get(pattern)
    assert [reply[i].decode() for i in range(0, len(reply), 2)] == names


# ---------------------------------------------------------------------------
# CONFIG SET
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, value, attr, expected", [
    ("timeout", "30", "timeout", 30),
    ("tcp-keepalive", "60", "tcp_keepalive", 60),
    ("tcp-keepalive", "yes", "tcp_keepalive", 300),
    ("tcp-keepalive", "NO", "tcp_keepalive", 0),
    ("supervised", "systemd", "supervised", "systemd"),
    ("loglevel", "WARNING", "loglevel", "warning"),
    ("maxclients", "1", "maxclients", 1),
    ("maxmemory", "3mb", "maxmemory", 3 * MB),
    ("maxmemory", "1", "maxmemory", 1),
    ("maxmemory", "1gb", "maxmemory", GB),
    ("maxmemory", "100k", "maxmemory", 100_000),
    ("maxmemory", "0", "maxmemory", 0),
    ("maxmemory-policy", "NoEviction", "maxmemory_policy", "noeviction"),
    ("maxmemory-samples", "10", "maxmemory_samples", 10),
    ("activerehashing", "no", "activerehashing", False),
    ("hz", "100", "hz", 100),
    ("hz", "0", "hz", 1),
    ("hz", "501", "hz", 500),
    ("appendonly", "yes", "appendonly", True),
    ("appendfsync", "always", "appendfsync", "always"),
    ("auto-aof-rewrite-percentage", "0", "auto_aof_rewrite_percentage", 0),
    ("auto-aof-rewrite-min-size", "1048576", "auto_aof_rewrite_min_size", MB),
    ("aof-rewrite-incremental-fsync", "no", "aof_rewrite_incremental_fsync", False),
    ("aof-load-truncated", "NO", "aof_load_truncated", False),
    ("aof-enqueue-jobs-once", "yes", "aof_enqueue_jobs_once", True),
    ("requirepass", "secret", "requirepass", "secret"),
    ("requirepass", "x" * 512, "requirepass", "x" * 512),
    ("cluster-node-timeout", "3000", "cluster_node_timeout", 3000),
    ("cluster-node-timeout", "0", "cluster_node_timeout", 0),
    ("slowlog-log-slower-than", "0", "slowlog_log_slower_than", 0),
    ("slowlog-max-len", "0", "slowlog_max_len", 0),
    ("latency-monitor-threshold", "100", "latency_monitor_threshold", 100),
    ("client-output-buffer-limit", "normal 1mb 512kb 60", "client_output_buffer_limit",
     (MB, 512 * KB, 60)),
    ("client-output-buffer-limit", "normal 0 0 0 NORMAL 10 20 30",
     "client_output_buffer_limit", (10, 20, 30)),
    ("watchdog-period", "500", "watchdog_period", 500),
    ("proto-max-bulk-len", "1mb", "proto_max_bulk_len", MB),
    ("dashboard-hosts", "a.example b.example", "dashboard_hosts", ["a.example", "b.example"]),
    ("dashboard-hosts", "", "dashboard_hosts", []),
    ("maxmemory-clients", "512mb", "maxmemory_clients", (512 * MB, 0)),
    ("maxmemory-clients", "0", "maxmemory_clients", (0, 0)),
    ("maxmemory-clients", "25%", "maxmemory_clients", (0, 25)),
    ("maxmemory-clients", "100%", "maxmemory_clients", (0, 100)),
])
def test_set_accepts(name, value, attr, expected):
    config = Config()
    config.set(name.encode(), value.encode())
    assert getattr(config, attr) == expected


def test_set_is_visible_in_get():
    config = Config()
    config.set(b"cluster-node-timeout", b"3000")
    config.set(b"appendonly", b"yes")
    assert config.get(b"cluster-node-timeout") == [b"cluster-node-timeout", b"3000"]
    assert config.get(b"appendonly") == [b"appendonly", b"yes"]


def test_set_requirepass_empty_disables():
    config = Config()
    config.set(b"requirepass", b"pw")
    config.set(b"requirepass", b"")
    assert config.requirepass == ""
    assert config.get(b"requirepass") == [b"requirepass", b""]


def test_set_names_are_case_insensitive():
    config = Config()
    config.set(b"MaxMemory", b"2mb")
    assert config.maxmemory == 2 * MB


@pytest.mark.parametrize("name, value", [
    ("timeout", "-1"), ("timeout", "abc"), ("timeout", "1.5"), ("timeout", "+1"),
    ("timeout", "01"), ("timeout", " 1"), ("timeout", "1 "), ("timeout", ""),
    ("timeout", "99999999999999999999"),
    ("tcp-keepalive", "-1"), ("tcp-keepalive", "2147483648"), ("tcp-keepalive", "maybe"),
    ("supervised", "upstart"), ("loglevel", "loud"),
    ("maxclients", "0"),
    ("maxmemory", "-1"), ("maxmemory", "lots"), ("maxmemory", "1tb"),
    ("maxmemory-policy", "allkeys-lru"),
    ("maxmemory-samples", "0"),
    ("activerehashing", "1"),
    ("hz", "-1"), ("hz", "fast"),
    ("appendonly", "true"),
    ("appendfsync", "sometimes"),
    ("auto-aof-rewrite-percentage", "-1"),
    ("auto-aof-rewrite-min-size", "64mb"), ("auto-aof-rewrite-min-size", "-1"),
    ("requirepass", "x" * 513),
    ("cluster-node-timeout", "-1"), ("cluster-node-timeout", "abc"),
    ("slowlog-log-slower-than", "-1"),
    ("slowlog-max-len", "-1"),
    ("latency-monitor-threshold", "-1"),
    ("client-output-buffer-limit", ""),
    ("client-output-buffer-limit", "normal 0 0"),
    ("client-output-buffer-limit", "slave 0 0 0"),
    ("client-output-buffer-limit", "normal 0 0 0 pubsub 0 0 0"),
    ("client-output-buffer-limit", "normal -1 0 0"),
    ("client-output-buffer-limit", "normal 0 0 -1"),
    ("client-output-buffer-limit", "normal 0 0 1s"),
    ("watchdog-period", "-1"),
    ("proto-max-bulk-len", "1000"),
    ("maxmemory-clients", "-1"), ("maxmemory-clients", "101%"), ("maxmemory-clients", "-5%"),
    ("maxmemory-clients", "5.5%"), ("maxmemory-clients", "%"), ("maxmemory-clients", "lots"),
])
def test_set_rejects_with_exact_text(name, value):
    config = Config()
    before = stored_values(config)
    assert set_error(config, name, value) == f"ERR Invalid argument '{value}' for CONFIG SET '{name}'"
    assert stored_values(config) == before


def test_set_invalid_echoes_name_as_given():
    assert (set_error(Config(), "Cluster-Node-Timeout", "abc")
            == "ERR Invalid argument 'abc' for CONFIG SET 'Cluster-Node-Timeout'")


def test_set_error_text_is_single_line_and_encodable():
    text = set_error(Config(), b"timeout", b"1\r\n\xff")
    assert "\r" not in text and "\n" not in text
    text.encode("utf-8")


@pytest.mark.parametrize("name", [
    "port", "bind", "tcp-backlog", "unixsocket", "unixsocketperm", "daemonize", "pidfile",
    "logfile", "syslog-enabled", "syslog-ident", "syslog-facility", "databases",
    "appendfilename", "no-appendfsync-on-rewrite", "cluster-config-file", "cluster-bus-port",
    "metrics-port", "tls-port", "tls-key-file-pass", "Metrics-Port",
])
def test_set_of_a_startup_only_parameter_names_it_immutable(name):
    """Redis 7's reply for an immutable parameter, naming it as given."""
    config = Config()
    before = stored_values(config)
    assert set_error(config, name, "1") == (
        f"ERR CONFIG SET failed (possibly related to argument '{name}') - "
        "can't set immutable config")
    assert stored_values(config) == before


@pytest.mark.parametrize("name", [
    # Lines of the file only are no parameter, as in Redis 7.
    "include", "rename-command", "user", "save", "nosuchparam", "metrics-ports", "",
])
def test_set_unsupported(name):
    """Disque 1.0's reply, byte for byte, for a name that is no parameter."""
    assert set_error(Config(), name, "1") == f"ERR Unsupported CONFIG parameter: {name}"



def test_listener_gets_old_and_new_values():
    config = Config()
    calls = []
    config.on_change("maxmemory", lambda old, new: calls.append((old, new)))
    config.set(b"maxmemory", b"3mb")
    config.set(b"MAXMEMORY", b"1")
    assert calls == [(GB, 3 * MB), (3 * MB, 1)]


def test_listener_receives_clamped_value():
    config = Config()
    calls = []
    config.on_change("hz", lambda old, new: calls.append((old, new)))
    config.set(b"hz", b"1000")
    assert calls == [(10, 500)]


def test_listener_failure_restores_old_value():
    config = Config()

    def refuse(old, new):
        raise ConfigSetError("ERR Unable to turn on AOF. Check server logs.")

    config.on_change("appendonly", refuse)
    assert set_error(config, "appendonly", "yes") == "ERR Unable to turn on AOF. Check server logs."
    assert config.appendonly is False


def test_listener_not_called_for_invalid_value():
    config = Config()
    calls = []
    config.on_change("timeout", lambda old, new: calls.append(new))
    set_error(config, "timeout", "-5")
    assert calls == []


def test_on_change_rejects_unknown_directive():
    with pytest.raises(ValueError):
        Config().on_change("no-such-thing", lambda old, new: None)


def test_set_dir_changes_directory():
    files = MemoryFiles(dirs=["d"])
    config = Config(files)
    config.set(b"dir", b"d")
    assert files.cwd == CWD + "/d"
    assert config.get(b"dir") == [b"dir", (CWD + "/d").encode()]


def test_set_dir_failure():
    config = Config(MemoryFiles())
    assert set_error(config, "dir", "missing") == "ERR Changing directory: No such file or directory"
    assert config.dir == CWD


def test_set_dir_without_a_file_system_records_the_name():
    config = Config()
    config.set(b"dir", b"d")
    assert config.get(b"dir") == [b"dir", b"d"]


def test_set_dir_with_listener_delegates_the_chdir():
    files = MemoryFiles(dirs=["elsewhere"])
    config = Config(files)
    calls = []
    config.on_change("dir", lambda old, new: calls.append((old, new)))
    config.set(b"dir", b"elsewhere")
    assert calls == [(CWD, "elsewhere")]
    assert files.cwd == CWD


def test_set_dir_listener_error_propagates():
    config = Config()

    def fail(old, new):
        raise ConfigSetError("ERR Changing directory: Permission denied")

    config.on_change("DIR", fail)
    assert set_error(config, "dir", "/root") == "ERR Changing directory: Permission denied"


# ---------------------------------------------------------------------------
# CONFIG REWRITE
# ---------------------------------------------------------------------------

def test_rewrite_without_config_file():
    config = Config()
    with pytest.raises(ConfigSetError) as info:
        config.rewrite()
    assert str(info.value) == "ERR The server is running without a config file"


def test_rewrite_keeps_comments_and_unmanaged_lines():
    files = MemoryFiles({"inc.conf": ""})
    original = ("# Disque config\n"
                "\n"
                "# the port\n"
                "port 7000\n"
                "include inc.conf\n"
                "rename-command DEBUG \"\"\n"
                "databases 4\n"
                "timeout 0\n")
    config = load_text(original, files=files)
    config.rewrite()
    assert files.text() == ("# Disque config\n"
                                "\n"
                                "# the port\n"
                                "port 7000\n"
                                "include inc.conf\n"
                                "rename-command DEBUG \"\"\n"
                                "databases 4\n"
                                "timeout 0\n"
                                f"{REWRITE_SIGNATURE}\n"
                                f'dir "{CWD}"\n')


def test_rewrite_replaces_lines_in_place():
    config = load_text("# top\nPORT 7000\n# middle\nmaxmemory 1gb\n# end\n")
    config.port = 7100
    config.set(b"maxmemory", b"3mb")
    assert config.rewrite_lines() == ["# top", "port 7100", "# middle", "maxmemory 3mb", "# end",
                                      REWRITE_SIGNATURE, f'dir "{CWD}"']


def test_rewrite_blanks_duplicates_and_collapses_empty_lines():
    config = load_text("hz 20\n\nhz 30\n\n\n\nhz 40\n# tail\n")
    config.set(b"hz", b"50")
    assert config.rewrite_lines() == ["hz 50", "", "# tail", REWRITE_SIGNATURE,
                                      f'dir "{CWD}"']


def test_rewrite_appends_non_defaults_once_after_signature():
    files = MemoryFiles()
    config = load_text("port 7000\n", files=files)
    config.set(b"cluster-node-timeout", b"3000")
    config.set(b"appendonly", b"yes")
    config.set(b"loglevel", b"debug")
    config.rewrite()
    lines = files.text().splitlines()
    assert lines == ["port 7000", REWRITE_SIGNATURE, "loglevel debug", f'dir "{CWD}"',
                     "appendonly yes", "cluster-node-timeout 3000"]
    config.set(b"hz", b"25")
    config.rewrite()
    lines = files.text().splitlines()
    assert lines.count(REWRITE_SIGNATURE) == 1
    assert lines[-1] == "hz 25"


def test_maxmemory_clients_in_the_file_get_and_rewrite():
    config = load_text("maxmemory-clients 30%\n")
    assert config.maxmemory_clients == (0, 30)
    assert config.get(b"maxmemory-clients") == [b"maxmemory-clients", b"30%"]
    config.set(b"maxmemory-clients", b"256mb")
    assert config.get(b"maxmemory-clients") == [b"maxmemory-clients", b"268435456"]
    assert "maxmemory-clients 256mb" in config.rewrite_lines()
    assert load_text("").get(b"maxmemory-clients") == [b"maxmemory-clients", b"100%"]
    with pytest.raises(ConfigError, match="maxmemory-clients must be a memory value, or a "
                       "percentage of maxmemory from 0% to 100%"):
        load_text("maxmemory-clients 150%\n")


def test_rewrite_does_not_write_defaults():
    config = load_text("")
    config.set(b"timeout", b"0")
    assert config.rewrite_lines() == [REWRITE_SIGNATURE, f'dir "{CWD}"']


def test_rewrite_keeps_present_lines_at_default():
    config = load_text("port 7000\nappendonly yes\n")
    config.port = 7711
    config.set(b"appendonly", b"no")
    assert config.rewrite_lines()[:2] == ["port 7711", "appendonly no"]


def test_rewrite_dir_is_always_written_and_replaces_old_line():
    config = load_text(f"dir {CWD}\nport 7000\n", files=MemoryFiles(dirs=["d"]))
    config.set(b"dir", b"d")
    assert config.rewrite_lines() == [f'dir "{CWD}/d"', "port 7000"]


def test_rewrite_strings_are_quoted():
    config = load_text("logfile \"\"\npidfile /run/x.pid\n")
    config.set(b"requirepass", b'pa ss"\n\xff')
    config.unixsocket = "/tmp/d.sock"
    config.appendfilename = "x.aof"
    config.cluster_config_file = "n 1.conf"
    config.syslog_ident = "id"
    lines = config.rewrite_lines()
    assert lines[:2] == ['logfile ""', 'pidfile "/run/x.pid"']
    assert 'requirepass "pa ss\\"\\n\\xff"' in lines
    assert 'unixsocket "/tmp/d.sock"' in lines
    assert 'appendfilename "x.aof"' in lines
    assert 'cluster-config-file "n 1.conf"' in lines
    assert 'syslog-ident "id"' in lines


def test_rewrite_removes_unset_optional_strings():
    config = load_text("requirepass old\nunixsocket /tmp/s\nbind 127.0.0.1\nport 1\n")
    config.set(b"requirepass", b"")
    config.unixsocket = ""
    config.bind = []
    # The three blanked lines collapse into one empty line.
    assert config.rewrite_lines() == ["", "port 1", REWRITE_SIGNATURE, f'dir "{CWD}"']


def test_rewrite_bind_written_when_set():
    config = load_text("", ["--bind", "127.0.0.1", "::1"])
    assert "bind 127.0.0.1 ::1" in config.rewrite_lines()


@pytest.mark.parametrize("value, text", [
    (1, "1"), (1000, "1000"), (1536, "1536"), (2048, "2kb"), (3 * MB, "3mb"), (GB, "1gb"),
    (5 * GB, "5gb"), (1025 * KB, "1025kb"), (1024 * MB + KB, "1048577kb"), (0, "0"),
])
def test_format_memory_uses_largest_exact_unit(value, text):
    assert format_memory(value) == text


def test_rewrite_memory_values():
    config = load_text("maxmemory 100mb\n")
    config.set(b"maxmemory", b"1")
    config.set(b"auto-aof-rewrite-min-size", b"2097152")
    config.set(b"client-output-buffer-limit", b"normal 1gb 3000 60")
    config.set(b"proto-max-bulk-len", b"2mb")
    lines = config.rewrite_lines()
    assert lines[0] == "maxmemory 1"
    assert "auto-aof-rewrite-min-size 2mb" in lines
    assert "client-output-buffer-limit normal 1gb 3000 60" in lines
    assert "proto-max-bulk-len 2mb" in lines


def test_rewrite_other_renderings():
    config = load_text("unixsocketperm 700\ntcp-keepalive 60\nsyslog-enabled yes\n")
    config.set(b"tcp-keepalive", b"yes")
    assert config.rewrite_lines()[:3] == ["unixsocketperm 700", "tcp-keepalive 300",
                                          "syslog-enabled yes"]


def test_rewrite_keeps_unparsable_lines_as_comments():
    files = MemoryFiles()
    config = load_text("port 1\n", files=files)
    files.files[CONF] = b'port 1\nrequirepass "broken\n'
    assert config.rewrite_lines()[:2] == ["port 1", '# ??? requirepass "broken']


def test_rewrite_keeps_unknown_directives():
    files = MemoryFiles()
    config = load_text("port 1\n", files=files)
    files.files[CONF] = b"port 1\nsave 900 1\nsave 300 10\n"
    assert config.rewrite_lines()[:3] == ["port 1", "save 900 1", "save 300 10"]


def test_rewrite_reuses_existing_signature():
    config = load_text(f"port 1\n{REWRITE_SIGNATURE}\nhz 20\n")
    config.set(b"timeout", b"5")
    assert config.rewrite_lines() == ["port 1", REWRITE_SIGNATURE, "hz 20", "timeout 5",
                                      f'dir "{CWD}"']


def test_rewrite_creates_missing_file():
    files = MemoryFiles()
    config = load_text("port 1\n", files=files)
    del files.files[CONF]
    config.rewrite()
    assert files.text().splitlines() == [REWRITE_SIGNATURE, "port 1", f'dir "{CWD}"']


def test_rewrite_io_error():
    config = Config(MemoryFiles())
    config.config_file = CWD + "/missing-dir/disque.conf"
    with pytest.raises(ConfigSetError) as info:
        config.rewrite()
    assert str(info.value) == "ERR Rewriting config file: No such file or directory"


def test_rewrite_read_error():
    config = Config(MemoryFiles(dirs=["conf.d"]))
    config.config_file = CWD + "/conf.d"
    with pytest.raises(ConfigSetError) as info:
        config.rewrite()
    assert str(info.value) == "ERR Rewriting config file: Is a directory"


def test_rewrite_without_a_file_system_fails():
    config = Config()
    config.config_file = CONF
    with pytest.raises(ConfigSetError) as info:
        config.rewrite()
    assert str(info.value) == "ERR Rewriting config file: Read-only file system"


def test_rewrite_is_idempotent():
    files = MemoryFiles()
    config = load_text("# c\nport 7000\nport 7001\n\n\nhz 20\n", files=files)
    config.set(b"maxmemory", b"5mb")
    config.rewrite()
    first = files.text()
    config.rewrite()
    assert files.text() == first


def reload(files: MemoryFiles) -> Config:
    """What a restart reads: CONF again, from the directory the process started in."""
    again = MemoryFiles(cwd=CWD)
    again.files, again.dirs = files.files, files.dirs
    return Config.load(again.files[CONF], [], config_file=CONF, files=again)


def test_rewrite_round_trip():
    files = MemoryFiles(dirs=["data"])
    config = load_text("# keep me\nport 7000\nhz 20\nhz 30\n", files=files)
    config.port = 7100
    config.bind = ["127.0.0.1", "::1"]
    config.tcp_backlog = 128
    config.unixsocket = "/tmp/d q.sock"
    config.unixsocketperm = 0o755
    config.daemonize = True
    config.pidfile = "/run/disque.pid"
    config.logfile = "disque.log"
    config.syslog_enabled = True
    config.syslog_ident = "dq"
    config.syslog_facility = "local3"
    config.appendfilename = "jobs.aof"
    config.no_appendfsync_on_rewrite = True
    config.cluster_config_file = "nodes-7100.conf"
    config.cluster_bus_port = 17100
    for name, value in [
        ("timeout", "30"), ("tcp-keepalive", "60"), ("supervised", "auto"),
        ("loglevel", "warning"), ("maxclients", "500"), ("maxmemory", "3mb"),
        ("maxmemory-policy", "noeviction"), ("maxmemory-samples", "7"),
        ("activerehashing", "no"), ("hz", "100"), ("appendonly", "yes"),
        ("appendfsync", "always"), ("auto-aof-rewrite-percentage", "50"),
        ("auto-aof-rewrite-min-size", "1000"), ("aof-rewrite-incremental-fsync", "no"),
        ("aof-load-truncated", "no"), ("aof-enqueue-jobs-once", "yes"),
        ("requirepass", 'p "w" \\ d'), ("cluster-node-timeout", "3000"),
        ("slowlog-log-slower-than", "0"), ("slowlog-max-len", "64"),
        ("latency-monitor-threshold", "5"), ("client-output-buffer-limit", "normal 2mb 1mb 10"),
        ("proto-max-bulk-len", "3mb"), ("dir", "data"),
    ]:
        config.set(name.encode(), value.encode())
    config.slowlog_log_slower_than = -1  # only reachable from a file, must survive too
    config.rewrite()

    reloaded = reload(files)
    expected = stored_values(config)
    expected["watchdog_period"] = 0  # runtime only, never written
    expected["databases"] = 16        # not managed by CONFIG REWRITE
    assert stored_values(reloaded) == expected
    assert reloaded.dir == CWD + "/data"
    text = files.text()
    assert text.startswith("# keep me\nport 7100\nhz 100\n")
    assert "\nhz 30\n" not in text


@settings(max_examples=50, deadline=None)
@given(password=st.binary(max_size=512), ident=st.text(max_size=40))
def test_rewrite_round_trip_arbitrary_strings(password, ident):
    files = MemoryFiles()
    config = load_text("requirepass old\n", files=files)
    config.set(b"requirepass", password)
    config.syslog_ident = ident
    config.rewrite()
    reloaded = reload(files)
    assert reloaded.requirepass.encode("utf-8", "surrogateescape") == password
    assert reloaded.syslog_ident == ident


@given(st.integers(min_value=0, max_value=2 ** 50))
def test_format_memory_round_trip(value):
    text = format_memory(value)
    assert parse_memory(text) == value
    number = int(re.match(r"[0-9]+", text).group())
    assert text == str(value) or number % 1024 != 0 or text.endswith("gb")


# ---------------------------------------------------------------------------
# The shipped conf/disque.conf
# ---------------------------------------------------------------------------

def test_shipped_config_loads_with_make_run_settings():
    config = load_text(SHIPPED_CONF.read_bytes())
    assert config.bind == ["127.0.0.1"]
    assert config.port == 7711
    assert config.appendonly is False
    assert config.logfile == ""
    assert config.daemonize is False
    assert config.supervised == "no"
    defaults = stored_values(Config())
    defaults["bind"] = ["127.0.0.1"]
    assert stored_values(config) == defaults


def test_shipped_config_documents_every_directive():
    lines = SHIPPED_CONF.read_text().splitlines()
    for directive in DIRECTIVES.values():
        if "F" not in directive.flags:  # runtime only: mentioned in a comment
            assert any(directive.name in line for line in lines), directive.name
            continue
        pattern = re.compile(rf"#?\s*{re.escape(directive.name)}\b")
        assert any(pattern.match(line) for line in lines), directive.name
    active = {line.split()[0] for line in lines if line and not line.startswith("#")}
    assert "dir" not in active
    for name in ("requirepass", "unixsocket", "include", "rename-command"):
        assert name not in active


def test_shipped_config_rewrite_only_adds_dir():
    files = MemoryFiles()
    config = load_text(SHIPPED_CONF.read_bytes(), files=files)
    config.rewrite()
    original = SHIPPED_CONF.read_text().splitlines()
    rewritten = files.text().splitlines()
    squeezed = [line for i, line in enumerate(original)
                if line or i == 0 or original[i - 1]]
    assert rewritten == squeezed + [REWRITE_SIGNATURE, f'dir "{CWD}"']
