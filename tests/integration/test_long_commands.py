"""Long commands through a real server (docs/commands.md "Long commands",
docs/security.md "Limits"): a QPURGE, QPEEK, GETJOB COUNT, SHOW or ACKJOB
about many jobs goes on in steps while other clients are served; a reply
is made only as its client reads it; maxmemory-clients closes the client
whose unread replies hold the most.
"""

from __future__ import annotations

import socket

import hiredis
import pytest

from tests.support.process import wait_until

BODY = b"j" * 1000
CLOSED_LOG = r"closed: its replies not yet sent held"


def command(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%b\r\n" % (len(w), w) for w in words)


def fill(node, queue: bytes, count: int, body: bytes = BODY) -> list[bytes]:
    """``count`` jobs in ``queue``, added by pipelines; their IDs."""
    ids: list[bytes] = []
    client = node.client()
    for start in range(0, count, 5000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(count, start + 5000)):
            pipe.execute_command("ADDJOB", queue, body + b"%d" % i, 0)
        ids += pipe.execute()
    return ids


def idle_reader(node, request: bytes) -> socket.socket:
    """A connection that sends ``request`` and reads nothing (yet)."""
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=30)
    sock.sendall(request)
    return sock


def read_replies(sock: socket.socket, count: int = 1) -> list:
    """Read ``count`` whole replies (hiredis parses them)."""
    reader = hiredis.Reader()
    sock.settimeout(30)
    replies: list = []
    while len(replies) < count:
        reply = reader.gets()
        if reply is not False:
            replies.append(reply)
            continue
        data = sock.recv(1 << 20)
        assert data, "the connection closed before the reply"
        reader.feed(data)
    return replies


def read_reply(sock: socket.socket):
    """Read one whole reply."""
    return read_replies(sock)[0]


def limits(node) -> dict:
    return node.call("INFO", "limits")


def rss(node) -> int:
    return node.call("INFO", "memory")["used_memory_rss"]


def test_a_purge_of_a_long_queue_lets_other_clients_in_and_journals_what_it_counts(
        server_factory):
    node = server_factory("appendonly yes\nappendfsync always\n")
    count = 60_000
    fill(node, b"q", count)
    kept = node.call("ADDJOB", "other", "k", 0)
    lengths: list[int] = []
    with socket.create_connection(("127.0.0.1", node.port), timeout=60) as purger:
        purger.sendall(command(b"QPURGE", b"q"))
        client = node.client()

        def purged() -> bool:
            lengths.append(client.execute_command("QLEN", "q"))
            return lengths[-1] == 0
        wait_until(purged, timeout=60, interval=0.001, message="the queue purged")
        assert read_reply(purger) == count
    # Another client ran while the purge went on: it saw the queue part purged.
    assert any(0 < length < count for length in lengths), lengths[:5]
    # What it answered was journaled: nothing comes back after a crash.
    node.kill()
    node.start()
    assert node.call("QLEN", "q") == 0 and node.call("JSCAN", "QUEUE", "q")[1] == []
    assert node.call("SHOW", kept) is not None


def test_clients_reading_nothing_make_no_copy_of_their_long_replies(server):
    count = 20_000
    fill(server, b"q", count)
    big = server.call("ADDJOB", "big", b"B" * (30 << 20), 0)
    before = rss(server)
    readers = [idle_reader(server, command(b"QPEEK", b"q", b"%d" % count)) for _ in range(6)]
    readers += [idle_reader(server, command(b"SHOW", big)) for _ in range(6)]
    # What their replies hold is counted (less what the sockets' buffers took)...
    wait_until(lambda: limits(server)["clients_reply_memory"] > 6 * (10 << 20) + 6 * (20 << 20),
               message="the replies counted")
    # ...but not made: 6 QPEEKs of 20 MB and 6 SHOWs of a 30 MB job, in pieces
    # as their clients read them, the job's body written as it is.
    assert rss(server) - before < 60 << 20, (before, rss(server))
    assert server.call("PING") is True
    # Each gets the whole reply, in order, with what it sent behind it.
    readers[0].sendall(b"PING\r\n")
    entries, pong = read_replies(readers[0], 2)
    assert [entry[2] for entry in entries] == [BODY + b"%d" % i for i in range(count)]
    assert pong == b"PONG"
    show = read_reply(readers[-1])
    assert show[show.index(b"body") + 1] == b"B" * (30 << 20)
    for sock in readers:
        sock.close()
    wait_until(lambda: limits(server)["clients_reply_memory"] == 0,
               message="the closed clients' replies let go of")


def held_by(node, socks: list[socket.socket]) -> list[int]:
    """What the replies not yet sent to these clients hold (CLIENT LIST's omem)."""
    omem = {}
    for line in node.call("CLIENT", "LIST").decode().splitlines():
        fields = dict(field.split("=", 1) for field in line.split())
        omem[fields["addr"]] = int(fields["omem"])
    return [omem.get("127.0.0.1:%d" % sock.getsockname()[1], 0) for sock in socks]


@pytest.mark.expect_log(CLOSED_LOG)
def test_maxmemory_clients_closes_the_client_whose_replies_hold_the_most(server):
    fill(server, b"q", 20_000)
    # Replies of about 21, 11 and 5 MB, less what the sockets' buffers take.
    readers = [idle_reader(server, command(b"QPEEK", b"q", b"%d" % count))
               for count in (20_000, 10_000, 5_000)]
    held = wait_until(lambda: (lambda held: held if all(held) else None)(
        held_by(server, readers)), message="the replies under way")
    largest, middle, smallest = readers
    assert held[0] > held[1] > held[2]
    # Under a limit below the three together, the largest goes.
    limit = held[1] + held[2] + (1 << 20)
    assert server.call("CONFIG", "SET", "maxmemory-clients", str(limit)) == b"OK"
    assert server.call("CONFIG", "GET", "maxmemory-clients") == {
        b"maxmemory-clients": str(limit).encode()}
    wait_until(lambda: limits(server)["client_memory_limit_closed"] == 1,
               message="the largest closed")
    with pytest.raises((ConnectionResetError, AssertionError)):
        read_reply(largest)  # closed: reset, or closed before the reply's end
    assert len(read_reply(middle)) == 10_000
    assert len(read_reply(smallest)) == 5_000
    assert limits(server)["client_memory_limit_closed"] == 1
    assert limits(server)["maxmemory_clients"] == limit
    # As a percentage of maxmemory, as in Redis 7 (the default: 100%).
    assert server.call("CONFIG", "SET", "maxmemory-clients", "50%") == b"OK"
    assert server.call("CONFIG", "GET", "maxmemory-clients") == {b"maxmemory-clients": b"50%"}
    assert limits(server)["maxmemory_clients"] == (1 << 30) // 2
    for sock in readers:
        sock.close()


def test_getjob_count_and_commands_on_many_ids(server):
    fill(server, b"a", 3000)
    fill(server, b"b", 1000)
    client = server.client()
    jobs = client.execute_command("GETJOB", "NOHANG", "COUNT", 2500, "WITHCOUNTERS",
                                  "FROM", "a", "b")
    assert len(jobs) == 2500
    # Round-robin, one job per queue per round, while both have some.
    assert [job[0] for job in jobs[:2000]] == [b"a", b"b"] * 1000
    assert all(job[0] == b"a" for job in jobs[2000:])
    ids = [job[1] for job in jobs]
    assert client.execute_command("ACKJOB", *ids) == 2500
    rest = [entry[1] for entry in client.execute_command("QPEEK", "a", 5000)]
    assert len(rest) == 1500
    assert client.execute_command("FASTACK", *rest[:1200]) == 1200
    with pytest.raises(Exception, match="BADID"):
        client.execute_command("DELJOB", *rest[1200:], "D-not-an-id")
    assert client.execute_command("DELJOB", *rest[1200:], *ids) == 300
    assert client.execute_command("QLEN", "a") == client.execute_command("QLEN", "b") == 0
