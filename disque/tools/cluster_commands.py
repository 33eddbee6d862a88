"""The subcommands of ``disque-cluster``: create, status, start, restart and stop.

``create`` lays the nodes out (``node_files``) with their configuration
(``node_config``), starts them as daemons (``node_processes``) and joins
them; ``status`` asks each node about itself (``node_queries``); ``start``
and ``restart`` run one node again from its own directory and config, so
it keeps its ``nodes.conf`` (its node ID and the other nodes' addresses)
and rejoins by itself; ``stop`` stops nodes in bounded steps. Each returns
the command's exit status.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from disque.config import Config
from disque.tools.node_config import ConfigProblem, NodeConfig, dashboard_url
from disque.tools.node_files import HOST, NodeFiles, cluster_nodes
from disque.tools.node_processes import (SIGNAL_TIMEOUT_S, LaunchError, port_in_use, port_list,
                                         recorded_pid, start_nodes, stop_nodes, wait_for)
from disque.tools.node_queries import (CLUSTER_MEET, OK, QUERY_ERRORS, answers_ping,
                                       cluster_view, link, node_ids, node_status)

PROGRAM: Final = "disque-cluster"
DEFAULT_DIR: Final = "disque-cluster"
BUS_PORT_OFFSET: Final = 10000   # a node's cluster bus listens on its port + 10000
MAX_PORT: Final = 65535
JOIN_TIMEOUT_S: Final = 30.0


def create(size: int, first_port: int, root: Path, settings: NodeConfig) -> int:
    """Start ``size`` joined nodes on consecutive ports under ``root``, each
    configured with ``settings``."""
    ports = range(first_port, first_port + size)
    if size < 1:
        return _fail("the cluster needs at least one node")
    if first_port < 1 or ports[-1] + BUS_PORT_OFFSET > MAX_PORT:
        return _fail("ports %d-%d do not fit: each node's bus port is its port + %d, at most "
                     "%d, so --port must be between 1 and %d"
                     % (ports[0], ports[-1], BUS_PORT_OFFSET, MAX_PORT,
                        MAX_PORT - BUS_PORT_OFFSET - size + 1))
    listeners = [[(port, "client"), (port + BUS_PORT_OFFSET, "bus"),
                  *settings.listener_ports(index)] for index, port in enumerate(ports)]
    taken: dict[int, str] = {}
    for index, node_ports in enumerate(listeners):
        for port, kind in node_ports:
            name = "the %s port of node %d" % (kind, index + 1)
            if not 1 <= port <= MAX_PORT:
                return _fail("%s would be %d, not a port (1-%d)" % (name, port, MAX_PORT))
            if port in taken:
                return _fail("port %d would be both %s and %s" % (port, taken[port], name))
            taken[port] = name
    existing = cluster_nodes(root)
    running = [node.port for node in existing
               if recorded_pid(node) is not None or answers_ping(node.port)]
    if running:
        return _fail("a cluster is already running in %s (ports %s); stop it first: %s"
                     % (root, port_list(running), _command("stop", root)))
    if existing:
        return _fail("%s holds a stopped cluster's files (ports %s); start its nodes again "
                     "(%s), remove them (rm -r %s) or choose another --dir"
                     % (root, port_list([node.port for node in existing]),
                        _command("start PORT", root), shlex.quote(str(root))))
    busy = ["%d (%s)" % (port, name) for port, name in taken.items() if port_in_use(port)]
    if busy:
        return _fail("ports in use: %s; choose other ports or stop what listens there"
                     % ", ".join(busy))
    nodes = [NodeFiles(port, root.resolve() / str(port)) for port in ports]
    texts = [settings.text(node, index, size) for index, node in enumerate(nodes)]
    try:
        configs = [settings.check(node, text) for node, text in zip(nodes, texts)]
    except ConfigProblem as exc:
        return _fail(str(exc))
    for node, text in zip(nodes, texts):
        node.directory.mkdir(parents=True, exist_ok=True)
        node.config.write_text(text, errors="surrogateescape")
    try:
        start_nodes(nodes)
        _join(nodes)
        ids = node_ids(nodes)
    except (LaunchError, *QUERY_ERRORS) as exc:
        sys.stderr.write("%s: %s\n" % (PROGRAM, exc))
        stop_nodes(nodes, sys.stderr)
        sys.stderr.write("The nodes' files stay in %s for a look; remove them (rm -r %s) "
                         "before the next create.\n" % (root, shlex.quote(str(root))))
        return 1
    _print_created(nodes, ids, configs, root)
    return 0


def _join(nodes: Sequence[NodeFiles]) -> None:
    """MEET the first node with each other one; wait until every node sees all."""
    first = nodes[0]
    with link(first.port) as connection:
        for node in nodes[1:]:
            if connection.call(*CLUSTER_MEET, HOST, node.port) != OK:
                raise LaunchError("CLUSTER MEET %s %d failed on node %d"
                                  % (HOST, node.port, first.port))
    views: dict[int, tuple[int, int]] = {}

    def meshed() -> bool:
        for node in nodes:
            try:
                views[node.port] = cluster_view(node.port)
            except QUERY_ERRORS:
                return False
        return all(view == (len(nodes), len(nodes)) for view in views.values())

    if not wait_for(meshed, JOIN_TIMEOUT_S):
        raise LaunchError("the nodes did not all see each other within %.0f s "
                          "(port: known/reachable nodes) %s"
                          % (JOIN_TIMEOUT_S, ", ".join("%d: %d/%d" % (port, *view)
                                                       for port, view in views.items())))


def _print_created(nodes: Sequence[NodeFiles], ids: Sequence[str], configs: Sequence[Config],
                   root: Path) -> None:
    first = nodes[0].port
    print("Started %d node%s in %s (%s, AOF %s), joined as one cluster:"
          % (len(nodes), "" if len(nodes) == 1 else "s", root, HOST,
             "on" if configs[0].appendonly else "off"))
    for node, node_id in zip(nodes, ids):
        print("  %s:%d  pid %s  id %s  %s" % (HOST, node.port, recorded_pid(node) or "?",
                                            node_id[:8], node.directory))
    print()
    print("Connect:  redis-cli -p %d" % first)
    print("Nodes:    redis-cli -p %d HELLO" % first)
    print('Python:   DisqueClient("%s")' % ",".join("%s:%d" % (HOST, node.port) for node in nodes))
    if configs[0].metrics_port:
        print("Dashboards: %s" % "  ".join(dashboard_url(config.metrics_port, config.tls_port)
                                           for config in configs))
    print("Status:   %s" % _command("status", root))
    print("Stop:     %s   (then rm -r %s removes logs, node IDs and AOFs)"
          % (_command("stop", root), shlex.quote(str(root))))


def status(root: Path) -> int:
    """Print each node's state; 0 if every node is up."""
    nodes = cluster_nodes(root)
    if not nodes:
        return _fail("no cluster in %s (start one with %s)"
                     % (root, _command("create N", root)))
    rows = [node_status(node, recorded_pid(node)) for node in nodes]
    up = sum(row.up for row in rows)
    print("Cluster in %s: %d of %d node%s up" % (root, up, len(rows), "" if len(rows) == 1 else "s"))
    header = ("PORT", "PID", "STATE", "KNOWN", "REACHABLE", "JOBS", "QUEUED", "DASHBOARD")
    table = [header] + [(str(row.port), _shown(row.pid), row.state,
                         _shown(row.known_nodes), _shown(row.reachable_nodes),
                         _shown(row.jobs), _shown(row.queued), row.dashboard or "-")
                        for row in rows]
    widths = [max(len(line[column]) for line in table) for column in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    print("STATE: whether its process answers now; KNOWN: nodes in the node's table; "
          "REACHABLE: those it can replicate to now (a bus link open, not flagged failing), "
          "itself included; JOBS: jobs it holds; QUEUED: jobs in its queues; DASHBOARD: its "
          "metrics port (create --metrics-port).")
    return 0 if up == len(rows) else 1


def _shown(value: int | None) -> str:
    return "-" if value is None else str(value)


def _cluster_node(root: Path, port: int) -> tuple[list[NodeFiles], NodeFiles | None, str]:
    """The cluster's nodes and the one on ``port``; without it, why not."""
    nodes = cluster_nodes(root)
    if not nodes:
        return nodes, None, "no cluster in %s" % root
    for node in nodes:
        if node.port == port:
            return nodes, node, ""
    return nodes, None, ("no node %d in the cluster in %s (its ports: %s)"
                         % (port, root, port_list([node.port for node in nodes])))


def start_node(root: Path, port: int) -> int:
    """Start the stopped node on ``port`` from its own directory and config;
    0 once it answers and it and the other running nodes reach each other."""
    nodes, node, why = _cluster_node(root, port)
    if node is None:
        return _fail(why)
    pid = recorded_pid(node)
    if pid is not None or answers_ping(port):
        return _fail("node %d already runs%s; restart it with %s"
                     % (port, "" if pid is None else " (pid %d)" % pid,
                        _command("restart %d" % port, root)))
    busy = [str(checked) for checked in (port, port + BUS_PORT_OFFSET) if port_in_use(checked)]
    if busy:
        return _fail("node %d cannot start: port %s in use by another process"
                     % (port, " and ".join(busy)))
    # A node killed without SHUTDOWN leaves its pid file; a stale pid there
    # would read as "exited while starting" before the new process writes its own.
    if node.pidfile_pid() is not None:
        node.pidfile.unlink(missing_ok=True)
    try:
        start_nodes([node])
        node_id = node_ids([node])[0]
        _rejoin(node, nodes)
    except (LaunchError, *QUERY_ERRORS) as exc:
        return _fail(str(exc))
    print("  %d: started (pid %s, id %s), reaches the %d other running node%s"
          % (port, recorded_pid(node) or "?", node_id[:8], len(_running(nodes)) - 1,
             "" if len(_running(nodes)) == 2 else "s"))
    return 0


def restart_node(root: Path, port: int) -> int:
    """Stop the node on ``port`` (if it runs), then start it again."""
    nodes, node, why = _cluster_node(root, port)
    if node is None:
        return _fail(why)
    if stop_nodes([node], sys.stdout):
        return _fail("node %d still runs after SIGKILL" % port)
    if not wait_for(lambda: not port_in_use(port) and not port_in_use(port + BUS_PORT_OFFSET),
                    SIGNAL_TIMEOUT_S):
        return _fail("node %d stopped but its ports are still in use" % port)
    return start_node(root, port)


def _running(nodes: Sequence[NodeFiles]) -> list[NodeFiles]:
    """The nodes that answer PING now."""
    return [node for node in nodes if answers_ping(node.port)]


def _rejoin(node: NodeFiles, nodes: Sequence[NodeFiles]) -> None:
    """Wait until ``node`` reaches every other running node and each of them
    reaches it (the restarted node dials the addresses in its nodes.conf)."""
    views: dict[int, int] = {}

    def rejoined() -> bool:
        up = _running(nodes)
        for other in up:
            try:
                views[other.port] = cluster_view(other.port)[1]
            except QUERY_ERRORS:
                return False
        return node in up and all(seen >= len(up) for seen in views.values())

    if not wait_for(rejoined, JOIN_TIMEOUT_S):
        raise LaunchError("node %d started but did not rejoin within %.0f s (port: reachable "
                          "nodes, itself included) %s; its log ends with:\n%s"
                          % (node.port, JOIN_TIMEOUT_S,
                             ", ".join("%d: %d" % item for item in views.items()),
                             node.log_tail()))


def stop(root: Path, port: int | None = None) -> int:
    """Stop every node of the cluster under ``root``, or the one on ``port``;
    0 once none of them runs."""
    if port is None:
        nodes = cluster_nodes(root)
        if not nodes:
            return _fail("no cluster in %s" % root)
    else:
        _, node, why = _cluster_node(root, port)
        if node is None:
            return _fail(why)
        nodes = [node]
    survivors = stop_nodes(nodes, sys.stdout)
    if survivors:
        return _fail("still running after SIGKILL: %s" % port_list(survivors))
    if port is not None:
        print("Start it again with %s (same node ID, from its nodes.conf)."
              % _command("start %d" % port, root))
        return 0
    print("Files kept in %s (logs, nodes.conf%s); rm -r %s removes them."
          % (root, ", AOFs" if any(node.aof.exists() for node in nodes)
             else "", shlex.quote(str(root))))
    return 0


def _command(name: str, root: Path) -> str:
    """How to run another subcommand on the same cluster, spelled as this one
    was run (``.venv/bin/disque-cluster`` when it is not on PATH)."""
    program = sys.argv[0] if os.path.basename(sys.argv[0]) == PROGRAM else PROGRAM
    command = "%s %s" % (shlex.quote(program), name)
    if root == Path(DEFAULT_DIR):
        return command
    return "%s --dir %s" % (command, shlex.quote(str(root)))


def _fail(message: str) -> int:
    sys.stderr.write("%s: %s\n" % (PROGRAM, message))
    return 1


