"""Commands done in steps (``ClientState.reply_in_steps``): replies too long
to build at once and commands about too many jobs to handle in one go.

A connection runs one step after another for about its slice of a loop
turn, then lets the other clients in, and stops while its peer does not
read (serving/commands.py): one client's QPEEK of a million jobs neither
holds up the others nor makes the node build its whole reply in memory.
What a command answers at once when small (the first INLINE_JOBS jobs, the
first INLINE_IDS IDs) is unchanged, and a reply in steps has the same bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Final, Protocol

from disque.protocol import errors
from disque.jobs.ids import is_valid_job_id
from disque.jobs.replies import entry_value, job_entry, priority_entry
from disque.protocol.resp import encode_parts, integer

if TYPE_CHECKING:
    from disque.cluster.consumers import Consumers
    from disque.cluster.lifecycle import JobLifecycle
    from disque.jobs.job import Job
    from disque.queues.queue import Queue

# A command about more jobs than these works in steps; below, it answers at once.
INLINE_JOBS: Final = 256
INLINE_IDS: Final = 1024
INLINE_BYTES: Final = 1 << 20  # a reply longer than this is sent in steps
# One step's work: about 1 ms of pure Python, a fraction of the connection's slice.
STEP_JOBS: Final = 256  # jobs gathered, popped, deleted or acted on
STEP_IDS_CHECKED: Final = 4096
STEP_BYTES: Final = 256 * 1024  # reply bytes made (at least one entry)
# A body this long goes to the transport as it is, never copied into its entry.
LARGE_BODY: Final = 1 << 20
ENTRY_OVERHEAD: Final = 64  # an entry's bytes beyond its queue, ID and body, about


def entry_size(job: Job) -> int:
    """About how long ``job``'s entry is (what a reply still to send holds)."""
    queue, body = job.queue, job.body
    # ``is not None`` tests, not ``or b""``: compiled, a bytes' truth is a call
    return ((len(queue) if queue is not None else 0) + (len(body) if body is not None else 0)
            + ENTRY_OVERHEAD)


class EntryStream:
    """The array of ``jobs``' entries, a step's bytes at a time. The jobs
    are held last first, so that each is let go of once sent."""

    __slots__ = ("jobs", "withcounters", "withheaders", "withpriority", "pending", "started")

    def __init__(self, jobs: list[Job], withcounters: bool, withheaders: bool,
                 withpriority: bool, pending: int) -> None:
        jobs.reverse()
        self.jobs = jobs
        self.withcounters = withcounters
        self.withheaders = withheaders
        self.withpriority = withpriority
        self.pending = pending
        self.started = False

    def step(self, out: list[bytes]) -> bool:
        """The array's header first, then entries up to STEP_BYTES."""
        jobs = self.jobs
        if not self.started:
            self.started = True
            out.append(b"*%d\r\n" % len(jobs))
        made = 0
        while jobs and made < STEP_BYTES:
            job = jobs.pop()
            size = entry_size(job)
            made += size
            self.pending -= size
            if len(job.body or b"") >= LARGE_BODY:
                out += encode_parts(entry_value(job, self.withcounters, self.withheaders,
                                                self.withpriority), LARGE_BODY)
            elif self.withpriority:
                out.append(priority_entry(job))
            else:
                out.append(job_entry(job, self.withcounters, self.withheaders))
        return not jobs

    def pending_bytes(self) -> int:
        """The entries not sent yet."""
        return self.pending


class Gatherer(Protocol):
    """Where a ``GatheredEntries`` finds its jobs, a step at a time."""

    def gather(self, jobs: list[Job]) -> bool:
        """Add up to STEP_JOBS jobs to ``jobs``; True once all are there."""


class GatheredEntries:
    """Entries of jobs gathered a step at a time (QPEEK's, GETJOB's), then
    sent by an ``EntryStream``: the array's count is known once they are."""

    __slots__ = ("gatherer", "jobs", "withcounters", "withheaders", "withpriority", "pending",
                 "entries")

    def __init__(self, gatherer: Gatherer, jobs: list[Job], withcounters: bool,
                 withheaders: bool, withpriority: bool, pending: int) -> None:
        self.gatherer = gatherer
        self.jobs = jobs  # gathered so far, at least one
        self.withcounters = withcounters
        self.withheaders = withheaders
        self.withpriority = withpriority
        self.pending = pending
        self.entries: EntryStream | None = None

    def step(self, out: list[bytes]) -> bool:
        """Gather more jobs, or send."""
        entries = self.entries
        if entries is not None:
            return entries.step(out)
        jobs = self.jobs
        gathered = len(jobs)
        done = self.gatherer.gather(jobs)
        pending = self.pending
        for i in range(gathered, len(jobs)):
            pending += entry_size(jobs[i])
        self.pending = pending
        if done:
            self.entries = EntryStream(jobs, self.withcounters, self.withheaders,
                                       self.withpriority, pending)
        return False

    def pending_bytes(self) -> int:
        """The entries of the jobs gathered so far."""
        entries = self.entries
        return self.pending if entries is None else entries.pending


class QueueWalk:
    """QPEEK's jobs: each step goes on in the queue's order from the last
    job gathered, which may have left the queue meanwhile (it is shown all
    the same, as a job that left after its entry was sent would be)."""

    __slots__ = ("queue", "wanted", "backwards")

    def __init__(self, queue: Queue, wanted: int, backwards: bool) -> None:
        self.queue = queue
        self.wanted = wanted
        self.backwards = backwards

    def gather(self, jobs: list[Job]) -> bool:
        """The next jobs after the last one gathered."""
        end = min(self.wanted, len(jobs) + STEP_JOBS)
        if len(jobs) < end:
            for job in self.queue.jobs.iter_after(jobs[-1], self.backwards):
                jobs.append(job)
                if len(jobs) == end:
                    break
        return len(jobs) < end or end == self.wanted


class RoundRobin:
    """GETJOB's jobs, popped round-robin from its queues (the round goes on
    where the last step stopped)."""

    __slots__ = ("consumers", "names", "count", "position")

    def __init__(self, consumers: Consumers, names: list[bytes], count: int,
                 position: int) -> None:
        self.consumers = consumers
        self.names = names
        self.count = count
        self.position = position  # where the round goes on; -1 once a round gave nothing

    def gather(self, jobs: list[Job]) -> bool:
        """Pop the next jobs."""
        if self.position >= 0 and len(jobs) < self.count:
            self.position = self.consumers.collect_more(
                self.names, min(self.count, len(jobs) + STEP_JOBS), jobs, self.position)
        return self.position < 0 or len(jobs) == self.count


class PartsStream:
    """The rest of a reply made at once, in parts written as they are (a
    large body is not copied into the reply)."""

    __slots__ = ("parts", "pending")

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts
        self.pending = sum([len(part) for part in parts])

    def step(self, out: list[bytes]) -> bool:
        """Everything at once: the parts are made already."""
        out += self.parts
        self.parts = []
        self.pending = 0
        return True

    def pending_bytes(self) -> int:
        """The parts not handed over yet."""
        return self.pending


class IdsStream:
    """A command applied to many job IDs, a step at a time: every ID is
    checked first (one malformed: -BADID, nothing done), then ``act`` runs
    for each; the reply counts the IDs it returned True for."""

    __slots__ = ("ids", "act", "checked", "done", "count")

    def __init__(self, ids: list[bytes], act: Callable[[bytes], bool]) -> None:
        self.ids = ids
        self.act = act
        self.checked = 0
        self.done = 0
        self.count = 0

    def step(self, out: list[bytes]) -> bool:
        """Check up to STEP_IDS_CHECKED IDs, or act on up to STEP_JOBS."""
        ids = self.ids
        checked = self.checked
        if checked < len(ids):
            end = min(len(ids), checked + STEP_IDS_CHECKED)
            for i in range(checked, end):
                if not is_valid_job_id(ids[i]):
                    out.append(errors.BADID)
                    return True
            self.checked = end
            return False
        act = self.act
        end = min(len(ids), self.done + STEP_JOBS)
        count = self.count
        for i in range(self.done, end):
            if act(ids[i]):
                count += 1
        self.count = count
        self.done = end
        if end < len(ids):
            return False
        out.append(integer(count))
        return True

    def pending_bytes(self) -> int:
        """Nothing but the count is answered."""
        return 0


class PurgeStream:
    """QPURGE of a long queue, STEP_JOBS jobs a step, at most as many as the
    queue held when it began (jobs queued meanwhile may go too). The
    connection writes the AOF between steps, so the count answered is of
    deletions journaled (spec: persistence.md)."""

    __slots__ = ("lifecycle", "queue", "left", "purged")

    def __init__(self, lifecycle: JobLifecycle, queue: Queue) -> None:
        self.lifecycle = lifecycle
        self.queue = queue
        self.left = len(queue.jobs)
        self.purged = 0

    def step(self, out: list[bytes]) -> bool:
        """Delete the next jobs at the queue's head."""
        wanted = min(STEP_JOBS, self.left)
        purged = self.lifecycle.purge(self.queue, wanted)
        self.purged += purged
        self.left -= purged
        if purged == wanted and self.left:
            return False
        out.append(integer(self.purged))
        return True

    def pending_bytes(self) -> int:
        """Nothing but the count is answered."""
        return 0
