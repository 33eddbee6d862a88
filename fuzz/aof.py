"""Fuzz target ``aof``: the AOF loader (disque/aof/loader.py, the loop of
disque/state/restore.py over disque/jobs/record_reader.py) and
disque-check-aof's ``check``, on the same file.

An input's first byte sets how the loader reads it (read size, records
per slice, aof-load-truncated, aof-enqueue-jobs-once) and picks the form
of the rest:

- raw (even): the file's bytes, as found on disk;
- structured (odd): choices (``ByteRandom``) that assemble records of
  every form, with payloads taken from real jobs and then damaged, and
  correct checksums, so the payload decoders behind the checksums are
  reached.

A load may only end loaded or with AofLoadError, and the loader (the file
read in chunks, a slice of records at a time) must agree with ``check``
(read whole): it refuses the file exactly when ``check`` finds a problem,
naming the same place (a truncated tail excepted when truncation is
allowed, and then the file is cut where ``check`` says). A loaded node
must be consistent.
``python -m fuzz.aof --runs N``.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile

from fuzz.common import ByteRandom, Target, main

START_MS = 1_700_000_000_000


def _jobs():
    """Jobs of every shape the writer records: extensions, holders, states."""
    from disque.jobs.job import QUEUED, Job

    jobs = []
    for n, (queue, body, retry, delivered) in enumerate([
            (b"q", b"body", 30, (b"a1b2c3d4" + b"0" * 32,)),
            (b"q2", b"x\r\n*3\r\n$7", 0, ()),
            (b"queue", b"", 5, (b"feedbeef" + b"1" * 32, b"9" * 40))]):
        job = Job(b"D-a1b2c3d4-%024d-05a1" % n, queue, body, 2, (START_MS - n) * 1_000_000,
                  START_MS // 1000 + 3600, n, retry)
        job.delivered = delivered
        if n != 1:
            job.state = QUEUED
        jobs.append(job)
    jobs[2].priority = 1
    return jobs


def build() -> Target:
    """The AOF loader and disque-check-aof as a fuzz target."""
    from disque.aof import loader as loader_module
    from disque.aof.check import check
    from disque.jobs.records import FILE_MARKER, append_loadjobs, checksum, deljob_record
    from disque.aof.loader import AofLoader, AofLoadError
    from disque.jobs.journal import REASON_ACKED
    from fuzz.common import Crash, trap_errors
    from tests.support.aof import first_record, msgpack_loadjob_record
    from tests.unit.helpers import add_peer, make_node
    from tests.unit.test_node_fuzz import check_node

    trap = trap_errors()
    quiet = logging.getLogger("fuzz.aof.loader")
    quiet.setLevel(logging.CRITICAL)
    quiet.propagate = False
    jobs = _jobs()
    written = []
    for job in jobs:
        out = bytearray()
        append_loadjobs(out, [job], START_MS)
        written.append(bytes(out))
    deljobs = [deljob_record(job, START_MS, REASON_ACKED) for job in jobs]
    legacy = [msgpack_loadjob_record(job, START_MS) for job in jobs]
    payloads = [first_record(record)[0][1] for record in written + legacy]
    workdir = tempfile.mkdtemp(prefix="fuzz-aof-", dir="/dev/shm" if os.path.isdir("/dev/shm")
                               else None)
    atexit.register(shutil.rmtree, workdir, True)
    path = os.path.join(workdir, "fuzz.aof")

    def summed(*args: bytes) -> bytes:
        record = b"*%d\r\n" % (len(args) + 1) + b"".join(
            b"$%d\r\n%b\r\n" % (len(a), a) for a in args) + b"$8\r\n"
        return record + checksum(record) + b"\r\n"

    def damaged(rng: ByteRandom, payload: bytes) -> bytes:
        buf = bytearray(payload)
        for _ in range(rng.randrange(4)):
            op = rng.randrange(4)
            at = rng.randrange(len(buf) + 1)
            if op == 0 and buf:
                buf[min(at, len(buf) - 1)] = rng.randrange(256)
            elif op == 1:
                buf[at:at] = rng.take(rng.randrange(1, 9))
            elif op == 2:
                del buf[at:at + rng.randrange(1, 9)]
            else:
                buf[at:at + 8] = rng.choice([b"\x00" * 8, b"\xff" * 8, b"\x7f\xff\xff\xff"])
        return bytes(buf)

    def structured(rng: ByteRandom) -> bytes:
        parts = [FILE_MARKER] if rng.random() < 0.7 else []
        while not rng.exhausted and len(parts) < 12:
            kind = rng.randrange(8)
            if kind < 2:
                parts.append(rng.choice(written))
            elif kind == 2:
                parts.append(rng.choice(deljobs))
            elif kind == 3:
                parts.append(rng.choice(legacy))
            elif kind == 4:
                payload = damaged(rng, rng.choice(payloads))
                parts.append(summed(b"LOADJOB", payload, b"%d" % START_MS))
            elif kind == 5:
                job = rng.choice(jobs)
                fields = [job.id, b"%d" % START_MS, job.queue, b"0", b"0", b"acked"]
                at = rng.randrange(len(fields))
                fields[at] = damaged(rng, fields[at])
                parts.append(summed(b"DELJOB", *fields[:rng.randrange(1, 7)]))
            elif kind == 6:
                parts.append(rng.choice([FILE_MARKER, summed(b"AOFFORMAT", b"3"),
                                         b"*2\r\n$6\r\nDELJOB\r\n$40\r\n%s\r\n" % jobs[0].id]))
            else:
                parts.append(rng.take(rng.randrange(1, 16)))
        data = b"".join(parts)
        if rng.random() < 0.2 and data:
            data = data[:rng.randrange(len(data))]
        return data

    def one_input(data: bytes) -> None:
        if not data:
            return
        mode = data[0]
        contents = structured(ByteRandom(data[1:])) if mode & 1 else data[1:]
        truncate_allowed = bool(mode & 2)
        enqueue_once = bool(mode & 4)
        with open(path, "wb") as f:
            f.write(contents)
        verdict = check(contents)
        node = make_node(seed=mode)
        add_peer(node)
        node.state.read_clock()
        loader_module.READ_CHUNK = 16 + (mode >> 3) * 61
        loader = AofLoader(node.state, path, enqueue_once=enqueue_once,
                           truncate_allowed=truncate_allowed, logger=quiet)
        refused = None
        try:
            while not loader.run(1 + mode % 5):
                pass
        except AofLoadError as exc:
            refused = exc
        finally:
            loader.close()
            loader_module.READ_CHUNK = READ_CHUNK
        trap.check()
        accepted = verdict.problem is None or (verdict.truncated and truncate_allowed)
        if accepted == (refused is not None):
            raise Crash("disque-check-aof says %r, the loader %s" % (
                verdict, "refused it: %s" % refused if refused else "loaded it"))
        if refused is not None and not verdict.truncated and str(refused.__cause__) != (
                verdict.problem):
            raise Crash("disque-check-aof says %r, the loader %r" % (verdict.problem, refused))
        if refused is None:
            if os.path.getsize(path) != verdict.valid:
                raise Crash("loaded file cut at %d, check says %d"
                            % (os.path.getsize(path), verdict.valid))
            try:
                check_node(node, [])
            except AssertionError as exc:
                raise Crash("node inconsistent after a load") from exc

    READ_CHUNK = loader_module.READ_CHUNK

    def seeds() -> list[bytes]:
        return [b"\x00" + FILE_MARKER + b"".join(written) + deljobs[0],
                b"\x02" + b"".join(legacy) + FILE_MARKER + written[1],
                b"\x04" + b"".join(legacy) + deljobs[1] + b"*2\r\n$6\r\nDELJOB\r\n$40\r\n"
                + jobs[2].id + b"\r\n",
                b"\x08" + FILE_MARKER + written[2][:-9],
                b"\x01" + bytes(range(256)), b"\x13" + bytes(i * 11 % 256 for i in range(300))]

    return Target("aof", one_input, seeds, max_len=4096,
                  dictionary=[b"*3\r\n", b"*4\r\n", b"*8\r\n", b"$7\r\nLOADJOB\r\n",
                              b"$6\r\nDELJOB\r\n", b"$13\r\n", b"$8\r\n", b"$40\r\n",
                              b"AOFFORMAT", b"\r\n"])


if __name__ == "__main__":
    sys.exit(main(build))
