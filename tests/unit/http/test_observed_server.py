"""/metrics and the dashboard read of the server only what ``ObservedServer``
names: here they run against a stand-in with exactly those members and no
``__dict__``, so reaching for anything else fails."""

from __future__ import annotations

from disque.http.dashboard import Sampler, build_stats
from disque.http.metrics import server_registry
from disque.node import Node
from tests.unit.helpers import make_node
from tests.unit.http.test_metrics import scrape, value


class StandInServer:
    """The members of ``ObservedServer``, and nothing else."""

    __slots__ = ("node", "config", "start_time", "clients", "connections_received",
                 "rejected_connections", "net_input_bytes", "net_output_bytes", "aof_writer")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.config = node.state.config
        self.start_time = 1_700_000_000.0
        self.clients = {1: None, 2: None}
        self.connections_received = 3
        self.rejected_connections = 1
        self.net_input_bytes = 100
        self.net_output_bytes = 200
        self.aof_writer = None

    def info_fields(self, section: str) -> list[tuple[str, object]]:
        if section == "limits":
            return [("client_memory_limit_closed", 2), ("clients_reply_memory", 5000)]
        return [("used_memory_rss", 4096)] if section == "memory" else []


def test_metrics_read_what_the_protocol_names() -> None:
    families = scrape(server_registry(StandInServer(make_node())))
    assert value(families, "disque_connected_clients") == 2
    assert value(families, "disque_connections_received_total") == 3
    assert value(families, "disque_net_output_bytes_total") == 200
    assert value(families, "disque_clients_reply_memory_bytes") == 5000
    assert value(families, "disque_client_memory_limit_closed_total") == 2
    assert "disque_aof_enabled" not in families


def test_the_dashboard_reads_what_the_protocol_names() -> None:
    stats = build_stats(StandInServer(make_node()), Sampler(), 0.0)
    assert stats["node"]["connected_clients"] == 2
    assert stats["memory"]["rss"] == 4096
    assert stats["aof"]["enabled"] is False and stats["aof"]["size_human"] is None
