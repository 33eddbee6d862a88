"""HELLO and CLUSTER (spec: commands.md §3)."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Final

from disque import __version__
from disque.protocol import errors
from disque.cluster.membership import MYSELF
from disque.commands.access import (MEET_PROTECTED, cluster_secret_set, is_loopback,
                                    needs_auth, protected_mode_refuses_bus)
from disque.commands.acl import authenticate
from disque.commands.admin import CLIENT_BAD_NAME, valid_client_name
from disque.commands.args import parse_int
from disque.protocol.resp import OK, bulk, encode, encode_map, error, status

if TYPE_CHECKING:
    from disque.context.clients import ClientState
    from disque.state.nodestate import NodeState

CLUSTER_SYNTAX: Final = error("ERR Wrong CLUSTER subcommand or number of arguments")
INVALID_NODE_ID: Final = error("ERR Invalid node identifier")
FORGET_MYSELF: Final = error("ERR I tried hard but I can't forget myself...")
LEAVING_SYNTAX: Final = error("ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'")
MAX_MEET_PORT: Final = 55535


def hello(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """HELLO: format version, own ID, then [id, ip, port, priority] per node.

    ``HELLO <protover> [AUTH user pass] [SETNAME name]`` is the handshake
    Redis 6+ clients (redis-py 8 by default) send on connect; it is
    accepted so those clients work, and replies stay RESP2-encoded, which
    RESP3 parsers read too.
    """
    if len(argv) == 1:
        if needs_auth(node.config, client):
            return errors.NOAUTH
        # A client on tls-port is given the ports it can reach: each node's
        # tls-port, learnt from its bus messages (the plain port while unknown).
        tls = client.tls
        entries = [[n.id, n.ip.encode(), str(n.tport if tls and n.tport else n.port).encode(),
                    n.priority()]
                   for n in node.membership.nodes.values()]
        return encode([1, node.id] + entries)
    return _client_handshake(node, client, argv)


def _client_handshake(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    protover = parse_int(argv[1])
    if protover is None or not argv[1]:
        return errors.wrong_arity("hello")
    if protover not in (2, 3):
        return error("NOPROTO sorry, this protocol version is not supported")
    i = 2
    while i < len(argv):
        opt = argv[i].upper()
        if opt == b"AUTH" and i + 2 < len(argv):
            reply = authenticate(node, client, argv[i + 1], argv[i + 2])
            if reply != OK:
                return reply
            i += 3
        elif opt == b"SETNAME" and i + 1 < len(argv):
            if not valid_client_name(argv[i + 1]):
                return CLIENT_BAD_NAME  # as CLIENT SETNAME
            client.name = argv[i + 1]
            i += 2
        else:
            return error("ERR Syntax error in HELLO option '%s'" % argv[i].decode("latin-1"))
    if needs_auth(node.config, client):
        return errors.NOAUTH
    fields = [(b"server", b"disque"), (b"version", __version__.encode()), (b"proto", protover),
              (b"id", client.id), (b"mode", b"cluster"), (b"role", b"master"),
              (b"modules", [])]
    client.protocol = protover
    if protover == 3:
        return encode_map(fields)
    return encode([item for pair in fields for item in pair])


def _meet(node: NodeState, argv: list[bytes]) -> bytes:
    ip = argv[2].decode("latin-1")
    port_arg = argv[3]
    port = parse_int(port_arg)
    if port is None:
        return error("ERR Invalid TCP port specified: %s" % port_arg.decode("latin-1"))
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        address = None
    if address is None or port <= 0 or port > MAX_MEET_PORT:
        return error("ERR Invalid node address specified: %s:%s"
                     % (ip, port_arg.decode("latin-1")))
    config = node.config
    if protected_mode_refuses_bus(config, is_loopback(ip), cluster_secret_set(config)):
        # The bus adapter would refuse the link; the operator learns why here.
        return MEET_PROTECTED
    node.gossip.cluster_meet(str(address), port)
    return OK


def _forget(node: NodeState, node_id: bytes) -> bytes:
    if len(node_id) != 40:
        return INVALID_NODE_ID
    target = node.membership.nodes.get(node_id)
    if target is None:
        return error("ERR Unknown node %s" % node_id.decode("latin-1"))
    if target.flags & MYSELF:
        return FORGET_MYSELF
    node.gossip.cluster_forget(node_id)
    return OK


def _leaving(node: NodeState, argv: list[bytes]) -> bytes:
    if len(argv) == 2:
        return status(b"yes" if node.membership.leaving else b"no")
    value = argv[2].lower()
    if value not in (b"yes", b"no"):
        return LEAVING_SYNTAX
    node.gossip.set_leaving(value == b"yes")
    return OK


def cluster(node: NodeState, client: ClientState, argv: list[bytes]) -> bytes:
    """CLUSTER MEET | NODES | MYID | INFO | SAVECONFIG | FORGET | RESET | LEAVING."""
    sub = argv[1].upper()
    n = len(argv)
    if sub == b"MEET" and n == 4:
        return _meet(node, argv)
    if sub == b"NODES" and n == 2:
        return bulk(node.membership.render_nodes())
    if sub == b"MYID" and n == 2:
        return bulk(node.id)
    if sub == b"INFO" and n == 2:
        return bulk(node.membership.render_info())
    if sub == b"SAVECONFIG" and n == 2:
        problem = node.host.save_cluster_config()
        if problem:
            return error("ERR error saving the cluster node config: %s" % problem)
        return OK
    if sub == b"FORGET" and n == 3:
        return _forget(node, argv[2])
    if sub == b"RESET" and n in (2, 3):
        hard = False
        if n == 3:
            mode = argv[2].upper()
            if mode not in (b"SOFT", b"HARD"):
                return error("ERR syntax error")
            hard = mode == b"HARD"
        node.cluster_reset(hard)
        return OK
    if sub == b"LEAVING" and n in (2, 3):
        return _leaving(node, argv)
    return CLUSTER_SYNTAX


TABLE: Final = (
           ("hello", -1, "rlF", hello),
           ("cluster", -2, "ar", cluster),
       )
