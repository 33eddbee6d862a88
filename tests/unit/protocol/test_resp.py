"""Tests for disque/protocol/resp.py: reply encoding (spec: commands.md §0)."""

from __future__ import annotations

import hiredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disque.protocol import resp
from disque.protocol.resp import Status


class TestEncoders:
    def test_simple_values(self):
        assert resp.status(b"OK") == b"+OK\r\n"
        assert resp.error("ERR boom") == b"-ERR boom\r\n"
        assert resp.integer(0) == b":0\r\n"
        assert resp.integer(1023) == b":1023\r\n"
        assert resp.integer(1024) == b":1024\r\n"
        assert resp.integer(-5) == b":-5\r\n"
        assert resp.bulk(b"") == b"$0\r\n\r\n"
        assert resp.bulk(b"a\r\nb") == b"$4\r\na\r\nb\r\n"
        assert resp.bulk(None) == b"$-1\r\n"

    def test_constants(self):
        assert resp.OK == b"+OK\r\n" and resp.PONG == b"+PONG\r\n"
        assert resp.NIL == b"$-1\r\n" and resp.NIL_ARRAY == b"*-1\r\n"
        assert resp.EMPTY_ARRAY == b"*0\r\n"

    def test_encode_nested(self):
        value = [b"a", "é", 7, -1, None, Status(b"D-x"), [True, False, []], (b"t",)]
        assert resp.encode(value) == (
            b"*8\r\n$1\r\na\r\n$2\r\n\xc3\xa9\r\n:7\r\n:-1\r\n$-1\r\n+D-x\r\n"
            b"*3\r\n:1\r\n:0\r\n*0\r\n*1\r\n$1\r\nt\r\n")

    def test_encode_rejects_unknown_types(self):
        with pytest.raises(TypeError):
            resp.encode(1.5)

    @settings(max_examples=50, deadline=None)
    @given(st.recursive(st.none() | st.integers(-(2 ** 63), 2 ** 63 - 1) | st.binary(max_size=20),
                        lambda inner: st.lists(inner, max_size=4), max_leaves=20))
    def test_encode_round_trips_through_hiredis(self, value):
        reader = hiredis.Reader()
        reader.feed(resp.encode(value))
        assert reader.gets() == value
        assert reader.gets() is False


def test_encode_parts_is_encode_with_large_strings_apart():
    large = b"L" * 1000
    value = [b"id", b"x", [b"nested", large, 7, None, [large]], large, "text", Status(b"OK"),
             (b"tuple", 1), b"y" * 999]
    parts = resp.encode_parts(value, 1000)
    assert b"".join(parts) == resp.encode(value)
    assert [part for part in parts if part is large] == [large] * 3  # the object, not a copy
    assert resp.encode_parts([b"small"], 1000) == [resp.encode([b"small"])]
