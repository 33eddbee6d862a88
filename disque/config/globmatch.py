"""Redis glob matching, the CONFIG GET pattern language."""

from __future__ import annotations


def stringmatch(pattern: bytes, string: bytes, nocase: bool = False) -> bool:
    """Redis glob matching (stringmatchlen): * ? [abc] [^a] [a-z] and \\x escapes."""
    return _match(pattern, 0, string, 0, nocase)


def _fold(c: int, nocase: bool) -> int:
    return c + 32 if nocase and 65 <= c <= 90 else c


def _match(p: bytes, pi: int, s: bytes, si: int, nocase: bool) -> bool:
    # A faithful port: out-of-range reads see NUL, as C reads the terminator.
    plen, slen = len(p), len(s)

    def pc(i: int) -> int:
        return p[i] if i < plen else 0

    def sc(i: int) -> int:
        return s[i] if i < slen else 0

    while pi < plen:
        c = p[pi]
        if c == 0x2A:  # '*'
            while pc(pi + 1) == 0x2A:
                pi += 1
            if pi + 1 == plen:
                return True
            while si < slen:
                if _match(p, pi + 1, s, si, nocase):
                    return True
                si += 1
            return False
        if c == 0x3F:  # '?'
            if si >= slen:
                return False
            si += 1
        elif c == 0x5B:  # '['
            pi += 1
            negate = pc(pi) == 0x5E
            if negate:
                pi += 1
            matched = False
            while True:
                if pc(pi) == 0x5C:
                    pi += 1
                    if pc(pi) == sc(si):
                        matched = True
                elif pc(pi) == 0x5D:
                    break
                elif pi >= plen:
                    pi -= 1
                    break
                elif pc(pi + 1) == 0x2D and plen - pi >= 3:
                    start, end, ch = p[pi], p[pi + 2], sc(si)
                    if start > end:
                        start, end = end, start
                    start, end, ch = _fold(start, nocase), _fold(end, nocase), _fold(ch, nocase)
                    pi += 2
                    if start <= ch <= end:
                        matched = True
                elif _fold(pc(pi), nocase) == _fold(sc(si), nocase):
                    matched = True
                pi += 1
            if negate:
                matched = not matched
            if not matched:
                return False
            si += 1
        else:
            if c == 0x5C and plen - pi >= 2:
                pi += 1
                c = p[pi]
            if _fold(c, nocase) != _fold(sc(si), nocase):
                return False
            si += 1
        pi += 1
        if si >= slen:
            while pc(pi) == 0x2A:
                pi += 1
            break
    return pi >= plen and si >= slen

