"""disque/context/runtime.py helpers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from disque.context.runtime import ms_from_seconds


@given(st.integers(min_value=-(1 << 52), max_value=1 << 52))
def test_ms_from_seconds_is_a_product(seconds: int) -> None:
    assert ms_from_seconds(seconds) == seconds * 1000
