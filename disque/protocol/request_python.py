"""The pure-Python request parser: inline and multibulk commands, their
limits and every protocol error text, complete on its own. The hiredis
backend (``request_hiredis``) hands it whatever hiredis cannot take, a
command at a time, through ``join_held`` and ``parse_one``: each says by
what it returns (None, -1) when it keeps a cut command, so that backend
knows without asking whether the next read starts a command.
"""

from __future__ import annotations

import io
from typing import Final

from disque.protocol.argsplit import UnbalancedQuotes, split_args
from disque.protocol.request import (ARG_OVERHEAD, DEFAULT_MAX_BULK_LEN, ERR_BIG_BULK_COUNT,
                                     ERR_BIG_INLINE, ERR_BIG_MBULK_COUNT, ERR_BULK_LENGTH,
                                     ERR_EXPECTED_DOLLAR, ERR_MULTIBULK_LENGTH, ERR_UNBALANCED,
                                     MAX_INLINE_SIZE, MAX_MULTIBULK_COUNT, ProtocolError)

_STAR: Final = 42
_DOLLAR: Final = 36
# A bulk argument this long, cut by the end of a read, is read into a
# buffer of its size as it arrives (PythonRequestParser._start_bulk).
BIG_BULK: Final = 1 << 20


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


class PythonRequestParser:
    """A RequestParser in Python alone."""

    __slots__ = ("max_bulk_len", "_pending", "_args", "_left", "_need", "_args_size", "_bulk_at",
                 "_bulk", "_bulk_left", "_bulk_crlf")

    def __init__(self, max_bulk_len: int = DEFAULT_MAX_BULK_LEN) -> None:
        self.max_bulk_len = max_bulk_len
        self._pending: bytearray | None = None  # unparsed bytes held for a cut command
        self._args: list[bytes] | None = None  # multibulk being assembled
        self._left = 0  # bulk arguments still expected
        self._need = 0  # bytes the pending buffer must reach before parsing again
        self._args_size = 0  # memory held by _args (arguments and their objects)
        # Where the cut bulk argument's data starts in _pending (0: the pending
        # bytes are not a cut bulk argument); it ends 2 bytes before _need.
        self._bulk_at = 0
        # A cut bulk argument of BIG_BULK bytes or more is read into a buffer
        # of its size that becomes the argument (see _start_bulk).
        self._bulk: io.BytesIO | None = None
        self._bulk_left = 0  # bytes of it still to come
        self._bulk_crlf = 0  # bytes of the CRLF after it still to skip

    def feed(self, data: bytes, commands: list[list[bytes]]) -> None:
        """Append every complete command found in ``data`` to ``commands``;
        ProtocolError, after the commands before it, for an invalid stream."""
        buf = self.join_held(data, commands)
        if buf is None:
            return
        pos = 0
        n = len(buf)
        while pos < n:
            pos = self.parse_one(buf, pos, n, commands)
            if pos < 0:
                return

    def join_held(self, data: bytes, commands: list[list[bytes]]) -> bytes | None:
        """``data`` joined to what is held of a cut command: the bytes to parse
        from (a command, or the next argument of the one held), or None when
        the command is still cut and all of ``data`` is held.

        A cut bulk argument that ``data`` completes is added to its command
        (appended to ``commands`` when it was the last argument) and only the
        bytes after it are returned.
        """
        if self._bulk is not None:
            pos = self._fill_bulk(data, 0, commands)
            if pos < 0:
                return None
            rest = data[pos:]
        else:
            pending = self._pending
            if pending is None:
                return data
            pending += data
            if len(pending) < self._need:
                return None  # still inside a bulk argument
            self._pending = None
            if not self._bulk_at:
                return bytes(pending)
            rest = self._take_bulk(pending, commands)
        if not rest and self._args is not None:
            self._keep(rest, 0, 0)  # the command's next arguments come later
            return None
        return rest

    def parse_one(self, buf: bytes, pos: int, n: int, commands: list[list[bytes]]) -> int:
        """Parse the command at ``pos`` (or the rest of the one assembled) in
        ``buf``, which holds ``n`` bytes; return where the next one starts, or
        -1 when the command is cut (the rest of ``buf`` is then held), and
        only then."""
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
                    self._fill_bulk(buf, start, commands)  # it ends past buf: still cut
                    return -1
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

    def buffered(self) -> int:
        """Bytes held for an incomplete command (for CLIENT LIST qbuf)."""
        if self._bulk is not None:
            return self._bulk.tell()
        return len(self._pending) if self._pending is not None else 0

    def held(self) -> int:
        """Memory held for an incomplete command: its unparsed bytes and the
        arguments already taken from it (what client-query-buffer-limit bounds)."""
        if self._bulk is not None:
            return self._bulk.tell() + self._args_size
        pending = self._pending
        if pending is None:
            return 0
        return len(pending) + (self._args_size if self._args is not None else 0)

    def _take_bulk(self, pending: bytearray, commands: list[list[bytes]]) -> bytes:
        """The cut bulk argument held in ``pending`` is complete: add it to the
        command (appended when it was the last argument) and return the bytes
        that follow it.

        The argument is copied out of ``pending`` once; neither copying the
        whole buffer nor scanning it for the next command's headers, which
        for a large bulk would hold the event loop for as long again.
        """
        at = self._bulk_at
        self._bulk_at = 0
        end = self._need - 2
        with memoryview(pending) as view:
            arg = bytes(view[at:end])
            rest = bytes(view[end + 2:])
        self._add_arg(arg, end - at, commands)
        return rest

    def _start_bulk(self, length: int) -> None:
        """Make the buffer a cut bulk argument of ``length`` bytes is read into.

        bytes(length) maps zeroed pages without touching them, the BytesIO
        that alone holds it writes each read into place as it arrives, and
        once full its getvalue() hands that same object over as the argument
        (CPython gives a BytesIO's buffer away without a copy when nothing
        else references it). So a bulk of hundreds of MB costs its size once
        and never one long copy (page faults included) in a single loop
        turn: other clients are served between its reads, as Redis reads a
        big argument into its final string.
        """
        self._bulk = io.BytesIO(bytes(length))
        self._bulk_left = length
        self._bulk_crlf = 2

    def _fill_bulk(self, data: bytes, pos: int, commands: list[list[bytes]]) -> int:
        """Copy what ``data[pos:]`` holds of the cut bulk argument into place;
        when it is complete, add it to its command and return the position
        after it, else -1 (all of ``data`` was taken)."""
        bulk = self._bulk
        assert bulk is not None
        n = len(data)
        take = min(n - pos, self._bulk_left)
        if take == n:
            bulk.write(data)
        elif take > 0:
            with memoryview(data) as view:
                bulk.write(view[pos:pos + take])
        self._bulk_left -= take
        pos += take
        skip = min(n - pos, self._bulk_crlf)
        self._bulk_crlf -= skip
        if self._bulk_crlf:
            return -1
        self._bulk = None
        arg = bulk.getvalue()
        self._add_arg(arg, len(arg), commands)
        return pos + skip

    def _add_arg(self, arg: bytes, length: int, commands: list[list[bytes]]) -> None:
        """Add a bulk argument that was cut to its command."""
        args = self._args
        assert args is not None
        args.append(arg)
        self._args_size += length + ARG_OVERHEAD
        self._left -= 1
        if not self._left:
            self._args = None
            commands.append(args)

    def _keep(self, buf: bytes, pos: int, need: int) -> int:
        self._pending = bytearray(buf[pos:])
        self._need = need
        self._bulk_at = 0
        return -1

    def _parse_inline(self, buf: bytes, pos: int, n: int, commands: list[list[bytes]]) -> int:
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
