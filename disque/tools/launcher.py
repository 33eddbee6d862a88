"""``disque-cluster``: start, inspect and stop a cluster of nodes on this machine,
like Redis' create-cluster script in one command.

    disque-cluster create 3 [--port 7711] [--dir ./disque-cluster] [--base-config FILE]
                            [--conf "DIRECTIVE ARGS"]... [--appendonly]
                            [--metrics-port BASE] [--tls-port BASE]
    disque-cluster status [--dir ./disque-cluster]
    disque-cluster stop [PORT] [--dir ./disque-cluster]
    disque-cluster start PORT [--dir ./disque-cluster]
    disque-cluster restart PORT [--dir ./disque-cluster]

Each node gets its own directory ``DIR/<port>/`` (``node_files``) with its
own config file (``node_config``: the base file, ``--conf`` lines and the
node's own settings); the nodes daemonize themselves through it, and ``status``
and ``stop`` find them again by their pid files and ports
(``node_processes``). This module reads the command line; the subcommands
are ``cluster_commands``'s.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from disque.tools.cluster_commands import (DEFAULT_DIR, PROGRAM, create, restart_node,
                                           start_node, status, stop)
from disque.tools.node_config import ConfigProblem, NodeConfig

DEFAULT_PORT: Final = 7711


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``disque-cluster``."""
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Start, inspect and stop a cluster of disque nodes on this machine.",
        epilog="A node started again (start, restart) runs from its own directory and "
               "config: it keeps its nodes.conf, so its node ID, and rejoins the others.")
    commands = parser.add_subparsers(dest="command", required=True)
    create_parser = commands.add_parser(
        "create", help="start N nodes on consecutive ports and join them")
    create_parser.add_argument("nodes", type=int, metavar="N", help="number of nodes")
    create_parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                               help="first node's port (default %d)" % DEFAULT_PORT)
    create_parser.add_argument("--base-config", type=Path, metavar="FILE",
                               help="a config file every node starts from (its port, dir, "
                                    "files and daemon settings are replaced by each node's)")
    create_parser.add_argument("--conf", action="append", default=[], metavar='"DIRECTIVE ARGS"',
                               help='a config line for every node, after the base file\'s '
                                    '(repeatable): --conf "appendonly yes"')
    create_parser.add_argument("--appendonly", action="store_true",
                               help='each node keeps an AOF (--conf "appendonly yes")')
    create_parser.add_argument("--metrics-port", type=int, default=0, metavar="BASE",
                               help="the nodes serve /metrics and the dashboard on BASE, "
                                    "BASE + 1, ...")
    create_parser.add_argument("--tls-port", type=int, default=0, metavar="BASE",
                               help="the nodes take TLS clients on BASE, BASE + 1, ... (and "
                                    "their dashboards speak HTTPS); give the certificate "
                                    "with --conf")
    commands.add_parser("status", help="show each node's state")
    commands.add_parser("stop", help="stop every node, or only the one on PORT").add_argument(
        "port", type=int, nargs="?", metavar="PORT", help="the node's port (default: all)")
    for name, text in (("start", "start the stopped node on PORT again"),
                       ("restart", "stop the node on PORT, then start it again")):
        commands.add_parser(name, help=text).add_argument(
            "port", type=int, metavar="PORT", help="the node's port")
    for sub in commands.choices.values():
        sub.add_argument("--dir", type=Path, default=Path(DEFAULT_DIR),
                         help="the cluster's directory (default ./%s)" % DEFAULT_DIR)
    args = parser.parse_args(argv)
    if args.command == "create":
        directives = args.conf + (["appendonly yes"] if args.appendonly else [])
        try:
            settings = NodeConfig.build(args.base_config, directives, args.metrics_port,
                                        args.tls_port)
        except ConfigProblem as exc:
            parser.exit(1, "%s: %s\n" % (PROGRAM, exc))
        return create(args.nodes, args.port, args.dir, settings)
    if args.command == "status":
        return status(args.dir)
    if args.command == "start":
        return start_node(args.dir, args.port)
    if args.command == "restart":
        return restart_node(args.dir, args.port)
    return stop(args.dir, args.port)


if __name__ == "__main__":
    sys.exit(main())
