"""Native (sparse exponential) histograms: the state one target's latency keeps, and the
frozen copy a scrape encodes.

The bucket maths is client_golang's (prometheus/histogram.go), so a value lands in the
bucket Prometheus computes for it: at schema ``s`` the bucket boundaries are powers of
``base = 2**(2**-s)``, bucket ``i`` covers ``(base**(i-1), base**i]`` (the upper bound is
inclusive, so an exact power of two is the top of its bucket), and values at or below the
zero threshold in magnitude count in the zero bucket. The defaults are client_golang's:
schema 3 (its choice for NativeHistogramBucketFactor 1.1, each bound 9 % above the one
before it) and a zero threshold of 2**-128. Buckets are kept sparse (a dict of counts),
and bounded: past :data:`MAX_BUCKETS` the schema is lowered, each step merging pairs of
neighbouring buckets, as client_golang's doubleBucketWidth does when
NativeHistogramMaxBucketNumber is set (its own default is no limit; 160 is the figure its
documentation and OpenTelemetry's exponential histograms use).
"""

from __future__ import annotations

import math
import sys
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from typing import NamedTuple

DEFAULT_SCHEMA = 3
DEFAULT_ZERO_THRESHOLD = 2.0**-128
MAX_BUCKETS = 160
MIN_SCHEMA = -4  # the lowest schema Prometheus knows; client_golang stops reducing there


def _bounds(schema: int) -> tuple[float, ...]:
    """The fractions (as math.frexp returns them, in [0.5, 1)) at which the buckets of one
    power of two start, for a schema above 0: client_golang's nativeHistogramBounds."""
    n = 1 << schema
    return tuple(math.ldexp(2.0 ** (i / n), -1) for i in range(n))


_BOUNDS = {s: _bounds(s) for s in range(1, 9)}
_INF = math.inf
_frexp = math.frexp


def bucket_key(value: float, schema: int) -> int:
    """The index of the bucket holding ``abs(value)`` (not 0, not NaN) at ``schema``: the
    smallest ``i`` with ``abs(value) <= base**i``. Computed from the float's own mantissa
    and exponent, as client_golang does, so exact powers of two and the bounds of schema
    0 and below are exact. An infinity goes one bucket above the largest float's, as
    client_golang puts it."""
    magnitude = abs(value)
    above = math.isinf(magnitude)
    frac, exp = math.frexp(sys.float_info.max if above else magnitude)
    if schema > 0:
        bounds = _BOUNDS[schema]
        key = bisect_left(bounds, frac) + (exp - 1) * len(bounds)
    else:
        key = exp - 1 if frac == 0.5 else exp
        # ceil(key / 2**-schema), flooring as an arithmetic shift does: a truncating
        # division would put (2**-3, 2**-2] at schema -1 in bucket 0 rather than -1.
        key = (key + (1 << -schema) - 1) >> -schema
    return key + 1 if above else key


def upper_bound(key: int, schema: int) -> float:
    """The inclusive upper bound of bucket ``key`` at ``schema`` (tests and docs)."""
    return float(2.0 ** (key * 2.0**-schema))


class NativeSnapshot(NamedTuple):
    """A native histogram as it stood when copied: its sparse bucket counts by index on
    each side of zero, its count and sum. The spans and deltas the exposition wants are
    worked out from it (:func:`spans_and_deltas`) when a scraper asks for protobuf."""

    schema: int
    zero_threshold: float
    zero_count: int
    sample_count: int
    sample_sum: float
    positive: dict[int, int]
    negative: dict[int, int]


def spans_and_deltas(
    counts: dict[int, int],
) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
    """Sparse bucket counts as spans and deltas. A gap of empty buckets ends a span, as
    client_golang's makeBuckets does for gaps above two (a gap of one or two costs fewer
    bytes as zero counts than as a new span, so it is written as zeros)."""
    spans: list[tuple[int, int]] = []
    deltas: list[int] = []
    prev_key = 0
    prev_count = 0
    for key in sorted(counts):
        if not spans:
            spans.append((key, 1))
        else:
            gap = key - prev_key - 1
            if gap > 2:
                spans.append((gap, 1))
            else:
                for _ in range(gap):
                    deltas.append(-prev_count)
                    prev_count = 0
                offset, length = spans[-1]
                spans[-1] = (offset, length + gap + 1)
        deltas.append(counts[key] - prev_count)
        prev_count = counts[key]
        prev_key = key
    return tuple(spans), tuple(deltas)


class NativeHistogram:
    """One histogram's native state, kept across scrapes beside its classic buckets."""

    __slots__ = ("count", "negative", "positive", "schema", "sum", "zero_count", "zero_threshold")

    def __init__(
        self, *, schema: int = DEFAULT_SCHEMA, zero_threshold: float = DEFAULT_ZERO_THRESHOLD
    ) -> None:
        if not MIN_SCHEMA <= schema <= 8:
            raise ValueError(f"schema {schema} is not between {MIN_SCHEMA} and 8")
        self.schema = schema
        self.zero_threshold = zero_threshold
        self.zero_count = 0
        self.count = 0
        self.sum = 0.0
        self.positive: dict[int, int] = {}
        self.negative: dict[int, int] = {}

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value
        schema = self.schema
        if 0.0 <= self.zero_threshold < value < _INF and schema > 0:
            # bucket_key for what every probe's latency is (positive, finite, above the
            # zero threshold; NaN fails every comparison) without its calls and tests:
            # len(_BOUNDS[schema]) is 1 << schema.
            frac, exp = _frexp(value)
            key = bisect_left(_BOUNDS[schema], frac) + ((exp - 1) << schema)
            side = self.positive
        elif math.isnan(value):
            # client_golang counts a NaN in count and sum only: it belongs to no bucket.
            return
        elif abs(value) <= self.zero_threshold:
            self.zero_count += 1
            return
        else:
            side = self.positive if value > 0 else self.negative
            key = bucket_key(value, schema)
        n = side.get(key)
        if n is not None:
            side[key] = n + 1
            return
        side[key] = 1
        # A new bucket: the only time the count can pass the bound.
        while len(self.positive) + len(self.negative) > MAX_BUCKETS and self.schema > MIN_SCHEMA:
            self._halve()

    def _halve(self) -> None:
        """One schema lower: bucket ``k`` joins bucket ``ceil(k / 2)``, which covers it and
        its neighbour (at the lower schema, bucket ``j`` spans the old ``2j - 1`` and ``2j``)."""
        self.schema -= 1
        for name in ("positive", "negative"):
            merged: dict[int, int] = {}
            for key, n in getattr(self, name).items():
                new = -(-key // 2)
                merged[new] = merged.get(new, 0) + n
            setattr(self, name, merged)

    def snapshot(self) -> NativeSnapshot:
        return NativeSnapshot(
            self.schema,
            self.zero_threshold,
            self.zero_count,
            self.count,
            self.sum,
            self.positive.copy(),
            self.negative.copy(),
        )


class Snapshots(Mapping[str, NativeSnapshot]):
    """Native histograms by series, copied only when read. A cycle's record keeps this,
    not copies: the copies (a dict of some 50 buckets per target) would cost every cycle
    2 ms of CPU and every kept record 2.5 MB at 1,000 targets, for scrapers that may never
    ask for protobuf. One that does reads the histograms as they are then, perhaps a few
    observations past the record's classic buckets: the native count and sum go with
    them, so a message's native buckets never hold more than its count."""

    __slots__ = ("_live",)

    def __init__(self, live: Mapping[str, NativeHistogram]) -> None:
        self._live = live

    def __getitem__(self, key: str) -> NativeSnapshot:
        return self._live[key].snapshot()

    def __iter__(self) -> Iterator[str]:
        return iter(self._live)

    def __len__(self) -> int:
        return len(self._live)
