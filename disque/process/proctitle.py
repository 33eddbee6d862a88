"""The process title that ``ps`` and ``pgrep`` show, as redis-server sets its own.

A node runs as ``python3 -m disque.server`` or a console script's Python,
so without a title of its own ``pgrep disque-server`` finds nothing. Redis'
default template, ``{title} {listen-addr} {server-mode}``, gives
``disque-server 127.0.0.1:7711 [cluster]``: the program's name whichever way
it was started, the first bind address (``*`` when none) and the client port
(the TLS port when there is no plain one, the Unix socket when neither), and
``[cluster]``, which Redis shows for a node of a cluster, as every Disque
node is (its cluster bus always listens).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from disque.process.cli import PROGRAM_NAME

if TYPE_CHECKING:
    from disque.config import Config

SERVER_MODE = "[cluster]"
ANY_ADDRESS = "*"


def listen_address(config: Config) -> str:
    """Where clients reach the node, as Redis' ``{listen-addr}`` names it."""
    port = config.port or config.tls_port
    if port:
        return "%s:%d" % (config.bind[0] if config.bind else ANY_ADDRESS, port)
    return "unixsocket:%s" % config.unixsocket


def process_title(config: Config) -> str:
    """``disque-server 127.0.0.1:7711 [cluster]``."""
    return "%s %s %s" % (PROGRAM_NAME, listen_address(config), SERVER_MODE)


def set_process_title(config: Config) -> None:
    """Show ``process_title`` in ps and /proc/PID/cmdline, and name the
    process ``disque-server`` (/proc/PID/comm: what pgrep, pidof and ps -C
    match), as the executable's name does for redis-server. setproctitle is
    a dependency; where it is missing the node runs under its command line."""
    try:
        from setproctitle import setproctitle, setthreadtitle
    except ImportError:
        return
    setproctitle(process_title(config))
    setthreadtitle(PROGRAM_NAME)  # the main thread's name is the process's
