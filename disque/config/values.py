"""Config values: text codec, integers, memory sizes, yes/no, and their rendering.

Values are ``str`` decoded from the file's bytes with UTF-8 and
``surrogateescape``, so any byte string (paths, passwords) survives a
load/GET/REWRITE round trip unchanged.
"""

from __future__ import annotations

import re
from typing import Final

from disque.protocol.argsplit import quote_arg
from disque.config.errors import InvalidValue
from disque.config.messages import NOT_INTEGER, NOT_MEMORY, NOT_YES_NO

LLONG_MIN: Final = -(2 ** 63)
LLONG_MAX: Final = 2 ** 63 - 1
INT_MAX: Final = 2 ** 31 - 1
KB, MB, GB = 1024, 1024 ** 2, 1024 ** 3
_UNITS: Final = {"": 1, "b": 1, "k": 1000, "kb": KB, "m": 1000 ** 2, "mb": MB,
                 "g": 1000 ** 3, "gb": GB}
_FILE_INT: Final = re.compile(r"[+-]?[0-9]+")            # strtoll: the file is lenient
_STRICT_INT: Final = re.compile(r"-?[1-9][0-9]*|0")      # string2ll: what CONFIG SET accepts
_MEMORY: Final = re.compile(r"(-?[0-9]+)(b|k|kb|m|mb|g|gb)?", re.IGNORECASE)


def decode(raw: bytes) -> str:
    """Bytes from a file or a client to a value; no byte string is refused."""
    return raw.decode("utf-8", "surrogateescape")


def encode(text: str) -> bytes:
    """A value back to the exact bytes it was decoded from."""
    return text.encode("utf-8", "surrogateescape")


def printable(raw: bytes) -> str:
    """Render bytes for an error message: always encodable, never multi-line."""
    return raw.decode("utf-8", "backslashreplace").replace("\r", " ").replace("\n", " ")


def ascii_lower(text: str) -> str:
    """Lower-case the way strcasecmp compares: ASCII letters only."""
    # strcasecmp folds ASCII only; non-ASCII text can never equal an ASCII keyword.
    return text.lower() if text.isascii() else text


def file_int(text: str, low: int = LLONG_MIN, high: int = LLONG_MAX,
             reason: str = NOT_INTEGER) -> int:
    """Parse a config-file integer; out of [low, high] raises InvalidValue(reason)."""
    if not _FILE_INT.fullmatch(text):
        raise InvalidValue(NOT_INTEGER)
    value = int(text)
    if not LLONG_MIN <= value <= LLONG_MAX:
        raise InvalidValue(NOT_INTEGER)
    if not low <= value <= high:
        raise InvalidValue(reason)
    return value


def strict_int(text: str) -> int:
    """Parse an integer the way CONFIG SET does (no sign, spaces or leading zeros)."""
    if not _STRICT_INT.fullmatch(text):
        raise InvalidValue()
    value = int(text)
    if not LLONG_MIN <= value <= LLONG_MAX:
        raise InvalidValue()
    return value


def parse_memory(text: str) -> int:
    """Parse a memory value with an optional unit (b, k, kb, m, mb, g, gb); raise ValueError."""
    match = _MEMORY.fullmatch(text)
    if match is None:
        raise ValueError(NOT_MEMORY)
    value = int(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
    if not LLONG_MIN <= value <= LLONG_MAX:
        raise ValueError(NOT_MEMORY)
    return value


def memory_value(text: str) -> int:
    """parse_memory for the directive parsers: a bad value raises InvalidValue."""
    try:
        return parse_memory(text)
    except ValueError:
        raise InvalidValue(NOT_MEMORY) from None


def format_memory(value: int) -> str:
    """Render bytes with the largest unit that divides them exactly (gb, mb, kb)."""
    for unit, size in (("gb", GB), ("mb", MB), ("kb", KB)):
        if value and value % size == 0:
            return f"{value // size}{unit}"
    return str(value)


def parse_yes_no(text: str) -> bool:
    """yes/no in any case to a bool."""
    word = ascii_lower(text)
    if word == "yes":
        return True
    if word == "no":
        return False
    raise InvalidValue(NOT_YES_NO)


def yes_no_text(value: bool) -> str:
    """A bool as CONFIG GET and REWRITE show it."""
    return "yes" if value else "no"


def quoted(value: str) -> str:
    """A string as one config-file argument, quoted when it needs to be."""
    return quote_arg(encode(value))


def quoted_if_set(value: str) -> str | None:
    """quoted(value), or None (leave the directive out) when it is empty."""
    return quoted(value) if value else None


def octal_text(value: int) -> str:
    """A permission mask as the file writes it (no 0o prefix)."""
    return format(value, "o")

