"""A client connection needs of its server only what ``ConnectionServer``
names: here it runs against a stand-in with exactly those members and no
``__dict__``, so reaching for anything else fails."""

from __future__ import annotations

import socket

from disque.serving.interfaces import LimitCounters
from disque.net.connection import ClientConnection
from disque.serving.batch import OutputBatch
from disque.net.replymemory import ReplyMemory
from disque.node import Node
from tests.unit.helpers import make_node
from tests.unit.net.test_connection import PING, FakeLoop, FakeTransport

GETJOB = b"*5\r\n$6\r\nGETJOB\r\n$7\r\nTIMEOUT\r\n$3\r\n100\r\n$4\r\nFROM\r\n$1\r\nq\r\n"
ADDJOB = b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$4\r\nbody\r\n$1\r\n0\r\n"


class StandInServer:
    """The members of ``ConnectionServer``, and nothing else."""

    __slots__ = ("node", "config", "clients", "output_batch", "reply_memory", "limits",
                 "clients_paused",
                 "output_limited", "connections_received", "rejected_connections",
                 "net_input_bytes", "net_output_bytes", "client_id", "armed")

    def __init__(self, node: Node, loop: FakeLoop) -> None:
        self.node = node
        self.config = node.state.config
        self.clients: dict[int, ClientConnection] = {}
        self.output_batch = OutputBatch(loop, lambda: None)
        self.limits = LimitCounters()
        self.reply_memory = ReplyMemory(loop, self.config, self.limits)
        self.clients_paused = False
        self.output_limited = False
        self.connections_received = 0
        self.rejected_connections = 0
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.client_id = 0
        self.armed = 0

    def next_client_id(self) -> int:
        self.client_id += 1
        return self.client_id

    def arm_timer(self) -> None:
        self.armed += 1

    def flush_aof_then(self, done) -> None:
        done()

    def tune_tcp_socket(self, sock: socket.socket) -> None:
        raise AssertionError("a fake transport has no socket")


def test_a_connection_runs_on_what_the_protocol_names() -> None:
    loop = FakeLoop()
    server = StandInServer(make_node(), loop)
    waiting = ClientConnection(server)
    waiting_transport = FakeTransport()
    waiting.connection_made(waiting_transport)
    producer = ClientConnection(server)
    producer_transport = FakeTransport()
    producer.connection_made(producer_transport)
    assert server.clients == {waiting.id: waiting, producer.id: producer}

    waiting.data_received(GETJOB + PING)  # blocks; the PING waits behind it
    producer.data_received(ADDJOB)
    loop.end_turn()  # the replies of the turn, then the blocked client's pending PING
    loop.end_turn()
    assert producer_transport.writes[0].startswith(b"+D-")
    reply = b"".join(waiting_transport.writes)
    assert reply.startswith(b"*1\r\n") and reply.endswith(b"+PONG\r\n")
    assert server.connections_received == 2
    assert server.net_input_bytes == len(GETJOB + PING + ADDJOB)
    assert server.net_output_bytes == len(reply) + len(producer_transport.writes[0])
    assert "cmd=ping" in waiting.describe(server.node.state.now)

    server.config.client_query_buffer_limit = 8
    producer.data_received(b"*1\r\n$100\r\n" + b"x" * 20)  # holds more than the limit allows
    assert producer_transport.closed and server.limits.query_buffer == 1
    producer.connection_lost(None)
    waiting.close()
    waiting.connection_lost(None)
    assert server.clients == {} and server.armed
