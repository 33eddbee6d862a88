"""nodes.conf, the process's side of it: locked by one node at a time,
read at start and rewritten atomically. Its text is the core's
(``cluster.nodesconf``). Versions before the tables file kept the
schedules and the queues' delivery limits there too: they are read at
start, to move them (``server.Server``), and never written back."""

from __future__ import annotations

import fcntl
import os
import time
from typing import TYPE_CHECKING

from disque.cluster import nodesconf
from disque.context.log import logger
from disque.process.osprocess import atomic_write
from disque.process.startup import StartupError
from disque.queues import ratelimit

if TYPE_CHECKING:
    from disque.cluster.membership import ClusterNode
    from disque.cluster.schedulerecord import Schedule
    from disque.state.nodestate import NodeState

IN_USE = ("Sorry, the cluster configuration file %s is already used by a different Disque "
          "node. Please make sure that different nodes use different cluster configuration "
          "files.")


class ClusterConfigFile:
    """One node's nodes.conf and the lock that keeps a second node off it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock_fd = -1

    def lock_and_read(self) -> tuple[list[ClusterNode], list[Schedule],
                                     list[tuple[bytes, int, int]]]:
        """Take the file for this process, then read its nodes, and the
        schedules and delivery limits an older version left in it (none when
        it does not exist yet); raise StartupError."""
        self.lock_fd = os.open(self.path + ".lock", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise StartupError(IN_USE % self.path) from None
        try:
            with open(self.path) as f:
                text = f.read()
        except FileNotFoundError:
            return [], [], []
        except OSError as exc:
            raise StartupError("Can't read the cluster config file %s: %s"
                               % (self.path, exc)) from None
        try:
            return (nodesconf.parse(text, time.time_ns() // 1_000_000),
                    nodesconf.parse_schedules(text), ratelimit.parse_conf(text))
        except (nodesconf.NodesConfError, ValueError) as exc:
            raise StartupError(str(exc)) from None

    def save(self, state: NodeState) -> str | None:
        """Rewrite the file from the node's state; the error text on failure."""
        try:
            atomic_write(self.path, nodesconf.render(state.membership))
        except OSError as exc:
            logger.warning("Could not save the cluster config file: %s", exc)
            return exc.strerror or str(exc)
        return None

    def release(self) -> None:
        """Let the file go (a restart re-executes the process, which locks it again)."""
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1
