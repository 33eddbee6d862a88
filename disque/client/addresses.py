"""Where Disque nodes listen: ``NodeAddress`` and the parsing of seed lists."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

DEFAULT_PORT = 7711
DEFAULT_SEED = "127.0.0.1:7711"
# HELLO priority of a failing or leaving node (spec: commands.md §3 HELLO).
PRIORITY_FAILING = 10


@dataclass(frozen=True)
class NodeAddress:
    """Where a node listens, and what HELLO told us about it."""

    host: str
    port: int
    node_id: str | None = field(default=None, compare=False)
    priority: int = field(default=1, compare=False)

    @classmethod
    def parse(cls, text: str) -> "NodeAddress":
        """``host:port``, ``host`` (port 7711), or ``[v6addr]:port``."""
        text = text.strip()
        if not text:
            raise ValueError("empty node address")
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            port = rest.lstrip(":") or DEFAULT_PORT
        elif text.count(":") == 1:
            host, port = text.split(":")
        else:
            host, port = text, DEFAULT_PORT
        return cls(host, int(port))

    def __str__(self) -> str:
        return "%s:%d" % (self.host, self.port)


def parse_nodes(nodes: str | Sequence[str | NodeAddress | tuple[str, int]]) -> list[NodeAddress]:
    """Seed nodes from ``"h1:p1,h2:p2"``, a list of such strings, or (host, port) pairs."""
    if isinstance(nodes, str):
        nodes = [part for part in nodes.split(",") if part.strip()]
    out: list[NodeAddress] = []
    for node in nodes:
        if isinstance(node, NodeAddress):
            out.append(node)
        elif isinstance(node, tuple):
            out.append(NodeAddress(node[0], int(node[1])))
        else:
            out.append(NodeAddress.parse(node))
    if not out:
        raise ValueError("no Disque node given")
    return out
