"""RESP reply encoding: the replies' constants and the functions that frame
them (requests are parsed by a RequestParser, ``protocol/request.py``)."""

from __future__ import annotations

from typing import Any, Final

from mypy_extensions import mypyc_attr

CRLF: Final = b"\r\n"
OK: Final = b"+OK\r\n"
PONG: Final = b"+PONG\r\n"
NIL: Final = b"$-1\r\n"
NIL_ARRAY: Final = b"*-1\r\n"
EMPTY_ARRAY: Final = b"*0\r\n"

_SMALL_INTS: Final = [b":%d\r\n" % i for i in range(1024)]


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


def encode_parts(value: object, large: int) -> list[bytes]:
    """``encode(value)`` as consecutive parts, every bytes value of ``large``
    bytes or more a part of its own: the same object, not a copy, so a job's
    body reaches the transport without being copied into the reply."""
    parts: list[bytes] = []
    out = bytearray()
    _encode_split(out, value, parts, large)
    parts.append(bytes(out))
    return parts


def _encode_split(out: bytearray, value: object, parts: list[bytes], large: int) -> None:
    if type(value) is bytes and len(value) >= large:
        out += b"$%d\r\n" % len(value)
        parts.append(bytes(out))
        parts.append(value)
        out.clear()
        out += CRLF
    elif type(value) is list:
        out += b"*%d\r\n" % len(value)
        for item in value:
            _encode_split(out, item, parts, large)
    else:
        _encode_into(out, value)


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
