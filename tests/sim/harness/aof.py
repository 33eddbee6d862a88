"""The append-only file of a simulated node: the real writer and loader.

A simulated machine with ``appendonly`` on keeps its AOF in a file of the
simulation's temporary directory, written by the server's own
``AofWriter`` and read back at restart by its own ``AofLoader``. The
real server writes the records of a loop turn before any reply or bus
frame of that turn leaves the process; the simulation flushes after
every event a node handles (``Sim.poke``), and a crash happens between
events, so a crash here is a SIGKILL of the process: everything the node
answered or sent is in the file (the page cache survives a process kill;
``appendfsync`` only matters when the machine loses power, which the
simulation does not model). Files are written with ``appendfsync no``:
fsync costs time and changes nothing for a process crash.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import cast

from disque.aof.loader import AofLoader
from disque.aof.writer import AofWriter
from disque.config import Config
from disque.jobs.job import ACTIVE, QUEUED
from disque.node import Node

_logger = logging.getLogger("disque.sim.aof")
_LOAD_ALL = 1 << 30


class SimAof:
    """One machine's AOF file, across the incarnations of its process."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.writer: AofWriter | None = None
        self.loads = 0
        self.jobs_loaded = 0  # by the last load
        # Jobs whose last record is a LOADJOB when the process died: what a
        # restart brings back (read by the ledger while the machine is down).
        self.live_at_crash: frozenset[bytes] = frozenset()

    def start(self, node: Node, config: Config) -> None:
        """The process starts: load the file if there is one, then append to it."""
        config.appendonly = True
        config.appendfilename = self.path
        config.appendfsync = "no"
        config.aof_load_truncated = True
        marked = False  # the file begins with the format marker (checksummed records)
        if os.path.exists(self.path):
            node.state.loading = True
            loader = AofLoader(node.state, self.path, enqueue_once=False, truncate_allowed=True,
                               logger=_logger)
            try:
                node.state.read_clock()
                while not loader.run(_LOAD_ALL):
                    pass
            finally:
                loader.close()
                node.state.loading = False
            self.loads += 1
            self.jobs_loaded = loader.jobs_loaded
            marked = loader.checksums_required
        # No event loop: the simulation never rewrites (the writer's only use of it).
        writer = AofWriter(node.state, config, cast(asyncio.AbstractEventLoop, None), _logger)
        writer.open_existing(marked)  # as AofService: the marker once, at the file's start
        self.writer = writer

    def flush(self) -> None:
        """Write the records of the event just handled (before its output "leaves")."""
        writer = self.writer
        if writer is not None and writer.pending:
            writer.flush()

    def crash(self, node: Node) -> None:
        """The process was killed: what it wrote stays, its file descriptor goes."""
        writer = self.writer
        if writer is None:
            return
        self.live_at_crash = frozenset(job_id for job_id, job in node.state.jobs.items()
                                       if job.state == ACTIVE or job.state == QUEUED)
        if writer.fd >= 0:
            os.close(writer.fd)
            writer.fd = -1
        writer.fsync_pool.shutdown(wait=False)
        self.writer = None

    def wipe(self) -> None:
        """The disk is lost too (a replaced machine): the next start is empty."""
        self.live_at_crash = frozenset()
        if os.path.exists(self.path):
            os.unlink(self.path)
