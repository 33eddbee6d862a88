"""Tests for disque/jobs/ids.py (spec: jobs-and-ids.md §1, commands.md job-ID validation)."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disque.jobs.ids import (
    ID_LENGTH,
    JobIdGenerator,
    id_ttl_minutes,
    is_at_most_once_id,
    is_valid_job_id,
    ttl_field,
)

NODE = b"357e57931d14b67cd18a9f63b0982d265df88424"
ID_RE = re.compile(rb"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}\Z")


def test_format():
    gen = JobIdGenerator(NODE, random.Random(1))
    job_id = gen.new_id(86400, 300)
    assert len(job_id) == ID_LENGTH == 40
    assert ID_RE.match(job_id)
    assert job_id.startswith(b"D-357e5793-")
    assert job_id.endswith(b"-05a1")


@pytest.mark.parametrize("ttl, retry, field", [
    (86400, 300, b"05a1"), (86400, 0, b"05a0"), (5, 1, b"0001"), (5, 0, b"0000"),
    (60, 6, b"0001"), (120, 12, b"0003"), (119, 0, b"0000"), (180, 0, b"0002"),
    (65535 * 60, 1, b"ffff"), (10 ** 9, 1, b"ffff"), (10 ** 9, 0, b"fffe"),
])
def test_ttl_field(ttl, retry, field):
    assert ttl_field(ttl, retry) == field
    gen = JobIdGenerator(NODE, random.Random(2))
    assert gen.new_id(ttl, retry)[36:] == field


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 2 ** 40), st.integers(0, 10 ** 6))
def test_ttl_field_parity_tells_retry(ttl, retry):
    field = ttl_field(ttl, retry)
    minutes = int(field, 16)
    assert (minutes & 1 == 1) == (retry > 0)
    assert abs(minutes - min(ttl // 60, 65535)) <= 1
    job_id = JobIdGenerator(NODE, random.Random(ttl)).new_id(ttl, retry)
    assert id_ttl_minutes(job_id) == minutes
    assert is_at_most_once_id(job_id) == (retry == 0)


def test_ttl_decoding_tolerates_case_and_bad_digits():
    base = b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-"
    assert id_ttl_minutes(base + b"05A1") == 0x5A1
    assert id_ttl_minutes(base + b"zz01") == 1  # invalid hex digits count as 0
    assert id_ttl_minutes(base + b"0g0f") == 0x000F
    assert is_at_most_once_id(base + b"0002")
    assert not is_at_most_once_id(base + b"0001")


def test_ids_are_unique_across_many_generations():
    gen = JobIdGenerator(NODE, random.Random(3))
    ids = {gen.new_id(86400, 300) for _ in range(20000)}
    assert len(ids) == 20000
    assert all(ID_RE.match(i) for i in list(ids)[:2000])


def test_same_seed_same_ids_different_seed_different_ids():
    a = [JobIdGenerator(NODE, random.Random(9)).new_id(60, 1) for _ in range(1)]
    b = [JobIdGenerator(NODE, random.Random(9)).new_id(60, 1) for _ in range(1)]
    c = [JobIdGenerator(NODE, random.Random(10)).new_id(60, 1) for _ in range(1)]
    assert a == b != c


def test_node_id_change():
    gen = JobIdGenerator(NODE, random.Random(4))
    gen.new_id(60, 1)
    gen.set_node_id(b"abcdef12" + b"0" * 32)
    assert gen.new_id(60, 1).startswith(b"D-abcdef12-")


def test_suffix_cache_distinguishes_retry_zero():
    gen = JobIdGenerator(NODE, random.Random(5))
    assert gen.new_id(600, 1).endswith(b"-000b")
    assert gen.new_id(600, 0).endswith(b"-000a")
    for ttl in range(1, 3000):  # overflow the cache of suffixes
        gen.new_id(ttl * 60, ttl % 2)
    assert gen.new_id(600, 0).endswith(b"-000a")


@pytest.mark.parametrize("job_id, valid", [
    (b"D-357e5793-zTdDA906+stSktxhIaAXV2i3-05a1", True),
    (b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001", True),
    (b"D-xxxxxxxx-!!!!!!!!!!!!!!!!!!!!!!!!-zzzz", True),  # contents are not checked
    (b"D-357e5793-zTdDA906+stSktxhIaAXV2i3-05a", False),
    (b"D-357e5793-zTdDA906+stSktxhIaAXV2i3-05a1x", False),
    (b"E-357e5793-zTdDA906+stSktxhIaAXV2i3-05a1", False),
    (b"d-357e5793-zTdDA906+stSktxhIaAXV2i3-05a1", False),
    (b"D_357e5793-zTdDA906+stSktxhIaAXV2i3-05a1", False),
    (b"D-357e5793_zTdDA906+stSktxhIaAXV2i3-05a1", False),
    (b"D-357e5793-zTdDA906+stSktxhIaAXV2i3_05a1", False),
    (b"", False), (b"badid", False),
])
def test_validation(job_id, valid):
    assert is_valid_job_id(job_id) is valid


@settings(max_examples=150, deadline=None)
@given(st.binary(min_size=0, max_size=45))
def test_validation_is_exactly_the_four_fixed_bytes(job_id):
    expected = (len(job_id) == 40 and job_id[:2] == b"D-" and job_id[10:11] == b"-"
                and job_id[35:36] == b"-")
    assert is_valid_job_id(job_id) == expected
