"""What a client request parser is: the interface its two backends share
(``request_hiredis``, the server's, and ``request_python``, complete on its
own and the hiredis backend's fallback), with the request limits and the
protocol error texts both must give byte for byte (spec: commands.md §0).
"""

from __future__ import annotations

from typing import Final, Protocol

MAX_MULTIBULK_COUNT: Final = 1024 * 1024
MAX_INLINE_SIZE: Final = 64 * 1024
DEFAULT_MAX_BULK_LEN: Final = 512 * 1024 * 1024
ARG_OVERHEAD: Final = 40  # a bytes object and its list slot beyond the argument's length

ERR_MULTIBULK_LENGTH: Final = "Protocol error: invalid multibulk length"
ERR_BULK_LENGTH: Final = "Protocol error: invalid bulk length"
ERR_EXPECTED_DOLLAR: Final = "Protocol error: expected '$', got '%s'"
ERR_BIG_MBULK_COUNT: Final = "Protocol error: too big mbulk count string"
ERR_BIG_BULK_COUNT: Final = "Protocol error: too big bulk count string"
ERR_BIG_INLINE: Final = "Protocol error: too big inline request"
ERR_UNBALANCED: Final = "Protocol error: unbalanced quotes in request"


class ProtocolError(Exception):
    """The client sent bytes that are not a valid request; close after replying."""


class RequestParser(Protocol):
    """Turns a client's byte stream into commands (lists of bytes)."""

    max_bulk_len: int  # proto-max-bulk-len: CONFIG SET changes it for open connections

    def feed(self, data: bytes, commands: list[list[bytes]]) -> None:
        """Append every complete command found in ``data`` to ``commands``.

        Raises ProtocolError, after appending the commands that preceded the
        malformed one, when the stream is invalid.
        """

    def buffered(self) -> int:
        """Bytes held for an incomplete command (for CLIENT LIST qbuf)."""

    def held(self) -> int:
        """Memory held for an incomplete command: its unparsed bytes and the
        arguments already taken from it (what client-query-buffer-limit bounds)."""
