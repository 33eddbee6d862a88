"""The cluster config file (nodes.conf): text ↔ node table, no I/O.

spec: cluster-bus.md §2. Same line format as CLUSTER NODES; handshake
nodes are not saved; ``myself`` marks this node's own line. Versions
before the tables file (``process/tablefile.py``) kept the schedules there
too, as ``schedule`` lines after the nodes: they are read once, to move
them.
"""

from __future__ import annotations

from typing import Final

from disque.cluster.membership import (FAIL, FLAGS_BY_NAME, HANDSHAKE, LEAVING, MYSELF, NOADDR,
                                       PFAIL, ClusterNode, Membership)
from disque.cluster.schedulerecord import CONF_LINE, Schedule, parse_line

_PERSISTED_FLAGS: Final = MYSELF | LEAVING | PFAIL | FAIL | NOADDR


class NodesConfError(ValueError):
    """The file cannot be used; the server refuses to start."""


def render(membership: Membership) -> str:
    """File content for the current table."""
    return "".join(n.render(with_bus_port=True) + "\n" for n in membership.nodes.values()
                   if not n.flags & HANDSHAKE)


def parse(text: str, now_ms: int) -> list[ClusterNode]:
    """Nodes listed in ``text``; exactly one carries MYSELF."""
    nodes = []
    seen_myself = False
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0] == "vars" or fields[0] == CONF_LINE:
            continue
        if len(fields) != 6 or len(fields[0]) != 40:
            raise NodesConfError("Unrecoverable error: corrupted cluster config file, line %d"
                                 % number)
        node_id, addr, flag_words, ping_sent, pong_received, _ = fields
        addr, _, bport = addr.partition("@")
        host, sep, port = addr.rpartition(":")
        if not sep or not port.isdigit() or (bport and not bport.isdigit()):
            raise NodesConfError("Invalid address in cluster config file, line %d" % number)
        flags = 0
        if flag_words != "noflags":
            for word in flag_words.split(","):
                if word not in FLAGS_BY_NAME:
                    raise NodesConfError("Unknown flag in cluster config file: %s" % word)
                flags |= FLAGS_BY_NAME[word]
        flags &= _PERSISTED_FLAGS
        node = ClusterNode(node_id.encode(), host, int(port), flags, now_ms)
        node.bport = int(bport) if bport else 0
        node.ping_sent = now_ms if ping_sent != "0" else 0
        node.pong_received = now_ms if pong_received != "0" else 0
        if flags & MYSELF:
            if seen_myself:
                raise NodesConfError("Two 'myself' lines in the cluster config file")
            seen_myself = True
        nodes.append(node)
    if nodes and not seen_myself:
        raise NodesConfError("Myself node definition not found in cluster config file")
    return nodes


def parse_schedules(text: str) -> list[Schedule]:
    """The schedules listed in ``text`` (by a version before the tables file)."""
    schedules = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if fields and fields[0] == CONF_LINE:
            s = parse_line(fields)
            if s is None:
                raise NodesConfError("Invalid schedule in cluster config file, line %d"
                                     % number)
            schedules.append(s)
    return schedules


def restore(membership: Membership, nodes: list[ClusterNode], port: int) -> None:
    """Load parsed nodes into a fresh table; self keeps its IP, takes the current port."""
    for node in nodes:
        if node.flags & MYSELF:
            myself = membership.myself
            myself.ip = node.ip
            myself.flags = node.flags
            myself.port = port
        else:
            membership.add(node)
    membership.update_reachable()
