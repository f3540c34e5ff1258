"""Native histogram state: bucket indexes as Prometheus computes them (bucket ``i`` covers
``(base**(i-1), base**i]``, exact powers of two at the top of their bucket), checked
against exact rational arithmetic; the bounded bucket count, lowering the schema as
client_golang does; and the spans and deltas the exposition carries."""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dnsfleet.nativehist import (
    DEFAULT_SCHEMA,
    DEFAULT_ZERO_THRESHOLD,
    MAX_BUCKETS,
    MIN_SCHEMA,
    NativeHistogram,
    bucket_key,
    spans_and_deltas,
    upper_bound,
)

pytestmark = pytest.mark.unit


def exact_key(value: float, schema: int) -> int:
    """The smallest ``i`` with ``|value| <= 2**(i * 2**-schema)``, in exact arithmetic."""
    v = abs(Fraction(value))
    if schema >= 0:
        # |v| <= 2**(i / 2**s)  <=>  |v|**(2**s) <= 2**i
        x: Fraction = v ** (2**schema)
        i: int = x.numerator.bit_length() - x.denominator.bit_length()
        while Fraction(2) ** i < x:
            i += 1
        while Fraction(2) ** (i - 1) >= x:
            i -= 1
        return i
    # |v| <= 2**(i * 2**-s)  <=>  i >= log2|v| / 2**-s, so ceil(exact_key(v, 0) / 2**-s)
    return -(-exact_key(value, 0) // (1 << -schema))


def test_defaults_are_client_golangs() -> None:
    # NativeHistogramBucketFactor 1.1 gives schema 3 (bounds 2**(1/8) = 1.0905 apart);
    # DefNativeHistogramZeroThreshold is 2**-128.
    assert DEFAULT_SCHEMA == 3 and DEFAULT_ZERO_THRESHOLD == 2.938735877055719e-39
    assert upper_bound(1, 3) == 2 ** (1 / 8) and 2 ** (1 / 8) <= 1.1


@pytest.mark.parametrize(
    ("value", "schema", "key"),
    [
        (1.0, 3, 0),  # 1 is the top of bucket 0 at every schema
        (1.0, 0, 0),
        (1.0, -4, 0),
        (2.0, 3, 8),
        (2.0, 0, 1),
        (2.0, -1, 1),  # (1, 4]
        (4.0, -1, 1),
        (4.000000001, -1, 2),
        (0.5, 3, -8),
        (0.5, -1, 0),  # (1/4, 1]
        (0.25, -1, -1),
        (0.125, -1, -1),  # (1/16, 1/4]: a truncating division would say 0
        (2.0**-10, -2, -2),  # (2**-12, 2**-8]
        (1.0905, 3, 1),  # just under 2**(1/8)
        (1.1, 3, 2),
        (0.001, 3, -79),
        (0.0009765625, 3, -80),  # 2**-10, exactly a bound
        (3.0, 0, 2),
        (-3.0, 0, 2),  # the negative side uses the magnitude
        (math.inf, 3, 8193),  # one above the largest float's bucket, as client_golang
        (-math.inf, 0, 1025),
    ],
)
def test_bucket_key_known_values(value: float, schema: int, key: int) -> None:
    assert bucket_key(value, schema) == key


@pytest.mark.parametrize("schema", range(MIN_SCHEMA, 9))
def test_powers_of_two_top_their_bucket(schema: int) -> None:
    for k in range(-40, 41):
        v = math.ldexp(1.0, k)
        key = bucket_key(v, schema)
        assert key == exact_key(v, schema), (v, schema)
        assert upper_bound(key - 1, schema) < v <= upper_bound(key, schema)
        if schema >= 0:
            assert key == k << schema and upper_bound(key, schema) == v
        above = math.nextafter(v, math.inf)
        assert bucket_key(above, schema) == exact_key(above, schema)


@given(
    st.floats(min_value=1e-12, max_value=1e12, allow_nan=False),
    st.integers(min_value=MIN_SCHEMA, max_value=8),
)
def test_bucket_key_matches_exact_arithmetic(value: float, schema: int) -> None:
    assert bucket_key(value, schema) == exact_key(value, schema)
    assert bucket_key(-value, schema) == exact_key(value, schema)


def test_zero_bucket_nan_and_sides() -> None:
    h = NativeHistogram()
    for v in (0.0, -0.0, 1e-40, -1e-40, DEFAULT_ZERO_THRESHOLD, 0.004, -2.0, 0.004):
        h.observe(v)
    assert h.zero_count == 5
    assert h.positive == {bucket_key(0.004, 3): 2} and h.negative == {8: 1}
    h.observe(math.nan)  # counted, summed, in no bucket (client_golang)
    snap = h.snapshot()
    assert snap.sample_count == 9 and math.isnan(snap.sample_sum)
    assert sum(snap.positive.values()) + sum(snap.negative.values()) + snap.zero_count == 8


def test_snapshot_is_a_copy() -> None:
    h = NativeHistogram()
    h.observe(0.01)
    snap = h.snapshot()
    h.observe(0.01)
    h.observe(5.0)
    assert snap.sample_count == 1 and sum(snap.positive.values()) == 1


def test_bucket_count_is_bounded_by_lowering_the_schema() -> None:
    """Latencies across 24 orders of magnitude: at schema 3 that is ~640 buckets. Kept to
    MAX_BUCKETS by merging neighbours; the merged counts are what bucketing every value at
    the final schema gives, and nothing is lost."""
    values = [10.0 ** (e / 25) for e in range(-300, 300)]
    h = NativeHistogram()
    for v in values:
        h.observe(v)
        assert len(h.positive) <= MAX_BUCKETS
    assert h.schema < DEFAULT_SCHEMA
    direct: dict[int, int] = {}
    for v in values:
        k = bucket_key(v, h.schema)
        direct[k] = direct.get(k, 0) + 1
    assert h.positive == direct and h.count == len(values)


def test_schema_stops_at_minus_four() -> None:
    # At schema -4 a bucket spans 2**16: the floats fill ~130 on each side of zero (a
    # zero threshold of 0 keeps the tiny ones out of the zero bucket).
    h = NativeHistogram(schema=MIN_SCHEMA, zero_threshold=0.0)
    for e in range(-1000, 1000, 3):
        h.observe(math.ldexp(1.0, e))
        h.observe(-math.ldexp(1.0, e))
    assert h.schema == MIN_SCHEMA and len(h.positive) + len(h.negative) > MAX_BUCKETS
    with pytest.raises(ValueError, match="schema 9"):
        NativeHistogram(schema=9)


@pytest.mark.parametrize(
    ("counts", "spans", "deltas"),
    [
        ({}, (), ()),
        ({0: 1}, ((0, 1),), (1,)),
        ({-34: 1, -8: 2, 13: 1}, ((-34, 1), (25, 1), (20, 1)), (1, 1, -1)),
        # gaps of one or two empty buckets are written as zeros, a longer gap starts a span
        ({-3: 2, -2: 5, 0: 1, 4: 3}, ((-3, 4), (3, 1)), (2, 3, -5, 1, 2)),
        ({5: 1, 8: 1}, ((5, 4),), (1, -1, 0, 1)),
        ({5: 1, 9: 1}, ((5, 1), (3, 1)), (1, 0)),
    ],
)
def test_spans_and_deltas(
    counts: dict[int, int], spans: tuple[tuple[int, int], ...], deltas: tuple[int, ...]
) -> None:
    assert spans_and_deltas(counts) == (spans, deltas)


@given(st.dictionaries(st.integers(-200, 200), st.integers(1, 10**12), max_size=40))
def test_spans_and_deltas_read_back(counts: dict[int, int]) -> None:
    spans, deltas = spans_and_deltas(counts)
    got: dict[int, int] = {}
    key = 0
    n = 0
    it = iter(deltas)
    for i, (offset, length) in enumerate(spans):
        key = offset if i == 0 else key + offset
        for _ in range(length):
            n += next(it)
            if n:
                got[key] = n
            key += 1
    assert got == counts and next(it, None) is None


def reference_state(values: list[float], schema: int) -> tuple[object, ...]:
    """What observe must leave, from bucket_key alone and the same bound on buckets."""
    zero = count = 0
    total = 0.0
    sides: dict[bool, dict[int, int]] = {True: {}, False: {}}
    for v in values:
        count += 1
        total += v
        if math.isnan(v):
            continue
        if abs(v) <= DEFAULT_ZERO_THRESHOLD:
            zero += 1
            continue
        side = sides[v > 0]
        key = bucket_key(v, schema)
        side[key] = side.get(key, 0) + 1
        while len(sides[True]) + len(sides[False]) > MAX_BUCKETS and schema > -4:
            schema -= 1
            for k in (True, False):
                merged: dict[int, int] = {}
                for key, n in sides[k].items():
                    merged[-(-key // 2)] = merged.get(-(-key // 2), 0) + n
                sides[k] = merged
    return schema, zero, count, total, sides[True], sides[False]


@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.floats(min_value=1e-6, max_value=10.0),  # a probe's latency: the fast path
            st.sampled_from([0.0, -0.0, 2.0**-128, 2.0**-129, math.inf, 0.001, 1.0]),
        ),
        max_size=300,
    ),
    st.integers(-4, 8),
)
def test_observe_agrees_with_bucket_key(values: list[float], schema: int) -> None:
    h = NativeHistogram(schema=schema)
    for v in values:
        h.observe(v)
    got = (h.schema, h.zero_count, h.count, h.sum, h.positive, h.negative)
    want = reference_state(values, schema)
    assert got[:3] == want[:3] and got[4:] == want[4:]
    assert got[3] == want[3] or (math.isnan(got[3]) and math.isnan(want[3]))  # type: ignore[arg-type]


def one_observation_key(value: float, schema: int) -> int:
    """The bucket ``observe`` counts one positive ``value`` in, at ``schema``."""
    h = NativeHistogram(schema=schema)
    h.observe(value)
    assert h.count == 1 and not h.negative and not h.zero_count and list(h.positive.values()) == [1]
    return next(iter(h.positive))


def edges(schema: int) -> list[float]:
    """Powers of two, the float bounds of the buckets (``2**(i / 2**schema)`` as the float
    the bucket maths compares with), and each one's neighbours on both sides."""
    found = []
    for exp in range(-30, 31):
        for i in range(1 << max(schema, 0)):
            bound = math.ldexp(2.0 ** (i / (1 << max(schema, 0))), exp)
            found += [bound, math.nextafter(bound, 0.0), math.nextafter(bound, math.inf)]
    return found


@pytest.mark.parametrize("schema", range(MIN_SCHEMA, 9))
def test_observe_fast_path_keys_bounds_and_powers_of_two(schema: int) -> None:
    """``observe`` works a positive finite value's key out inline (every probe's latency):
    the same key as bucket_key at the values where one bucket ends and the next begins."""
    for v in edges(schema):
        assert one_observation_key(v, schema) == bucket_key(v, schema), (v, schema)


@given(
    st.one_of(
        st.floats(min_value=2.0**-127, max_value=sys.float_info.max),
        st.floats(min_value=1e-7, max_value=100.0),
    ),
    st.integers(min_value=MIN_SCHEMA, max_value=8),
)
def test_observe_fast_path_matches_bucket_key(value: float, schema: int) -> None:
    assert one_observation_key(value, schema) == bucket_key(value, schema)
