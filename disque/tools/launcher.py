"""``disque-cluster``: start, inspect and stop a cluster of nodes on this machine,
like Redis' create-cluster script in one command.

    disque-cluster create 3 [--port 7711] [--dir ./disque-cluster] [--appendonly]
    disque-cluster status [--dir ./disque-cluster]
    disque-cluster stop [PORT] [--dir ./disque-cluster]
    disque-cluster start PORT [--dir ./disque-cluster]
    disque-cluster restart PORT [--dir ./disque-cluster]

Each node gets its own directory ``DIR/<port>/`` with its own config file
(``node_files``); the nodes daemonize themselves through it, and ``status``
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
    create_parser.add_argument("--appendonly", action="store_true",
                               help="each node keeps an AOF (appendonly yes)")
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
        return create(args.nodes, args.port, args.dir, args.appendonly)
    if args.command == "status":
        return status(args.dir)
    if args.command == "start":
        return start_node(args.dir, args.port)
    if args.command == "restart":
        return restart_node(args.dir, args.port)
    return stop(args.dir, args.port)


if __name__ == "__main__":
    sys.exit(main())
