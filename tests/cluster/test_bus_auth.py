"""The authenticated cluster bus through real processes (docs/security.md
"Cluster bus"): with ``cluster-secret`` set, a rogue process that speaks the
bus protocol cannot join, read or delete anything; a node with a wrong
secret cannot join; the secret can be rolled on a running cluster. Also
the bus limits every node has, secret or not: the frame cap and the
handshake timeout.

Each attack is first shown to work on a cluster without a secret, so the
refusals below are the secret's doing and not a malformed attack.
"""

from __future__ import annotations

import os
import socket
import struct
import time

import msgpack
import pytest

from disque.net import busauth
from disque.net.busauth import CHALLENGE_LEN, MAGIC, NONCE_LEN, PROOF_LEN
from tests.support.cluster import BUS_SECURITY
from tests.support.process import DisqueProcess, free_port, wait_until

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(bool(BUS_SECURITY), reason="sets up its own bus security")]

BUS_OFFSET = 10000
SECRET = "3f1c0b6e9d4a27f58e0c1b2a3d4e5f60"
OTHER_SECRET = "a-different-secret-of-32-bytes!!"
NEW_SECRET = "9b8a7c6d5e4f30211203f4e5d6c7b8a9"
ATTACKS = ("meet", "ping", "deljob", "pause", "repljob+enqueue")
ROGUE_ID = b"e" * 40


def secret_config(tmp_path, secret: str = SECRET) -> str:
    """Config lines that give a node the secret through a file only its owner reads."""
    path = tmp_path / ("secret-%s" % secret[:8])
    path.write_text(secret + "\n")
    os.chmod(path, 0o600)
    return "cluster-secret-file %s\n" % path


def frame(obj) -> bytes:
    payload = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def header(sender: bytes, port: int) -> dict:
    return {"v": 1, "sender": sender, "port": port, "flags": 0}


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything received until the peer closed (or reset) the connection."""
    received = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    except ConnectionResetError:
        pass
    return received


def converse(port: int, data: bytes, answer_challenge: bool = False) -> bytes:
    """Connect to the bus of the node on ``port`` as a rogue peer, send
    ``data`` (after a HELLO with made-up proofs when ``answer_challenge``),
    and return everything the node sent until it closed the link."""
    received = b""
    with socket.create_connection(("127.0.0.1", port + BUS_OFFSET), timeout=10) as sock:
        if answer_challenge:
            while len(received) < CHALLENGE_LEN:
                chunk = sock.recv(CHALLENGE_LEN - len(received))
                assert chunk, "the node closed before its challenge"
                received += chunk
            hello = MAGIC + bytes((busauth.VERSION,)) + os.urandom(NONCE_LEN) + b"\x01"
            data = hello + os.urandom(PROOF_LEN) + data
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # already refused
        return received + read_until_closed(sock)


def forged_job_id(real_id: str) -> bytes:
    """A well-formed job ID no node made (the real one with other random bytes)."""
    return (real_id[:11] + "F" * 24 + real_id[35:]).encode()


def attack(cluster, kind: str, job_id: str, answer_challenge: bool = False) -> bytes:
    """Run one attack on node 0, posing as node 1 where a known sender is needed."""
    peer = header(cluster.ids[1].encode(), cluster.port(1))
    if kind == "meet":
        data = frame([header(ROGUE_ID, free_port()), {"type": "MEET", "gossip": []}])
    elif kind == "ping":
        data = frame([header(ROGUE_ID, free_port()), {"type": "PING", "gossip": []}])
    elif kind == "deljob":
        data = frame([peer, {"type": "DELJOB", "id": job_id.encode()}])
    elif kind == "pause":
        data = frame([peer, {"type": "PAUSE", "queue": b"pq", "pause": b"all"}])
    else:
        evil = forged_job_id(job_id)
        fields = [evil, b"eq", b"evil", 2, int(time.time() * 1000), 600, 0, 0, 0, 0, 0,
                  [cluster.ids[1].encode(), cluster.ids[0].encode()]]
        data = frame([peer, {"type": "REPLJOB", "job": fields},
                      {"type": "ENQUEUE", "id": evil, "delay": 0}])
    return converse(cluster.port(0), data, answer_challenge)


def attack_effect(cluster, kind: str, job_id: str, reply: bytes) -> bool:
    """Whether node 0 shows the attack's effect."""
    if kind == "meet":
        return len(cluster.cluster_nodes(0)) > 2
    if kind == "ping":  # the node's ID (and address) revealed to anyone
        return cluster.ids[0].encode() in reply
    if kind == "deljob":
        return cluster.show(0, job_id) is None
    if kind == "pause":
        return cluster.call(0, "PAUSE", "pq", "state") == b"all"
    return cluster.call(0, "QLEN", "eq") == 1


def bus_info(cluster, i: int) -> dict:
    return cluster.info_section(i, "bus")


def config_set(cluster, i: int, name: str, value: str) -> bool:
    return cluster.raw(i, "CONFIG", "SET", name, value) == b"+OK\r\n"


def test_each_attack_works_without_a_secret(cluster_factory):
    """The baseline: what a rogue peer does to a node whose bus has no secret."""
    cluster = cluster_factory(2)
    for kind in ATTACKS:
        job_id = cluster.call(1, "ADDJOB", "q", "precious", 5000, "REPLICATE", 2).decode()
        reply = attack(cluster, kind, job_id)
        # Polled: the node handles the frames as they come, the rogue's EOF last.
        wait_until(lambda: attack_effect(cluster, kind, job_id, reply), 5, interval=0.05,
                   message="the %s attack's effect" % kind)
    assert bus_info(cluster, 0)["bus_secret"] == "no"


def test_a_rogue_peer_without_the_secret_is_refused(cluster_factory, tmp_path):
    cluster = cluster_factory(2, config=secret_config(tmp_path))
    job_id = cluster.call(1, "ADDJOB", "q", "precious", 5000, "REPLICATE", 2).decode()
    assert cluster.holders(job_id) == [0, 1]
    for answer_challenge in (False, True):
        for kind in ATTACKS:
            reply = attack(cluster, kind, job_id, answer_challenge)
            # All the rogue ever reads is the challenge: no ID, no address.
            # The node closed the link before it decoded a frame, so nothing
            # can take effect later: checking once is enough.
            assert len(reply) == CHALLENGE_LEN and reply.startswith(MAGIC), (kind, reply)
            assert not attack_effect(cluster, kind, job_id, reply), kind
    info = bus_info(cluster, 0)
    assert info["bus_secret"] == "yes"
    assert int(info["bus_auth_failures"]) == 2 * len(ATTACKS)
    # The cluster itself is unharmed and still works.
    assert set(cluster.cluster_nodes(0)) == set(cluster.ids)
    assert cluster.show(0, job_id)["body"] == b"precious"
    assert cluster.call(0, "PAUSE", "pq", "state") == b"none"
    new_job = cluster.call(0, "ADDJOB", "q", "after", 5000, "REPLICATE", 2)
    assert cluster.holders(new_job) == [0, 1]
    log = cluster.nodes[0].log_path.read_text()
    assert "bus authentication failed" in log and SECRET not in log


def test_a_node_meeting_a_rogue_reveals_nothing(cluster_factory, tmp_path):
    """CLUSTER MEET towards a rogue listener: the node proves itself (a
    HELLO) but sends no frame until the rogue proves it knows the secret,
    which it cannot; a rogue that skips the handshake is refused too."""
    cluster = cluster_factory(1, config=secret_config(tmp_path))
    for skip_handshake in (False, True):
        fake_port = free_port()  # a new one: retries of the last round go elsewhere
        with socket.socket() as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", fake_port + BUS_OFFSET))
            listener.listen(5)
            listener.settimeout(10)
            assert cluster.call(0, "CLUSTER", "MEET", "127.0.0.1", fake_port) == b"OK"
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(10)
                if skip_handshake:
                    conn.sendall(frame([header(b"ab" * 20, fake_port),
                                        {"type": "PONG", "gossip": []}]))
                else:
                    conn.sendall(MAGIC + bytes((busauth.VERSION,)) + os.urandom(NONCE_LEN))
                    hello = b""
                    while len(hello) < busauth.HELLO_FIXED_LEN + PROOF_LEN:
                        chunk = conn.recv(4096)
                        assert chunk, "closed before the HELLO"
                        hello += chunk
                    assert hello.startswith(MAGIC)
                    conn.sendall(MAGIC + bytes((busauth.VERSION, 0)) + os.urandom(PROOF_LEN))
                rest = read_until_closed(conn)
                assert rest == b"", "the node sent %r to an unauthenticated peer" % rest
            nodes = cluster.cluster_nodes(0)
            assert [n.flags for n in nodes.values() if n.id != cluster.ids[0]] == [
                {"handshake"}]
            shake = next(n for n in nodes.values() if n.id != cluster.ids[0])
            assert cluster.call(0, "CLUSTER", "FORGET", shake.id) == b"OK"
    assert int(bus_info(cluster, 0)["bus_auth_failures"]) >= 2


def test_a_node_with_a_wrong_secret_cannot_join_and_secrets_roll(cluster_factory, tmp_path):
    cluster = cluster_factory(3, config="cluster-secret %s\n" % SECRET, join=False)
    assert config_set(cluster, 2, "cluster-secret", OTHER_SECRET)
    assert cluster.raw(0, "CONFIG", "GET", "cluster-secret") == b"*0\r\n"  # never shown
    assert cluster.call(0, "CLUSTER", "MEET", "127.0.0.1", cluster.port(1)) == b"OK"
    assert cluster.call(1, "CLUSTER", "MEET", "127.0.0.1", cluster.port(2)) == b"OK"
    wait_until(lambda: all(int(cluster.info(i)["cluster_reachable_nodes"]) == 1
                           for i in (0, 1)), 10, message="nodes 0 and 1 joined")
    wait_until(lambda: int(bus_info(cluster, 2)["bus_auth_failures"]) >= 2, 10)
    assert list(cluster.cluster_nodes(2)) == [cluster.ids[2]]  # node 2 learned nothing
    assert cluster.ids[2] not in cluster.cluster_nodes(0)
    assert cluster.ids[2] not in cluster.cluster_nodes(1)

    # The right secret, set at run time: node 2 joins.
    assert config_set(cluster, 2, "cluster-secret", SECRET)
    assert cluster.call(1, "CLUSTER", "MEET", "127.0.0.1", cluster.port(2)) == b"OK"
    cluster.wait_joined()

    def replicates() -> None:
        job_id = cluster.call(0, "ADDJOB", "roll", "x", 5000, "REPLICATE", 3)
        assert len(cluster.holders(job_id)) == 3

    # Roll to NEW_SECRET one node at a time: each keeps accepting the old one.
    for i in range(3):
        assert config_set(cluster, i, "cluster-secret-old", SECRET)
        assert config_set(cluster, i, "cluster-secret", NEW_SECRET)
        cluster.wait_joined()
        replicates()
    # Then drop the old secret everywhere: links made with it open again with the new one.
    for i in range(3):
        assert config_set(cluster, i, "cluster-secret-old", "")
        cluster.wait_joined()
        replicates()
    # A node that only knows the old secret is now refused.
    assert config_set(cluster, 2, "cluster-secret", SECRET)
    wait_until(lambda: int(bus_info(cluster, 2)["bus_links_outbound"]) == 0, 10)
    # Secrets that cannot be used are refused, and the node keeps its own.
    assert cluster.raw(2, "CONFIG", "SET", "cluster-secret-old", SECRET) == b"+OK\r\n"
    assert cluster.raw(2, "CONFIG", "SET", "cluster-secret", "") == (
        b"-ERR cluster-secret-old is set without cluster-secret\r\n")
    assert bus_info(cluster, 2)["bus_secret"] == "yes"


def test_a_frame_above_the_cap_closes_the_link(cluster_factory):
    """The largest frame is proto-max-bulk-len plus 1 MB; jobs of that size
    still replicate."""
    cluster = cluster_factory(2, config="proto-max-bulk-len 1mb\n")
    info = bus_info(cluster, 0)
    assert int(info["bus_max_frame"]) == 2 * 1024 * 1024
    body = b"b" * (1024 * 1024 - 100)
    job_id = cluster.call(0, "ADDJOB", "big", body, 5000, "REPLICATE", 2)
    assert cluster.show(1, job_id)["body"] == body
    with socket.create_connection(("127.0.0.1", cluster.port(0) + BUS_OFFSET), timeout=10) as s:
        s.sendall(struct.pack(">I", 2 * 1024 * 1024 + 1) + b"x" * 1000)
        assert s.recv(16) == b""  # closed without waiting for the rest
    assert int(bus_info(cluster, 0)["bus_frames_too_large"]) == 1
    cluster.wait_joined()


@pytest.mark.parametrize("secret", [False, True], ids=["plain", "secret"])
def test_a_link_that_never_finishes_its_handshake_is_closed(cluster_factory, tmp_path, secret):
    """Within cluster-node-timeout (1 s here): a plain link must send its
    first frame, an authenticated one its HELLO."""
    config = secret_config(tmp_path) if secret else ""
    cluster = cluster_factory(1, config=config, node_timeout=1000)
    port = cluster.port(0) + BUS_OFFSET
    with socket.create_connection(("127.0.0.1", port), timeout=10) as idle, \
            socket.create_connection(("127.0.0.1", port), timeout=10) as partial:
        # A HELLO's first bytes, or a frame's length and first byte.
        partial.sendall(MAGIC + b"\x01" if secret else b"\x00\x00\x00\x20\x92")
        for sock in (idle, partial):
            received = read_until_closed(sock)
            # Nothing but the challenge, then the close.
            assert len(received) == (CHALLENGE_LEN if secret else 0)
    assert int(bus_info(cluster, 0)["bus_handshake_timeouts"]) == 2


def test_secret_files_are_checked_at_start(cluster_factory, tmp_path):
    """An unreadable file stops the start with the reason; a file others can
    read is used, with a warning."""
    node = DisqueProcess(tmp_path / "bad", config="cluster-secret-file %s\n"
                         % (tmp_path / "missing"))
    node.start(wait=False)
    assert node.wait_exit() == 1
    assert "Can't secure the cluster bus: Can't read cluster-secret-file" in node.tail_log()
    shared = tmp_path / "shared-secret"
    shared.write_text(SECRET + "\n")
    os.chmod(shared, 0o644)
    cluster = cluster_factory(2, config="cluster-secret-file %s\n" % shared)
    assert bus_info(cluster, 0)["bus_secret"] == "yes"
    log = cluster.nodes[0].log_path.read_text()
    assert "can be read by other users (mode 644)" in log and SECRET not in log
