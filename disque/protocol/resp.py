"""RESP2: request parsing (hiredis + pure-Python fallback) and reply encoding.

hiredis parses well-formed multibulk requests quickly, but it is a reply
parser: it accepts things a request must not contain (integers, nested
arrays, status strings), rejects inline commands, and cannot say where a
half-received command starts. So it only ever sees data from a command
boundary, and the small incremental parser below takes over for inline
commands, for a command split across reads, and for any input hiredis
rejects, which it diagnoses with the exact Redis error texts.
"""

from __future__ import annotations

import re
from typing import Any, Final

import hiredis
from mypy_extensions import mypyc_attr

from disque.protocol.argsplit import UnbalancedQuotes, split_args

CRLF: Final = b"\r\n"
OK: Final = b"+OK\r\n"
PONG: Final = b"+PONG\r\n"
NIL: Final = b"$-1\r\n"
NIL_ARRAY: Final = b"*-1\r\n"
EMPTY_ARRAY: Final = b"*0\r\n"

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
# A bulk argument this long, cut by the end of a read, is read straight into
# its final object (RequestParser._start_bulk).
BIG_BULK: Final = 1 << 20
# hiredis sizes a list from an array header before its elements arrive, and
# freeing a list of 2^31 slots takes seconds: data that holds a count this
# big (or a bulk that merely looks like one) goes to the Python parser.
_HUGE_COUNT: Final = re.compile(rb"\*[0-9]{7}")
_SMALL_INTS: Final = [b":%d\r\n" % i for i in range(1024)]


# ---------------------------------------------------------------- encoding

def status(text: bytes) -> bytes:
    """Encode a status reply (``+text``)."""
    return b"+" + text + CRLF


def error(text: str) -> bytes:
    """Encode an error reply; ``text`` carries its own prefix (``ERR ...``).

    CR and LF become spaces, as the original's addReplyErrorFormat does, so
    an argument quoted in the message cannot break the protocol.
    """
    return b"-" + text.encode().replace(b"\r", b" ").replace(b"\n", b" ") + CRLF


def integer(n: int) -> bytes:
    """Encode an integer reply."""
    if 0 <= n < 1024:
        return _SMALL_INTS[n]
    return b":%d\r\n" % n


def bulk(data: bytes | None) -> bytes:
    """Encode a bulk string, or the null bulk for None."""
    if data is None:
        return NIL
    return b"$%d\r\n%b\r\n" % (len(data), data)


# mypyc compiles no subclass of bytes: this class stays a Python class in the
# compiled core (the decorator does nothing at run time).
@mypyc_attr(native_class=False)
class Status(bytes):
    """Marks a bytes value that ``encode`` must send as a status reply."""

    __slots__ = ()


def encode(value: object) -> bytes:
    """Encode a nested Python value: bytes→bulk, str→bulk, int→integer,
    None→null bulk, list/tuple→array, Status→status."""
    out = bytearray()
    _encode_into(out, value)
    return bytes(out)


def encode_map(pairs: list[tuple[bytes, object]]) -> bytes:
    """A RESP3 map of ``pairs`` (for a client that said HELLO 3)."""
    out = bytearray(b"%%%d\r\n" % len(pairs))
    for key, value in pairs:
        _encode_into(out, key)
        _encode_into(out, value)
    return bytes(out)


# Any: the branches test type(value) held in a local, which mypy cannot narrow
# through, and type(value) is ... once per branch would cost every reply.
def _encode_into(out: bytearray, value: Any) -> None:
    t = type(value)
    if t is bytes:
        out += b"$%d\r\n%b\r\n" % (len(value), value)
    elif t is int:
        out += b":%d\r\n" % value
    elif t is list or t is tuple:
        out += b"*%d\r\n" % len(value)
        for item in value:
            _encode_into(out, item)
    elif value is None:
        out += NIL
    elif t is Status:
        out += b"+" + value + CRLF
    elif t is str:
        data = value.encode()
        out += b"$%d\r\n%b\r\n" % (len(data), data)
    elif t is bool:
        out += b":1\r\n" if value else b":0\r\n"
    else:
        raise TypeError("cannot encode %r" % (t,))


# ----------------------------------------------------------------- parsing

class ProtocolError(Exception):
    """The client sent bytes that are not a valid request; close after replying."""


class _HiredisFallback(Exception):
    """hiredis produced something a request may not contain."""


def _parse_count(digits: bytes) -> int | None:
    """Parse a RESP length the way Redis' string2ll does (no '+', no leading zeros)."""
    if digits.isdigit():
        if digits[0] == 48 and len(digits) > 1:
            return None
    elif not (digits[:1] == b"-" and digits[1:].isdigit() and digits[1] != 48):
        return None
    if len(digits) > 20:
        return None
    value = int(digits)
    return value if -(1 << 63) <= value < (1 << 63) else None


class RequestParser:
    """Turns a client's byte stream into commands (lists of bytes)."""

    __slots__ = ("max_bulk_len", "_alone_limit", "_reader", "_pending", "_args", "_left",
                 "_need", "_args_size", "_bulk_at", "_bulk", "_bulk_addr", "_bulk_filled",
                 "_bulk_crlf")

    def __init__(self, max_bulk_len: int = DEFAULT_MAX_BULK_LEN) -> None:
        self.max_bulk_len = max_bulk_len
        # Reads shorter than this may be one whole command for _parse_alone:
        # its bulk sizes are in the _FRAMED table and within max_bulk_len.
        self._alone_limit = min(_FRAMED_SIZES, max_bulk_len + 1)
        self._reader = hiredis.Reader()
        self._pending: bytearray | None = None  # unparsed bytes held by the Python parser
        self._args: list[bytes] | None = None  # multibulk being assembled
        self._left = 0  # bulk arguments still expected
        self._need = 0  # bytes the pending buffer must reach before parsing again
        self._args_size = 0  # memory held by _args (arguments and their objects)
        # Where the cut bulk argument's data starts in _pending (0: the pending
        # bytes are not a cut bulk argument); it ends 2 bytes before _need.
        self._bulk_at = 0
        # A cut bulk argument of BIG_BULK bytes or more is read straight into
        # the bytes object that becomes the argument (see _start_bulk).
        self._bulk: bytes | None = None
        self._bulk_addr = 0  # where _bulk's bytes start in memory
        self._bulk_filled = 0  # bytes of it received
        self._bulk_crlf = 0  # bytes of the CRLF after it still to skip

    def feed(self, data: bytes, commands: list) -> None:
        """Append every complete command found in ``data`` to ``commands``.

        Raises ProtocolError, after appending the commands that preceded the
        malformed one, when the stream is invalid.
        """
        # Cheapest tests first: this runs once per read of every client. The
        # count must have under 7 digits before hiredis sees it (hiredis
        # allocates the array it announces); one or two digits is the rule.
        n = len(data)
        if (3 < n < self._alone_limit and data[0] == _STAR and self._pending is None
                and self._args is None
                and (data[2] == _CR or data[3] == _CR or not data[1:8].isdigit())
                and _STAR not in data[1:] and self._parse_alone(data, commands)):
            return
        if self._bulk is not None:
            pos = self._fill_bulk(data, 0, commands)
            if pos < 0:
                return
            buf = data[pos:] if pos else data
        elif self._pending is not None:
            pending = self._pending
            pending += data
            if len(pending) < self._need:
                return  # still inside a large bulk argument
            self._pending = None
            if self._bulk_at:
                buf = self._take_bulk(pending, commands)
            else:
                buf = bytes(pending)
        else:
            buf = data
        pos = 0
        n = len(buf)
        python = self._args is not None  # the Python parser owns the next command
        if buf.find(b"*", 1) < 0:  # one command at most: only its own count matters
            hiredis_safe = not buf[1:8].isdigit()
        else:
            hiredis_safe = _HUGE_COUNT.search(buf) is None
        while pos < n:
            if python or buf[pos] != _STAR or not hiredis_safe:
                pos = self._parse_one(buf, pos, n, commands)
                if pos < 0:
                    return
                python = False
            else:
                pos = self._parse_hiredis(buf, pos, commands)
                if pos < 0:
                    return
                python = True  # hiredis refused: the Python parser takes this command

    def _take_bulk(self, pending: bytearray, commands: list) -> bytes:
        """The cut bulk argument held in ``pending`` is complete: add it to the
        command (appended when it was the last argument) and return the bytes
        that follow it.

        The argument is copied out of ``pending`` once; neither copying the
        whole buffer nor scanning it for the next command's headers, which
        for a bulk of hundreds of MB held the event loop for as long again.
        """
        at = self._bulk_at
        self._bulk_at = 0
        end = self._need - 2
        with memoryview(pending) as view:
            arg = bytes(view[at:end])
            rest = bytes(view[end + 2:])
        args = self._args
        assert args is not None
        args.append(arg)
        self._args_size += end - at + ARG_OVERHEAD
        self._left -= 1
        if not self._left:
            self._args = None
            commands.append(args)
        return rest

    def _parse_alone(self, data: bytes, commands: list) -> bool:
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

    def _parse_hiredis(self, buf: bytes, pos: int, commands: list) -> int:
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
        max_bulk_len = self.max_bulk_len
        table_limit = min(_FRAMED_SIZES, max_bulk_len + 1)
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

    def _parse_one(self, buf: bytes, pos: int, n: int, commands: list) -> int:
        """Parse one command at ``pos``; return the next position, or -1 when
        the command is incomplete (the rest of ``buf`` is then kept)."""
        if self._args is None:
            if buf[pos] != _STAR:
                return self._parse_inline(buf, pos, n, commands)
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if n - pos > MAX_INLINE_SIZE:
                    raise ProtocolError(ERR_BIG_MBULK_COUNT)
                return self._keep(buf, pos, 0)
            count = _parse_count(buf[pos + 1:eol])
            if count is None or count > MAX_MULTIBULK_COUNT:
                raise ProtocolError(ERR_MULTIBULK_LENGTH)
            pos = eol + 2
            if count <= 0:
                return pos
            self._args = []
            self._args_size = 0
            self._left = count
        args = self._args
        append = args.append
        left = self._left
        size = self._args_size
        while left:
            if pos >= n:
                break
            if buf[pos] != _DOLLAR:
                raise ProtocolError(ERR_EXPECTED_DOLLAR % chr(buf[pos]))
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if n - pos > MAX_INLINE_SIZE:
                    raise ProtocolError(ERR_BIG_BULK_COUNT)
                break
            length = _parse_count(buf[pos + 1:eol])
            if length is None or length < 0 or length > self.max_bulk_len:
                raise ProtocolError(ERR_BULK_LENGTH)
            start = eol + 2
            end = start + length
            if end + 2 > n:
                self._left = left
                self._args_size = size
                if length >= BIG_BULK:
                    self._start_bulk(length)
                    return self._fill_bulk(buf, start, commands)
                self._keep(buf, pos, end + 2 - pos)
                self._bulk_at = start - pos
                return -1
            append(buf[start:end])
            size += length + ARG_OVERHEAD
            pos = end + 2
            left -= 1
        if left:
            self._left = left
            self._args_size = size
            return self._keep(buf, pos, 0)
        self._args = None
        commands.append(args)
        return pos

    def _start_bulk(self, length: int) -> None:
        """Make the object a cut bulk argument of ``length`` bytes is read into.

        bytes(length) maps zeroed pages without touching them, and each read
        is copied into place as it arrives, so a bulk of hundreds of MB never
        costs one long copy (page faults included) in a single loop turn:
        other clients are served between its reads. Redis reads a big
        argument into its final string the same way. The object is not seen
        by anyone until it is complete, so filling it in place is safe; it
        is never one of CPython's shared bytes singletons (length > 1).
        """
        import ctypes  # loaded with the first bulk of 1 MiB or more, not at start
        target = bytes(length)
        self._bulk = target
        self._bulk_addr = ctypes.cast(ctypes.c_char_p(target), ctypes.c_void_p).value or 0
        self._bulk_filled = 0
        self._bulk_crlf = 2

    def _fill_bulk(self, data: bytes, pos: int, commands: list) -> int:
        """Copy what ``data[pos:]`` holds of the cut bulk argument into place;
        when it is complete, add it to its command and return the position
        after it, else -1 (all of ``data`` was taken)."""
        import ctypes
        target = self._bulk
        assert target is not None
        n = len(data)
        take = min(n - pos, len(target) - self._bulk_filled)
        if take > 0:
            src = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0
            ctypes.memmove(self._bulk_addr + self._bulk_filled, src + pos, take)
            self._bulk_filled += take
            pos += take
        skip = min(n - pos, self._bulk_crlf)
        self._bulk_crlf -= skip
        pos += skip
        if self._bulk_crlf:
            return -1
        self._bulk = None
        self._bulk_addr = 0
        args = self._args
        assert args is not None
        args.append(target)
        self._args_size += len(target) + ARG_OVERHEAD
        self._left -= 1
        if not self._left:
            self._args = None
            commands.append(args)
        elif pos == n:
            self._keep(data, pos, 0)  # the command's next arguments come later
        return -1 if pos == n else pos

    def _keep(self, buf: bytes, pos: int, need: int) -> int:
        self._pending = bytearray(buf[pos:])
        self._need = need
        self._bulk_at = 0
        return -1

    def _parse_inline(self, buf: bytes, pos: int, n: int, commands: list) -> int:
        eol = buf.find(b"\n", pos)
        if eol < 0:
            if n - pos > MAX_INLINE_SIZE:
                raise ProtocolError(ERR_BIG_INLINE)
            return self._keep(buf, pos, 0)
        line = buf[pos:eol]
        if line.endswith(b"\r"):
            line = line[:-1]
        try:
            argv = split_args(line)
        except UnbalancedQuotes:
            raise ProtocolError(ERR_UNBALANCED) from None
        if argv:
            commands.append(argv)
        return eol + 1

    def buffered(self) -> int:
        """Bytes held for an incomplete command (for CLIENT LIST qbuf)."""
        if self._bulk is not None:
            return self._bulk_filled
        return len(self._pending) if self._pending is not None else 0

    def held(self) -> int:
        """Memory held for an incomplete command: its unparsed bytes and the
        arguments already taken from it (what client-query-buffer-limit bounds)."""
        if self._bulk is not None:
            return self._bulk_filled + self._args_size
        pending = self._pending
        if pending is None:
            return 0
        return len(pending) + (self._args_size if self._args is not None else 0)
