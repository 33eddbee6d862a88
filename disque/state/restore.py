"""Putting back the jobs of an AOF (spec: persistence.md §5).

The AOF loader (an adapter) reads the file in large chunks and hands them
here. Records are framed, their checksums checked (one xxh3 call per
record) and their jobs decoded by ``jobs.record_reader``, the file's one
reader, and applied in one loop, in the core, so that the compiled build
runs the per-job work as C. Whatever stops the loop (damage, a record cut
by the end of the chunk, a payload that does not decode, a command no AOF
holds) stops it before it changes anything: the loader's strict parser
takes that record and names the damage, or reads more.

The rules are the lifecycle's: a loaded job is registered active with its
qtime rearmed; during an ``aof-enqueue-jobs-once`` load, jobs stored as
queued go back to their queues once the whole file is read, oldest first,
so that each is appended at its queue's tail.
"""

from __future__ import annotations

from collections.abc import Container

from disque.cluster.lifecycle import JobLifecycle
from disque.jobs.codec import BadJobPayload
from disque.jobs.job import Job
from disque.jobs.record_reader import (DELETION, JOB, MARKER, RecordDamaged, RecordReader,
                                       RecordTruncated, decode_job)
from disque.jobs.registry import JobRegistry
from disque.context.runtime import Runtime


class JobRestore:
    """Applies an AOF's records to a node's jobs, a chunk at a time."""

    def __init__(self, lifecycle: JobLifecycle, registry: JobRegistry, runtime: Runtime,
                 known_nodes: Container[bytes], enqueue_once: bool) -> None:
        self.lifecycle = lifecycle
        self.registry = registry
        self.runtime = runtime
        self.known_nodes = known_nodes
        self.enqueue_once = enqueue_once
        # The file's reader: it holds the checksum rule of the format
        # marker once it read one (the loader's strict parser follows it).
        self.reader = RecordReader()
        self.records = 0  # applied through load_written
        self.jobs_loaded = 0
        # One bytes object per queue name, shared by the jobs of that queue.
        self._queue_names: dict[bytes, bytes] = {}
        # Jobs stored as queued, put back in their queues by ``finish``.
        self._to_queue: list[Job] = []

    def load_written(self, buf: bytes, pos: int, budget: int) -> int:
        """Apply up to ``budget`` records of ``buf`` from ``pos`` on; return
        the position after the last one applied.

        It stops at the first record not whole in ``buf``, damaged (its
        checksum too), whose payload does not decode or that no AOF holds:
        the caller's strict parser takes that one.
        """
        runtime = self.runtime
        lifecycle = self.lifecycle
        enqueue_once = self.enqueue_once
        to_queue = self._to_queue
        own = runtime.self_delivered
        known = self.known_nodes
        by_id = self.registry.by_id
        names = self._queue_names
        reader = self.reader  # reader.read is called, never bound: compiled, a native call
        end = len(buf)
        now_s = runtime.now // 1000
        done = 0
        loaded = 0
        while done < budget:
            try:
                nxt = reader.read(buf, pos, end)
                kind = reader.kind
                if kind != JOB:
                    if kind == DELETION:
                        self.delete(buf[reader.first:reader.first_stop])
                    elif kind != MARKER:
                        break  # a command no AOF holds: the strict parser names it
                    pos = nxt
                    done += 1
                    continue
                job, queued = decode_job(buf, reader.first, reader.first_stop, known, own,
                                         names)
            except (RecordTruncated, RecordDamaged, BadJobPayload):
                break
            pos = nxt
            done += 1
            if job.etime <= now_s or job.id in by_id:
                continue
            lifecycle.set_received_qtime(job)  # spec §5: delay + retry after the load
            if queued and enqueue_once:
                lifecycle.register_job(job, False)
                to_queue.append(job)
            else:
                lifecycle.register_job(job)
            loaded += 1
        self.records += done
        self.jobs_loaded += loaded
        return pos

    def load_job(self, job: Job, queued: bool) -> None:
        """Take a job decoded by the caller (spec §5 steps 3-5): dropped if
        expired or already here, else registered (and queued at the end
        when it was stored queued and the load enqueues once)."""
        if job.etime <= self.runtime.now // 1000 or job.id in self.registry.by_id:
            return
        lifecycle = self.lifecycle
        lifecycle.set_received_qtime(job)
        if queued and self.enqueue_once:
            lifecycle.register_job(job, False)
            self._to_queue.append(job)
        else:
            lifecycle.register_job(job)
        self.jobs_loaded += 1

    def delete(self, job_id: bytes) -> None:
        """A DELJOB: forget the job if it is here."""
        job = self.registry.by_id.get(job_id)
        if job is not None:
            self.lifecycle.delete_job(job)

    def finish(self) -> None:
        """The whole file is read: queue the jobs stored as queued that are
        still here, oldest first, so each goes after its queue's tail
        without a skiplist search whatever order the file listed them in."""
        jobs = self._to_queue
        self._to_queue = []
        jobs.sort(key=_queue_order)
        by_id = self.registry.by_id
        lifecycle = self.lifecycle
        for job in jobs:
            if by_id.get(job.id) is not job:
                continue  # a later DELJOB removed it
            if not job.qtime:
                job.qtime = 1  # spec decision 2: a RETRY 0 job queued at shutdown is queued again
            if not lifecycle.enqueue_job(job):
                lifecycle.schedule_job(job)


def _queue_order(job: Job) -> tuple[int, int, bytes]:
    """A queue's order (spec: jobs-and-ids.md §5), higher priorities first."""
    return -job.priority, job.ctime, job.id
