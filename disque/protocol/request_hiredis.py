"""The server's request parser: hiredis for whole multibulk commands, the
pure-Python parser (``request_python``) for the rest.

hiredis parses well-formed multibulk requests quickly, but it is a reply
parser: it accepts things a request must not contain (integers, nested
arrays, status strings), rejects inline commands, and cannot say where a
half-received command starts. So it only ever sees data from a command
boundary, and the Python parser takes over for inline commands, for a
command split across reads, and for any input hiredis rejects, which it
diagnoses with the exact Redis error texts.
"""

from __future__ import annotations

import re
from typing import Final

import hiredis

from disque.protocol.request import DEFAULT_MAX_BULK_LEN, MAX_MULTIBULK_COUNT
from disque.protocol.request_python import PythonRequestParser

_STAR: Final = 42
_DOLLAR: Final = 36
_CR: Final = 13
# Bytes taken by a bulk argument of a given size: '$' size CRLF data CRLF, that
# is size + 5 + its number of digits (ranges of sizes with 1, 2, 3 and 4 digits:
# formatting each size costs every start a millisecond).
_FRAMED_SIZES: Final = 4096
_FRAMED: Final = [*range(6, 16), *range(17, 107), *range(108, 1008), *range(1009, 4105)]
# hiredis moves its unread bytes to the front of its buffer each time it has
# consumed 1 KB: a large read is fed in slices so that stays cheap.
FEED_SLICE: Final = 4096
# hiredis sizes a list from an array header before its elements arrive, and
# freeing a list of 2^31 slots takes seconds: data that holds a count this
# big (or a bulk that merely looks like one) goes to the Python parser.
_HUGE_COUNT: Final = re.compile(rb"\*[0-9]{7}")


class _HiredisFallback(Exception):
    """hiredis produced something a request may not contain."""


def _alone_limit(max_bulk_len: int) -> int:
    """Reads shorter than this may be one whole command for ``_parse_alone``:
    its bulk sizes are in the _FRAMED table and within ``max_bulk_len``."""
    return min(_FRAMED_SIZES, max_bulk_len + 1)


class HiredisRequestParser:
    """A RequestParser that gives hiredis what it parses exactly and the
    Python parser the rest."""

    __slots__ = ("_alone_limit", "_reader", "_python", "_cut")

    def __init__(self, max_bulk_len: int = DEFAULT_MAX_BULK_LEN) -> None:
        self._python = PythonRequestParser(max_bulk_len)
        self._alone_limit = _alone_limit(max_bulk_len)
        self._reader = hiredis.Reader()
        # The Python parser holds a cut command (its last call returned None
        # or -1): the next read continues it.
        self._cut = False

    @property
    def max_bulk_len(self) -> int:
        """The longest bulk argument a request may hold (proto-max-bulk-len)."""
        return self._python.max_bulk_len

    @max_bulk_len.setter
    def max_bulk_len(self, value: int) -> None:
        self._python.max_bulk_len = value
        self._alone_limit = _alone_limit(value)

    def feed(self, data: bytes, commands: list[list[bytes]]) -> None:
        """Append every complete command found in ``data`` to ``commands``;
        ProtocolError, after the commands before it, for an invalid stream."""
        python = self._python
        if self._cut:
            rest = python.join_held(data, commands)
            if rest is None:
                return
            self._cut = False
            if not rest:
                return
            buf = rest
            n = len(buf)
            # The Python parser continues the command it held, or takes the
            # one after the bulk argument that completed it.
            pos = python.parse_one(buf, 0, n, commands)
            if pos < 0:
                self._cut = True
                return
        else:
            # Cheapest tests first: this runs once per read of every client.
            # The count must have under 7 digits before hiredis sees it
            # (hiredis allocates the array it announces); one or two digits
            # is the rule.
            n = len(data)
            if (3 < n < self._alone_limit and data[0] == _STAR
                    and (data[2] == _CR or data[3] == _CR or not data[1:8].isdigit())
                    and _STAR not in data[1:] and self._parse_alone(data, commands)):
                return
            buf = data
            pos = 0
        if buf.find(b"*", 1) < 0:  # one command at most: only its own count matters
            hiredis_safe = not buf[1:8].isdigit()
        else:
            hiredis_safe = _HUGE_COUNT.search(buf) is None
        while pos < n:
            if hiredis_safe and buf[pos] == _STAR:
                pos = self._parse_hiredis(buf, pos, commands)
                if pos < 0:
                    return
            # Not a multibulk, or one hiredis refused: the Python parser takes it.
            pos = python.parse_one(buf, pos, n, commands)
            if pos < 0:
                self._cut = True
                return

    def buffered(self) -> int:
        """Bytes held for an incomplete command (for CLIENT LIST qbuf)."""
        return self._python.buffered() if self._cut else 0

    def held(self) -> int:
        """Memory held for an incomplete command: its unparsed bytes and the
        arguments already taken from it (what client-query-buffer-limit bounds)."""
        return self._python.held() if self._cut else 0  # only a cut command holds any

    def _parse_alone(self, data: bytes, commands: list[list[bytes]]) -> bool:
        """The read is one small command, as unpipelined clients send: parse it
        with hiredis in one call; False (state untouched) if it is anything
        else (cut, pipelined, not made of bulk strings), for the general path.

        Walking the bulk headers checks what ``_parse_hiredis`` checks: every
        element is a '$' string and the last one ends where the data ends;
        the caller made sure no argument can exceed the bulk length limit.
        """
        reader = self._reader
        reader.feed(data)
        try:
            cmd = reader.gets()
            if type(cmd) is list and not reader.has_data():
                count = len(cmd)
                end = 4 if count < 10 else len(str(count)) + 3
                for arg in cmd:
                    if data[end] != _DOLLAR:
                        break
                    end += _FRAMED[len(arg)]  # TypeError for integers, nil, doubles...
                else:
                    if end == len(data):
                        if count:
                            commands.append(cmd)
                        return True
        except (hiredis.ProtocolError, TypeError, IndexError):
            pass
        self._reader = hiredis.Reader()
        return False

    def _parse_hiredis(self, buf: bytes, pos: int, commands: list[list[bytes]]) -> int:
        """Parse ``buf[pos:]`` with hiredis; return -1 when all of it was
        consumed, else the position of the first command the Python parser
        must take (a malformed one, or one cut by the end of the read).

        hiredis is a reply parser: it also reads status, verbatim and big
        number elements as strings and sets or pushes as arrays, and knows
        no request limits. So each command is checked to be made of '*' and
        '$' headers only (hiredis parses their lengths strictly, so their
        sizes are known) within the limits. That also gives the exact end
        of every command: when the last one ends where the data ends, the
        reader holds nothing back; otherwise a command is cut and the
        Python parser continues it. The commands before a problem are kept,
        so a long pipeline is never re-parsed once per command.
        """
        reader = self._reader
        n = len(buf)
        fed = min(n, pos + FEED_SLICE)
        reader.feed(buf, pos, fed - pos)
        append = commands.append
        max_bulk_len = self._python.max_bulk_len
        table_limit = self._alone_limit  # sizes below it are in the _FRAMED table
        try:
            while True:
                cmd = reader.gets()
                if cmd is False:
                    if fed < n:
                        step = min(n - fed, FEED_SLICE)
                        reader.feed(buf, fed, step)
                        fed += step
                        continue
                    break
                if type(cmd) is not list or buf[pos] != _STAR:
                    raise _HiredisFallback
                count = len(cmd)
                if count > MAX_MULTIBULK_COUNT:
                    raise _HiredisFallback
                p = pos + (4 if count < 10 else len(str(count)) + 3)
                for arg in cmd:
                    size = len(arg)  # TypeError for integers, nil, doubles...
                    if buf[p] != 36:  # '$'
                        raise _HiredisFallback
                    if size < table_limit:
                        p += _FRAMED[size]
                    elif size > max_bulk_len:
                        raise _HiredisFallback
                    else:
                        p += size + len(str(size)) + 5
                if count:
                    append(cmd)
                pos = p
        except (hiredis.ProtocolError, MemoryError, TypeError, IndexError, _HiredisFallback):
            self._reader = hiredis.Reader()
            return pos
        if pos == n:
            return -1
        self._reader = hiredis.Reader()  # it holds the start of a cut command
        return pos
