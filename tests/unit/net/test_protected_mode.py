"""Protected mode and locality at the connection adapter, with fake
transports (the real-network check, from another network namespace, is in
tests/integration/test_acl.py and needs root)."""

from __future__ import annotations

import pytest

from disque.commands.access import PROTECTED_MODE_DENIED
from disque.config import Config
from disque.net.connection import ClientConnection
from disque.server import Server
from tests.unit.net.test_connection import FakeLoop, FakeTransport

DEBUG_FLUSHALL = b"*2\r\n$5\r\nDEBUG\r\n$8\r\nFLUSHALL\r\n"


class PeerTransport(FakeTransport):
    """A fake transport whose peer is ``peer`` (a tuple, or '' for the unix socket)."""

    def __init__(self, peer) -> None:
        super().__init__()
        self.peer = peer

    def get_extra_info(self, name: str):
        return self.peer if name == "peername" else None


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = Config()
    config.cluster_bus_port = 0
    config.enable_debug_command = "local"
    server = Server(config, ["disque-server"])
    server.loop = FakeLoop()
    return server


def connect(server: Server, peer) -> tuple[ClientConnection, PeerTransport]:
    client = ClientConnection(server)
    transport = PeerTransport(peer)
    client.connection_made(transport)
    return client, transport


def test_a_remote_client_of_an_open_node_is_denied_and_closed(server):
    client, transport = connect(server, ("10.1.2.3", 5555))
    assert transport.writes == [PROTECTED_MODE_DENIED] and transport.closed
    assert client.id not in server.clients
    assert server.node.state.access_stats.protected_mode_denied == 1
    client.connection_lost(None)  # the close completes: nothing else to undo


@pytest.mark.parametrize("peer", [("127.0.0.1", 5555), ("::1", 5555, 0, 0), ""])
def test_loopback_and_the_unix_socket_are_local(server, peer):
    client, transport = connect(server, peer)
    assert client.local and not transport.closed
    client.data_received(DEBUG_FLUSHALL)  # enable-debug-command local
    server.loop.end_turn()
    assert transport.writes == [b"+OK\r\n"]


def test_a_remote_client_is_let_in_once_the_node_has_a_password(server):
    server.config.requirepass = "pw"
    client, transport = connect(server, ("10.1.2.3", 5555))
    assert not transport.closed and not client.local
    client.data_received(b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n" + DEBUG_FLUSHALL)
    server.loop.end_turn()
    assert transport.writes[0].startswith(b"+OK\r\n-ERR DEBUG command not allowed.")


def test_protected_mode_no_lets_remote_clients_in(server):
    server.config.protected_mode = False
    client, transport = connect(server, ("10.1.2.3", 5555))
    assert not transport.closed and client.id in server.clients
