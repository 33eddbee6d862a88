"""Putting back the jobs of an AOF (spec: persistence.md §5).

The AOF loader (an adapter) reads the file in large chunks and feeds them
to this part's ``RecordReader`` (``jobs.record_reader``, the file's one
reader): records are framed, their checksums checked (one xxh3 call per
record) and their jobs decoded there, and applied in one loop here, in the
core, so that the compiled build runs the per-job work as C. Damage stops
the loop before it changes anything for the damaged record, with the
reader's ``AofFormatError`` naming where.

The rules are the lifecycle's: a loaded job is registered active with its
qtime rearmed; during an ``aof-enqueue-jobs-once`` load, jobs stored as
queued go back to their queues once the whole file is read, oldest first,
so that each is appended at its queue's tail.
"""

from __future__ import annotations

from collections.abc import Container

from disque.cluster.lifecycle import JobLifecycle
from disque.jobs.job import Job
from disque.jobs.record_reader import DELETION, END, JOB, RecordReader
from disque.jobs.registry import JobRegistry
from disque.context.runtime import Runtime


class JobRestore:
    """Applies an AOF's records to a node's jobs, as its reader is fed."""

    def __init__(self, lifecycle: JobLifecycle, registry: JobRegistry, runtime: Runtime,
                 known_nodes: Container[bytes], enqueue_once: bool) -> None:
        self.lifecycle = lifecycle
        self.registry = registry
        self.runtime = runtime
        self.known_nodes = known_nodes
        self.enqueue_once = enqueue_once
        self.reader = RecordReader()  # the loader feeds it the file
        self.jobs_loaded = 0
        # One bytes object per queue name, shared by the jobs of that queue.
        self._queue_names: dict[bytes, bytes] = {}
        # Jobs stored as queued, put back in their queues by ``finish``.
        self._to_queue: list[Job] = []

    def load(self, budget: int) -> int:
        """Apply up to ``budget`` of the records fed to ``reader``; return how
        many were applied, fewer once the bytes fed hold no whole record more.

        Raises the reader's AofFormatError at a damaged record (those before
        it applied). Each job is put back by the rule of spec §5 steps 3-5:
        dropped if expired or already here, else registered with its qtime
        rearmed, and queued at the end when it was stored queued and the
        load enqueues once.
        """
        runtime = self.runtime
        lifecycle = self.lifecycle
        enqueue_once = self.enqueue_once
        to_queue = self._to_queue
        own = runtime.self_delivered
        known = self.known_nodes
        by_id = self.registry.by_id
        names = self._queue_names
        reader = self.reader  # reader.next is called, never bound: compiled, a native call
        now_s = runtime.now // 1000
        done = 0
        loaded = 0
        while done < budget:
            kind = reader.next()
            if kind != JOB:
                if kind == END:
                    break
                if kind == DELETION:
                    self.delete(reader.deleted_id())
                done += 1
                continue
            job, queued = reader.job(known, own, names)
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
        self.jobs_loaded += loaded
        return done

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
