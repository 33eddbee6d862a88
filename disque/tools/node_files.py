"""Where the nodes of a ``disque-cluster`` keep their files: ``DIR/<port>/``.

Each node has its own ``disque.conf`` (so a CONFIG REWRITE edits that
node's file, never a shared one), ``nodes.conf``, ``disque.log``,
``disque.pid`` and, with ``appendonly``, ``disque.aof``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

HOST: Final = "127.0.0.1"
CONFIG_NAME: Final = "disque.conf"
PID_NAME: Final = "disque.pid"
LOG_NAME: Final = "disque.log"
AOF_NAME: Final = "disque.aof"
NODES_CONF_NAME: Final = "nodes.conf"
LOG_TAIL_LINES: Final = 15


@dataclass(frozen=True)
class NodeFiles:
    """Where one node's files live: ``DIR/<port>/``."""

    port: int
    directory: Path

    @property
    def config(self) -> Path:
        return self.directory / CONFIG_NAME

    @property
    def pidfile(self) -> Path:
        return self.directory / PID_NAME

    @property
    def logfile(self) -> Path:
        return self.directory / LOG_NAME

    @property
    def aof(self) -> Path:
        return self.directory / AOF_NAME

    def log_tail(self) -> str:
        """The last lines of the node's log, indented for an error message."""
        try:
            lines = self.logfile.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        except OSError:
            return "    (no log at %s)" % self.logfile
        return "\n".join("    " + line for line in lines) or "    (empty log %s)" % self.logfile

    def pidfile_pid(self) -> int | None:
        """The pid the node's pid file holds (None without a file or while it is written)."""
        try:
            return int(self.pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


def cluster_nodes(root: Path) -> list[NodeFiles]:
    """The nodes laid out under ``root`` by create: ``<port>/disque.conf``, by port.

    Their paths are absolute, as create's: a node starts in its own
    directory, where a path relative to the caller's would not be found."""
    if not root.is_dir():
        return []
    nodes = [NodeFiles(int(entry.name), entry) for entry in root.resolve().iterdir()
             if entry.name.isdigit() and (entry / CONFIG_NAME).is_file()]
    return sorted(nodes, key=lambda node: node.port)
