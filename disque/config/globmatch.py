"""Redis glob matching: ACL queue patterns and CONFIG GET's pattern.

The pattern language and its corner cases are Redis's ``stringmatchlen``;
the way of matching is not its recursion, which tries every rest of the
string at each ``*`` and so costs the string's length to the power of the
number of stars. Here a ``*`` first takes nothing and, on a mismatch, only
the last ``*`` seen takes one byte more: an earlier one never needs to, as
a longer run of it only leaves the last one less to choose from. A match
costs at most the pattern's length times the string's, and less where the
literal bytes after a ``*`` are looked for with ``bytes.find``. Patterns
from clients are at most MAX_PATTERN_LEN bytes (docs/security.md "Limits").
"""

from __future__ import annotations

from typing import Final

MAX_PATTERN_LEN: Final = 1024  # a pattern from a client: ACL ~pattern, CONFIG GET

_STAR: Final = 0x2A
_QUESTION: Final = 0x3F
_OPEN: Final = 0x5B
_CLOSE: Final = 0x5D
_CARET: Final = 0x5E
_DASH: Final = 0x2D
_BACKSLASH: Final = 0x5C
_NO_MATCH: Final = -1


def stringmatch(pattern: bytes, string: bytes, nocase: bool = False) -> bool:
    """Redis glob matching (stringmatchlen): * ? [abc] [^a] [a-z] and \\x escapes."""
    plen = len(pattern)
    slen = len(string)
    if slen == 0:
        return _matches_empty(pattern, nocase)
    pi = 0
    si = 0
    resume_pi = _NO_MATCH  # the pattern after the last star: where each retry starts
    resume_si = 0  # the end of that star's run on the current try
    anchor = b""  # the literal bytes after that star: a try can only start where they are
    while si < slen:
        if pi < plen and pattern[pi] == _STAR:
            pi = _after_stars(pattern, pi)
            if pi == plen:
                return True
            resume_pi = pi
            resume_si = si - 1  # the retry below starts the star's run empty
            anchor = b"" if nocase else _literal_run(pattern, pi)
        elif pi < plen:
            end = _token_end(pattern, pi, string[si], nocase)
            if end != _NO_MATCH:
                pi = end
                si += 1
                continue
        if resume_pi == _NO_MATCH:
            return False
        resume_si += 1
        if anchor:
            resume_si = string.find(anchor, resume_si)
            if resume_si < 0:  # no later try of the last star can match, nor of an earlier one
                return False
        pi = resume_pi
        si = resume_si
    return _after_stars(pattern, pi) >= plen


def _matches_empty(pattern: bytes, nocase: bool) -> bool:
    """The empty string: besides stars, stringmatchlen lets the first token
    match the string's terminating NUL (``[^a]``, ``\\x00``), ``?`` aside,
    and then only stars may follow."""
    pi = 0
    if pattern and pattern[0] != _STAR:
        if pattern[0] == _QUESTION:
            return False
        pi = _token_end(pattern, 0, 0, nocase)
        if pi == _NO_MATCH:
            return False
    return _after_stars(pattern, pi) >= len(pattern)


def _after_stars(pattern: bytes, pi: int) -> int:
    """The first position from ``pi`` that is not a star."""
    plen = len(pattern)
    while pi < plen and pattern[pi] == _STAR:
        pi += 1
    return pi


def _literal_run(pattern: bytes, pi: int) -> bytes:
    """The bytes from ``pi`` up to the next glob character: they match only
    themselves, so ``bytes.find`` can look for them."""
    end = pi
    plen = len(pattern)
    while end < plen:
        c = pattern[end]
        if c == _STAR or c == _QUESTION or c == _OPEN or c == _BACKSLASH:
            break
        end += 1
    return pattern[pi:end]


def _token_end(pattern: bytes, pi: int, c: int, nocase: bool) -> int:
    """Where the token at ``pi`` (not a star) ends if it matches the byte
    ``c``, else _NO_MATCH. How far a token reaches depends on the pattern
    alone; an unterminated class ends at or past the pattern's end."""
    plen = len(pattern)
    token = pattern[pi]
    if token == _QUESTION:
        return pi + 1
    if token == _OPEN:
        return _class_end(pattern, pi + 1, c, nocase)
    if token == _BACKSLASH and plen - pi >= 2:
        pi += 1
        token = pattern[pi]
    return pi + 1 if _fold(token, nocase) == _fold(c, nocase) else _NO_MATCH


def _class_end(pattern: bytes, pi: int, c: int, nocase: bool) -> int:
    """A ``[...]`` class from just after its ``[``. Redis's reading: ``]``
    right after ``[`` or ``[^`` closes an empty class, ``\\`` inside takes
    the next byte as is (no case folding) and sees NUL past the pattern's
    end as C reads the terminator, a range's end may be ``]``, and an
    unterminated class ends with the pattern."""
    plen = len(pattern)
    negate = _at(pattern, pi) == _CARET
    if negate:
        pi += 1
    matched = False
    folded = _fold(c, nocase)
    while True:
        p = _at(pattern, pi)
        if p == _BACKSLASH:
            pi += 1
            if _at(pattern, pi) == c:
                matched = True
        elif p == _CLOSE:
            break
        elif pi >= plen:
            break
        elif plen - pi >= 3 and pattern[pi + 1] == _DASH:
            start = pattern[pi]
            end = pattern[pi + 2]
            if start > end:
                start, end = end, start
            if _fold(start, nocase) <= folded <= _fold(end, nocase):
                matched = True
            pi += 2
        elif _fold(p, nocase) == folded:
            matched = True
        pi += 1
    if matched != negate:
        return pi + 1
    return _NO_MATCH


def _at(pattern: bytes, i: int) -> int:
    return pattern[i] if i < len(pattern) else 0


def _fold(c: int, nocase: bool) -> int:
    return c + 32 if nocase and 65 <= c <= 90 else c
