"""Client connections against fake transports: replies are collected while
the loop runs the read callbacks and written once per client per turn."""

from __future__ import annotations

import asyncio

import pytest

from disque.config import Config
from disque.serving.output import WRITE_HIGH_WATER
from disque.net.connection import ClientConnection
from disque.serving.commands import ClientCommands
from disque.server import Server

PING = b"*1\r\n$4\r\nPING\r\n"


class FakeTransport:
    """Records writes and closes; never applies backpressure."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 40000) if name == "peername" else None

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class FakeLoop:
    """Keeps call_soon callbacks so a test decides when the loop turn ends."""

    def __init__(self) -> None:
        self.soon: list = []

    def call_soon(self, callback, *args) -> None:
        self.soon.append((callback, args))

    def call_later(self, delay: float, callback):
        return self

    def cancel(self) -> None:
        pass

    def end_turn(self) -> None:
        """Run what was scheduled with call_soon, as the loop's next turn would."""
        soon, self.soon = self.soon, []
        for callback, args in soon:
            callback(*args)


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = Config()
    config.cluster_bus_port = 0
    server = Server(config, ["disque-server"])
    server.loop = FakeLoop()
    return server


def connect(server: Server) -> tuple[ClientConnection, FakeTransport]:
    client = ClientConnection(server)
    transport = FakeTransport()
    client.connection_made(transport)
    return client, transport


def test_the_protocol_reads_with_the_cores_callback():
    """asyncio.Protocol has a data_received of its own that does nothing:
    the core's comes first in the connection's bases, or nothing runs."""
    assert ClientConnection.data_received is ClientCommands.data_received
    assert ClientConnection.__mro__.index(ClientCommands) < ClientConnection.__mro__.index(
        asyncio.Protocol)


def test_replies_wait_for_the_end_of_the_loop_turn(server):
    clients = [connect(server) for _ in range(3)]
    for client, _ in clients:
        client.data_received(PING)
    assert all(not transport.writes for _, transport in clients)
    assert len(server.loop.soon) == 1, "one flush per turn, not one per client"
    server.loop.end_turn()
    assert [transport.writes for _, transport in clients] == [[b"+PONG\r\n"]] * 3


def test_replies_of_several_reads_in_one_turn_leave_in_one_write(server):
    client, transport = connect(server)
    client.data_received(PING)
    client.data_received(PING + b"*2\r\n$4\r\nQLEN\r\n$1\r\nq\r\n")
    server.loop.end_turn()
    assert transport.writes == [b"+PONG\r\n+PONG\r\n:0\r\n"]


def test_quit_writes_the_pending_replies_before_closing(server):
    client, transport = connect(server)
    client.data_received(PING + b"*1\r\n$4\r\nQUIT\r\n")
    assert transport.closed
    assert transport.writes == [b"+PONG\r\n+OK\r\n"]
    server.loop.end_turn()  # nothing is written twice or after the close
    assert transport.writes == [b"+PONG\r\n+OK\r\n"]


@pytest.mark.parametrize("request_head", [
    b"POST / HTTP/1.1\r\nHost: 127.0.0.1:7711\r\n",
    b"GET / HTTP/1.1\r\nhost: 127.0.0.1:7711\r\n",  # the first line is only unknown
    b"post /x HTTP/1.0\r\n",
])
def test_an_http_request_closes_the_connection_before_its_body_runs(server, request_head):
    client, transport = connect(server)
    client.data_received(request_head + b"Content-Type: text/plain\r\n\r\n"
                         b"ADDJOB q x 0\r\nCONFIG SET protected-mode no\r\n")
    server.loop.end_turn()
    assert transport.closed
    assert b"".join(transport.writes) in (b"", b"-ERR unknown command 'GET'\r\n")
    assert len(server.node.state.jobs) == 0 and server.config.protected_mode
    assert server.node.state.access_stats.cross_protocol == 1


def test_an_http_request_split_across_reads_runs_nothing_after_post(server):
    client, transport = connect(server)
    client.data_received(b"POST / HTTP/1.1\r\n")
    assert transport.closed
    client.data_received(b"ADDJOB q x 0\r\n")  # bytes already in flight
    server.loop.end_turn()
    assert transport.writes == [] and len(server.node.state.jobs) == 0


def test_protocol_error_reply_precedes_the_close(server):
    client, transport = connect(server)
    client.data_received(PING + b"*1\r\n#4\r\n")
    assert transport.closed
    assert transport.writes == [b"+PONG\r\n-ERR Protocol error: expected '$', got '#'\r\n"]


def test_a_client_gone_before_the_flush_gets_nothing(server):
    gone, gone_transport = connect(server)
    staying, staying_transport = connect(server)
    gone.data_received(PING)
    staying.data_received(PING)
    gone.connection_lost(None)
    server.loop.end_turn()
    assert gone_transport.writes == []
    assert staying_transport.writes == [b"+PONG\r\n"]


def test_aof_records_are_written_before_the_replies(server):
    order: list[str] = []

    class Writer:
        pending = True

        def flush(self) -> None:
            order.append("aof")
            self.pending = False

    server.aof_writer = Writer()
    client, transport = connect(server)
    transport.write = lambda data: order.append("reply")
    client.data_received(PING)
    assert order == []
    server.loop.end_turn()
    assert order == ["aof", "reply"]


class CountingWriter:
    """An AOF writer that logs its flushes (with a record pending each time)."""

    def __init__(self, order: list[str]) -> None:
        self.order = order
        self.pending = True

    def flush(self) -> None:
        self.order.append("aof")


def test_the_aof_is_written_once_per_turn_before_every_client_reply(server):
    order: list[str] = []
    server.aof_writer = CountingWriter(order)
    for n in range(3):
        client, transport = connect(server)
        transport.write = lambda data, n=n: order.append("reply %d" % n)
        client.data_received(PING)
    server.loop.end_turn()
    assert order == ["aof", "reply 0", "reply 1", "reply 2"]


def test_close_writes_the_aof_before_its_last_replies(server):
    order: list[str] = []
    server.aof_writer = CountingWriter(order)
    client, transport = connect(server)
    transport.write = lambda data: order.append("reply")
    client.data_received(PING + b"*1\r\n$4\r\nQUIT\r\n")
    assert order == ["aof", "reply"]
    server.loop.end_turn()
    assert "reply" not in order[2:]  # the batch has nothing left for a closed client


def command(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%b\r\n" % (len(w), w) for w in words)


def test_a_pipeline_past_the_high_water_mark_writes_the_aof_first(server):
    client, transport = connect(server)
    client.data_received(command(b"ADDJOB", b"q", b"x" * 4096, b"0"))
    client.data_received(command(b"QPEEK", b"q", b"1"))
    server.loop.end_turn()
    reply_size = len(transport.writes[-1]) - len(transport.writes[-1].split(b"\r\n", 1)[0]) - 2
    order: list[str] = []
    server.aof_writer = CountingWriter(order)
    transport.write = lambda data: order.append("reply %d" % len(data))
    count = WRITE_HIGH_WATER // reply_size + 2
    client.data_received(command(b"QPEEK", b"q", b"1") * count)
    # The replies that reach the mark leave during the read, AOF first; the rest
    # at the end of the turn, AOF first again.
    early = -(-WRITE_HIGH_WATER // reply_size)
    assert order == ["aof", "reply %d" % (early * reply_size)]
    server.loop.end_turn()
    assert order[2:] == ["aof", "reply %d" % ((count - early) * reply_size)]


GETJOB_FOREVER = [b"GETJOB", b"TIMEOUT", b"0", b"FROM", b"q"]


def _command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join([b"$%d\r\n%s\r\n" % (len(a), a) for a in args])


def test_a_command_that_waited_behind_a_blocked_one_may_block_in_turn(server):
    """Two pipelined GETJOBs on an empty queue: the first blocks, the second
    waits; a job releases the first, and the second, run then, blocks in turn
    (compiled, the connection must read ``blocked`` again after running it)."""
    getjob = _command(*GETJOB_FOREVER)
    addjob = _command(b"ADDJOB", b"q", b"body", b"0")
    consumer, consumer_transport = connect(server)
    producer, _ = connect(server)
    consumer.data_received(getjob + getjob)
    assert consumer.blocked is not None and consumer.pending == [GETJOB_FOREVER]
    producer.data_received(addjob)
    server.loop.end_turn()  # the replies, then the waiting GETJOB, which blocks
    server.loop.end_turn()
    assert len(consumer_transport.writes) == 1 and consumer.blocked is not None
    assert not consumer.pending  # nothing more waits behind it
    producer.data_received(addjob)
    server.loop.end_turn()
    assert len(consumer_transport.writes) == 2 and consumer.blocked is None
