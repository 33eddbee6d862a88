"""Why the server cannot start: one exception, whose message the log and
stderr show, and the text of a listener that could not be opened."""

from __future__ import annotations


class StartupError(Exception):
    """The server cannot start; the message says why."""


def cannot_listen(what: str, bind: list[str], port: int, exc: OSError) -> StartupError:
    """The start-up error of a listener that could not be opened."""
    return StartupError("Creating %s listening socket %s:%d: %s" % (
        what, ",".join(bind) or "*", port, exc.strerror or exc))
