"""cluster/wire.py: messages are packed, queued per peer, framed behind the
header, and frames are decoded back."""

from __future__ import annotations

import struct

import msgpack

from disque.cluster import messages as m
from disque.cluster.wire import (FRAME_BAD_MAC, FRAME_NOT_ARRAY, FRAME_OK, FRAME_TOO_LARGE,
                                 FRAME_UNDECODABLE, PeerOutput, Wire, decode_frames, frame_bytes,
                                 pack_job_message)

JOB_ID = b"D-0123abcd-" + b"x" * 24 + b"-05a1"
NODE_ID = b"0123456789abcdef0123456789abcdef01234567"


def reference(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def test_a_message_sent_to_several_peers_in_a_row_is_packed_once():
    wire = Wire({}, lambda: None, lambda output: None, 16)
    msg = {m.TYPE: m.REPLJOB, m.JOB: [JOB_ID, b"q", b"x" * 64], m.MFLAGS: 0}
    packed = wire.pack(msg)
    assert packed == reference(msg) and wire.pack(msg) is packed
    assert wire.pack(dict(msg)) == packed


def test_messages_about_one_job_id_are_packed_as_msgpack_packs_them():
    for kind in (m.GOTJOB, m.DELJOB, m.QUEUED, m.WORKING, m.WILLQUEUE):
        assert pack_job_message(m.job_message(kind, JOB_ID)) == reference(
            m.job_message(kind, JOB_ID))
    for known in (0, 1):
        msg = {m.TYPE: m.GOTACK, m.ID: JOB_ID, m.KNOWN: known}
        assert pack_job_message(msg) == reference(msg)
    wire = Wire({}, lambda: None, lambda output: None, 16)
    for other in (m.job_message(m.WORKING, JOB_ID, 6), {m.TYPE: m.GOTACK, m.ID: JOB_ID, m.KNOWN: 2},
                  {m.TYPE: m.SETACK, m.ID: JOB_ID, m.MAY_HAVE: 0}, m.job_message(m.GOTJOB, b"x"),
                  {m.TYPE: m.ENQUEUE, m.ID: JOB_ID}, {m.TYPE: m.GOTJOB, m.JOB: JOB_ID}):
        assert pack_job_message(other) is None
        assert wire.pack(other) == reference(other)


def test_messages_queue_per_peer_and_leave_as_one_frame_behind_the_header():
    class Link:
        def __init__(self) -> None:
            self.output = PeerOutput(self)

    first: list[int] = []
    full: list[PeerOutput] = []
    links = {NODE_ID: Link()}
    wire = Wire(links, lambda: first.append(1), full.append, 3)
    msg = m.job_message(m.GOTJOB, JOB_ID)
    wire.send(NODE_ID, msg)
    wire.send(NODE_ID[::-1], msg)  # no link: dropped
    wire.send(NODE_ID, msg)
    assert first == [1] and full == []
    wire.send(NODE_ID, {m.TYPE: m.DELJOB, m.ID: JOB_ID})
    assert full == [links[NODE_ID].output]  # the third message fills the frame
    assert wire.take_dirty() == [links[NODE_ID].output] and wire.take_dirty() == []
    output = links[NODE_ID].output
    size = output.size
    out = output.take()
    assert out is not None and output.take() is None and output.size == 0
    header = {m.VERSION: 1, m.SENDER: NODE_ID, m.PORT: 7711, m.FLAGS: 0}
    data = frame_bytes(out, reference(header), size)
    assert struct.unpack(">I", data[:4])[0] == len(data) - 4
    assert msgpack.unpackb(data[4:], raw=False) == [header, msg, msg,
                                                    {m.TYPE: m.DELJOB, m.ID: JOB_ID}]


def test_decode_frames_takes_whole_frames_and_says_why_it_stopped():
    header = {m.VERSION: 1, m.SENDER: NODE_ID, m.PORT: 7711, m.FLAGS: 0}
    one = reference([header, m.job_message(m.GOTJOB, JOB_ID)])
    two = reference([header])
    stream = struct.pack(">I", len(one)) + one + struct.pack(">I", len(two)) + two
    frames, used, problem, _ = decode_frames(bytearray(stream + stream[:6]), 1 << 20)
    assert (frames, used, problem) == ([[header, m.job_message(m.GOTJOB, JOB_ID)], [header]],
                                       len(stream), FRAME_OK)
    for data, expected in ((struct.pack(">I", 1 << 21), FRAME_TOO_LARGE),
                           (struct.pack(">I", 1) + b"\xc1", FRAME_UNDECODABLE),
                           (struct.pack(">I", 1) + b"\x01", FRAME_NOT_ARRAY)):
        frames, used, problem, what = decode_frames(bytearray(stream + data), 1 << 20)
        assert (len(frames), used, problem) == (2, len(stream), expected) and what


def test_decode_frames_checks_each_frames_mac_before_decoding_it():
    header = {m.VERSION: 1, m.SENDER: NODE_ID, m.PORT: 7711, m.FLAGS: 0}
    frame = reference([header])
    good, bad = b"G" * 16, b"B" * 16
    stream = bytearray()
    for trailer in (good, good, bad, good):
        stream += struct.pack(">I", len(frame)) + frame + trailer
    checked = []

    def check(buffer, start, end):
        checked.append((start, end))
        return buffer[end:end + 16] == good
    whole = 4 + len(frame) + 16
    frames, used, problem, what = decode_frames(stream[:-3], 1 << 20, 16, check)
    assert (frames, used, problem) == ([[header], [header]], 2 * whole, FRAME_BAD_MAC)
    assert "MAC" in what
    assert checked == [(i * whole, i * whole + 4 + len(frame)) for i in range(3)]
    # A frame whose MAC has not all arrived waits, unchecked.
    checked.clear()
    frames, used, problem, _ = decode_frames(stream[:whole - 1], 1 << 20, 16, check)
    assert (frames, used, problem, checked) == ([], 0, FRAME_OK, [])


class Format2Link:
    def __init__(self) -> None:
        self.output = PeerOutput(self)
        self.output.format = 2


def sent_in_format_2(msgs: list[dict], early_flush: int = 100) -> list[object]:
    """What one peer's frame carries of ``msgs`` in bus format 2, decoded."""
    links = {NODE_ID: Format2Link()}
    wire = Wire(links, lambda: None, lambda output: None, early_flush)
    for msg in msgs:
        wire.send(NODE_ID, msg)
    out = links[NODE_ID].output.take()
    assert out is not None
    frame = frame_bytes(out, reference({}), sum(map(len, out)))
    return msgpack.unpackb(frame[4:], raw=False)[1:]


def job_id(n: int) -> bytes:
    return b"D-0123abcd-" + b"%024d" % n + b"-05a1"


def test_format_2_sends_a_run_of_messages_of_one_type_as_one_batch():
    ids = [job_id(n) for n in range(20)]
    sent = sent_in_format_2([m.job_message(m.GOTJOB, i) for i in ids])
    assert sent == [[m.BATCH_CODES[m.GOTJOB], 0, *ids]]
    assert m.batch_messages(sent[0]) == [m.job_message(m.GOTJOB, i) for i in ids]


def test_format_2_keeps_the_order_of_a_peer_s_messages():
    msgs = [m.job_message(m.QUEUED, job_id(1)), m.job_message(m.QUEUED, job_id(2)),
            {m.TYPE: m.SETACK, m.ID: job_id(3), m.MAY_HAVE: 2, m.HOLDERS: [NODE_ID]},
            {m.TYPE: m.SETACK, m.ID: job_id(4), m.MAY_HAVE: 0},
            {m.TYPE: m.NEEDJOBS, m.QUEUE: b"q", m.COUNT: 3},  # not batched: a map
            m.job_message(m.QUEUED, job_id(5), m.MFLAG_INCR_NACKS),
            {**m.job_message(m.QUEUED, job_id(6)), m.MOVES: 1},  # a field batches have not
            {m.TYPE: m.REPLJOB, m.JOB: [job_id(7), b"q"], m.MFLAGS: 0},
            {m.TYPE: m.REPLJOB, m.JOB: [job_id(8), b"q"], m.MFLAGS: 0},
            {m.TYPE: m.REPLJOB, m.JOB: [job_id(9), b"q"], m.MFLAGS: m.MFLAG_NOREPLY}]
    sent = sent_in_format_2(msgs)
    assert sent == [[m.BATCH_CODES[m.QUEUED], 0, job_id(1), job_id(2)],
                    [m.BATCH_CODES[m.SETACK], 0, job_id(3), 2, [NODE_ID], job_id(4), 0, None],
                    msgs[4],
                    [m.BATCH_CODES[m.QUEUED], m.MFLAG_INCR_NACKS, job_id(5)],
                    msgs[6],
                    [m.BATCH_CODES[m.REPLJOB], 0, [job_id(7), b"q"], [job_id(8), b"q"]],
                    [m.BATCH_CODES[m.REPLJOB], m.MFLAG_NOREPLY, [job_id(9), b"q"]]]
    decoded = []
    for msg in sent:
        decoded.extend(m.batch_messages(msg) if isinstance(msg, list) else [msg])
    # As the maps would decode, but for an MFLAGS of 0, which a batch leaves out.
    msgs[7].pop(m.MFLAGS)
    msgs[8].pop(m.MFLAGS)
    assert decoded == msgs


def test_format_2_counts_messages_as_they_travel_and_flushes_by_the_core_s_count():
    links = {NODE_ID: Format2Link()}
    full: list[PeerOutput] = []
    wire = Wire(links, lambda: None, full.append, 3)
    for n in range(3):
        wire.send(NODE_ID, m.job_message(m.DELJOB, job_id(n)))
    assert full == [links[NODE_ID].output] and wire.messages == 1


def test_a_batch_that_is_not_well_formed_is_refused_whole():
    good = job_id(1)
    assert m.batch_messages([m.BATCH_CODES[m.DELJOB], 0, good, b"x"]) == "bad id"
    assert m.batch_messages([99, 0, good]) == "unknown batch type 99"
    assert m.batch_messages([m.BATCH_CODES[m.GOTACK], 0, good]) == "batch of GOTACK cut short"
    assert m.batch_messages([m.BATCH_CODES[m.GOTACK], b"0", good, 1]) == "bad flags"
    assert m.batch_messages([m.BATCH_CODES[m.GOTACK], 0, good, b"1"]) == "bad known"
    assert m.batch_messages([m.BATCH_CODES[m.SETACK], 0, good, 1, {}]) == "bad holders"
    assert m.batch_messages([m.BATCH_CODES[m.REPLJOB], 0, good]) == "bad job"
    assert m.batch_messages([1]) == "short batch"
