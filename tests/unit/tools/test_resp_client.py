"""disque/tools/resp_client.py: exact request bytes, every RESP2 reply type,
error replies, and a pipelined round against a real redis-server."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

from disque.tools.resp_client import (
    CommandError,
    Connection,
    PipelinedClient,
    ReplyError,
    ReplyParser,
    ReplyStream,
    connect,
    encode_bulk,
    encode_command,
    open_stream,
)
from tests.support.process import free_port, wait_until

# ------------------------------------------------------------------ encoding


def test_encode_command_sends_bytes_str_and_int_as_bulk_strings():
    assert encode_command(b"GETJOB", "FROM", 7) == (
        b"*3\r\n$6\r\nGETJOB\r\n$4\r\nFROM\r\n$1\r\n7\r\n")


def test_encode_command_is_binary_safe_and_counts_utf8_bytes():
    assert encode_command(b"a\r\nb", "é", b"") == (
        b"*3\r\n$4\r\na\r\nb\r\n$2\r\n\xc3\xa9\r\n$0\r\n\r\n")
    assert encode_command() == b"*0\r\n"


def test_encode_bulk():
    assert encode_bulk(b"D-01") == b"$4\r\nD-01\r\n"
    assert b"*2\r\n" + encode_bulk(b"QLEN") + encode_bulk(b"q") == encode_command(b"QLEN", b"q")


# ------------------------------------------------------------------ parsing


@pytest.mark.parametrize("data, value", [
    (b"+OK\r\n", b"OK"),
    (b":42\r\n", 42),
    (b":-1\r\n", -1),
    (b"$5\r\na\r\nbc\r\n", b"a\r\nbc"),
    (b"$0\r\n\r\n", b""),
    (b"$-1\r\n", None),
    (b"*-1\r\n", None),
    (b"*0\r\n", []),
    (b"*3\r\n$1\r\nq\r\n:1\r\n*2\r\n+a\r\n$-1\r\n", [b"q", 1, [b"a", None]]),
])
def test_reply_parser_reads_every_reply_type(data, value):
    assert ReplyParser().parse(data) == value


def test_reply_parser_returns_error_replies_as_values():
    reply = ReplyParser().parse(b"-NOREPL Not enough reachable nodes\r\n")
    assert isinstance(reply, ReplyError)
    assert str(reply) == "NOREPL Not enough reachable nodes"


def test_reply_parser_refuses_an_incomplete_reply():
    with pytest.raises(ValueError):
        ReplyParser().parse(b"$5\r\nab")


# ------------------------------------------------------------------ asyncio, without a socket


class _Transport:
    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True


def test_reply_stream_hands_over_replies_in_order_across_chunks():
    got, lost = [], []
    stream = ReplyStream(lambda s, reply: got.append((s.in_flight, reply)),
                         lambda s, exc: lost.append(s.in_flight))
    transport = _Transport()
    stream.connection_made(transport)
    stream.send(b"three commands", 3)
    assert transport.written == b"three commands" and stream.in_flight == 3
    for chunk in (b"+D-1\r\n-ERR x", b"\r\n:7", b"\r\n"):
        stream.data_received(chunk)
    assert [count for count, _ in got] == [2, 1, 0]
    assert got[0][1] == b"D-1" and isinstance(got[1][1], ReplyError) and got[2][1] == 7
    stream.send(b"one more", 1)
    stream.connection_lost(None)
    assert lost == [1]
    stream.close()
    assert transport.closed


async def test_pipelined_client_splits_replies_across_requests_and_chunks():
    client = PipelinedClient()
    transport = _Transport()
    client.connection_made(transport)
    first = client.request(b"two commands", 2)
    second = client.request(b"one command", 1)
    assert transport.written == b"two commandsone command"
    for chunk in (b"+OK\r\n:4", b"2\r\n*2\r\n$1\r\na\r", b"\n*-1\r\n"):
        client.data_received(chunk)
    assert await first == [b"OK", 42]
    assert await second == [[b"a", None]]
    assert client.in_flight == 0


async def test_pipelined_client_fails_pending_requests_on_disconnect():
    client = PipelinedClient()
    client.connection_made(_Transport())
    pending = client.request(b"PING", 1)
    client.connection_lost(None)
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(pending, 1)


# ------------------------------------------------------------------ against servers


@pytest.fixture(scope="module")
def redis_port() -> Iterator[int]:
    """A redis-server on a free loopback port, without persistence."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def answers() -> bool:
            with Connection(port, timeout=1) as conn:
                return conn.call("PING") == b"PONG"
        wait_until(answers, 10, message="redis-server PING on port %d" % port)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_connection_pipeline_returns_replies_in_order(redis_port):
    with Connection(redis_port) as conn:
        conn.call("DEL", "rc:list")
        assert conn.pipeline([("RPUSH", "rc:list", b"a\r\nb", 2), ("LRANGE", "rc:list", 0, -1),
                              ("LLEN", "rc:list"), ("GET", "rc:none")]) == [
            2, [b"a\r\nb", b"2"], 2, None]


def test_connection_raises_on_an_error_reply_and_stays_in_step(redis_port):
    with Connection(redis_port) as conn:
        with pytest.raises(CommandError, match="unknown command"):
            conn.pipeline([("PING",), ("NOSUCHCOMMAND",), ("ECHO", "after")])
        assert conn.call("ECHO", "next") == b"next"


def test_connection_send_only_does_not_wait_for_the_reply(redis_port):
    with Connection(redis_port) as conn:
        conn.send_only("SET", "rc:sent", 1)
    with Connection(redis_port) as conn:
        assert wait_until(lambda: conn.call("GET", "rc:sent"), 5) == b"1"


def test_connection_reports_a_server_that_closes():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        def accept_and_close() -> None:
            peer, _ = listener.accept()
            peer.recv(1024)
            peer.close()
        thread = threading.Thread(target=accept_and_close)
        thread.start()
        with Connection(listener.getsockname()[1], timeout=5) as conn:
            with pytest.raises(ConnectionError):
                conn.call("PING")
        thread.join(5)


async def test_pipelined_round_against_redis(redis_port):
    client = await connect(redis_port)
    try:
        payload = (encode_command(b"DEL", b"rc:q") + encode_command(b"LPUSH", b"rc:q", b"x") * 3
                   + encode_command(b"LPOP", b"rc:q", b"2") + encode_command(b"NOSUCH"))
        replies = await client.request(payload, 6)
        assert replies[:5] == [0, 1, 2, 3, [b"x", b"x"]]
        assert isinstance(replies[5], ReplyError)
    finally:
        client.close()


async def test_reply_stream_counts_replies_against_redis(redis_port):
    done = asyncio.get_running_loop().create_future()
    replies = []

    def on_reply(stream: ReplyStream, reply: object) -> None:
        replies.append(reply)
        if not stream.in_flight:
            done.set_result(None)

    stream = await open_stream(redis_port, on_reply)
    try:
        stream.send(encode_command(b"PING") * 100, 100)
        await asyncio.wait_for(done, 5)
        assert replies == [b"PONG"] * 100
    finally:
        stream.close()
