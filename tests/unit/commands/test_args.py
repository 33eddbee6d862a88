"""Tests for disque/commands/args.py: the integer rules of the original's
string2ll, whichever of parse_int's paths takes an argument."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disque.commands.args import parse_int

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
DECIMAL = re.compile(rb"[+-]?[0-9]+\Z")


def reference(arg: bytes) -> int | None:
    """What the original accepts: an optional sign, digits, a signed 64-bit value."""
    if not arg:
        return 0
    if not DECIMAL.match(arg):
        return None
    value = int(arg)
    return value if INT64_MIN <= value <= INT64_MAX else None


@pytest.mark.parametrize("arg, expected", [
    (b"0", 0), (b"7", 7), (b"3600", 3600), (b"007", 7), (b"999999999", 999999999),
    (b"1234567890", 1234567890), (b"9223372036854775807", INT64_MAX),
    (b"9223372036854775808", None), (b"-9223372036854775808", INT64_MIN),
    (b"-1", -1), (b"+5", 5), (b"", 0), (b"1x", None), (b"x1", None), (b" 1", None),
    (b"1 ", None), (b"-", None), (b"+", None), (b"1.5", None), (b"\xd9\xa1", None),
])
def test_examples(arg: bytes, expected: int | None) -> None:
    assert parse_int(arg) == expected


@given(st.binary(max_size=22) | st.from_regex(rb"[+-]?[0-9]{1,21}\Z"))
def test_matches_the_original_rules(arg: bytes) -> None:
    assert parse_int(arg) == reference(arg)
