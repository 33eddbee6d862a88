"""``Config``: the server's settings, one attribute per directive.

Nothing here opens sockets or files: the server reacts to runtime changes
through ``Config.on_change``, and the file reading, directory changes and
file writes go through the ``FileSystem`` the Config is given.
"""

from __future__ import annotations

from collections.abc import Iterable

from disque.config.errors import ConfigError
from disque.config.filesystem import FileSystem, NoFileSystem
from disque.config.loader import Loader, override_lines, split_lines
from disque.config.messages import ACLFILE_AND_USERS
from disque.config.rewrite import rewrite_file, rewrite_lines
from disque.config.runtime import Listener, get_values, set_value
from disque.config.table import DIRECTIVE_TABLE, DIRECTIVES
from disque.config.users import DEFAULT_USER, User
from disque.config.values import ascii_lower


class Config:
    """The server configuration: one attribute per directive ('-' -> '_')."""

    port: int
    bind: list[str]
    tcp_backlog: int
    unixsocket: str
    unixsocketperm: int
    timeout: int
    tcp_keepalive: int
    daemonize: bool
    pidfile: str
    supervised: str
    loglevel: str
    logfile: str
    syslog_enabled: bool
    syslog_ident: str
    syslog_facility: str
    databases: int
    maxclients: int
    maxmemory: int
    maxmemory_policy: str
    maxmemory_samples: int
    activerehashing: bool
    hz: int
    appendonly: bool
    appendfilename: str
    appendfsync: str
    no_appendfsync_on_rewrite: bool
    auto_aof_rewrite_percentage: int
    auto_aof_rewrite_min_size: int
    aof_rewrite_incremental_fsync: bool
    aof_load_truncated: bool
    aof_enqueue_jobs_once: bool
    requirepass: str
    rename_commands: list[tuple[str, str]]
    cluster_config_file: str
    cluster_node_timeout: int
    cluster_bus_port: int
    slowlog_log_slower_than: int
    slowlog_max_len: int
    latency_monitor_threshold: int
    client_output_buffer_limit: tuple[int, int, int]
    watchdog_period: int
    proto_max_bulk_len: int
    maxdeliver_default: int
    dedup_window: int
    schedule_max_body: int
    metrics_port: int
    metrics_max_queues: int
    dashboard_hosts: list[str]
    protected_mode: bool
    enable_debug_command: str
    enable_protected_configs: str
    users: dict[bytes, User]
    tls_port: int
    tls_cert_file: str
    tls_key_file: str
    tls_key_file_pass: str
    tls_ca_cert_file: str
    tls_ca_cert_dir: str
    tls_auth_clients: str
    tls_cluster: bool
    tls_protocols: str
    tls_ciphers: str
    tls_ciphersuites: str
    tls_prefer_server_ciphers: bool
    client_query_buffer_limit: int
    unauthenticated_query_buffer_limit: int
    maxmemory_clients: tuple[int, int]  # (bytes, percent of maxmemory): one is 0
    getjob_max_queues: int
    client_request_timeout: int
    monitor_output_buffer_limit: tuple[int, int, int]
    cluster_secret: str
    cluster_secret_old: str
    cluster_secret_file: str
    aclfile: str
    config_file: str | None
    files: FileSystem

    def __init__(self, files: FileSystem | None = None) -> None:
        for directive in DIRECTIVE_TABLE:
            if directive.stored:
                default = directive.default
                # A list default (bind) is copied: no two Configs share one.
                setattr(self, directive.attr, list(default) if type(default) is list else default)
        self.rename_commands = []
        self.users = {DEFAULT_USER: User.default()}
        self.config_file = None
        self.files = files if files is not None else NoFileSystem()
        self._listeners: dict[str, Listener] = {}

    @property
    def dir(self) -> str:
        """The working directory (``dir`` is the process cwd, not a stored value)."""
        return self.files.working_dir()

    @classmethod
    def load(cls, text: bytes | None, overrides: Iterable[str | bytes] = (), *,
             config_file: str | None = None, files: FileSystem | None = None,
             commands: Iterable[str] | None = None) -> Config:
        """Apply a config file's ``text`` (if any) then the ``--name args...``
        overrides; raise ConfigError.

        ``config_file`` is the file's absolute path, where CONFIG REWRITE
        writes; ``files`` serves ``include``, ``dir`` and, later, CONFIG SET
        dir and CONFIG REWRITE. ``commands``, when given, is the command
        table used to validate rename-command lines (names are matched
        case-insensitively).
        """
        config = cls(files)
        config.config_file = config_file
        lines = split_lines(text) if text is not None else []
        lines.extend(override_lines(overrides))
        table = None if commands is None else {ascii_lower(name) for name in commands}
        Loader(config, DIRECTIVES, table, config.files).run(lines)
        if config.aclfile and _has_users(config.users):
            raise ConfigError(ACLFILE_AND_USERS)
        return config

    def get(self, pattern: bytes) -> list[bytes]:
        """CONFIG GET: [name, value, ...] for every visible parameter matching the glob."""
        return get_values(self, pattern)

    def set(self, name: bytes, value: bytes) -> None:
        """CONFIG SET: validate, store, notify the listener; raise ConfigSetError."""
        set_value(self, self._listeners, name, value)

    def on_change(self, name: str, listener: Listener) -> None:
        """Register ``listener(old, new)`` for CONFIG SET of directive ``name`` (replaces any)."""
        key = name.lower()
        if key not in DIRECTIVES:
            raise ValueError(f"unknown config directive {name!r}")
        self._listeners[key] = listener

    def rewrite_lines(self) -> list[str]:
        """The lines CONFIG REWRITE would write (without newlines); may raise OSError
        (reading the current file)."""
        return rewrite_lines(self)

    def rewrite(self) -> None:
        """CONFIG REWRITE: update the config file in place, keeping comments; raise ConfigSetError."""
        rewrite_file(self)


def _has_users(users: dict[bytes, User]) -> bool:
    """``user`` lines changed the users: a named user, or the default user's rules."""
    return len(users) > 1 or users[DEFAULT_USER].describe() != User.default().describe()
