"""The AOF as the server uses it: startup load, runtime switches, shutdown.

spec: persistence.md §4-§7. Glue between ``AofWriter``, ``AofLoader``, the
config (``appendonly`` and friends) and the server's commands.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Awaitable, Callable

from disque.aof.writer import STATE_OFF, STATE_WAIT_REWRITE, AofWriter
from disque.jobs.journal import NULL_JOURNAL
from disque.config import ConfigSetError
from disque.protocol.resp import error, status

if TYPE_CHECKING:
    from disque.aof.loader import AofLoader
    from disque.config import Config
    from disque.state.nodestate import NodeState

LOAD_SLICE_RECORDS = 20000
BGREWRITE_STARTED = status(b"Background append only file rewriting started")
BGREWRITE_RUNNING = error("ERR Background append only file rewriting already in progress")
ENABLE_FAILED = "ERR Unable to turn on AOF. Check server logs."


class AofStartupError(Exception):
    """The AOF cannot be loaded: the server must not start."""


class AofService:
    """Owns the node's AOF writer and loader."""

    def __init__(self, node: NodeState, config: Config, loop: asyncio.AbstractEventLoop,
                 logger: logging.Logger) -> None:
        self.node = node
        self.config = config
        self.logger = logger
        self.writer = AofWriter(node, config, loop, logger)
        self.loader: AofLoader | None = None
        self.loading_started = 0.0
        config.on_change("appendonly", self._appendonly_changed)

    # ------------------------------------------------------------ startup

    async def load_at_startup(self, progress: Callable[[], None] | None = None,
                              loading: Callable[[], Awaitable[None]] | None = None) -> None:
        """Load the AOF if ``appendonly`` or ``aof-enqueue-jobs-once`` asks for it;
        ``loading`` is awaited when there is a file to load, before it is read,
        and ``progress`` is called as the load begins and after each slice."""
        config = self.config
        path = config.appendfilename
        enqueue_once = config.aof_enqueue_jobs_once
        if not config.appendonly and not enqueue_once:
            return
        if not os.path.exists(path):
            if not config.appendonly:
                raise AofStartupError("aof-enqueue-jobs-once is set but the append only file %s "
                                      "does not exist" % path)
            self.writer.open_existing()  # creates it empty
            return
        # Imported only when there is a file to load: the loader brings the
        # record parser and the restore code, which no other start needs.
        from disque.aof.loader import AofLoadError
        if loading is not None:
            await loading()
        started = time.monotonic()
        try:
            marked = await self._load(path, enqueue_once, progress)
        except (AofLoadError, OSError) as exc:
            raise AofStartupError(str(exc)) from None
        self.logger.info("DB loaded from append only file: %.3f seconds (%d jobs)",
                         time.monotonic() - started, len(self.node.jobs))
        if config.appendonly:
            self.writer.open_existing(marked)
        if enqueue_once:
            config.aof_enqueue_jobs_once = False
            if config.config_file:
                try:
                    config.rewrite()
                except ConfigSetError as exc:
                    self.logger.warning("Could not reset aof-enqueue-jobs-once in the config "
                                        "file: %s", exc)

    async def _load(self, path: str, enqueue_once: bool,
                    progress: Callable[[], None] | None) -> bool:
        """Load the file; whether it ends under a format marker (checksums required)."""
        from disque.aof.loader import AofLoader
        node = self.node
        node.loading = True
        self.loading_started = time.time()
        loader = self.loader = AofLoader(node, path, enqueue_once=enqueue_once,
                                         truncate_allowed=self.config.aof_load_truncated,
                                         logger=self.logger)
        try:
            while True:
                if progress is not None:
                    progress()
                node.read_clock()
                if loader.run(LOAD_SLICE_RECORDS):
                    return loader.checksums_required
                await asyncio.sleep(0)
        finally:
            loader.close()
            node.loading = False
            self.loader = None

    # -------------------------------------------------------- runtime use

    def _appendonly_changed(self, old: bool, new: bool) -> None:
        if new and not old:
            if not self.writer.enable():
                raise ConfigSetError(ENABLE_FAILED)
        elif old and not new:
            self.writer.disable()

    def bgrewriteaof(self) -> bytes:
        """BGREWRITEAOF reply."""
        return BGREWRITE_STARTED if self.writer.start_rewrite() else BGREWRITE_RUNNING

    def reload(self) -> bool:
        """DEBUG LOADAOF: write what is pending, drop the data, load the file again."""
        from disque.aof.loader import AofLoader, AofLoadError
        writer = self.writer
        node = self.node
        writer.flush()
        path = self.config.appendfilename
        if not os.path.exists(path):
            return False
        journal = node.journal
        node.set_journal(NULL_JOURNAL)  # the flush below must not be logged (spec: persistence.md §7)
        node.flush_all()
        loader = AofLoader(node, path, enqueue_once=False, truncate_allowed=True,
                           logger=self.logger)
        node.loading = True
        try:
            while not loader.run(1 << 30):
                pass
        except AofLoadError as exc:
            self.logger.warning("DEBUG LOADAOF failed: %s", exc)
            return False
        finally:
            loader.close()
            node.loading = False
            node.set_journal(journal)
        return True

    def shutdown(self, rewrite: bool) -> bool:
        """Make the AOF durable before exiting; False if that failed."""
        writer = self.writer
        if writer.state == STATE_WAIT_REWRITE:
            # commands.md SHUTDOWN: the initial AOF is not complete yet, exiting
            # now would leave a file without the dataset.
            self.logger.warning("Writing initial AOF, can't exit.")
            return False
        writer.cancel_rewrite()
        try:
            if rewrite:
                writer.rewrite_now()
            if writer.state != STATE_OFF:
                writer.sync_and_close()
        except OSError as exc:
            self.logger.warning("Error trying to save the AOF before shutdown: %s", exc)
            return False
        return True

    def cron(self) -> None:
        """Periodic fsync, write retries, automatic rewrites."""
        self.writer.cron()

    def info_fields(self) -> list[tuple[str, object]]:
        """INFO Persistence."""
        loader = self.loader
        fields = [("loading", int(loader is not None))] + self.writer.info_fields()
        if loader is not None:
            elapsed = max(time.time() - self.loading_started, 1e-3)
            total = max(loader.total_bytes, 1)
            done = loader.loaded_bytes
            rate = done / elapsed
            fields += [("loading_start_time", int(self.loading_started)),
                       ("loading_total_bytes", loader.total_bytes),
                       ("loading_loaded_bytes", done),
                       ("loading_loaded_perc", "%.2f" % (done * 100 / total)),
                       ("loading_eta_seconds", int((total - done) / rate) if rate else 1)]
        return fields
