"""ADDJOB ... HEADER name value (docs/commands.md "Job headers"): the
option's limits and errors, SHOW, GETJOB WITHHEADERS, and the headers' way
over the bus and through the AOF."""

from __future__ import annotations

import msgpack
import pytest

from disque.cluster import messages as m
from disque.commands.addjob import addjob_run
from disque.jobs.codec import BadJobPayload, from_bus, to_bus
from disque.jobs.job import (MAX_HEADER_NAME, MAX_HEADERS, MAX_HEADERS_SIZE, JobExtras,
                             job_headers)
from disque.jobs.records import append_loadjobs
from disque.protocol import errors
from tests.support.aof import decode_payload, first_record, load_into
from tests.unit.helpers import NODE_ID, PEER_ID, Cmd, add_peer, deliver, make_node

SYNTAX = "ERR syntax error"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def cmd():
    return Cmd(make_node())


def _headers(count: int, value: str = "v") -> list[str]:
    words = []
    for i in range(count):
        words += ["HEADER", "h%d" % i, value]
    return words


# ------------------------------------------------------------ the option

def test_headers_reach_the_job_in_their_order(cmd):
    job_id = cmd.addjob("q", "b", "HEADER", "traceparent", TRACEPARENT, "header", "tenant", "",
                        "RETRY", 7)
    job = cmd.node.state.jobs.by_id[job_id]
    assert job_headers(job) == (b"traceparent", TRACEPARENT.encode(), b"tenant", b"")
    assert job.retry == 7


def test_a_plain_job_has_no_headers_and_no_extras(cmd):
    job = cmd.node.state.jobs.by_id[cmd.addjob("q", "b")]
    assert job.ext is None and job_headers(job) is None


@pytest.mark.parametrize("words, error", [
    (["HEADER"], SYNTAX),
    (["HEADER", "a"], SYNTAX),
    (["RETRY", "5", "HEADER", "a"], SYNTAX),
    (["HEADER", "", "v"], "ERR HEADER name must be 1 to 256 bytes"),
    (["HEADER", "n" * (MAX_HEADER_NAME + 1), "v"], "ERR HEADER name must be 1 to 256 bytes"),
    (_headers(MAX_HEADERS + 1), "ERR too many HEADERs: a job has at most 32"),
    (["HEADER", "a", "v" * MAX_HEADERS_SIZE],
     "ERR HEADERs too large: names and values of a job add up to at most 8192 bytes"),
    (["HEADER", "a", "1", "HEADER", "b", "2", "HEADER", "a", "3"],
     "ERR HEADER name given twice"),
])
def test_header_errors_add_nothing(cmd, words, error):
    assert cmd.error("ADDJOB", "q", "b", 0, *words) == error
    assert not cmd.node.state.jobs.by_id


def test_the_limits_themselves_are_allowed(cmd):
    at_most = cmd.addjob("q", "b", *_headers(MAX_HEADERS))
    assert len(job_headers(cmd.node.state.jobs.by_id[at_most])) == 2 * MAX_HEADERS
    name = "n" * MAX_HEADER_NAME
    exact = cmd.addjob("q", "b", "HEADER", name, "v" * (MAX_HEADERS_SIZE - MAX_HEADER_NAME))
    assert cmd.show(exact)["headers"] == [name.encode(),
                                          b"v" * (MAX_HEADERS_SIZE - MAX_HEADER_NAME)]


def test_the_error_texts_name_the_limits():
    assert b" 256 " in errors.HEADER_NAME_SIZE and MAX_HEADER_NAME == 256
    assert b" 32\r" in errors.HEADERS_TOO_MANY and MAX_HEADERS == 32
    assert b" 8192 " in errors.HEADERS_TOO_LARGE and MAX_HEADERS_SIZE == 8192


def test_header_and_dedupid_keep_extras_not_the_token_alone(cmd):
    job = cmd.node.state.jobs.by_id[cmd.addjob("q", "b", "DEDUPID", "t", "HEADER", "a", "1")]
    assert isinstance(job.ext, JobExtras) and job.ext.dedupid == b"t"
    assert cmd.addjob("q", "other", "DEDUPID", "t", "HEADER", "a", "1") == job.id


def test_a_pipelined_run_gives_each_job_the_headers():
    cmd = Cmd(make_node())
    argv = [b"ADDJOB", b"q", b"b", b"0", b"HEADER", b"k", b"v"]
    replies = []
    assert addjob_run(cmd.node.state, cmd.client, [argv] * 3, 0, replies) == 3
    jobs = [cmd.node.state.jobs.by_id[r[1:-2]] for r in replies]
    assert [job_headers(j) for j in jobs] == [(b"k", b"v")] * 3
    assert len({id(j.ext) for j in jobs}) == 3  # each job its own extras


# ------------------------------------------------------------------- SHOW

def test_show_of_a_plain_job_is_disque_10s(cmd):
    job_id = cmd.addjob("q", "b")
    shown = cmd.ok("SHOW", job_id)
    assert len(shown) == 30 and b"headers" not in shown


def test_show_ends_with_the_headers(cmd):
    job_id = cmd.addjob("q", "b", "HEADER", "a", "1", "HEADER", "b", "2")
    shown = cmd.ok("SHOW", job_id)
    assert shown[-2:] == [b"headers", [b"a", b"1", b"b", b"2"]]
    assert cmd.ok("JSCAN", 0, "REPLY", "all")[1][0] == shown


# ------------------------------------------------------- GETJOB WITHHEADERS

def test_getjob_without_withheaders_is_unchanged_bytes(cmd):
    job_id = cmd.addjob("q", "b", "HEADER", "a", "1")
    assert cmd.raw("GETJOB", "FROM", "q") == (
        b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n" + job_id + b"\r\n$1\r\nb\r\n")


def test_getjob_withheaders_bytes(cmd):
    job_id = cmd.addjob("q", "b", "HEADER", "a", "1")
    assert cmd.raw("GETJOB", "WITHHEADERS", "FROM", "q") == (
        b"*1\r\n*5\r\n$1\r\nq\r\n$40\r\n" + job_id + b"\r\n$1\r\nb\r\n"
        b"$7\r\nheaders\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n")


def test_getjob_withheaders_and_withcounters(cmd):
    with_headers = cmd.addjob("q", "b", "HEADER", "a", "1")
    plain = cmd.addjob("q", "c")
    entries = cmd.ok("GETJOB", "COUNT", 2, "withheaders", "WITHCOUNTERS", "FROM", "q")
    assert entries == [
        [b"q", with_headers, b"b", b"nacks", 0, b"additional-deliveries", 0,
         b"headers", [b"a", b"1"]],
        [b"q", plain, b"c", b"nacks", 0, b"additional-deliveries", 0, b"headers", []]]


def test_a_blocked_getjob_withheaders_gets_them(cmd):
    consumer = Cmd(cmd.node)
    assert consumer.raw("GETJOB", "WITHHEADERS", "FROM", "q") is None
    job_id = cmd.addjob("q", "b", "HEADER", "a", "1")
    assert consumer.sent() == [[[b"q", job_id, b"b", b"headers", [b"a", b"1"]]]]
    counted = Cmd(cmd.node)
    assert counted.raw("GETJOB", "WITHCOUNTERS", "FROM", "q") is None
    job_id = cmd.addjob("q", "b", "HEADER", "a", "1")
    assert counted.sent() == [[[b"q", job_id, b"b", b"nacks", 0,
                                b"additional-deliveries", 0]]]


# --------------------------------------------------------------- the bus

def _over_the_wire(job, now):
    return msgpack.unpackb(msgpack.packb(to_bus(job, now), use_bin_type=True), raw=False)


def test_headers_cross_the_bus(cmd):
    job = cmd.node.state.jobs.by_id[cmd.addjob("q", "b", "HEADER", "traceparent", TRACEPARENT,
                                         "HEADER", "x", "", "PRIORITY", 2, "DEDUPID", "t")]
    copy = from_bus(_over_the_wire(job, cmd.node.state.now), cmd.node.state.now, None)
    assert job_headers(copy) == job_headers(job)
    assert copy.priority == 2 and copy.ext.dedupid == b"t"


def test_a_job_without_headers_travels_as_before(cmd):
    job = cmd.node.state.jobs.by_id[cmd.addjob("q", "b", "MAXDELIVER", 3)]
    fields = to_bus(job, cmd.node.state.now)
    assert "headers" not in fields[12]


def test_a_replica_holds_the_headers_and_serves_them():
    origin = make_node()
    add_peer(origin)
    producer = Cmd(origin)
    assert producer.raw("ADDJOB", "q", "b", 0, "REPLICATE", 2, "HEADER", "a", "1") is None
    ((_, repljob),) = origin.state.outbox.transport.of_type(m.REPLJOB)
    replica = make_node(node_id=PEER_ID)
    add_peer(replica, NODE_ID)
    deliver(replica, NODE_ID, msgpack.unpackb(msgpack.packb(repljob, use_bin_type=True),
                                              raw=False))
    job_id = repljob[m.JOB][0]
    assert Cmd(replica).show(job_id)["headers"] == [b"a", b"1"]


@pytest.mark.parametrize("headers", [
    "a", [b"a"], [b"a", b"1", b"b"], [], [b"a", 1], [b"", b"1"], [b"a", b"1", b"a", b"2"],
    [b"n" * 257, b"v"], [b"a", b"v" * 8192], [b"h%d" % i for i in range(66)],
])
def test_bad_headers_from_the_bus_are_refused(cmd, headers):
    job = cmd.node.state.jobs.by_id[cmd.addjob("q", "b")]
    fields = to_bus(job, cmd.node.state.now) + [{"maxdeliver": 0, "headers": headers}]
    with pytest.raises(BadJobPayload):
        from_bus(fields, cmd.node.state.now, None)


# ---------------------------------------------------------------- the AOF

def _stored(job, now) -> bytes:
    out = bytearray()
    append_loadjobs(out, [job], now)
    argv, end = first_record(bytes(out))
    assert end == len(out)
    return argv[1]


def test_aof_payload_keeps_the_headers(cmd):
    job = cmd.node.state.jobs.by_id[cmd.addjob("q", "b", "HEADER", "a", "1", "HEADER", "b", "")]
    payload = _stored(job, cmd.node.state.now)
    assert payload[0] == 2  # an extended payload
    copy, queued = decode_payload(payload)
    assert queued and job_headers(copy) == (b"a", b"1", b"b", b"")


def test_headers_load_beside_plain_jobs(tmp_path):
    source = make_node(seed=3)
    cmd = Cmd(source)
    plain = [cmd.addjob("q", "p%d" % i) for i in range(5)]
    rich = [cmd.addjob("q", "r%d" % i, "HEADER", "i", str(i)) for i in range(5)]
    out = bytearray()
    append_loadjobs(out, [source.state.jobs.by_id[j] for j in plain + rich], source.state.now)
    (tmp_path / "a.aof").write_bytes(bytes(out))
    node = make_node(seed=4)
    loader = load_into(node, tmp_path / "a.aof")
    assert loader.records == 10
    assert [job_headers(node.state.jobs.by_id[j]) for j in rich] == [
        (b"i", str(i).encode()) for i in range(5)]
    assert all(node.state.jobs.by_id[j].ext is None for j in plain)


def test_a_schedule_gives_every_ticks_job_its_headers():
    from tests.unit.helpers import advance

    node = make_node()
    cmd = Cmd(node)
    cmd.ok("SCHEDULE", "SET", "beat", "EVERY", 1, "q", "hello", "HEADER", "tenant", "acme")
    assert cmd.error("SCHEDULE", "SET", "bad", "EVERY", 1, "q", "b", "HEADER", "a") == SYNTAX
    advance(node, 2500, step=100, cron=True)
    jobs = list(node.state.queues.get(b"q").jobs.iter_from_head())
    assert len(jobs) == 2 and {job_headers(j) for j in jobs} == {(b"tenant", b"acme")}
