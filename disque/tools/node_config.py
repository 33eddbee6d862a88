"""What each node of a ``disque-cluster`` is configured with, checked before
anything is written or started.

A node's ``disque.conf`` holds the base file's text (``--base-config``),
then the ``--conf`` directives, then the launcher's own lines, last so that
they win: a node's address, port, directory, files and daemon mode are the
launcher's to choose, and so are the ports each node needs one of its own
(``--metrics-port`` and ``--tls-port`` give the nodes BASE, BASE + 1, ...).
The text is loaded with the server's own parser, so a bad directive is
reported at once, and the launcher learns what the nodes will run with.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from disque.config import Config, ConfigError
from disque.config.users import DEFAULT_USER
from disque.config.values import quoted
from disque.protocol.argsplit import UnbalancedQuotes, split_args
from disque.tools.node_files import AOF_NAME, HOST, NODES_CONF_NAME, NodeFiles

METRICS_PORT: Final = "metrics-port"
TLS_PORT: Final = "tls-port"
# The directives the launcher writes for each node, and the option that
# chooses each one ("" when the launcher alone does).
LAUNCHER_DIRECTIVES: Final = {
    "bind": "", "port": "--port", "cluster-bus-port": "", "dir": "--dir",
    "daemonize": "", "pidfile": "", "logfile": "", "appendfilename": "",
    "cluster-config-file": "", METRICS_PORT: "--metrics-port", TLS_PORT: "--tls-port",
}
# What disque-cluster sends its nodes: renamed, it could not run them.
LAUNCHER_COMMANDS: Final = frozenset(("ping", "hello", "info", "cluster", "config", "qscan",
                                      "qlen", "shutdown"))


class ConfigProblem(Exception):
    """The nodes' configuration cannot be used; the message says why."""


def _directive_name(line: str) -> str:
    """The directive a config line sets ("" for a blank line or a comment)."""
    try:
        words = split_args(line.encode(errors="surrogateescape"))
    except UnbalancedQuotes:
        return ""   # the loader's check reports it, with the line
    if not words or words[0].startswith(b"#"):
        return ""
    return words[0].decode(errors="replace").lower()


class StartFiles:
    """The file system a node's config meets when the node starts in its own
    directory: files are read from there, and ``dir`` is recorded, not entered
    (the node's own directory is made only once the check passed)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.cwd = directory

    def read_file(self, path: str) -> bytes:
        """The file an ``include`` names, read from the current directory."""
        return (self.cwd / path).read_bytes()

    def replace_file(self, path: str, data: bytes) -> None:
        """Never asked at load."""
        raise OSError(errno.EROFS, "Read-only file system", path)

    def change_dir(self, path: str) -> None:
        """Record ``dir``; a directory other than the node's own must exist."""
        target = self.cwd / path
        if target != self.directory and not target.is_dir():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        self.cwd = target

    def working_dir(self) -> str:
        """The directory recorded last."""
        return str(self.cwd)


@dataclass(frozen=True)
class NodeConfig:
    """What ``create`` writes into every node's config file."""

    base: Path | None   # the base config file, absolute
    base_text: str
    directives: tuple[str, ...]   # --conf lines, in order
    metrics_base: int   # node i's metrics-port is metrics_base + i (0: none)
    tls_base: int       # node i's tls-port is tls_base + i (0: none)

    @classmethod
    def build(cls, base: Path | None, directives: Sequence[str], metrics_base: int,
              tls_base: int) -> NodeConfig:
        """Read the base file and check each ``--conf`` line; ConfigProblem says why not."""
        for line in directives:
            if "\n" in line or "\r" in line:
                raise ConfigProblem("--conf %r: one directive per --conf" % line)
            name = _directive_name(line)
            if name in LAUNCHER_DIRECTIVES:
                option = LAUNCHER_DIRECTIVES[name]
                raise ConfigProblem("--conf %r: disque-cluster sets %s for each node%s"
                                    % (line, name, " (give %s)" % option if option else ""))
        text = ""
        if base is not None:
            base = base.resolve()
            try:
                text = base.read_text(errors="surrogateescape")
            except OSError as exc:
                raise ConfigProblem("cannot read the base config %s: %s"
                                    % (base, exc.strerror)) from None
        return cls(base, text, tuple(directives), metrics_base, tls_base)

    def listener_ports(self, index: int) -> list[tuple[int, str]]:
        """Node ``index``'s ports besides its client and bus ports, with their kinds."""
        return [(base + index, kind) for base, kind in ((self.metrics_base, "metrics"),
                                                        (self.tls_base, "TLS")) if base]

    def text(self, node: NodeFiles, index: int, size: int) -> str:
        """The node's own config file."""
        lines = ["# Written by disque-cluster create: node %d of %d of a local cluster."
                 % (index + 1, size),
                 "# This file is the node's own: CONFIG REWRITE saves here."]
        if self.base is not None:
            lines += ["", "# From %s:" % self.base, self.base_text.rstrip("\n")]
        if self.directives:
            lines += ["", "# From --conf:", *self.directives]
        lines += ["", "# disque-cluster's lines for this node, last so that they win:",
                  "bind %s" % HOST,
                  "port %d" % node.port,
                  "dir %s" % quoted(str(node.directory)),
                  "daemonize yes",
                  "pidfile %s" % quoted(str(node.pidfile)),
                  "logfile %s" % quoted(str(node.logfile)),
                  "appendfilename %s" % AOF_NAME,
                  "cluster-config-file %s" % NODES_CONF_NAME]
        for option, base in ((METRICS_PORT, self.metrics_base), (TLS_PORT, self.tls_base)):
            if base:
                lines.append("%s %d" % (option, base + index))
        return "\n".join(lines) + "\n"

    def check(self, node: NodeFiles, text: str) -> Config:
        """Load ``text`` as the node will; ConfigProblem when it fails or the
        launcher could not run such a node."""
        try:
            config = Config.load(text.encode(errors="surrogateescape"),
                                 files=StartFiles(node.directory))
        except ConfigError as exc:
            raise ConfigProblem("node %d's config does not load:%s"
                                % (node.port, str(exc).rstrip())) from None
        for name, base, value in ((METRICS_PORT, self.metrics_base, config.metrics_port),
                                  (TLS_PORT, self.tls_base, config.tls_port)):
            if value and not base:
                raise ConfigProblem(
                    "%s sets %s %d, which the nodes cannot share: give %s BASE (the nodes "
                    "get BASE, BASE + 1, ...)" % (self.base or "an included file", name, value,
                                                  LAUNCHER_DIRECTIVES[name]))
        default = config.users.get(DEFAULT_USER)
        if config.requirepass or default is None or not (default.unrestricted()
                                                         and default.nopass):
            raise ConfigProblem("the nodes' default user would need a password or lack "
                                "commands (requirepass or a 'user default' line), and "
                                "disque-cluster talks to its nodes as that user")
        renamed = sorted(old.lower() for old, _ in config.rename_commands
                         if old.lower() in LAUNCHER_COMMANDS)
        if renamed:
            raise ConfigProblem("rename-command of %s: disque-cluster sends these to its "
                                "nodes" % ", ".join(renamed))
        return config


def dashboard_url(metrics_port: int, tls_port: int) -> str:
    """Where a node's dashboard answers: its metrics port, HTTPS under tls-port."""
    return "%s://%s:%d/" % ("https" if tls_port else "http", HOST, metrics_port)
