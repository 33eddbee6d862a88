"""Tests for disque/protocol/argsplit.py: sdssplitargs-compatible splitting and quoting."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disque.protocol.argsplit import UnbalancedQuotes, quote_arg, split_args


@pytest.mark.parametrize("line, expected", [
    (b"", []),
    (b"   \t ", []),
    (b"PING", [b"PING"]),
    (b"  a  b\tc\r\n", [b"a", b"b", b"c"]),
    (b'"hello world"', [b"hello world"]),
    (b'a "" b', [b"a", b"", b"b"]),
    (b"''", [b""]),
    (b'"\\n\\r\\t\\b\\a\\\\\\""', [b"\n\r\t\b\a\\\""]),
    (b'"\\x41\\x7a\\xff"', [b"Az\xff"]),
    (b'"\\xZZ"', [b"xZZ"]),  # not a hex escape: the backslash escapes 'x'
    (b'"\\q"', [b"q"]),
    (b"'it\\'s'", [b"it's"]),
    (b"'a\\nb'", [b"a\\nb"]),  # single quotes keep backslashes
    (b'ab"cd"', [b"abcd"]),  # a quote inside a word starts quoting
    (b'"a" "b"', [b"a", b"b"]),
    (b"x\0y z", [b"x"]),  # a NUL ends the line like a C string
])
def test_split(line, expected):
    assert split_args(line) == expected


@pytest.mark.parametrize("line", [
    b'"abc', b"'abc", b'"abc"def', b"'abc'def", b'"\\"', b'a "b', b'"a\\x4',
])
def test_unbalanced(line):
    with pytest.raises(UnbalancedQuotes):
        split_args(line)


def test_unbalanced_is_a_value_error():
    assert issubclass(UnbalancedQuotes, ValueError)


@pytest.mark.parametrize("arg, text", [
    (b"abc", '"abc"'),
    (b"", '""'),
    (b'a"b\\c', '"a\\"b\\\\c"'),
    (b"\n\r\t\a\b", '"\\n\\r\\t\\a\\b"'),
    (b"\x00\x7f\xff", '"\\x00\\x7f\\xff"'),
    (b"a b", '"a b"'),
])
def test_quote_arg(arg, text):
    assert quote_arg(arg) == text


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=20).filter(lambda b: b"\0" not in b), max_size=6))
def test_quote_then_split_round_trips(args):
    line = " ".join(quote_arg(a) for a in args).encode("latin-1")
    assert split_args(line) == args


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=60))
def test_any_line_splits_or_reports_unbalanced_quotes(line):
    try:
        args = split_args(line)
    except UnbalancedQuotes:
        return
    assert all(type(a) is bytes for a in args)
    if b'"' not in line and b"'" not in line:
        assert args == line.split(b"\0")[0].split()
