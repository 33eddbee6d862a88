"""disque.worker's parts that need no server: leases, delays, log lines, task
registration, the CLI's parsing, a failure's NACK reason, and the client's
argument building and NACK DELAY/REASON fallback (a client whose commands
are recorded, not sent)."""

from __future__ import annotations

import io
import json
import logging

import pytest
from redis.exceptions import ResponseError

from disque.client import (ConnectionSecurity, DisqueClient, NodeAddress, addjob_args,
                           addjob_options)
from disque.client.errors import is_badid
from disque.worker import AsyncioWorker, ThreadedWorker, WorkerOptions
from disque.worker.backoff import Backoff, nack_delay
from disque.worker.cli import build_worker, parse_args
from disque.worker.engine import failure_reason
from disque.worker.events import Event, JsonFormatter, KeyValueFormatter, configure, kv_value
from disque.worker.leases import RENEW_FRACTION, LeaseBook
from disque.worker.tasks import TaskRegistry, load_target


def plain_handler(job):
    return job


async def async_handler(job):
    return job


# -- leases ------------------------------------------------------------------------

def test_lease_first_working_after_fetch_then_a_third_of_the_retry():
    book = LeaseBook(working_after=0.25)
    book.hold("a", now=10.0)
    book.hold("b", now=10.1)
    assert book.next_due() == 10.25
    assert book.due(10.2) == []
    assert book.due(10.3) == ["a"]
    book.renewed("a", retry=3, now=10.3)
    assert book.next_due() == pytest.approx(10.35)
    assert sorted(book.due(11.31)) == ["a", "b"]
    assert book.due(10.3 + 3 * RENEW_FRACTION - 0.01) == ["b"]


def test_lease_ends_with_the_job_and_for_retry_zero():
    book = LeaseBook(working_after=1.0)
    book.hold("a", 0.0)
    book.hold("b", 0.0)
    book.renewed("a", retry=0, now=1.0)  # RETRY 0: never requeued, nothing to postpone
    assert "a" not in book and len(book) == 1
    book.release("b")
    book.renewed("b", retry=5, now=1.0)  # acked while its WORKING was on the way
    assert book.next_due() is None and len(book) == 0


# -- delays --------------------------------------------------------------------------

@pytest.mark.parametrize("nacks, expected", [(None, 2), (0, 2), (1, 4), (3, 16), (10, 60),
                                             (10**6, 60)])
def test_nack_delay_doubles_per_nack_up_to_the_cap(nacks, expected):
    assert nack_delay(nacks, base=2, cap=60) == expected


def test_nack_delay_zero_base_is_a_plain_nack_and_short_bases_round_up():
    assert nack_delay(5, base=0, cap=60) == 0
    assert nack_delay(0, base=0.3, cap=60) == 1


def test_backoff_doubles_to_its_cap_and_resets():
    backoff = Backoff(first=0.1, cap=0.35)
    assert [backoff.next() for _ in range(4)] == [0.1, 0.2, 0.35, 0.35]
    backoff.reset()
    assert backoff.next() == 0.1


# -- log lines -----------------------------------------------------------------------

def _record(event: Event, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord("disque.worker", level, __file__, 1, event, None, None)


def test_key_value_line_quotes_what_would_break_it():
    event = Event("job.failed", {"id": "D-1", "error": 'ValueError: a "b" = c', "ms": 1.23456,
                                 "body": b"x y", "empty": ""})
    line = KeyValueFormatter().format(_record(event))
    assert line.split(" ", 1)[0].startswith("ts=")
    assert line.split(" ", 1)[1] == (
        'level=warning event=job.failed id=D-1 error="ValueError: a \\"b\\" = c" ms=1.235 '
        'body="x y" empty=""')
    assert str(event).startswith("job.failed id=D-1 error=")  # what other formatters show


def test_json_line_has_the_same_keys():
    line = JsonFormatter().format(_record(Event("job.done", {"id": "D-1", "node": NodeAddress(
        "127.0.0.1", 7711)}), logging.INFO))
    document = json.loads(line)
    assert document["level"] == "info" and document["event"] == "job.done"
    assert document["id"] == "D-1" and document["node"] == "127.0.0.1:7711"


def test_configure_writes_one_line_per_event():
    logger = logging.getLogger("disque.worker")
    level, propagate = logger.level, logger.propagate
    stream = io.StringIO()
    handler = configure("json", logging.INFO, stream)
    try:
        logger.info(Event("worker.started", {"queues": "a,b"}))
        logger.debug(Event("job.done", {}))  # below the level
        logger.info("plain %s", "text")
    finally:  # as it was: other tests read the worker's events through caplog
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["worker.started", "log"]
    assert lines[1]["message"] == "plain text"
    with pytest.raises(ValueError):
        configure("xml")


def test_kv_value_formats():
    assert kv_value(3) == "3" and kv_value(0.5) == "0.500" and kv_value("a=b") == '"a=b"'


# -- tasks ----------------------------------------------------------------------------

def test_registry_keeps_one_handler_per_queue_of_the_right_kind():
    registry = TaskRegistry(coroutines=False)
    registry.add("q1", plain_handler)
    with pytest.raises(ValueError, match="already has a handler"):
        registry.add("q1", plain_handler)
    with pytest.raises(TypeError, match="coroutine function"):
        registry.add("q2", async_handler)
    assert registry.queues() == ["q1"] and registry.handler("q1") is plain_handler
    with pytest.raises(TypeError, match="not async def"):
        TaskRegistry(coroutines=True).add("q", plain_handler)


def test_worker_task_decorator_registers_and_returns_the_function():
    worker = ThreadedWorker("127.0.0.1:1")
    decorated = worker.task("emails")(plain_handler)
    assert decorated is plain_handler
    assert worker.tasks.handlers == {"emails": plain_handler}
    aworker = AsyncioWorker("127.0.0.1:1", concurrency=2)
    aworker.task("thumbs")(async_handler)
    assert aworker.options.concurrency == 2 and aworker.tasks.queues() == ["thumbs"]


def test_load_target():
    assert load_target("tests.unit.test_worker:plain_handler") is plain_handler
    assert load_target("disque.worker.leases:LeaseBook.hold") is LeaseBook.hold
    for bad in ("tests.unit.test_worker", "tests.unit.test_worker:", ":x",
                "tests.unit.test_worker:missing"):
        with pytest.raises(ValueError):
            load_target(bad)


def test_options_validation_and_capacity():
    assert WorkerOptions(concurrency=3).capacity == 6
    assert WorkerOptions(concurrency=3, prefetch=0).capacity == 3
    for bad in ({"concurrency": 0}, {"prefetch": -1}, {"poll_ms": 0}):
        with pytest.raises(ValueError):
            WorkerOptions(**bad)
    with pytest.raises(TypeError):
        ThreadedWorker("h:1", WorkerOptions(), concurrency=2)


# -- CLI --------------------------------------------------------------------------------

def test_cli_picks_the_worker_by_the_function_kind():
    args = parse_args(["tests.unit.test_worker:async_handler", "-q", "a", "--queue", "b",
                       "--cluster", "h1:1,h2:2", "--concurrency", "7", "--nack-delay", "0"])
    worker = build_worker(args)
    assert isinstance(worker, AsyncioWorker)
    assert worker.tasks.queues() == ["a", "b"] and worker.nodes == "h1:1,h2:2"
    assert worker.options.concurrency == 7 and worker.options.nack_delay == 0
    threaded = build_worker(parse_args(["tests.unit.test_worker:plain_handler", "-q", "a"]))
    assert isinstance(threaded, ThreadedWorker)
    with pytest.raises(SystemExit):
        parse_args(["tests.unit.test_worker:plain_handler"])  # --queue is required


def test_cli_tls_and_user_flags_fall_back_to_the_environment(monkeypatch):
    monkeypatch.setenv("DISQUE_TLS_CA_CERT_FILE", "/env/ca.crt")
    monkeypatch.setenv("DISQUE_USER", "env-user")
    monkeypatch.setenv("DISQUE_PASSWORD", "env-pw")
    monkeypatch.setenv("DISQUE_TLS_INSECURE", "no")
    worker = build_worker(parse_args([
        "tests.unit.test_worker:plain_handler", "-q", "a", "--tls-cert-file", "/c.crt",
        "--tls-key-file", "/c.key", "--user", "flag-user"]))
    security = worker.options.security
    assert security == ConnectionSecurity(
        tls=False, tls_ca_cert_file="/env/ca.crt", tls_cert_file="/c.crt",
        tls_key_file="/c.key", user="flag-user", password="env-pw")
    assert security.uses_tls
    client = worker._client()
    assert client.security is security and client.username == "flag-user"
    monkeypatch.setenv("DISQUE_TLS", "perhaps")
    with pytest.raises(ValueError, match="DISQUE_TLS must be true or false"):
        build_worker(parse_args(["tests.unit.test_worker:plain_handler", "-q", "a"]))


# -- the client's side -------------------------------------------------------------------

def test_addjob_options_extensions_and_disque_1_0_form():
    assert addjob_options() == ()
    assert addjob_args("q", b"x", 0, replicate=2, retry=5, async_=True) == (
        "ADDJOB", b"q", b"x", 0, "REPLICATE", 2, "RETRY", 5, "ASYNC")
    assert addjob_options(priority=9, maxdeliver=3, deadletter="dead", backoff=2,
                          maxretry=60, dedupid="t-1") == (
        "PRIORITY", 9, "MAXDELIVER", 3, "MAXRETRY", 60, "DEADLETTER", b"dead",
        "BACKOFF", "2.0", "DEDUPID", b"t-1")


class RecordingClient(DisqueClient):
    """A DisqueClient whose commands are recorded and answered like this server
    (``supported``) or a Disque 1.0 node (every word after NACK is checked as a job ID)."""

    def __init__(self, supported: bool) -> None:
        super().__init__("127.0.0.1:1")
        self.supported = supported
        self.sent: list[tuple] = []
        self.connection.node = NodeAddress("127.0.0.1", 1)

    def connect(self) -> NodeAddress:
        return self.node

    def execute(self, *args):
        self.sent.append(args)
        if not self.supported and (b"DELAY" in args or b"REASON" in args):
            raise ResponseError("BADID Invalid Job ID format.")
        return 0

    def _multi_id(self, command, ids, chunk_size, tail=()):
        return self.execute(command, *ids, *tail)


@pytest.mark.parametrize("supported", [True, False])
def test_nack_with_delay_is_probed_once_and_falls_back_to_plain_nack(supported):
    client = RecordingClient(supported)
    ids = ["D-11111111-aaaaaaaaaaaaaaaaaaaaaaaa-05a1"]
    client.nack(ids, delay=5)
    client.nack(ids, delay=7)
    probes = [c for c in client.sent if c[1] == "D-00000000-000000000000000000000000-0000"]
    assert len(probes) == 1
    nacks = [c for c in client.sent if c not in probes]
    if supported:
        assert nacks == [("NACK", ids[0], b"DELAY", b"5"), ("NACK", ids[0], b"DELAY", b"7")]
    else:
        assert nacks == [("NACK", ids[0])] * 2
    client.nack(ids)
    assert client.sent[-1] == ("NACK", ids[0])


@pytest.mark.parametrize("supported", [True, False])
def test_nack_with_a_reason_is_probed_once_and_falls_back_to_plain_nack(supported):
    client = RecordingClient(supported)
    ids = ["D-11111111-aaaaaaaaaaaaaaaaaaaaaaaa-05a1"]
    client.nack(ids, reason="ValueError: x")
    client.nack(ids, delay=3, reason=b"KeyError: 'k'")
    probes = [c for c in client.sent if c[1] == "D-00000000-000000000000000000000000-0000"]
    assert sorted(c[2] for c in probes) == [b"DELAY", b"REASON"]  # each once
    nacks = [c for c in client.sent if c not in probes]
    if supported:
        assert nacks == [("NACK", ids[0], b"REASON", b"ValueError: x"),
                         ("NACK", ids[0], b"DELAY", b"3", b"REASON", b"KeyError: 'k'")]
    else:
        assert nacks == [("NACK", ids[0])] * 2


def test_a_failover_to_a_disque_1_0_node_drops_both_options():
    client = RecordingClient(True)
    ids = ["D-11111111-aaaaaaaaaaaaaaaaaaaaaaaa-05a1"]
    assert client.supports_nack_delay() and client.supports_nack_reason()
    client.supported = False  # the node that answered the probes is gone
    client.nack(ids, delay=3, reason="x")
    assert client.sent[-2:] == [("NACK", ids[0], b"DELAY", b"3", b"REASON", b"x"),
                                ("NACK", ids[0])]
    client.nack(ids, delay=3, reason="x")
    assert client.sent[-1] == ("NACK", ids[0])


def test_a_failure_reason_is_the_exception_cut_to_whole_characters():
    assert failure_reason("ValueError: caf\u00e9") == "ValueError: café".encode()
    cut = failure_reason("E: " + "é" * 1000)  # 2 bytes each: 1024 ends mid-character
    assert len(cut) == 1023 and cut.decode("utf-8") == "E: " + "é" * 510
    assert failure_reason("E: \udc80") == b"E: \\udc80"  # a lone surrogate, escaped
    assert len(failure_reason("x" * 5000)) == 1024


def test_is_badid():
    assert is_badid(ResponseError("BADID Invalid Job ID format."))
    assert not is_badid(ResponseError("NOJOB Job not known"))


def test_headers_become_header_words_with_the_caller_first():
    from disque.client.arguments import with_headers
    assert addjob_options(headers={"a": "1", b"b": b"2"}) == ("HEADER", b"a", b"1",
                                                              "HEADER", b"b", b"2")
    carried = {"traceparent": "00-x"}
    assert with_headers(None, carried) == carried
    assert with_headers({"k": "v"}, {}) == {"k": "v"}
    assert with_headers({b"traceparent": b"mine"}, carried) == {b"traceparent": b"mine"}
    assert with_headers({"k": "v"}, carried) == {"k": "v", "traceparent": "00-x"}


class NoHeadersNode:
    """The fetcher's client against a node without GETJOB ... WITHHEADERS (Disque
    1.0): the option is refused as a syntax error."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.node = NodeAddress("127.0.0.1", 1)
        self.node_id = "n"
        self.failovers = 0
        self.asked: list[bool] = []

    def rebalance(self):
        return self.node

    def get_jobs(self, *queues, count, timeout_ms, withcounters, withheaders):
        self.asked.append(withheaders)
        if withheaders:
            raise ResponseError("syntax error")  # as redis-py gives it
        if len(self.asked) >= 3:
            self.worker.stop()
        return []

    def close(self) -> None:
        pass


def test_the_fetcher_drops_withheaders_for_a_node_that_refuses_it():
    worker = ThreadedWorker("127.0.0.1:1", concurrency=1, poll_ms=1)
    worker.add_task("q", plain_handler)
    fake = NoHeadersNode(worker)
    worker._client = lambda: fake
    worker._fetch()
    assert fake.asked == [True, False, False]
