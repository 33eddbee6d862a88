"""One client's heavy request does not hold every other client up
(real server): a long pipeline is run in slices with other clients served
in between, and JSCAN/QSCAN serve a huge COUNT in bounded calls."""

from __future__ import annotations

import socket

import redis

from disque.commands.queues import MAX_SCAN_COUNT


def _command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _read_lines(sock: socket.socket, count: int) -> list[bytes]:
    data = b""
    while data.count(b"\r\n") < count:
        chunk = sock.recv(1 << 20)
        assert chunk, "connection closed"
        data += chunk
    return data.split(b"\r\n")[:count]


def test_a_ping_is_answered_while_a_long_pipeline_is_still_running(server):
    jobs = 60_000
    heavy = socket.create_connection(("127.0.0.1", server.port))
    heavy.settimeout(60)
    other = server.client(socket_timeout=30)
    assert other.ping()  # connected before the pipeline arrives
    # Each ADDJOB names its own queue, so its reply tells which command it answers.
    heavy.sendall(b"".join(_command(b"ADDJOB", b"q%d" % i, b"body", b"0")
                           for i in range(jobs)))
    assert other.ping()
    # The other client was served before the pipeline was done: not every job exists yet.
    assert other.info("jobs")["registered_jobs"] < jobs
    replies = _read_lines(heavy, jobs)
    assert all(r.startswith(b"+D-") for r in replies)
    # Replies stayed in order: the n-th reply's job is in queue qn.
    client = server.client()
    for i in (0, 1, jobs // 2, jobs - 1):
        show = client.execute_command("SHOW", replies[i][1:].decode())
        assert show[show.index(b"queue") + 1] == b"q%d" % i
    heavy.close()


def test_jscan_serves_a_huge_count_in_bounded_calls_and_misses_no_job(server):
    client = server.client()
    jobs = 2 * MAX_SCAN_COUNT + 17
    pipe = client.pipeline(transaction=False)
    for i in range(jobs):
        pipe.execute_command("ADDJOB", "scanned", "job-%d" % i, 0)
    ids = {i.encode() if isinstance(i, str) else i for i in pipe.execute()}
    seen: set[bytes] = set()
    cursor = b"0"
    calls = 0
    while True:
        cursor, items = client.execute_command("JSCAN", cursor, "COUNT", 1000000000,
                                               "REPLY", "all")
        calls += 1
        assert len(items) <= MAX_SCAN_COUNT
        seen.update(item[1] for item in items)  # "id", <id>, ... of each job
        if cursor in (b"0", 0):
            break
    assert calls > 1
    assert seen == ids
    # BUSYLOOP still iterates to completion in one call (spec: commands.md QSCAN).
    cursor, items = client.execute_command("JSCAN", "COUNT", 1000000000, "BUSYLOOP")
    assert cursor == b"0" and len(items) == jobs


def test_qscan_serves_a_huge_count_in_bounded_calls(server):
    client = server.client()
    pipe = client.pipeline(transaction=False)
    queues = MAX_SCAN_COUNT + 5
    for i in range(queues):
        pipe.execute_command("ADDJOB", "q%d" % i, "x", 0)
    pipe.execute()
    seen: set[bytes] = set()
    cursor = b"0"
    while True:
        cursor, names = client.execute_command("QSCAN", cursor, "COUNT", 1000000000)
        assert len(names) <= MAX_SCAN_COUNT
        seen.update(names)
        if cursor in (b"0", 0):
            break
    assert len(seen) == queues


def test_a_50_mb_addjob_is_stored_intact_and_others_are_served_while_it_arrives(server):
    """A body far larger than a read, made of bytes that look like protocol
    headers, is stored exactly as sent; until its last byte arrives the node
    serves other clients. (How long its completion holds the others is a
    latency, measured by bench.stall's bulk case, not asserted here.)"""
    body = (b"*1234567\r\n$3\r\nabc\r\n*\r\n$" * 2_100_000)[:50_000_000]
    heavy = socket.create_connection(("127.0.0.1", server.port))
    heavy.settimeout(120)
    other = server.client(socket_timeout=60)
    assert other.ping()
    request = _command(b"ADDJOB", b"big", body, b"0", b"REPLICATE", b"1") + _command(b"QLEN", b"big")
    cut = request.index(body) + len(body) + 2  # all of the body and its CRLF, not the rest
    heavy.sendall(request[:cut])
    assert other.ping()
    assert other.execute_command("QLEN", "big") == 0  # the ADDJOB is not complete yet
    heavy.sendall(request[cut:])
    reply, qlen = _read_lines(heavy, 2)
    assert reply.startswith(b"+D-") and qlen == b":1"
    got = server.client(socket_timeout=60).execute_command("GETJOB", "NOHANG", "FROM", "big")
    assert got == [[b"big", reply[1:], body]]
    heavy.close()
