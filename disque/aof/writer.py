"""The append-only file writer: records, fsync policies, rewrites.

spec: persistence.md §2-§4, §6. Records produced while a command (or bus
message) is processed are buffered and written with one ``write`` before
any reply of that event-loop turn leaves the process, so a node killed
right after answering still has them in the page cache. A new job's
LOADJOB record is built then too, with the turn's others (see
``format.append_loadjobs``), or earlier when another record must follow
it. ``appendfsync always`` fsyncs before replying, ``everysec`` fsyncs in
a worker thread once a second, ``no`` leaves it to the OS.

A rewrite does not fork: the live jobs are serialised a slice at a time
from the event loop through the job scan index (every job present for
the whole rewrite is visited), while records produced meanwhile are kept
in a diff buffer appended at the end; duplicates this creates are
harmless because loading ignores an already-known job ID.

Every file the writer starts (a new AOF, a rewrite) begins with the format
marker, so its records' checksums are required when it is loaded; a file
of an earlier version gets the marker appended once, before the first
record this version writes to it (docs/aof-format.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from time import perf_counter_ns  # fsync durations (tests fake time.monotonic, not this)
from typing import TYPE_CHECKING

from disque.jobs.records import FILE_MARKER, append_loadjobs, deljob_record
from disque.jobs.journal import NULL_JOURNAL
from disque.jobs.job import ACTIVE, QUEUED, Job
from disque.context.stats import LatencyHistogram

if TYPE_CHECKING:
    from disque.config import Config
    from disque.state.nodestate import NodeState

STATE_OFF = "off"
STATE_ON = "on"
STATE_WAIT_REWRITE = "wait-rewrite"

REWRITE_SLICE_JOBS = 2000
REWRITE_SLICE_SECONDS = 0.005
WRITE_RETRY_MS = 1000
INCREMENTAL_FSYNC_BYTES = 32 * 1024 * 1024
# Upper bounds (µs) of the buckets of the fsyncs' durations (the metrics).
FSYNC_BUCKETS_US = (100, 250, 500, 1000, 2500, 5000, 10_000, 25_000, 50_000, 100_000,
                    250_000, 500_000, 1_000_000, 2_500_000)


def _open_append(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _stored(jobs: Iterable[Job]) -> list[Job]:
    """The jobs a rewrite writes: the active and queued ones."""
    return [job for job in jobs if job.state == ACTIVE or job.state == QUEUED]


def _write_prefix(fd: int, data: bytearray) -> tuple[int, OSError | None]:
    """Write as much of ``data`` as possible: (bytes written, the error that stopped it)."""
    done = 0
    with memoryview(data) as view:  # every view released, so ``data`` can be resized
        try:
            while done < len(view):
                with view[done:] as rest:
                    done += os.write(fd, rest)
        except OSError as exc:
            return done, exc
    return done, None


class AofWriter:
    """The node's journal while appendonly is on, and the file behind it."""

    def __init__(self, node: NodeState, config: Config, loop: asyncio.AbstractEventLoop,
                 logger: logging.Logger) -> None:
        self.node = node
        self.config = config
        self.loop = loop
        self.logger = logger
        self.state = STATE_OFF
        self.fd = -1
        self.buffer = bytearray()
        self.new_jobs: list[Job] = []  # created since the last flush, records not built yet
        self.diff: bytearray | None = None  # records made during a background rewrite
        self.rewrite_task: asyncio.Task[None] | None = None
        self.rewrite_started = 0.0
        self.last_rewrite_seconds = -1
        self.last_bgrewrite_ok = True
        self.rewrite_scheduled = False
        self.current_size = 0
        self.base_size = 0
        self.write_error: str | None = None
        self.last_write_retry = 0
        self.fsync_pool = ThreadPoolExecutor(1, thread_name_prefix="aof-fsync")
        self.fsync_future: Future[None] | None = None  # the last fsync sent to its thread
        self.fsync_pending_bytes = 0
        self.last_fsync = time.monotonic()
        self.delayed_fsync = 0
        self.fsync_latency = LatencyHistogram(FSYNC_BUCKETS_US)  # appendfsync always/everysec

    @property
    def path(self) -> str:
        return self.config.appendfilename

    @property
    def pending(self) -> bool:
        """Records wait to be written."""
        return bool(self.buffer or self.new_jobs)

    # ---------------------------------------------------- the journal

    def job_stored(self, job: Job) -> None:
        """A job now lives on this node (once per ADDJOB, so all it costs
        here is a list append: the record is built at the next flush)."""
        self.new_jobs.append(job)

    def job_removed(self, job: Job, reason: bytes) -> None:
        """A job left this node."""
        self._append(deljob_record(job, self.node.now, reason))

    def _record_new_jobs(self) -> None:
        """Build the LOADJOB records of the jobs created since the last call."""
        jobs = self.new_jobs
        if not jobs:
            return
        if self.state == STATE_ON:
            buffer = self.buffer
            start = len(buffer)
            append_loadjobs(buffer, jobs, self.node.now)
            if self.diff is not None:
                self.diff += buffer[start:]
        elif self.diff is not None:
            append_loadjobs(self.diff, jobs, self.node.now)
        jobs.clear()

    def _append(self, record: bytes) -> None:
        self._record_new_jobs()  # their LOADJOBs come first: this may be one's DELJOB
        if self.state == STATE_ON:
            self.buffer += record
        if self.diff is not None:
            self.diff += record

    # ----------------------------------------------------------- the file

    def open_existing(self, marked: bool = False) -> None:
        """Start appending to the AOF (after it was loaded or created empty).

        ``marked``: the load read a format marker, so checksums are already
        required; otherwise the marker goes first (an empty file, or one an
        earlier version wrote).
        """
        self.fd = _open_append(self.path)
        if not marked:
            _write_all(self.fd, FILE_MARKER)
        self.current_size = self.base_size = os.fstat(self.fd).st_size
        self.state = STATE_ON
        self.node.set_journal(self)

    def flush(self) -> None:
        """Write buffered records; fsync now under ``appendfsync always``."""
        if self._write_buffer() and self._always():
            self.fsync_pending_bytes = 0
            self._fsync_always(self.fd)

    def flush_then(self, done: Callable[[], None]) -> None:
        """``flush`` between the steps of a long command (QPURGE): under
        ``appendfsync always`` the fsync runs in the fsync thread while the
        loop serves other clients, and ``done`` is called on the loop once
        the records are on disk; at once otherwise."""
        if self._write_buffer() and self._always():
            self.fsync_pending_bytes = 0
            loop = self.loop
            # Kept where closing the file waits for it (``_wait_fsync``).
            future = self.fsync_future = self.fsync_pool.submit(self._fsync_always, self.fd)
            future.add_done_callback(lambda _: _call_on_loop(loop, done))
        else:
            done()

    def _always(self) -> bool:
        return self.config.appendfsync == "always" and not self._fsync_suppressed()

    def _write_buffer(self) -> bool:
        """Write the buffered records; True when something was written and
        nothing failed."""
        self._record_new_jobs()
        if not self.buffer or self.fd < 0:
            return False
        written, exc = _write_prefix(self.fd, self.buffer)
        if written:
            # spec §3: only the unwritten part stays buffered (a short write
            # before the error must not be written twice).
            del self.buffer[:written]
            self.current_size += written
            self.fsync_pending_bytes += written
        if exc is not None:
            self._write_failed(exc)
            return False
        if self.write_error is not None:
            self.logger.warning("AOF write error looks solved, Disque can write again.")
            self.write_error = None
            self.node.aof_error = None
        return True

    def _fsync_always(self, fd: int) -> None:
        """appendfsync always's fsync (on the loop, or in the fsync thread):
        one that fails ends the process, as a reply would lie otherwise."""
        start = perf_counter_ns()
        try:
            os.fdatasync(fd)
        except OSError as fsync_error:
            self.logger.warning("Can't fsync the AOF with appendfsync always: %s. Exiting.",
                                fsync_error.strerror)
            os._exit(1)
        self.fsync_latency.observe((perf_counter_ns() - start) // 1000)

    def _write_failed(self, exc: OSError) -> None:
        reason = exc.strerror or str(exc)
        if self.config.appendfsync == "always":
            self.logger.warning("Can't write the AOF with appendfsync always: %s. Exiting.",
                                reason)
            os._exit(1)
        if self.write_error is None:
            self.logger.warning("Error writing to the AOF file: %s", reason)
        self.write_error = reason
        self.node.aof_error = reason

    def _fsync_suppressed(self) -> bool:
        return self.config.no_appendfsync_on_rewrite and self.rewrite_task is not None

    def cron(self) -> None:
        """Every server cron tick: write records no reply carried out (a client
        under CLIENT REPLY OFF, a copy from a peer that wants no answer), retry
        failed writes, fsync everysec, auto rewrite."""
        now_ms = self.node.now
        if self.write_error is not None:
            if now_ms - self.last_write_retry >= WRITE_RETRY_MS:
                self.last_write_retry = now_ms
                self.flush()
        elif self.pending:
            self.flush()
        if (self.config.appendfsync == "everysec" and self.fd >= 0 and self.fsync_pending_bytes
                and time.monotonic() - self.last_fsync >= 1.0 and not self._fsync_suppressed()):
            if self.fsync_future is not None and not self.fsync_future.done():
                self.delayed_fsync += 1
            else:
                self.last_fsync = time.monotonic()
                self.fsync_pending_bytes = 0
                self.fsync_future = self.fsync_pool.submit(self._background_fsync, self.fd)
        if self.rewrite_scheduled and self.rewrite_task is None:
            self.rewrite_scheduled = False
            self.start_rewrite()
        self._maybe_auto_rewrite()

    def _background_fsync(self, fd: int) -> None:
        start = perf_counter_ns()
        try:
            os.fdatasync(fd)
        except OSError as exc:
            self.logger.warning("Background AOF fsync failed: %s", exc.strerror)
            return
        # From the fsync thread: the histogram's ints change under the GIL, and
        # a scrape between two of them sees one fsync half counted at worst.
        self.fsync_latency.observe((perf_counter_ns() - start) // 1000)

    def _maybe_auto_rewrite(self) -> None:
        percentage = self.config.auto_aof_rewrite_percentage
        if (self.state != STATE_ON or self.rewrite_task is not None or not percentage
                or self.current_size < self.config.auto_aof_rewrite_min_size):
            return
        base = self.base_size or 1
        growth = (self.current_size - base) * 100 // base
        if growth >= percentage:
            self.logger.info("Starting automatic rewriting of AOF on %d%% growth", growth)
            self.start_rewrite()

    def _wait_fsync(self) -> None:
        if self.fsync_future is not None:
            self.fsync_future.result()
            self.fsync_future = None

    def sync_and_close(self) -> None:
        """Flush, fsync and close (appendonly no, shutdown)."""
        self.flush()
        self._wait_fsync()
        if self.fd >= 0:
            try:
                os.fsync(self.fd)
            except OSError as exc:
                self.logger.warning("Can't fsync the AOF: %s", exc.strerror)
            os.close(self.fd)
            self.fd = -1

    # ----------------------------------------------------- enable/disable

    def enable(self) -> bool:
        """CONFIG SET appendonly yes: write a fresh AOF in the background."""
        if self.state != STATE_OFF:
            return True
        self.state = STATE_WAIT_REWRITE
        self.node.set_journal(self)
        if not self.start_rewrite():
            self.state = STATE_OFF
            self.node.set_journal(NULL_JOURNAL)
            return False
        return True

    def disable(self) -> None:
        """CONFIG SET appendonly no."""
        self.cancel_rewrite()
        self.sync_and_close()
        self.state = STATE_OFF
        self.node.set_journal(NULL_JOURNAL)
        self.buffer.clear()

    # ------------------------------------------------------------ rewrite

    def start_rewrite(self) -> bool:
        """BGREWRITEAOF: False if one is already running."""
        if self.rewrite_task is not None:
            return False
        self._record_new_jobs()  # jobs created before the rewrite are in its snapshot
        self.rewrite_started = time.monotonic()
        if self.state != STATE_OFF:
            self.diff = bytearray()
        self.rewrite_task = self.loop.create_task(self._rewrite_in_background())
        return True

    def cancel_rewrite(self) -> None:
        """Stop a running rewrite and remove its temp file."""
        task = self.rewrite_task
        if task is not None:
            task.cancel()
            self.rewrite_task = None
            self.diff = None
            self._remove_temp(self._bg_temp_path())

    def _bg_temp_path(self) -> str:
        return "temp-rewriteaof-bg-%d.aof" % os.getpid()

    @staticmethod
    def _remove_temp(path: str) -> None:
        try:
            os.unlink(path)
        except OSError:
            pass

    async def _rewrite_in_background(self) -> None:
        temp = self._bg_temp_path()
        node = self.node
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, FILE_MARKER)
                cursor = 0
                since_fsync = 0
                while True:
                    deadline = time.monotonic() + REWRITE_SLICE_SECONDS
                    out = bytearray()
                    while True:  # at least one scan step per slice, however late it starts
                        cursor, jobs = node.jobs.scan.scan(cursor, REWRITE_SLICE_JOBS)
                        append_loadjobs(out, _stored(jobs), node.now)
                        if cursor == 0 or time.monotonic() >= deadline:
                            break
                    _write_all(fd, out)
                    since_fsync += len(out)
                    if (self.config.aof_rewrite_incremental_fsync
                            and since_fsync >= INCREMENTAL_FSYNC_BYTES):
                        os.fdatasync(fd)
                        since_fsync = 0
                    if cursor == 0:
                        break
                    await asyncio.sleep(0)
                self._finish_rewrite(fd, temp)
            except BaseException:
                if fd != self.fd:
                    os.close(fd)
                raise
        except asyncio.CancelledError:
            self._remove_temp(temp)
            raise
        except OSError as exc:
            self.logger.warning("Background AOF rewrite failed: %s", exc.strerror or exc)
            self._remove_temp(temp)
            self.last_bgrewrite_ok = False
            self.diff = None
            self.rewrite_task = None
            if self.state == STATE_WAIT_REWRITE:
                self.state = STATE_OFF
                self.node.set_journal(NULL_JOURNAL)

    def _finish_rewrite(self, fd: int, temp: str) -> None:
        """Append the diff, make the new file durable and swap it in atomically."""
        self.flush()  # the old file stays complete until the rename
        if self.diff:
            _write_all(fd, self.diff)
        os.fsync(fd)
        size = os.fstat(fd).st_size
        os.replace(temp, self.path)
        self._fsync_dir()
        old_fd = self.fd
        if self.state == STATE_OFF:
            os.close(fd)  # BGREWRITEAOF with appendonly off only produces the file
        else:
            self._wait_fsync()
            self.fd = fd
            if old_fd >= 0:
                # The old file is unlinked now: closing it frees its page cache,
                # which takes 15-70 ms for 64-200 MB, so it happens off the loop.
                self.fsync_pool.submit(os.close, old_fd)
            self.current_size = self.base_size = size
            self.fsync_pending_bytes = 0
            if self.state == STATE_WAIT_REWRITE:
                self.state = STATE_ON
                self.logger.info("Background AOF rewrite finished: AOF is now on.")
        self.diff = None
        self.rewrite_task = None
        self.last_bgrewrite_ok = True
        self.last_rewrite_seconds = int(time.monotonic() - self.rewrite_started)
        self.logger.info("Background AOF rewrite terminated with success (%d bytes)", size)

    def _fsync_dir(self) -> None:
        dirfd = os.open(os.path.dirname(os.path.abspath(self.path)) or ".", os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)

    def rewrite_now(self) -> None:
        """Synchronous full rewrite (SHUTDOWN REWRITE-AOF); raises OSError."""
        self.cancel_rewrite()
        self.flush()
        temp = "temp-rewriteaof-%d.aof" % os.getpid()
        node = self.node
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, FILE_MARKER)
            jobs = _stored(node.jobs.by_id.values())
            for start in range(0, len(jobs), REWRITE_SLICE_JOBS):
                out = bytearray()
                append_loadjobs(out, jobs[start:start + REWRITE_SLICE_JOBS], node.now)
                _write_all(fd, out)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, self.path)
        self._fsync_dir()

    # --------------------------------------------------------------- INFO

    def info_fields(self) -> list[tuple[str, object]]:
        """The AOF part of INFO Persistence."""
        self._record_new_jobs()
        running = self.rewrite_task is not None
        fields = [("aof_enabled", int(self.state != STATE_OFF)),
                  ("aof_state", self.state),
                  ("aof_rewrite_in_progress", int(running)),
                  ("aof_rewrite_scheduled", int(self.rewrite_scheduled)),
                  ("aof_last_rewrite_time_sec", self.last_rewrite_seconds),
                  ("aof_current_rewrite_time_sec",
                   int(time.monotonic() - self.rewrite_started) if running else -1),
                  ("aof_last_bgrewrite_status", "ok" if self.last_bgrewrite_ok else "err"),
                  ("aof_last_write_status", "err" if self.write_error else "ok")]
        if self.state != STATE_OFF:
            fields += [("aof_current_size", self.current_size),
                       ("aof_base_size", self.base_size),
                       ("aof_pending_rewrite", int(self.rewrite_scheduled)),
                       ("aof_buffer_length", len(self.buffer)),
                       ("aof_rewrite_buffer_length", len(self.diff) if self.diff else 0),
                       ("aof_pending_bio_fsync",
                        int(self.fsync_future is not None and not self.fsync_future.done())),
                       ("aof_delayed_fsync", self.delayed_fsync)]
        return fields


def _call_on_loop(loop: asyncio.AbstractEventLoop, done: Callable[[], None]) -> None:
    """From the fsync thread: ``done`` on the loop, unless the loop closed
    meanwhile (the process is stopping: nobody waits for it)."""
    try:
        loop.call_soon_threadsafe(done)
    except RuntimeError:
        pass
