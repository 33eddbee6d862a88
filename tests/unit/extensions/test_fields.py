"""The extensions' job fields (docs/commands.md, "Extensions"): ADDJOB's
options, SHOW, and the fields' way over the bus and through the AOF."""

from __future__ import annotations

import msgpack
import pytest

from disque.jobs.records import append_loadjobs
from disque.config import Config
from disque.jobs.codec import BadJobPayload, from_bus, to_bus
from disque.jobs.record_reader import AofFormatError
from tests.support.aof import decode_payload, first_record
from tests.unit.helpers import NODE_ID, Cmd, make_node

SYNTAX = "ERR syntax error"


@pytest.fixture
def cmd():
    return Cmd(make_node())


def test_plain_job_has_no_extension_fields(cmd):
    job_id = cmd.addjob("q", "body")
    job = cmd.node.state.jobs.by_id[job_id]
    assert job.priority == 5 and job.ext is None
    assert len(cmd.ok("SHOW", job_id)) == 30  # Disque 1.0's reply, byte for byte
    assert len(to_bus(job, cmd.node.state.now)) == 12


@pytest.mark.parametrize("options, error", [
    (["PRIORITY", "10"], "ERR PRIORITY must be between 0 and 9"),
    (["PRIORITY", "-1"], "ERR PRIORITY must be between 0 and 9"),
    (["PRIORITY", "x"], "ERR PRIORITY must be between 0 and 9"),
    (["MAXDELIVER", "-1"], "ERR MAXDELIVER must be between 0 (unlimited) and 65535"),
    (["MAXDELIVER", "65536"], "ERR MAXDELIVER must be between 0 (unlimited) and 65535"),
    (["DEADLETTER", ""], "ERR DEADLETTER must name a queue"),
    (["BACKOFF", "0.5"], "ERR BACKOFF must be a number between 1 and 1000"),
    (["BACKOFF", "nan"], "ERR BACKOFF must be a number between 1 and 1000"),
    (["BACKOFF", "2", "MAXRETRY", "0"], "ERR MAXRETRY must be a number > 0"),
    (["MAXRETRY", "60"], "ERR MAXRETRY is the cap of BACKOFF: give BACKOFF too"),
    (["DEDUPID", ""], "ERR DEDUPID must be 1 to 256 bytes"),
    (["DEDUPID", "x" * 257], "ERR DEDUPID must be 1 to 256 bytes"),
    (["PRIORITY"], SYNTAX),
    (["DEDUPID"], SYNTAX),
    (["NOSUCHOPTION", "1"], SYNTAX),
])
def test_option_errors(cmd, options, error):
    assert cmd.error("ADDJOB", "q", "b", 0, *options) == error
    assert not cmd.node.state.jobs.by_id


def test_options_reach_the_job_and_show(cmd):
    job_id = cmd.addjob("q", "b", "PRIORITY", "9", "MAXDELIVER", "3", "DEADLETTER", "graveyard",
                        "BACKOFF", "2.5", "MAXRETRY", "600", "RETRY", "10", "DEDUPID", "tok-1")
    shown = cmd.show(job_id)
    assert shown["priority"] == 9
    assert shown["maxdeliver"] == 3 and shown["deadletter"] == b"graveyard"
    assert shown["origin-queue"] is None and shown["dead-reason"] is None
    assert shown["backoff"] == b"2.5" and shown["maxretry"] == 600 and shown["retry"] == 10
    assert shown["base-retry"] == 10 and shown["dedupid"] == b"tok-1"


def test_dead_letter_queue_defaults_to_queue_dead(cmd):
    job_id = cmd.addjob("jobs", "b", "MAXDELIVER", "2")
    assert cmd.show(job_id)["deadletter"] == b"jobs:dead"


def test_maxdeliver_default_applies_when_not_given():
    config = Config()
    config.maxdeliver_default = 4
    cmd = Cmd(make_node(config=config))
    plain = cmd.addjob("q", "b")
    explicit = cmd.addjob("q", "b", "MAXDELIVER", "0")
    assert cmd.show(plain)["maxdeliver"] == 4
    assert cmd.show(explicit)["maxdeliver"] == 0
    # The pipelined path of a lone node applies it too.
    replies = []
    from disque.commands.addjob import addjob_run
    addjob_run(cmd.node.state, cmd.client, [[b"ADDJOB", b"q", b"b", b"0"]] * 2, 0, replies)
    assert all(cmd.show(r[1:-2])["maxdeliver"] == 4 for r in replies)


def test_extensions_cross_the_bus(cmd):
    job_id = cmd.addjob("q", "b", "PRIORITY", "0", "MAXDELIVER", "3", "BACKOFF", "2",
                        "DEDUPID", "t")
    job = cmd.node.state.jobs.by_id[job_id]
    job.ext.origin = b"q0"
    job.ext.reason = b"maxdeliver"
    job.ext.moves = 2
    wire = msgpack.unpackb(msgpack.packb(to_bus(job, cmd.node.state.now), use_bin_type=True),
                           raw=False)
    copy = from_bus(wire, cmd.node.state.now, None)
    assert copy.priority == 0
    for name in ("maxdeliver", "deadletter", "origin", "reason", "moves", "backoff",
                 "maxretry", "base_retry", "dedupid"):
        assert getattr(copy.ext, name) == getattr(job.ext, name), name


def test_priority_alone_makes_no_extras(cmd):
    job = cmd.node.state.jobs.by_id[cmd.addjob("q", "b", "PRIORITY", "7")]
    copy = from_bus(to_bus(job, cmd.node.state.now), cmd.node.state.now, None)
    assert copy.priority == 7 and copy.ext is None


@pytest.mark.parametrize("extra", [
    [], {"pri": 10}, {"pri": "9"}, {"maxdeliver": -1}, {"maxdeliver": 1, "backoff": 0.5},
    {"maxdeliver": 1, "deadletter": ""}, {"maxdeliver": 1, "dedupid": 7},
    {"maxdeliver": 1, "moves": 2**40},
])
def test_bad_extensions_are_refused(cmd, extra):
    job = cmd.node.state.jobs.by_id[cmd.addjob("q", "b")]
    fields = to_bus(job, cmd.node.state.now) + [extra]
    with pytest.raises(BadJobPayload):
        from_bus(fields, cmd.node.state.now, None)


def test_older_layout_still_decodes(cmd):
    job = cmd.node.state.jobs.by_id[cmd.addjob("q", "b")]
    copy = from_bus(to_bus(job, cmd.node.state.now), cmd.node.state.now, None)
    assert copy.ext is None and copy.priority == 5


def _stored(job, now):
    out = bytearray()
    append_loadjobs(out, [job], now)
    argv, end = first_record(bytes(out))
    assert end == len(out) and argv[0] == b"LOADJOB"
    return argv[1]


def test_aof_payload_keeps_the_extensions(cmd):
    job_id = cmd.addjob("q", "b\r\nbody", "PRIORITY", "8", "MAXDELIVER", "5", "DEADLETTER",
                        "dl", "BACKOFF", "1.5", "MAXRETRY", "90", "DEDUPID", "tok")
    job = cmd.node.state.jobs.by_id[job_id]
    payload = _stored(job, cmd.node.state.now)
    assert payload[0] == 2
    copy, queued = decode_payload(payload)
    assert queued and copy.body == b"b\r\nbody" and copy.priority == 8
    assert (copy.ext.maxdeliver, copy.ext.deadletter, copy.ext.backoff, copy.ext.maxretry,
            copy.ext.dedupid) == (5, b"dl", 1.5, 90, b"tok")
    assert copy.delivered == (NODE_ID,)


def test_aof_plain_job_keeps_format_1(cmd):
    job = cmd.node.state.jobs.by_id[cmd.addjob("q", "b")]
    payload = _stored(job, cmd.node.state.now)
    assert payload[0] == 1
    assert decode_payload(payload)[0].ext is None


def test_aof_extended_payload_damage_is_reported(cmd):
    job = cmd.node.state.jobs.by_id[cmd.addjob("q", "b", "PRIORITY", "1")]
    payload = _stored(job, cmd.node.state.now)
    with pytest.raises(AofFormatError, match="corrupted job: bad job extensions"):
        decode_payload(payload[:-1] + b"\xc1")  # 0xc1 is never valid msgpack
    with pytest.raises(AofFormatError, match="corrupted job: "):
        decode_payload(payload[:payload.rindex(NODE_ID) + 40])  # the map cut off


@pytest.mark.parametrize("option, value", [
    ("PRIORITY", "0"), ("PRIORITY", "9"), ("PRIORITY", "10"), ("PRIORITY", "-1"),
    ("PRIORITY", "x"), ("PRIORITY", ""), ("DEDUPID", "t"), ("DEDUPID", ""),
    ("DEDUPID", "x" * 257), ("DEDUPID", "x" * 256)])
@pytest.mark.parametrize("timeout", ["0", "10", "x", "-1"])
def test_one_option_fast_path_answers_as_the_generic_path(option, value, timeout):
    """Upper-case PRIORITY or DEDUPID alone takes a shortcut on a lone node; a
    lower-case spelling takes the generic parser: both must answer alike."""
    def outcome(spelling):
        cmd = Cmd(make_node())
        raw = cmd.raw("ADDJOB", "q", "b", timeout, spelling, value)
        if not raw.startswith(b"+"):
            return raw
        shown = cmd.show(raw[1:-2])
        for key in ("id", "ctime", "next-requeue-within", "next-awake-within", "ttl"):
            shown.pop(key)
        again = cmd.raw("ADDJOB", "q", "b", timeout, spelling, value)
        return shown, again == raw, len(cmd.node.state.jobs.by_id)

    fast, generic = outcome(option), outcome(option.lower())
    assert fast == generic


def test_one_option_fast_path_in_a_pipelined_run():
    from disque.commands.addjob import addjob_run
    cmd = Cmd(make_node())
    commands = [[b"ADDJOB", b"q", b"b", b"0", b"DEDUPID", b"t%d" % (i % 3)] for i in range(6)]
    commands += [[b"ADDJOB", b"q", b"b", b"0", b"PRIORITY", b"%d" % i] for i in (1, 9, 12)]
    replies = []
    assert addjob_run(cmd.node.state, cmd.client, commands, 0, replies) == len(commands)
    assert replies[3:6] == replies[0:3]  # the same tokens: the same jobs
    assert replies[-1] == b"-ERR PRIORITY must be between 0 and 9\r\n"
    assert len(cmd.node.state.jobs.by_id) == 5
    assert [cmd.node.state.jobs.by_id[r[1:-2]].priority for r in replies[6:8]] == [1, 9]
