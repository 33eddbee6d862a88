"""disque.client against real servers: HELLO node choice, failover, chunked pipelining.

They start processes, so they live here and not in tests/unit, whose run
(``make test-fast``) does no I/O."""

from __future__ import annotations

import pytest
from redis.exceptions import AuthenticationError, ResponseError

from disque.client import (AddJobEncoder, DisqueClient, DisqueError, NodeAddress, NoNodeAvailable,
                           parse_nodes)
from tests.support.process import free_port, wait_until


def _hello_priorities(proc) -> dict[int, int]:
    reply = proc.call("HELLO")
    return {int(entry[2]): int(entry[3]) for entry in reply[2:]}


@pytest.fixture
def pair(server_factory):
    """Two joined nodes, each seeing the other with priority 1."""
    a, b = server_factory(name="a"), server_factory(name="b")
    assert a.call("CLUSTER", "MEET", "127.0.0.1", b.port) == b"OK"
    for proc in (a, b):
        wait_until(lambda: _hello_priorities(proc) == {a.port: 1, b.port: 1}, timeout=15,
                   message="both nodes in HELLO of %d" % proc.port)
    return a, b


def test_parse_nodes():
    assert parse_nodes("h1:7000, h2 ,[::1]:7002") == [
        NodeAddress("h1", 7000), NodeAddress("h2", 7711), NodeAddress("::1", 7002)]
    assert parse_nodes([("h", 1), "x:2"]) == [NodeAddress("h", 1), NodeAddress("x", 2)]
    with pytest.raises(ValueError):
        parse_nodes(" , ")


def test_connects_through_any_seed_and_learns_the_cluster(pair):
    a, b = pair
    dead = free_port()
    with DisqueClient("127.0.0.1:%d,127.0.0.1:%d" % (dead, b.port)) as client:
        assert client.connect() == NodeAddress("127.0.0.1", b.port)
        assert {n.port for n in client.known} == {a.port, b.port}
        assert client.node_id == b.call("CLUSTER", "MYID").decode()


def test_prefers_the_lowest_hello_priority(pair):
    a, b = pair
    assert a.call("CLUSTER", "LEAVING", "yes") == b"OK"
    wait_until(lambda: _hello_priorities(a)[a.port] == 100, message="a reporting itself leaving")
    with DisqueClient("127.0.0.1:%d,127.0.0.1:%d" % (a.port, b.port)) as client:
        assert client.connect() == NodeAddress("127.0.0.1", b.port)
        assert [(n.port, n.priority) for n in client.known] == [(b.port, 1), (a.port, 100)]
        # Asking the leaving node first still ends on the healthy one.
        assert client.add_job("q", b"x", replicate=1).startswith("D-")
        assert b.call("QLEN", "q") == 1


def test_fails_over_on_connection_error(pair):
    a, b = pair
    client = DisqueClient("127.0.0.1:%d" % a.port)  # b is learned through HELLO
    try:
        assert client.connect().port == a.port
        client.add_job("q", b"on a", replicate=1)
        a.kill()
        job_id = client.add_job("q", b"on b", replicate=1)
        assert client.node.port == b.port and client.failovers >= 1
        assert b.call("SHOW", job_id) is not None
    finally:
        client.close()


def test_fails_over_on_leaving_reply(pair):
    a, b = pair
    client = DisqueClient("127.0.0.1:%d,127.0.0.1:%d" % (a.port, b.port), use_hello=False)
    try:
        assert client.connect().port == a.port
        assert a.call("CLUSTER", "LEAVING", "yes") == b"OK"
        # A blocking GETJOB with nothing to serve on a leaving node replies -LEAVING.
        assert client.get_jobs("work", timeout_ms=200) == []
        assert client.node.port == b.port and client.failovers == 1
        job_id = client.add_job("work", b"on b", replicate=1)
        assert [j.id for j in client.get_jobs("work", nohang=True)] == [job_id]
    finally:
        client.close()


def test_pipeline_sends_leaving_commands_again_to_another_node(pair):
    a, b = pair
    job_id = b.call("ADDJOB", "work", "on b", 0, "REPLICATE", 1).decode()
    client = DisqueClient("127.0.0.1:%d,127.0.0.1:%d" % (a.port, b.port), use_hello=False)
    try:
        assert client.connect().port == a.port
        assert a.call("CLUSTER", "LEAVING", "yes") == b"OK"
        replies = client.pipeline([("QLEN", "work"), ("GETJOB", "TIMEOUT", 200, "FROM", "work")])
        assert replies[0] == 0  # answered by a, kept
        assert replies[1][0][1].decode() == job_id  # -LEAVING from a, then served by b
        assert client.node.port == b.port and client.failovers == 1
    finally:
        client.close()


def test_pipeline_out_of_nodes_returns_the_leaving_replies(server_factory):
    lone = server_factory()
    lone.call("CLUSTER", "LEAVING", "yes")
    client = DisqueClient("127.0.0.1:%d" % lone.port)
    try:
        replies = client.pipeline([("PING",), ("GETJOB", "TIMEOUT", 100, "FROM", "q")])
        assert replies[0] == b"PONG"
        assert isinstance(replies[1], ResponseError) and str(replies[1]).startswith("LEAVING")
    finally:
        client.close()


def test_gives_up_after_every_node_failed(server_factory):
    lone = server_factory()
    lone.call("CLUSTER", "LEAVING", "yes")
    client = DisqueClient("127.0.0.1:%d" % lone.port)
    with pytest.raises(DisqueError, match="LEAVING This node is leaving the cluster"):
        client.get_jobs("q", timeout_ms=100)
    client.close()
    with pytest.raises(NoNodeAvailable):
        DisqueClient("127.0.0.1:%d" % free_port()).connect()


def test_pipelines_addjob_and_ackjob_in_chunks(server, monkeypatch):
    client = DisqueClient("127.0.0.1:%d" % server.port)
    chunks = []
    real = client.connection._pipeline_once

    def recording(commands):
        # A command is an argv tuple, or bytes already RESP-encoded (*n, $len, name, ...).
        chunks.append([c.split(b"\r\n")[2].decode() if isinstance(c, bytes) else c[0]
                       for c in commands])
        return real(commands)

    monkeypatch.setattr(client.connection, "_pipeline_once", recording)
    ids = client.add_jobs([("bulk", b"job %d" % i) for i in range(1234)], chunk_size=100,
                          retry=42, ttl=600)
    assert [len(c) for c in chunks] == [100] * 12 + [34]
    assert len(set(ids)) == 1234 and server.call("QLEN", "bulk") == 1234
    assert client.show(ids[-1])["body"] == b"job 1233"
    assert {client.show(i)["retry"] for i in ids[::100]} == {42}

    jobs = client.get_jobs("bulk", count=1234, nohang=True, withcounters=True)
    assert len(jobs) == 1234 and (jobs[0].nacks, jobs[0].additional_deliveries) == (0, 0)
    chunks.clear()
    assert client.ack_jobs([j.id for j in jobs], chunk_size=500) == 1234
    # 1234 IDs in ACKJOBs of at most 500, all in one round trip.
    assert chunks == [["ACKJOB", "ACKJOB", "ACKJOB"]]
    assert server.call("QLEN", "bulk") == 0
    client.close()


def test_per_job_errors_come_back_in_place(server):
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        client.add_job("short", b"1")
        replies = client.add_jobs([("short", b"2"), ("other", b"3")], maxlen=1)
        assert isinstance(replies[0], ResponseError)
        assert str(replies[0]) == "MAXLEN Queue is already longer than the specified MAXLEN count"
        assert replies[1].startswith("D-")
        with pytest.raises(ResponseError, match="BADID"):
            client.ack_jobs(["nope"])


def test_job_entries_come_raw_from_pipelined_getjobs(server, monkeypatch):
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        ids = client.add_jobs([("raw", b"job %d\r\n" % i) for i in range(2500)], retry=30)
        client.nack([client.get_jobs("raw", nohang=True)[0].id])  # the first job, NACKed once
        rounds = []
        recording = client.connection._pipeline_once
        monkeypatch.setattr(client.connection, "_pipeline_once",
                            lambda commands: rounds.append(commands) or recording(commands))
        entries = client.get_job_entries("raw", want=2300, count=1000)
        # COUNT 1000, 1000 and 300 in one round trip.
        assert [[c[3] for c in r] for r in rounds] == [[1000, 1000, 300]]
        assert len(entries) == 2300
        assert [e[1] for e in entries] == [i.encode() for i in ids[:2300]]
        assert entries[0][0] == b"raw" and entries[1][2] == b"job 1\r\n"
        assert (entries[0][3:], entries[1][3:]) == (
            [b"nacks", 1, b"additional-deliveries", 0], [b"nacks", 0, b"additional-deliveries", 0])
        # Fewer queued than wanted: what is there, then empty replies.
        assert len(client.get_job_entries("raw", want=1000, count=150)) == 200
        assert client.get_job_entries("raw", want=10) == []
        assert client.get_job_entries("raw", want=0) == []


def test_encoded_addjobs_go_as_they_are(server):
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        encoder = AddJobEncoder((0, "RETRY", 7, "MAXLEN", 2))
        commands = (encoder.encode("enc", [b"a", b"b\r\nc"])
                    + encoder.encode_each(["enc", "other"], [b"d", b"e"]))
        assert commands[0] == b"*8\r\n$6\r\nADDJOB\r\n$3\r\nenc\r\n$1\r\na\r\n$1\r\n0\r\n" \
            b"$5\r\nRETRY\r\n$1\r\n7\r\n$6\r\nMAXLEN\r\n$1\r\n2\r\n"
        replies = client.pipeline(commands)
        assert isinstance(replies[2], ResponseError) and str(replies[2]).startswith("MAXLEN")
        assert all(replies[i].startswith(b"D-") for i in (0, 1, 3))
        assert [j.body for j in client.qpeek("enc", 10)] == [b"a", b"b\r\nc"]
        assert client.show(replies[3].decode())["retry"] == 7
        # Encoded and argv commands mix in one pipeline.
        mixed = client.pipeline([encoder.encode("mix", [b"x"])[0], ("QLEN", "mix")])
        assert mixed[1] == 1


def test_counters_working_and_scans(server):
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        job_id = client.add_job("c", b"body\r\nwith crlf", retry=30)
        (job,) = client.get_jobs("c", nohang=True, withcounters=True)
        assert job.id == job_id and job.body == b"body\r\nwith crlf"
        assert client.working(job_id) == 30
        assert client.working_many([job_id, "D-00000000-000000000000000000000000-0000"]) \
            .keys() == {job_id, "D-00000000-000000000000000000000000-0000"}
        assert client.nack([job_id]) == 1
        (again,) = client.get_jobs("c", nohang=True, withcounters=True)
        assert again.nacks == 1
        assert [j["id"] for j in client.jscan("c")] == [job_id]
        assert "c" in set(client.qscan())
        assert client.qpeek("c", 1) == []
        assert client.ack_jobs([job_id]) == 1
        assert client.show(job_id) is None


def test_password(server):
    proc = server
    assert proc.call("CONFIG", "SET", "requirepass", "s3cret") == b"OK"
    with DisqueClient("127.0.0.1:%d" % proc.port, password="s3cret") as client:
        assert client.qlen("q") == 0
    with pytest.raises(AuthenticationError, match="Authentication required"):
        DisqueClient("127.0.0.1:%d" % proc.port, use_hello=False).qlen("q")
    with pytest.raises(AuthenticationError):
        DisqueClient("127.0.0.1:%d" % proc.port).connect()


def test_one_line_replies_come_back_raw(server):
    with DisqueClient("127.0.0.1:%d" % server.port) as client:
        encoder = AddJobEncoder((0, "MAXLEN", 2))
        commands = encoder.encode("lines", [b"a", b"b", b"c"]) + encoder.encode("other", [b"d"])
        replies = client.pipeline_lines(b"".join(commands), len(commands))
        lines = replies.split(b"\r\n")
        assert replies.endswith(b"\r\n") and len(lines) == 5 and lines[4] == b""
        assert [line[:3] for line in lines[:4]] == [b"+D-", b"+D-", b"-MA", b"+D-"]
        # Many replies arrive in several reads.
        many = AddJobEncoder((0,)).encode("many", [b"x"] * 3000)
        assert client.pipeline_lines(b"".join(many), 3000).count(b"\r\n+D-") == 2999
        assert client.execute("QLEN", "lines") == 2  # the connection is in step


def test_one_line_replies_move_to_another_node_when_the_connection_drops(pair):
    a, b = pair
    client = DisqueClient("127.0.0.1:%d,127.0.0.1:%d" % (a.port, b.port), use_hello=False)
    try:
        assert client.connect().port == a.port
        client.execute("CLIENT", "SETNAME", "writer")
        killed = [line for line in a.call("CLIENT", "LIST").decode().splitlines()
                  if "name=writer" in line]
        a.call("CLIENT", "KILL", killed[0].split("addr=")[1].split()[0])
        command = AddJobEncoder((0, "REPLICATE", 1)).encode("moved", [b"x"])[0]
        replies = client.pipeline_lines(command, 1)
        assert replies.startswith(b"+D-") and client.failovers == 1
    finally:
        client.close()
