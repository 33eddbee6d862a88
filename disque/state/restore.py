"""Putting back the jobs of an AOF (spec: persistence.md §5).

The AOF loader (an adapter) reads the file in large chunks and hands them
here. Records in the form this version writes them (docs/aof-format.md:
LOADJOB with a packed payload, format 1 or 2, and a 13-digit record time,
DELJOB, each with or without its checksum) are framed, their checksums
checked (one xxh3 call per record) and applied in one loop, in the core,
so that the compiled build runs the per-job work as C. A format-2 payload (a job with
extensions: a priority, a DEDUPID...) ends with a msgpack map, decoded
here and applied by ``codec.apply_extension_fields``. Anything else (a
msgpack payload, another spelling of a record, damage, a record cut by the
end of the chunk, a checksum that does not match, a record without one
after the file's format marker) stops the loop before it changes anything: the loader's
strict parser takes it, names any damage, and hands what it decoded back
to ``load_job`` or ``delete``.

The rules are the lifecycle's: a loaded job is registered active with its
qtime rearmed; during an ``aof-enqueue-jobs-once`` load, jobs stored as
queued go back to their queues once the whole file is read, oldest first,
so that each is appended at its queue's tail.
"""

from __future__ import annotations

import re
from collections.abc import Container
from typing import Final

import msgpack  # type: ignore[import-untyped]  # no stubs; one call, its result is checked

from disque.cluster.lifecycle import JobLifecycle
from disque.jobs.codec import (STORED_FORMAT, STORED_FORMAT_EXTENDED, STORED_LAYOUT,
                               BadJobPayload, apply_extension_fields, from_checked_storage)
from disque.jobs.job import Job
from disque.jobs.records import CHECKSUM_HEAD, CHECKSUM_LEN, checksum
from disque.jobs.registry import JobRegistry
from disque.context.runtime import Runtime

# What precedes a LOADJOB payload; the group is the payload's length. With
# 4 arguments, the record ends with its checksum.
_LOADJOB_FRAME: Final = re.compile(rb"\*[34]\r\n\$7\r\nLOADJOB\r\n\$([0-9]{1,18})\r\n")
_SUMMED_LOADJOB: Final = 52  # the frame's second byte, "4"
# What follows it when the record time has 13 digits (unix ms from 2001 to 2286).
_STAMP_HEAD: Final = b"\r\n$13\r\n"
_STAMP_END: Final = 20  # offset of the record's final CRLF after the payload
_CRLF: Final = b"\r\n"
_RECORD_TAIL: Final = 22  # bytes after the payload: CRLF, "$13", CRLF, 13 digits, CRLF
# A checksummed record: after the 13 digits, CRLF, "$8", CRLF, then the
# xxh3-64 of every byte before it (docs/aof-format.md), and CRLF.
_SUM_AT: Final = 26  # offset of the checksum after the payload
_SUMMED_TAIL: Final = 36  # bytes after the payload


def _short_bulk(longest: int) -> bytes:
    """A pattern for a bulk string of 1 to ``longest`` bytes, its length honoured."""
    return rb"\$(?:%b)\r\n" % b"|".join(rb"%d\r\n[\s\S]{%d}" % (n, n)
                                       for n in range(1, longest + 1))


# A DELJOB: the job ID, the record time and the queue name's length (groups
# 1 and 2); after the queue name, the tail: nacks, additional deliveries
# and the reason. Only the ID matters to a load.
# With 8 arguments, its checksum follows the tail.
_DELJOB_HEAD: Final = re.compile(rb"\*[78]\r\n\$6\r\nDELJOB\r\n\$40\r\n([\s\S]{40})\r\n"
                                 + _short_bulk(20) + rb"\$([0-9]{1,9})\r\n")
_DELJOB_TAIL: Final = re.compile(rb"\r\n" + _short_bulk(20) * 3)
_SUMMED_DELJOB: Final = 56  # the head's second byte, "8"

_FIXED: Final = STORED_LAYOUT.size
_unpack_fixed: Final = STORED_LAYOUT.unpack_from
_NODE_ID_LEN: Final = 40
_unpack_map: Final = msgpack.unpackb  # a format-2 payload's extension map


class JobRestore:
    """Applies an AOF's records to a node's jobs, a chunk at a time."""

    def __init__(self, lifecycle: JobLifecycle, registry: JobRegistry, runtime: Runtime,
                 known_nodes: Container[bytes], enqueue_once: bool) -> None:
        self.lifecycle = lifecycle
        self.registry = registry
        self.runtime = runtime
        self.known_nodes = known_nodes
        self.enqueue_once = enqueue_once
        # Set by the loader once it read a format marker: a record without
        # a checksum is then left to the strict parser, which reports it.
        self.checksums_required = False
        self.records = 0  # applied through load_written
        self.jobs_loaded = 0
        # One bytes object per queue name, shared by the jobs of that queue.
        self._queue_names: dict[bytes, bytes] = {}
        # Jobs stored as queued, put back in their queues by ``finish``.
        self._to_queue: list[Job] = []

    def load_written(self, buf: bytes, pos: int, budget: int) -> int:
        """Apply up to ``budget`` records of ``buf`` from ``pos`` on; return
        the position after the last one applied.

        It stops at the first record not in the written form, not whole in
        ``buf``, whose checksum fails (or is missing where required), or
        whose payload does not decode: the caller's strict parser takes
        that one. A LOADJOB's payload is unpacked in place, straight into
        ``codec.from_checked_storage``.
        """
        runtime = self.runtime
        lifecycle = self.lifecycle
        enqueue_once = self.enqueue_once
        to_queue = self._to_queue
        own = runtime.self_delivered
        own_id = own[0]
        known = self.known_nodes
        by_id = self.registry.by_id
        names = self._queue_names
        now_s = runtime.now // 1000
        required = self.checksums_required
        frame = b""  # what precedes the payload in the last LOADJOB framed
        payload_at = 0
        size = 0
        summed = False
        done = 0
        loaded = 0
        while done < budget:
            if frame and buf.startswith(frame, pos):
                start = pos + payload_at
            else:
                match = _LOADJOB_FRAME.match(buf, pos)
                if match is None:
                    after = self._deljob(buf, pos, required)
                    if after < 0:
                        break
                    pos = after
                    done += 1
                    continue
                start = match.end()
                size = int(match.group(1))
                frame = buf[pos:start]
                payload_at = start - pos
                summed = buf[pos + 1] == _SUMMED_LOADJOB
                if not summed and required:
                    break
            stop = start + size
            if summed:
                # The checksum covers the record time's and its own headers:
                # a record of another shape (another time length, say) fails
                # it here and goes to the strict parser, which frames it by
                # its lengths. The final CRLF is the only byte it cannot cover.
                sum_at = stop + _SUM_AT
                end = stop + _SUMMED_TAIL
                if (buf[end - 2:end] != _CRLF or size < _FIXED
                        or checksum(buf[pos:sum_at]) != buf[sum_at:sum_at + CHECKSUM_LEN]):
                    break
            else:
                end = stop + _RECORD_TAIL
                if (buf[stop:stop + 7] != _STAMP_HEAD or buf[stop + _STAMP_END:end] != _CRLF
                        or size < _FIXED):
                    break
            marker = buf[start]
            if marker != STORED_FORMAT and marker != STORED_FORMAT_EXTENDED:
                break
            fields = _unpack_fixed(buf, start)
            queue_len: int = fields[10]
            body_len: int = fields[11]
            count: int = fields[12]
            queue_at = start + _FIXED
            body_at = queue_at + queue_len
            nodes_at = body_at + body_len
            nodes_end = nodes_at + count * _NODE_ID_LEN
            # Format 1 ends with the node IDs; format 2 has its map after them.
            if nodes_end != stop if marker == STORED_FORMAT else nodes_end >= stop:
                break
            queue = buf[queue_at:body_at]
            queue = names.setdefault(queue, queue)
            delivered: tuple[bytes, ...] | list[bytes]
            if count == 1 and buf.startswith(own_id, nodes_at):
                delivered = own
            else:
                delivered = [buf[at:at + _NODE_ID_LEN]
                             for at in range(nodes_at, nodes_end, _NODE_ID_LEN)]
            try:
                job, queued = from_checked_storage(
                    fields[13], queue, buf[body_at:nodes_at], fields[3], fields[4], fields[5],
                    fields[6], fields[7], fields[8], fields[9], fields[2], delivered, fields[1],
                    known, own)
                if marker == STORED_FORMAT_EXTENDED:
                    apply_extension_fields(job, _unpack_map(buf[nodes_end:stop], raw=False))
            except (BadJobPayload, ValueError, TypeError, msgpack.UnpackException):
                break
            pos = end
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

    def _deljob(self, buf: bytes, pos: int, required: bool) -> int:
        """Apply the DELJOB at ``pos``; the position after it, or -1 when
        there is none in the written form (or its checksum fails)."""
        head = _DELJOB_HEAD.match(buf, pos)
        if head is None:
            return -1
        tail = _DELJOB_TAIL.match(buf, head.end() + int(head.group(2)))
        if tail is None:
            return -1
        end = tail.end()
        if buf[pos + 1] == _SUMMED_DELJOB:
            sum_at = end + len(CHECKSUM_HEAD)
            if (buf[end:sum_at] != CHECKSUM_HEAD
                    or buf[sum_at + CHECKSUM_LEN:sum_at + CHECKSUM_LEN + 2] != _CRLF
                    or checksum(buf[pos:sum_at]) != buf[sum_at:sum_at + CHECKSUM_LEN]):
                return -1
            end = sum_at + CHECKSUM_LEN + 2
        elif required:
            return -1
        self.delete(head.group(1))
        return end

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
