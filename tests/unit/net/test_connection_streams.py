"""A command going on in steps through a client connection (fake transports,
a virtual clock for the slices): its reply is made only while the peer
reads, other clients run between slices, the commands after it wait, the
AOF is written before what a slice answers, and maxmemory-clients closes
the client holding the most."""

from __future__ import annotations

import itertools

import pytest

from disque.commands.streams import INLINE_JOBS
from disque.serving.commands import SLICE_BUDGET_NS
from disque.serving.output import WRITE_HIGH_WATER
from disque.net.connection import ClientConnection
from disque.net.replymemory import ReplyMemory
from tests.unit.helpers import Cmd
from tests.unit.net.test_connection import (PING, CountingWriter, FakeTransport, command,
                                            server)  # server: the fixture, used by name

BODY = b"b" * 1000
JOBS = INLINE_JOBS * 8


class PeerTransport(FakeTransport):
    """A transport whose peer reads only when the test says so: writes stay
    buffered, and past the high-water mark the protocol is paused."""

    def __init__(self) -> None:
        super().__init__()
        self.protocol: ClientConnection | None = None
        self.buffered = 0
        self.paused = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        super().write(data)
        self.buffered += len(data)
        if self.buffered > WRITE_HIGH_WATER and not self.paused:
            self.paused = True
            self.protocol.pause_writing()

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def peer_reads(self) -> None:
        """The peer reads everything buffered."""
        self.buffered = 0
        if self.paused:
            self.paused = False
            self.protocol.resume_writing()

    def abort(self) -> None:
        self.aborted = self.closed = True


def connect(server) -> tuple[ClientConnection, PeerTransport]:
    client = ClientConnection(server)
    transport = PeerTransport()
    transport.protocol = client
    client.connection_made(transport)
    return client, transport


@pytest.fixture
def node(server):
    """The server's node on a virtual clock: a slice ends after two steps."""
    ticks = itertools.count()
    server.node.perf_ns = lambda: next(ticks) * (SLICE_BUDGET_NS // 2 + 1)
    cmd = Cmd(server.node)
    for i in range(JOBS):
        cmd.addjob("q", BODY + b"%d" % i)
    return server.node


def run_turns(server, limit: int = 10_000) -> int:
    """End loop turns until nothing more is scheduled; how many ran."""
    turns = 0
    while server.loop.soon:
        server.loop.end_turn()
        turns += 1
        assert turns < limit
    return turns


def test_a_long_reply_is_made_while_the_peer_reads_and_the_others_run_meanwhile(server, node):
    expected = Cmd(node).raw("QPEEK", "q", JOBS)
    reader, transport = connect(server)
    other, other_transport = connect(server)
    reader.data_received(command(b"QPEEK", b"q", b"%d" % JOBS) + PING)
    run_turns(server)
    # The peer does not read: the reply stops near the high-water mark, the
    # rest still to come is the client's memory, and the PING waits.
    assert transport.paused and transport.buffered < 2 * WRITE_HIGH_WATER
    made = b"".join(transport.writes)
    assert expected.startswith(made) and len(made) < len(expected) // 4
    assert reader.stream is not None and not reader.reading
    assert reader.reply_memory() >= len(expected) - len(made)
    other.data_received(PING)
    run_turns(server)
    assert other_transport.writes == [b"+PONG\r\n"]
    # The peer reads: the reply goes on, then the PING behind it.
    while reader.stream is not None:
        transport.peer_reads()
        run_turns(server)
    transport.peer_reads()
    run_turns(server)
    assert b"".join(transport.writes) == expected + b"+PONG\r\n"
    assert reader.reading and reader.reply_memory() == 0


class FsyncThreadWriter(CountingWriter):
    """An AOF writer under appendfsync always whose fsyncs between slices
    finish only when the test says (as the fsync thread's would)."""

    def __init__(self, order: list[str]) -> None:
        super().__init__(order)
        self.fsyncing: list = []

    def flush_then(self, done) -> None:
        self.order.append("aof, fsync in its thread")
        self.fsyncing.append(done)

    def fsynced(self) -> None:
        fsyncing, self.fsyncing = self.fsyncing, []
        for done in fsyncing:
            done()


def test_a_purge_slice_starts_once_the_last_one_is_on_disk_and_others_run_meanwhile(
        server, node):
    order: list[str] = []
    writer = server.aof_writer = FsyncThreadWriter(order)
    client, transport = connect(server)
    transport.write = lambda data: order.append("reply %r" % data)
    other, other_transport = connect(server)
    client.data_received(command(b"QPURGE", b"q") + PING)
    slices = 0
    while writer.fsyncing:
        slices += 1
        left = Cmd(node).ok("QLEN", "q")
        run_turns(server)  # the fsync not done: no next slice, others served
        assert Cmd(node).ok("QLEN", "q") == left
        other.data_received(PING)
        run_turns(server)
        assert not [event for event in order if event.startswith("reply")]  # no count yet
        writer.fsynced()
        run_turns(server)
    assert slices > 2 and len(other_transport.writes) == slices
    replies = [n for n, event in enumerate(order) if event.startswith("reply")]
    assert [order[n] for n in replies] == ["reply b':%d\\r\\n'" % JOBS, "reply b'+PONG\\r\\n'"]
    assert all(order[n - 1] == "aof" for n in replies)
    assert Cmd(node).ok("QLEN", "q") == 0


def test_under_client_reply_off_the_work_is_done_and_nothing_answered(server, node):
    client, transport = connect(server)
    client.data_received(b"CLIENT REPLY OFF\r\n" + command(b"QPEEK", b"q", b"%d" % JOBS)
                         + command(b"QPURGE", b"q") + b"CLIENT REPLY ON\r\n" + PING)
    run_turns(server)
    assert transport.writes == [b"+OK\r\n+PONG\r\n"]
    assert Cmd(node).ok("QLEN", "q") == 0


def test_a_client_closed_meanwhile_stops_its_steps(server, node):
    client, transport = connect(server)
    client.data_received(command(b"GETJOB", b"COUNT", b"%d" % JOBS, b"FROM", b"q"))
    server.loop.end_turn()
    popped = JOBS - Cmd(node).ok("QLEN", "q")
    assert 0 < popped < JOBS
    client.connection_lost(None)
    run_turns(server)
    assert JOBS - Cmd(node).ok("QLEN", "q") == popped and client.stream is None


def test_maxmemory_clients_closes_the_client_holding_the_most(server, node):
    readers = [connect(server) for _ in range(3)]
    for count, (reader, _) in zip((JOBS, JOBS // 2, JOBS // 4), readers):
        reader.data_received(command(b"QPEEK", b"q", b"%d" % count))
    run_turns(server)
    held = [reader.reply_memory() for reader, _ in readers]
    assert held[0] > held[1] > held[2] > 0
    assert server.reply_memory.total >= sum(held)
    server.config.maxmemory_clients = (held[1] + held[2] + 100, 0)  # and the PONGs
    other, other_transport = connect(server)
    other.data_received(PING)  # a write: the account checks the limit
    run_turns(server)
    assert [transport.aborted for _, transport in readers] == [True, False, False]
    assert server.limits.client_memory == 1 and server.reply_memory.total <= held[1] + held[2] + 100
    # As a percentage of maxmemory.
    server.config.maxmemory = 4 * (held[2] + 100)
    server.config.maxmemory_clients = (0, 25)
    other.data_received(PING)
    run_turns(server)
    assert [transport.aborted for _, transport in readers] == [True, True, False]
    assert server.limits.client_memory == 2
    assert other_transport.writes == [b"+PONG\r\n"] * 2


class Holder:
    """A client as the account sees it."""

    def __init__(self, addr: str, held: int) -> None:
        self.addr = addr
        self.noted_memory = 0
        self.held = held
        self.closed = False

    def reply_memory(self) -> int:
        return self.held

    def close_for_memory(self) -> None:
        self.closed = True


def test_the_account_takes_figures_again_before_closing_anyone(server):
    account = ReplyMemory(server.loop, server.config, server.limits)
    server.config.maxmemory_clients = (100, 0)
    small, large, drained = Holder("a", 30), Holder("b", 60), Holder("c", 50)
    for holder in (small, large, drained):
        account.note(holder, holder.held)
    assert account.total == 140 and len(server.loop.soon) == 1  # one check, later
    drained.held = 0  # its transport drained since its figure was taken
    server.loop.end_turn()
    assert not any(holder.closed for holder in (small, large, drained))
    assert account.total == 90 and account.holding == {small, large}
    large.held = 80
    account.note(large, 80)
    server.loop.end_turn()
    assert large.closed and not small.closed
    assert account.total == 30 and server.limits.client_memory == 1
    account.forget(small)
    assert account.total == 0 and not account.holding
    server.config.maxmemory_clients = (0, 0)  # off
    account.note(large, 10 ** 12)
    assert not server.loop.soon


def test_a_request_longer_than_a_read_is_read_one_read_per_loop_turn(server, node):
    client, transport = connect(server)
    request = command(b"DEQUEUE", *[b"D-a1b2c3d4-%024d-05a1" % i for i in range(3000)])
    reads = [request[i:i + 16384] for i in range(0, len(request), 16384)]
    for data in reads[:-1]:
        client.data_received(data)
        assert transport.reading is False  # the rest waits for the next turn
        server.loop.end_turn()
        assert transport.reading is True
    client.data_received(reads[-1])
    run_turns(server)
    assert transport.writes == [b":0\r\n"] and transport.reading is True
    # Reading paused for a reason of its own stays paused.
    client.data_received(reads[0])
    transport.paused = True
    client.pause_writing()
    server.loop.end_turn()
    assert transport.reading is False
    transport.peer_reads()
    assert transport.reading is True
