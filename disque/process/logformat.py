"""The log in the original's format, ``pid:M dd Mon HH:MM:SS.mmm * message``,
and where it goes: stdout, a log file, syslog (spec: config.md §4)."""

from __future__ import annotations

import logging
import os
import sys
import time

from disque.context.log import VERBOSE, logger

LEVELS = {"debug": logging.DEBUG, "verbose": VERBOSE, "notice": logging.INFO,
          "warning": logging.WARNING}
LEVEL_CHARS = {logging.DEBUG: ".", VERBOSE: "-", logging.INFO: "*", logging.WARNING: "#",
               logging.ERROR: "#", logging.CRITICAL: "#"}


class LineFormatter(logging.Formatter):
    """One record as the original writes it; an exception's stack follows."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%d %b %H:%M:%S", time.localtime(record.created))
        char = LEVEL_CHARS.get(record.levelno, "*")
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
    handler.setFormatter(LineFormatter())
    logger.addHandler(handler)
    if syslog_enabled:
        # Imported only when syslog is on: logging.handlers brings pickle,
        # queue and more, a tenth of the start-up time of a node without it.
        from logging.handlers import SysLogHandler
        try:
            facility = SysLogHandler.facility_names[syslog_facility]
            syslog = SysLogHandler(address="/dev/log", facility=facility)
        except (OSError, KeyError) as exc:
            logger.warning("Can't connect to syslog: %s", exc)
        else:
            syslog.ident = syslog_ident + ": "
            logger.addHandler(syslog)
    set_level(loglevel)
    logger.propagate = False


def set_level(loglevel: str) -> None:
    """Log records at ``loglevel`` and above (startup, and CONFIG SET loglevel)."""
    logger.setLevel(LEVELS.get(loglevel, logging.INFO))
