"""What the node core asks of the process around it.

The server (``disque.server``) subclasses Host with real sockets, files
and process data. This base class is the host of unit tests and of the
simulator: no connections, no files, and every operation that needs the
operating system reports that it could not be done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from disque.context.clients import ClientState


class Host:
    """Process-level services for admin commands."""

    def time_us(self, now_ms: int) -> int:
        """Unix time in microseconds for TIME."""
        return now_ms * 1000

    def info_fields(self, section: str) -> list[tuple[str, object]]:
        """Process-level INFO fields of ``section`` (server, clients, memory,
        persistence, stats, cpu); the node adds its own."""
        return []

    def reset_stats(self) -> None:
        """CONFIG RESETSTAT: reset process-level counters."""

    def client_list(self, now_ms: int) -> bytes:
        """CLIENT LIST text (ages and idle times at ``now_ms``)."""
        return b""

    def kill_clients(self, caller: ClientState, *, addr: str | None = None,
                     client_id: int | None = None, skip_caller: bool = True) -> int:
        """Close matching client connections; return how many."""
        return 0

    def pause_clients(self, ms: int) -> None:
        """CLIENT PAUSE: stop reading from normal clients for ``ms``."""

    def shutdown(self, rewrite_aof: bool) -> bool:
        """Prepare to exit (flush AOF, optionally rewrite it); False on failure."""
        return False

    def bgrewriteaof(self) -> bytes:
        """Start a background AOF rewrite; return the reply."""
        return b"-ERR Background append only file rewriting not available\r\n"

    def debug_sleep(self, seconds: float) -> None:
        """DEBUG SLEEP: block the whole process."""

    def debug_reload_aof(self) -> bool:
        """DEBUG LOADAOF: flush, then reload the AOF."""
        return False

    def debug_restart(self, delay_ms: int, graceful: bool) -> bool:
        """DEBUG RESTART / CRASH-AND-RECOVER: re-exec the server."""
        return False

    def save_cluster_config(self) -> str | None:
        """Persist nodes.conf; return an error text on failure."""
        return None

    def flush_tables(self) -> str | None:
        """Write the tables log's records now (``context/tablelog``); the
        error text on failure."""
        return None

    def save_acl_file(self) -> str | None:
        """ACL SAVE: write the users to the aclfile now; the error text on
        failure (the process writes it after every change too)."""
        return "this process writes no file"

    def read_acl_file(self) -> bytes:
        """ACL LOAD: the aclfile's content; raise OSError."""
        raise FileNotFoundError(2, "No such file or directory")

    def cron_problem(self, expr: bytes) -> str | None:
        """Why ``expr`` is not a CRON expression every node reads alike, or
        None. The calendar is the process's (``process/cronspec.py``): the
        core does not import the parser."""
        return "CRON schedules need the server's calendar"

    def cron_next(self, expr: bytes, after_ms: int) -> int:
        """The first time (unix ms) after ``after_ms`` that ``expr`` names, or -1."""
        return -1
