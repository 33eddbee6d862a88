"""Pipelined runs of plain ADDJOBs (``Node.call_run``) answer and change the
node exactly as the same commands sent one at a time do.

Each test sends a pipeline to one server in a single read, and the same
commands one read each to a twin server with the same clock and random
source; the bytes written back and the state shown afterwards must match.
"""

from __future__ import annotations

import itertools
import random

import pytest

from disque.config import Config
from disque.jobs.ids import JobIdGenerator
from disque.server import Server
from tests.unit.helpers import FakeClock
from tests.unit.net.test_connection import FakeLoop, FakeTransport

BODY = b"x" * 64
_twins = itertools.count()


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def resp(*args) -> bytes:
    """One command as a RESP multibulk request."""
    words = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%b\r\n" % (len(w), w) for w in words)


class Twin:
    """A server on fake I/O with a fixed clock, job IDs and jitter."""

    def __init__(self, **settings) -> None:
        config = Config()
        config.cluster_bus_port = 0
        config.cluster_config_file = "nodes-%d.conf" % next(_twins)
        for name, value in settings.items():
            setattr(config, name, value)
        self.server = Server(config, ["disque-server"])
        self.server.loop = FakeLoop()
        node = self.node = self.server.node
        node.state.clock = FakeClock()
        node.state.runtime.random = random.Random(7).random
        node.state.ids = JobIdGenerator(b"0" * 40, random.Random(7))
        node.state.update_memory_limits()

    def connect(self):
        from disque.net.connection import ClientConnection
        client = ClientConnection(self.server)
        transport = FakeTransport()
        client.connection_made(transport)
        return client, transport

    def send(self, client, data: bytes) -> None:
        client.data_received(data)
        self.server.loop.end_turn()

    def written(self, transport) -> bytes:
        out = b"".join(transport.writes).replace(self.node.state.id, b"<node>")
        transport.writes.clear()
        return out


def pipelined_and_one_by_one(commands: list[bytes], after: list[bytes] = (), **settings):
    """Replies (and replies to ``after``, sent one by one) from both twins."""
    results = []
    for pipelined in (True, False):
        twin = Twin(**settings)
        client, transport = twin.connect()
        if pipelined:
            twin.send(client, b"".join(commands))
        else:
            for command in commands:
                twin.send(client, command)
        replies = twin.written(transport)
        for command in after:
            twin.send(client, command)
        results.append((replies, twin.written(transport)))
    return results


def ids_in(replies: bytes) -> list[bytes]:
    return [line[1:] for line in replies.split(b"\r\n") if line.startswith(b"+D-")]


def test_a_run_of_plain_addjobs_matches_one_by_one():
    commands = [resp("ADDJOB", "q", BODY + b"%d" % i, 0) for i in range(40)]
    (piped, piped_state), (single, single_state) = pipelined_and_one_by_one(
        commands, [resp("QLEN", "q"), resp("QPEEK", "q", 40)])
    assert len(ids_in(piped)) == 40
    assert piped == single
    assert piped_state == single_state
    assert piped_state.startswith(b":40\r\n")


def test_commands_a_run_cannot_take_get_the_normal_answer():
    commands = [
        resp("ADDJOB", "q", BODY, 0),
        resp("addjob", "q", BODY, 0),  # another spelling starts another run
        resp("ADDJOB", "q", BODY, 0, "RETRY", 5),
        resp("ADDJOB", "q", BODY, "soon"),
        resp("ADDJOB", "q", BODY, -1),
        resp("ADDJOB", "q", BODY, 5000),
        resp("ADDJOB", "other", BODY, 0),
        resp("QLEN", "q"),
        resp("PAUSE", "q", "in"),
        resp("ADDJOB", "q", BODY, 0),
        resp("ADDJOB", "other", BODY, 0),
        resp("ADDJOB", "q"),
    ]
    (piped, piped_state), (single, single_state) = pipelined_and_one_by_one(
        commands, [resp("QLEN", "other"), resp("INFO", "commandstats")])
    assert piped == single
    assert b"-ERR timeout is not an integer" in piped
    assert b"-PAUSED" in piped
    assert b"-ERR wrong number of arguments" in piped
    assert piped_state.split(b"\r\n")[0] == b":2"
    assert b"cmdstat_addjob:calls=9," in piped_state


def test_a_run_takes_addjobs_with_options_as_one_by_one_does():
    commands = [
        resp("ADDJOB", "q", BODY, 0, "REPLICATE", 1),
        resp("ADDJOB", "q", BODY, 0, "RETRY", 5, "TTL", 60),
        resp("ADDJOB", "q", BODY, 0, "DELAY", 10),
        resp("ADDJOB", "q", BODY, 0, "MAXLEN", 2),
        resp("ADDJOB", "q", BODY, 0, "ASYNC"),
        resp("ADDJOB", "q", BODY, 0, "REPLICATE", 2),
        resp("ADDJOB", "q", BODY, 0, "RETRY", 0),
        resp("ADDJOB", "q", BODY, 0, "TTL", 5, "DELAY", 10),
        resp("ADDJOB", "q", BODY, 0, "BOGUS", 1),
        resp("ADDJOB", "q", BODY, 100, "REPLICATE", 1),
    ]
    (piped, piped_state), (single, single_state) = pipelined_and_one_by_one(
        commands, [resp("QLEN", "q"), resp("INFO", "commandstats")])
    assert piped == single
    assert piped_state.split(b"\r\n")[0] == single_state.split(b"\r\n")[0]
    assert len(ids_in(piped)) == 6
    assert b"-MAXLEN" in piped and b"-NOREPL" in piped and b"-ERR syntax error" in piped
    assert b"Job refused since would never be delivered" in piped  # DELAY >= TTL
    assert piped_state.startswith(b":5\r\n")  # the DELAY one is not queued yet
    assert b"cmdstat_addjob:calls=10," in piped_state


def test_repeated_options_in_a_run_are_each_applied_as_one_by_one():
    """A run parses equal timeouts and options once: what follows must not
    depend on it."""
    same = ("REPLICATE", 1, "RETRY", 60, "TTL", 3600)
    commands = [
        *[resp("ADDJOB", "q", BODY, 0, *same)] * 3,
        resp("ADDJOB", "q", BODY, "soon", *same),  # equal options, bad timeout
        resp("ADDJOB", "q", BODY, 0, "REPLICATE", 1, "RETRY", 60, "TTL", 3601),  # one digit apart
        resp("ADDJOB", "q", BODY, 0, "replicate", 1, "retry", 60, "ttl", 3600),
        *[resp("ADDJOB", "q", BODY, 0, "MAXLEN", 6)] * 3,  # the second and third are refused
        *[resp("ADDJOB", "q", BODY, 0, "TTL", 0)] * 2,  # the same error twice
        resp("ADDJOB", "q", BODY, 0, "DELAY", 5, "TTL", 60),
        resp("ADDJOB", "q", BODY, 0, *same),
    ]
    (piped, piped_state), (single, single_state) = pipelined_and_one_by_one(
        commands, [resp("QLEN", "q"), resp("INFO", "commandstats")])
    assert piped == single
    assert len(ids_in(piped)) == 8
    assert piped.count(b"-MAXLEN") == 2 and piped.count(b"-ERR TTL must be") == 2
    assert b"-ERR timeout is not an integer" in piped
    assert piped_state.startswith(b":7\r\n")  # the DELAY one is not queued yet


def test_a_blocked_consumer_is_served_after_the_first_job_of_the_run():
    twin = Twin()
    consumer, consumer_transport = twin.connect()
    twin.send(consumer, resp("GETJOB", "FROM", "q"))
    producer, producer_transport = twin.connect()
    twin.send(producer, b"".join([resp("ADDJOB", "q", b"first", 0),
                                  resp("ADDJOB", "q", b"second", 0),
                                  resp("ADDJOB", "q", b"third", 0),
                                  resp("QLEN", "q")]))
    replies = twin.written(producer_transport)
    assert len(ids_in(replies)) == 3
    assert replies.endswith(b":2\r\n")
    assert b"first" in twin.written(consumer_transport)


@pytest.mark.parametrize("setup, expect", [
    ({"requirepass": "secret"}, b"-NOAUTH Authentication required.\r\n" * 3),
])
def test_a_node_that_refuses_commands_refuses_each_of_the_run(setup, expect):
    (piped, _), (single, _) = pipelined_and_one_by_one(
        [resp("ADDJOB", "q", BODY, 0)] * 3, **setup)
    assert piped == single == expect


def test_slow_log_logging_every_command_sees_every_command_of_the_run():
    commands = [resp("ADDJOB", "q", BODY, 0)] * 5
    (piped, piped_log), (single, single_log) = pipelined_and_one_by_one(
        commands, [resp("SLOWLOG", "LEN")], slowlog_log_slower_than=0)
    assert piped_log == single_log == b":5\r\n"


def test_monitor_sees_every_command_of_the_run():
    twin = Twin()
    monitor, monitor_transport = twin.connect()
    twin.send(monitor, resp("MONITOR"))
    twin.written(monitor_transport)
    producer, _ = twin.connect()
    twin.send(producer, resp("ADDJOB", "q", b"a", 0) + resp("ADDJOB", "q", b"b", 0))
    lines = twin.written(monitor_transport).split(b"\r\n")
    assert sum(b'"ADDJOB" "q"' in line for line in lines) == 2


def test_memory_above_the_warning_level_gives_the_normal_error_in_a_run():
    twin = Twin(maxmemory=2_000_000)
    client, transport = twin.connect()
    twin.send(client, b"".join([resp("ADDJOB", "q", b"y" * 100_000, 0)] * 40))
    replies = twin.written(transport)
    accepted = len(ids_in(replies))
    assert 0 < accepted < 40
    assert replies.count(b"-NOREPL") == 40 - accepted


def test_client_reply_off_silences_the_run():
    twin = Twin()
    client, transport = twin.connect()
    twin.send(client, resp("CLIENT", "REPLY", "OFF") + resp("ADDJOB", "q", BODY, 0) * 3
              + resp("CLIENT", "REPLY", "ON") + resp("QLEN", "q"))
    assert twin.written(transport) == b"+OK\r\n:3\r\n"


def test_a_renamed_addjob_keeps_its_run_handler():
    twin = Twin()
    twin.node.rename_command("addjob", "put")
    client, transport = twin.connect()
    twin.send(client, resp("PUT", "q", BODY, 0) * 3 + resp("ADDJOB", "q", BODY, 0))
    replies = twin.written(transport)
    assert len(ids_in(replies)) == 3
    assert replies.endswith(b"-ERR unknown command 'ADDJOB'\r\n")
    assert twin.node.run_commands.keys() == {b"put", b"PUT"}
