"""Logging in the original's format: ``pid:M dd Mon HH:MM:SS.mmm * message``."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Final

VERBOSE: Final = 15  # the original's level between debug and notice; logging has none
LEVELS: Final = {"debug": logging.DEBUG, "verbose": VERBOSE, "notice": logging.INFO,
                 "warning": logging.WARNING}
_LEVEL_CHARS: Final = {logging.DEBUG: ".", VERBOSE: "-", logging.INFO: "*", logging.WARNING: "#",
                       logging.ERROR: "#", logging.CRITICAL: "#"}

logger = logging.getLogger("disque")


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%d %b %H:%M:%S", time.localtime(record.created))
        char = _LEVEL_CHARS.get(record.levelno, "*")
        line = "%d:M %s.%03d %s %s" % (os.getpid(), stamp, int(record.msecs), char,
                                       record.getMessage())
        if record.exc_info:
            # logger.exception: the stack is what tells an operator (and the
            # tests, which fail on a logged traceback) what went wrong.
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(logfile: str, loglevel: str, syslog_enabled: bool = False,
              syslog_ident: str = "disque", syslog_facility: str = "local0") -> None:
    """Send the server's log to ``logfile`` (stdout when empty) at ``loglevel``."""
    logging.addLevelName(VERBOSE, "VERBOSE")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    handler = logging.FileHandler(logfile) if logfile else logging.StreamHandler(sys.stdout)
    handler.setFormatter(_Formatter())
    logger.addHandler(handler)
    if syslog_enabled:
        from logging.handlers import SysLogHandler
        try:
            facility = SysLogHandler.facility_names[syslog_facility]
            syslog = SysLogHandler(address="/dev/log", facility=facility)
        except (OSError, KeyError) as exc:
            logger.warning("Can't connect to syslog: %s", exc)
        else:
            syslog.ident = syslog_ident + ": "
            logger.addHandler(syslog)
    logger.setLevel(LEVELS.get(loglevel, logging.INFO))
    logger.propagate = False


def set_level(loglevel: str) -> None:
    """CONFIG SET loglevel."""
    logger.setLevel(LEVELS.get(loglevel, logging.INFO))
