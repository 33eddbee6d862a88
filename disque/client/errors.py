"""The client's errors, and which server and socket errors mean "try another node"."""

from __future__ import annotations

from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["AuthenticationError", "CONNECTION_ERRORS", "DisqueError", "LEAVING_PREFIX",
           "NOREPL_LEAVING_TEXT", "NoNodeAvailable", "ResponseError", "is_badid", "is_leaving"]

LEAVING_PREFIX = "LEAVING"
BADID_PREFIX = "BADID"
# ADDJOB on a leaving node that cannot replicate elsewhere (spec: commands.md ADDJOB step 6).
NOREPL_LEAVING_TEXT = "I'm leaving the cluster"

CONNECTION_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)


SYNTAX_ERROR_TEXT = "syntax error"  # after redis-py took the ERR off


class DisqueError(Exception):
    """A command failed on every node the client could reach."""


class NoNodeAvailable(DisqueError):
    """No configured or discovered node accepted a connection."""


def is_leaving(error: BaseException) -> bool:
    """Whether a server error says the node is leaving, so another node should get the command."""
    text = str(error)
    return text.startswith(LEAVING_PREFIX) or NOREPL_LEAVING_TEXT in text


def is_syntax_error(error: BaseException) -> bool:
    """Whether a server error is ``-ERR syntax error``: how a Disque 1.0 node
    refuses an option it does not have (HEADER, WITHHEADERS, ...)."""
    return str(error).removeprefix("ERR ") == SYNTAX_ERROR_TEXT


def is_badid(error: BaseException) -> bool:
    """Whether a server error is ``-BADID`` (a word where a job ID was expected)."""
    return str(error).startswith(BADID_PREFIX)
