"""Property tests (hypothesis) over the four input parsers, the
structure-aware half of ``make fuzz``: where the fuzz targets throw bytes,
these build well-formed inputs and check they come back exactly.

- ``resp_round_trip``: any commands, encoded as multibulk requests and cut
  into reads anywhere, parse back to the same commands;
- ``bus_round_trip``: any bus messages of the schemas, framed as the bus
  frames them and cut into reads anywhere, reach the node whole and in
  order;
- ``aof_round_trip``: any jobs, written as LOADJOB/DELJOB records and
  loaded (in slices, across read chunks), come back with every stored
  field, and disque-check-aof calls the file valid;
- ``targets_with_hypothesis``: each fuzz target's ``one_input`` on bytes
  hypothesis generates and shrinks.

``python -m fuzz.properties --examples N`` runs them all (N examples
each); tests/unit/test_fuzz_targets.py runs them with a few.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ARGS = st.lists(st.binary(max_size=40) | st.sampled_from([b"", b"\r\n", b"*1\r\n", b"$3\r\n"]),
                min_size=1, max_size=6)
CUTS = st.lists(st.integers(0, 600), max_size=6)


def _settings(examples: int):
    return settings(max_examples=examples, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


def resp_round_trip(examples: int) -> None:
    """Multibulk requests parse back to the commands they encode, however cut."""
    from disque.protocol.request_hiredis import HiredisRequestParser
    from disque.protocol.resp import encode

    @_settings(examples)
    @given(commands=st.lists(ARGS, min_size=1, max_size=8), cuts=CUTS)
    def check(commands: list[list[bytes]], cuts: list[int]) -> None:
        stream = b"".join(encode(command) for command in commands)
        parser = HiredisRequestParser()
        parsed: list = []
        start = 0
        for end in sorted(set(cuts)) + [len(stream)]:
            if start < end <= len(stream):
                parser.feed(stream[start:end], parsed)
                start = end
        assert parsed == commands, (commands, parsed)
        assert parser.buffered() == 0

    check()


def _bus_messages():
    from disque.cluster import messages as m

    job_id = st.sampled_from([b"D-a1b2c3d4-AAAAAAAAAAAAAAAAAAAAAAAA-05a1",
                              b"D-feedbeef-////////////////////////-ffff"])
    values = {int: st.integers(0, 1 << 40), bytes: st.binary(max_size=20),
              list: st.lists(st.integers(0, 9), max_size=3), "job id": job_id,
              "node id": st.sampled_from([b"feedbeef" + b"1" * 32, b"0" * 40])}

    def message(kind: str):
        fields = {key: values[what] for key, what in m.BODY_SCHEMAS[kind].items()}
        return st.fixed_dictionaries({m.TYPE: st.just(kind), **fields})

    return st.lists(st.sampled_from(sorted(m.BODY_SCHEMAS)).flatmap(message), min_size=1,
                    max_size=6)


def bus_round_trip(examples: int) -> None:
    """Frames of messages reach the node whole and in order, however cut."""
    import msgpack

    from disque.cluster import messages as m
    from disque.net.bus import BusConnection, ClusterBus
    from fuzz.bus import FakeLoop, FakeTransport

    class Receiver:
        def __init__(self) -> None:
            self.frames: list = []

        def receive_frame(self, link, frame) -> None:
            self.frames.append(frame)

    header = {m.VERSION: m.PROTOCOL_VERSION, m.SENDER: b"feedbeef" + b"1" * 32, m.PORT: 7712,
              m.FLAGS: 0}

    @_settings(examples)
    @given(frames=st.lists(_bus_messages(), min_size=1, max_size=4), cuts=CUTS)
    def check(frames: list[list[dict]], cuts: list[int]) -> None:
        receiver = Receiver()
        bus = ClusterBus(receiver, FakeLoop())  # type: ignore[arg-type]
        conn = BusConnection(bus, None)
        transport = FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        stream = b""
        for msgs in frames:
            packed = msgpack.packb([header, *msgs], use_bin_type=True)
            stream += struct.pack(">I", len(packed)) + packed
        start = 0
        for end in sorted(set(cuts)) + [len(stream)]:
            if start < end <= len(stream):
                conn.data_received(stream[start:end])
                start = end
        assert not transport.aborted
        assert receiver.frames == [[header, *msgs] for msgs in frames]

    check()


def _jobs():
    from disque.jobs.job import ACTIVE, QUEUED, Job

    node_ids = st.sampled_from([b"a1b2c3d4" + b"0" * 32, b"feedbeef" + b"1" * 32, b"9" * 40])

    @st.composite
    def job(draw, n: int):
        body = draw(st.binary(max_size=300))
        queue = draw(st.binary(min_size=1, max_size=30))
        retry = draw(st.integers(0, 3600))
        new = Job(b"D-a1b2c3d4-%024d-05a1" % n, queue, body, draw(st.integers(1, 7)),
                  draw(st.integers(1_600_000_000_000, 1_699_000_000_000)) * 1_000_000,
                  1_700_000_000 + draw(st.integers(1, 10 ** 6)), draw(st.integers(0, 3600)),
                  retry)
        new.delivered = tuple(draw(st.lists(node_ids, max_size=3, unique=True)))
        new.state = draw(st.sampled_from([ACTIVE, QUEUED]))
        new.nacks = draw(st.integers(0, 0xFFFF))
        new.adeliv = draw(st.integers(0, 0xFFFF))
        new.priority = draw(st.integers(0, 9))
        return new

    return st.integers(1, 12).flatmap(lambda count: st.tuples(*(job(n) for n in range(count))))


def aof_round_trip(examples: int) -> None:
    """Jobs written to an AOF load back with every stored field."""
    import atexit
    import logging
    import os
    import shutil
    import tempfile

    from disque.aof import loader as loader_module
    from disque.aof.check import check as check_aof
    from disque.jobs.records import FILE_MARKER, append_loadjobs, deljob_record
    from disque.aof.loader import AofLoader
    from disque.jobs.journal import REASON_ACKED
    from tests.unit.helpers import make_node

    log = logging.getLogger("fuzz.properties.aof")
    workdir = tempfile.mkdtemp(prefix="fuzz-properties-")
    atexit.register(shutil.rmtree, workdir, True)
    path = os.path.join(workdir, "a.aof")
    read_chunk = loader_module.READ_CHUNK

    @_settings(examples)
    @given(jobs=_jobs(), deleted=st.sets(st.integers(0, 11)), chunk=st.integers(16, 4096),
           slice_records=st.integers(1, 9))
    def check(jobs, deleted: set[int], chunk: int, slice_records: int) -> None:
        out = bytearray(FILE_MARKER)
        append_loadjobs(out, list(jobs), 1_700_000_000_000)
        gone = {jobs[n].id for n in deleted if n < len(jobs)}
        for job in jobs:
            if job.id in gone:
                out += deljob_record(job, 1_700_000_000_001, REASON_ACKED)
        with open(path, "wb") as f:
            f.write(out)
        assert check_aof(bytes(out)).problem is None
        node = make_node()
        node.state.read_clock()
        loader_module.READ_CHUNK = chunk
        loader = AofLoader(node.state, path, enqueue_once=False, truncate_allowed=False, logger=log)
        try:
            while not loader.run(slice_records):
                pass
        finally:
            loader.close()
            loader_module.READ_CHUNK = read_chunk
        assert set(node.state.jobs) == {job.id for job in jobs} - gone
        for job in jobs:
            if job.id in gone:
                continue
            copy = node.state.jobs[job.id]
            assert (copy.queue, copy.body, copy.repl, copy.ctime, copy.etime, copy.delay,
                    copy.retry, copy.nacks, copy.adeliv, copy.priority) == (
                job.queue, job.body, job.repl, job.ctime, job.etime, job.delay, job.retry,
                job.nacks, job.adeliv, job.priority)
            # Holders the loading node does not know are left out.
            known = node.state.membership.nodes
            assert list(copy.delivered) == [n for n in job.delivered if n in known]

    check()


def targets_with_hypothesis(examples: int) -> None:
    """Each fuzz target on bytes from hypothesis (which shrinks a failure)."""
    from fuzz import aof, bus, command, resp

    for module in (resp, command, bus, aof):
        target = module.build()

        @_settings(examples)
        @given(data=st.binary(max_size=target.max_len))
        def check(data: bytes) -> None:
            target.one_input(data)

        check()


PROPERTIES: dict[str, Callable[[int], None]] = {
    "resp_round_trip": resp_round_trip, "bus_round_trip": bus_round_trip,
    "aof_round_trip": aof_round_trip, "targets_with_hypothesis": targets_with_hypothesis}


def main(argv: list[str] | None = None) -> int:
    """Run every property with ``--examples`` examples."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--only", choices=sorted(PROPERTIES), action="append")
    args = parser.parse_args(argv)
    from fuzz.common import trap_errors

    trap_errors()
    for name in args.only or PROPERTIES:
        started = time.monotonic()
        PROPERTIES[name](args.examples)
        print("%s: %d examples, no failure (%.1f s)" % (name, args.examples,
                                                       time.monotonic() - started), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
