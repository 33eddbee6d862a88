"""The server's logger, which every part logs to.

Its format (pid, timestamps) and where it goes (stdout, a file, syslog)
are the process's business: ``disque.process.logformat``.
"""

from __future__ import annotations

import logging
from typing import Final

VERBOSE: Final = 15  # the original's level between debug and notice; logging has none

logger = logging.getLogger("disque")


class LogThrottle:
    """Lets one log line through per interval and counts those held back,
    so that a peer repeating a fault (a guessed password, a scan, an
    attack) cannot fill the log."""

    __slots__ = ("interval_ms", "last_ms", "held")

    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        self.last_ms = -interval_ms
        self.held = 0

    def admit(self, now_ms: int) -> int:
        """How many lines were held back since the last one let through, when
        one may be logged at ``now_ms``; -1 (and one more held) when not."""
        if now_ms - self.last_ms < self.interval_ms:
            self.held += 1
            return -1
        held = self.held
        self.last_ms = now_ms
        self.held = 0
        return held
