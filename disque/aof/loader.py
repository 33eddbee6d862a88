"""Loading an AOF into a node (spec: persistence.md §5).

Loading runs in slices so the server can answer INFO and -LOADING while
a large file is read. Jobs come back ``active`` and are re-queued after
their retry time; during an ``aof-enqueue-jobs-once`` load, jobs stored
as queued are put back in their queues (RETRY 0 ones included, spec
decision 2).

The file is read in large chunks. LOADJOB records in the form this
version writes (a packed payload and a 13-digit record time) are framed
and decoded in one loop, straight from the chunk: a million of them are
a million turns of that loop and a few calls each. Anything else (DELJOB,
a msgpack payload, a damaged or cut record) goes through the strict
parser, which names the exact offset of any damage.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from operator import attrgetter

from disque.aof.format import (DELJOB, LOADJOB, PAYLOAD_V1, PAYLOAD_V1_LAYOUT, AofFormatError,
                               Truncated, load_job, read_record)
from disque.cluster.lifecycle import WILLQUEUE_ADVANCE_MS
from disque.jobs.job import ACTIVE, BCAST_WILLQUEUE, QUEUED, Job
from disque.runtime import JITTER_RANGE_MS

READ_CHUNK = 8 * 1024 * 1024

# What precedes a LOADJOB payload; the group is the payload's length.
_LOADJOB_FRAME = re.compile(rb"\*3\r\n\$7\r\nLOADJOB\r\n\$([0-9]{1,18})\r\n")
# What follows it when the record time has 13 digits (unix ms from 2001 to 2286).
_STAMP_HEAD = b"\r\n$13\r\n"
_STAMP_END = 20  # offset of the record's final CRLF after the payload
_CRLF = b"\r\n"
_RECORD_TAIL = 22  # bytes after the payload: CRLF, "$13", CRLF, 13 digits, CRLF

_FIXED = PAYLOAD_V1_LAYOUT.size
_unpack_fixed = PAYLOAD_V1_LAYOUT.unpack_from
_NODE_ID_LEN = 40
_MAX_REPL = 65535
_COUNTER_MASK = 0xFFFF  # nacks and additional deliveries are 16-bit in a job
_LOCAL_FLAGS = 0x7
_HALF_JITTER_MS = JITTER_RANGE_MS // 2
_QUEUE_ORDER = attrgetter("ctime", "id")  # queue order (spec: jobs-and-ids.md §5)


class AofLoadError(Exception):
    """The AOF cannot be loaded; the server refuses to start."""


def _known_holders(data: bytes, at: int, count: int,
                   known: Collection[bytes]) -> tuple[bytes, ...]:
    """The nodes-delivered of a payload, without repeats and without nodes
    this node does not know (spec §5)."""
    ids = [data[i:i + _NODE_ID_LEN] for i in range(at, at + count * _NODE_ID_LEN, _NODE_ID_LEN)]
    return tuple(dict.fromkeys(n for n in ids if n in known))


class AofLoader:
    """Reads one AOF file into a node, a slice at a time."""

    def __init__(self, node, path: str, *, enqueue_once: bool, truncate_allowed: bool,
                 logger) -> None:
        self.node = node
        self.path = path
        self.enqueue_once = enqueue_once
        self.truncate_allowed = truncate_allowed
        self.logger = logger
        self.file = open(path, "rb")
        self.total_bytes = os.fstat(self.file.fileno()).st_size
        self.loaded_bytes = 0  # offset of the first unparsed byte
        self.buffer = b""
        self._pos = 0  # position in ``buffer`` of the byte at ``loaded_bytes``
        self.eof = False
        self.records = 0
        self.jobs_loaded = 0
        self.truncated_at: int | None = None
        # One bytes object per queue name, shared by the jobs of that queue.
        self._queue_names: dict[bytes, bytes] = {}
        # Jobs stored as queued, put back in their queues once the file is read.
        self._to_queue: list[Job] = []

    def close(self) -> None:
        """Release the file."""
        self.file.close()

    def run(self, max_records: int) -> bool:
        """Apply up to ``max_records`` records; True once the whole file is loaded."""
        done = 0
        while done < max_records:
            done += self._load_packed(max_records - done)
            if done >= max_records:
                break
            try:
                argv, used = read_record(self.buffer, self._pos, len(self.buffer))
            except Truncated:
                if not self._read_more():
                    self._finish()
                    self._queue_restored()
                    return True
                continue
            except AofFormatError as exc:
                offset = self.loaded_bytes + exc.offset - self._pos
                raise AofLoadError("Bad file format reading the append only file at offset %d: "
                                   "%s" % (offset, exc.reason)) from None
            self._apply(argv, self.loaded_bytes)
            self.loaded_bytes += used - self._pos
            self._pos = used
            self.records += 1
            done += 1
        return False

    def _load_packed(self, budget: int) -> int:
        """Load up to ``budget`` packed LOADJOB records from the front of the
        buffer; return how many. Stops at the first other record, or one
        the buffer does not hold whole, for the strict parser.

        It does what ``_loadjob`` does, inline: decode with the checks of
        ``codec.from_checked_storage``, drop expired and duplicate jobs,
        rearm qtime (spec §5 step 4), register, and set the timer as
        ``JobLifecycle.schedule_job`` would. A payload it cannot vouch for
        goes to ``_loadjob``, which loads it or names the damage.
        """
        buf = self.buffer
        pos = self._pos
        base = self.loaded_bytes - pos  # file offset of buf[0]
        node = self.node
        runtime = node.runtime
        now = runtime.now
        now_s = now // 1000
        random = runtime.random
        own = runtime.self_delivered
        own_id = own[0]
        known = node.membership.nodes
        by_id = node.jobs.by_id
        register = node.jobs.add
        schedule = node.timers.schedule
        names = self._queue_names
        enqueue_once = self.enqueue_once
        startswith = buf.startswith
        frame = None  # the bytes before the payload of the last record framed
        payload_at = size = 0
        done = loaded = 0
        try:
            while done < budget:
                if frame is not None and startswith(frame, pos):
                    start = pos + payload_at
                else:
                    match = _LOADJOB_FRAME.match(buf, pos)
                    if match is None:
                        break
                    start = match.end()
                    size = int(match.group(1))
                    frame = buf[pos:start]
                    payload_at = start - pos
                stop = start + size
                if buf[stop:stop + 7] != _STAMP_HEAD or buf[stop + _STAMP_END:
                                                            stop + _RECORD_TAIL] != _CRLF:
                    break
                record_at = pos
                pos = stop + _RECORD_TAIL
                done += 1
                if size < _FIXED or buf[start] != PAYLOAD_V1:
                    loaded += self._loadjob(buf[start:stop], base + record_at)
                    continue
                (_, state, flags, repl, ctime, etime, delay, retry, nacks, adeliv, queue_len,
                 body_len, count, job_id) = _unpack_fixed(buf, start)
                queue_at = start + _FIXED
                body_at = queue_at + queue_len
                nodes_at = body_at + body_len
                # codec's checks: the length, the state, the replication factor
                # and the ID's shape (D-<8>-<24>-<4>).
                if not (nodes_at + count * _NODE_ID_LEN == stop
                        and (state == ACTIVE or state == QUEUED) and 1 <= repl <= _MAX_REPL
                        and job_id[0] == 68 and job_id[1] == 45 and job_id[10] == 45
                        and job_id[35] == 45):
                    loaded += self._loadjob(buf[start:stop], base + record_at)
                    continue
                if etime <= now_s or job_id in by_id:
                    continue
                queue = buf[queue_at:body_at]
                queue = names.setdefault(queue, queue)
                job = Job(job_id, queue, buf[body_at:nodes_at], repl, ctime, etime, delay, retry)
                job.nacks = nacks & _COUNTER_MASK
                job.adeliv = adeliv & _COUNTER_MASK
                job.delivered = own if count == 1 and startswith(own_id, nodes_at) else (
                    _known_holders(buf, nodes_at, count, known))
                expire = etime * 1000 + 1000
                flags &= _LOCAL_FLAGS
                if retry:
                    job.flags = flags | BCAST_WILLQUEUE
                    qtime = job.qtime = now + ((delay + retry) * 1000 - _HALF_JITTER_MS
                                               + int(random() * JITTER_RANGE_MS))
                    when = qtime - WILLQUEUE_ADVANCE_MS
                    if when > expire:
                        when = expire
                else:
                    job.flags = flags
                    job.qtime = 0
                    when = expire
                if state == QUEUED and enqueue_once:
                    self._restore_queued(job)
                else:
                    register(job)
                    schedule(job, when)
                loaded += 1
        finally:
            self._pos = pos
            self.loaded_bytes = base + pos
            self.records += done
            self.jobs_loaded += loaded
        return done

    def _read_more(self) -> bool:
        chunk = self.file.read(READ_CHUNK) if not self.eof else b""
        if not chunk:
            self.eof = True
            return False
        self.buffer = self.buffer[self._pos:] + chunk
        self._pos = 0
        return True

    def _finish(self) -> None:
        leftover = len(self.buffer) - self._pos
        if leftover > 0:
            offset = self.loaded_bytes
            if not self.truncate_allowed:
                raise AofLoadError(
                    "Unexpected end of file reading the append only file at offset %d. You can: "
                    "1) Make a backup of your AOF file, then use ./disque-check-aof --fix "
                    "<filename>. 2) Alternatively you can set the 'aof-load-truncated' "
                    "configuration option to yes and restart the server." % offset)
            self.logger.warning("!!! Warning: short read while loading the AOF file %s!!! "
                                "AOF loaded anyway because aof-load-truncated is enabled; "
                                "truncating it at offset %d", self.path, offset)
            os.truncate(self.path, offset)
            self.truncated_at = offset
        self.buffer = b""

    def _apply(self, argv: list[bytes], offset: int) -> None:
        name = argv[0].upper()
        if name == LOADJOB and len(argv) >= 2:
            self.jobs_loaded += self._loadjob(argv[1], offset)
        elif name == DELJOB and len(argv) >= 2:
            job = self.node.jobs.by_id.get(argv[1])
            if job is not None:
                self.node.lifecycle.delete_job(job)
        else:
            raise AofLoadError("Unknown command '%s' reading the append only file at offset %d"
                               % (argv[0][:64].decode("latin-1"), offset))

    def _loadjob(self, payload: bytes, offset: int) -> int:
        """Load one LOADJOB payload of any form; 1 if it added a job, else 0."""
        node = self.node
        try:
            job, was_queued = load_job(payload, node.membership.nodes, node.runtime.self_delivered)
        except (ValueError, TypeError) as exc:  # BadJobPayload is a ValueError
            raise AofLoadError("Corrupted job in the append only file at offset %d: %s"
                               % (offset, exc)) from None
        if job.etime <= node.runtime.now // 1000 or job.id in node.jobs.by_id:
            return 0
        node.lifecycle.set_received_qtime(job)  # spec §5: delay + retry after the load
        if was_queued and self.enqueue_once:
            self._restore_queued(job)
        else:
            node.lifecycle.register_job(job)
        return 1

    def _restore_queued(self, job: Job) -> None:
        """Register a job stored as queued (``aof-enqueue-jobs-once``); it is
        queued again, without a timer until then, when the file is read."""
        self.node.lifecycle.register_job(job, False)
        self._to_queue.append(job)

    def _queue_restored(self) -> None:
        """Queue the jobs stored as queued that are still here, oldest first.

        Each one then goes after the tail of its queue, never through a
        skiplist search, whatever order the file listed them in (jobs of
        other nodes, a rewrite's scan order).
        """
        jobs = self._to_queue
        if not jobs:
            return
        self._to_queue = []
        by_id = self.node.jobs.by_id
        lifecycle = self.node.lifecycle
        jobs.sort(key=_QUEUE_ORDER)
        for job in jobs:
            if by_id.get(job.id) is not job:
                continue  # a later DELJOB removed it
            if not job.qtime:
                job.qtime = 1  # spec decision 2: a RETRY 0 job queued at shutdown is queued again
            if not lifecycle.enqueue_job(job):
                lifecycle.schedule_job(job)
