"""The process as its supervisor sees it: systemd's readiness and stopping
notices (``supervised``), the start timeout pushed back while the AOF
loads, and the pid file of a daemonized node."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from disque.context.log import logger
from disque.process.osprocess import notify_systemd

if TYPE_CHECKING:
    from disque.config import Config

# While the AOF loads, systemd's start timeout (TimeoutStartSec) is pushed
# back: each EXTEND_TIMEOUT_USEC gives this long from when it is sent, and a
# new one goes out every LOADING_NOTIFY_INTERVAL, so a node that stops
# making progress is still killed within about that long.
LOADING_EXTEND_USEC = 10_000_000
LOADING_NOTIFY_INTERVAL = 0.25  # seconds; a datagram each time, a few per second at most


class Supervision:
    """Notices to systemd and the pid file."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.pidfile_written = False
        self._next_loading_notify = 0.0  # monotonic: when the next EXTEND_TIMEOUT_USEC is due

    def notify(self, state: str) -> None:
        """Tell systemd ``state`` (READY=1, STOPPING=1, ...) when supervised by it."""
        supervised = self.config.supervised
        if supervised == "systemd" or (supervised == "auto" and "NOTIFY_SOCKET" in os.environ):
            if not notify_systemd(state) and supervised == "systemd" and state == "READY=1":
                logger.warning("systemd supervision requested, but NOTIFY_SOCKET not found")

    def loading_progress(self) -> None:
        """A slice of the AOF was loaded: keep systemd from timing the start out."""
        now = time.monotonic()
        if now >= self._next_loading_notify:
            self._next_loading_notify = now + LOADING_NOTIFY_INTERVAL
            self.notify("EXTEND_TIMEOUT_USEC=%d" % LOADING_EXTEND_USEC)

    def write_pidfile(self) -> None:
        """Write the pid file (when daemonized)."""
        try:
            with open(self.config.pidfile, "w") as f:
                f.write("%d\n" % os.getpid())
            self.pidfile_written = True
        except OSError as exc:
            logger.warning("Can't write the pid file %s: %s", self.config.pidfile, exc)

    def remove_pidfile(self) -> None:
        """The pid file goes with the process."""
        if self.pidfile_written:
            try:
                os.unlink(self.config.pidfile)
            except OSError:
                pass
