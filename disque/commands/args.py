"""Argument parsing shared by the command handlers (spec: commands.md §0)."""

from __future__ import annotations

from typing import Final

from disque.protocol import errors

_INT64_MAX: Final = (1 << 63) - 1
_INT64_MIN: Final = -(1 << 63)
_UINT64: Final = 1 << 64


def parse_int(arg: bytes) -> int | None:
    """Signed 64-bit decimal with an optional sign; None when invalid.

    Quirk kept from the original: an empty argument parses as 0. Short
    unsigned numbers (every option value a client usually sends) are
    summed digit by digit: in the compiled core that is a few instructions
    a digit, where ``int(bytes)`` builds and parses a temporary string.
    """
    n = len(arg)
    if 0 < n < 10:
        value = 0
        i = 0
        while i < n:
            c = arg[i]
            if c < 48 or c > 57:
                break
            value = value * 10 + c - 48
            i += 1
        if i == n:
            return value
    if arg.isdigit():
        if len(arg) < 19:
            return int(arg)
        value = int(arg)
        return value if value <= _INT64_MAX else None
    if not arg:
        return 0
    sign = arg[:1]
    if (sign == b"-" or sign == b"+") and arg[1:].isdigit():
        value = int(arg)
        return value if _INT64_MIN <= value <= _INT64_MAX else None
    return None


def parse_timeout(arg: bytes) -> int | bytes:
    """A timeout in milliseconds (ADDJOB's and ADDJOBS's, GETJOB's TIMEOUT):
    its value, or the error reply for one that is not an integer or is
    negative."""
    value = parse_int(arg)
    if value is None:
        return errors.TIMEOUT_NOT_INTEGER
    if value < 0:
        return errors.TIMEOUT_NEGATIVE
    return value


def option_name(arg: bytes) -> bytes:
    """An option word in upper case; clients send them so, and then no copy is made."""
    return arg if arg.isupper() else arg.upper()


def parse_uint(arg: bytes) -> int | None:
    """Unsigned 64-bit (scan cursors): negative values wrap like strtoull."""
    value = parse_int(arg)
    if value is None:
        if arg.isdigit() and int(arg) < _UINT64:
            return int(arg)
        return None
    return value % _UINT64


def parse_float(arg: bytes) -> float | None:
    """A finite float, or None."""
    try:
        value = float(arg)
    except ValueError:
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    return value
