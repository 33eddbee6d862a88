"""Split a text line into arguments the way Redis' sdssplitargs does.

Used for inline requests (telnet, redis-benchmark's inline PING) and for
config file lines, so both accept the same quoting and escapes.
"""

from typing import Final

_SPACE: Final = frozenset(b" \t\n\r\v\f")
_ESCAPES: Final = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
_HEX: Final = frozenset(b"0123456789abcdefABCDEF")


class UnbalancedQuotes(ValueError):
    """The line has an unterminated quote or a quote glued to the next word."""


def split_args(line: bytes) -> list[bytes]:
    """Return the arguments of ``line``; raise UnbalancedQuotes on bad quoting."""
    nul = line.find(b"\0")
    if nul >= 0:
        line = line[:nul]
    if b'"' not in line and b"'" not in line:
        return line.split()
    args: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _SPACE:
            i += 1
        if i >= n:
            return args
        current = bytearray()
        in_dq = in_sq = False
        while True:
            c = line[i] if i < n else None
            if in_dq:
                if c is None:
                    raise UnbalancedQuotes("unbalanced quotes")
                if (c == 92 and i + 3 < n and line[i + 1] == 120
                        and line[i + 2] in _HEX and line[i + 3] in _HEX):
                    current.append(int(line[i + 2:i + 4], 16))
                    i += 3
                elif c == 92 and i + 1 < n:
                    i += 1
                    e = line[i]
                    current.append(_ESCAPES.get(e, e))
                elif c == 34:
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        raise UnbalancedQuotes("closing quote must be followed by a space")
                    i += 1
                    break
                else:
                    current.append(c)
            elif in_sq:
                if c is None:
                    raise UnbalancedQuotes("unbalanced quotes")
                if c == 92 and i + 1 < n and line[i + 1] == 39:
                    i += 1
                    current.append(39)
                elif c == 39:
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        raise UnbalancedQuotes("closing quote must be followed by a space")
                    i += 1
                    break
                else:
                    current.append(c)
            else:
                if c is None or c in _SPACE:
                    break
                if c == 34:
                    in_dq = True
                elif c == 39:
                    in_sq = True
                else:
                    current.append(c)
            i += 1
        args.append(bytes(current))


def quote_arg(arg: bytes) -> str:
    """Render ``arg`` as a double-quoted string with C escapes (sdscatrepr)."""
    out = ['"']
    for c in arg:
        if c == 34 or c == 92:
            out.append("\\" + chr(c))
        elif c == 10:
            out.append("\\n")
        elif c == 13:
            out.append("\\r")
        elif c == 9:
            out.append("\\t")
        elif c == 7:
            out.append("\\a")
        elif c == 8:
            out.append("\\b")
        elif 32 <= c < 127:
            out.append(chr(c))
        else:
            out.append("\\x%02x" % c)
    out.append('"')
    return "".join(out)
