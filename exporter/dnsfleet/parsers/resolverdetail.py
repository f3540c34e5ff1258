"""The resolver statistics an SRE charts beyond queries, hits and rcodes: latency and
upstream round-trip histograms, upstream queries and timeouts, drops by reason, recursions
in flight, cache entries, memory, queries by type and DNSSEC validation results.

The model and the small shared helpers; each software's mapping is in its own parser
(``parsers/unbound.py``, ``parsers/bind.py``, ``parsers/promtext.py``). Every label set
here is closed and documented in docs/metrics.md, so a fleet of mixed software gives the
same series names:

- drop ``reason``: :data:`DROP_REASONS`; ``cache``: :data:`CACHES`; memory ``pool``:
  :data:`POOLS` (disjoint, so their sum is the daemon's own total where it reports one);
  ``qtype``: :data:`QTYPES` then ``other``; DNSSEC ``result``: :data:`DNSSEC_RESULTS`.

The qtype set holds only types that every software counting types names on its own
(unbound counts types >= 256, CAA among them, as ``other``; CoreDNS's monitored list has
no NAPTR), so ``other`` means the same on every resolver.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

DROP_REASONS = ("rate_limit", "overload", "policy", "acl", "malformed")
CACHES = ("message", "rrset", "packet", "negative", "key", "infra")
POOLS = ("cache", "modules", "buffers", "other")
QTYPES = (
    "A",
    "AAAA",
    "CNAME",
    "MX",
    "NS",
    "PTR",
    "SOA",
    "SRV",
    "TXT",
    "DS",
    "DNSKEY",
    "HTTPS",
    "SVCB",
    "ANY",
)
DNSSEC_RESULTS = ("secure", "insecure", "bogus", "indeterminate")

Counts = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative histogram: ``(upper bound in seconds, observations <= bound)`` in
    ascending order, the last bound ``inf``. ``sum`` is NaN where the daemon keeps none
    (BIND, Knot Resolver: its /metrics ``latency_sum`` is made up from the bounds)."""

    buckets: tuple[tuple[float, float], ...]
    sum: float

    @property
    def count(self) -> float:
        return self.buckets[-1][1] if self.buckets else 0.0


@dataclass(frozen=True, slots=True)
class ResolverDetail:
    """None (or empty) wherever the software does not count the thing: the family is then
    absent for that resolver rather than a zero that reads as "nothing happened"."""

    response_latency: Histogram | None = None
    upstream_rtt: Histogram | None = None
    upstream_queries: int | None = None
    upstream_timeouts: int | None = None
    dropped: Counts = ()  # (reason, count) for the reasons the software counts
    recursions_in_flight: int | None = None
    recursions_limit: int | None = None
    cache_entries: Counts = ()
    memory_bytes: Counts = ()
    queries_by_type: Counts = ()  # every QTYPES member and "other" when counted at all
    dnssec_answers: Counts = ()


def count(v: float) -> int:
    """A counter or gauge value as a non-negative int (NaN and negatives are 0)."""
    return int(v) if math.isfinite(v) and v > 0 else 0


def opt_count(v: float | None) -> int | None:
    return None if v is None else count(v)


def from_intervals(intervals: Iterable[tuple[float, float]], total: float = math.nan) -> Histogram:
    """Per-interval counts (upper bound in seconds, count in that interval; ``inf`` for the
    open last one) -> cumulative. An interval list without ``inf`` gets an +Inf bucket
    equal to the last one (nothing is above the daemon's highest bound)."""
    out: list[tuple[float, float]] = []
    acc = 0.0
    for bound, n in sorted(intervals):
        acc += max(n, 0.0)
        out.append((bound, acc))
    if not out or out[-1][0] != math.inf:
        out.append((math.inf, acc))
    return Histogram(tuple(out), total)


def merge_cumulative(
    buckets: Iterable[tuple[float, float]], total: float = math.nan, *, scale: float = 1.0
) -> Histogram | None:
    """Cumulative ``(le, count)`` samples of one or more label sets (summed per ``le``) ->
    one histogram; ``scale`` converts the bound's unit to seconds (dnsdist and Knot Resolver
    count in milliseconds). None when there are no buckets."""
    per_le: dict[float, float] = {}
    for le, n in buckets:
        bound = le if math.isinf(le) else le * scale
        per_le[bound] = per_le.get(bound, 0.0) + (n if math.isfinite(n) else 0.0)
    if not per_le:
        return None
    out = sorted(per_le.items())
    if out[-1][0] != math.inf:
        out.append((math.inf, out[-1][1]))
    return Histogram(tuple(out), total)


def fold_qtypes(counts: Mapping[str, float]) -> Counts:
    """Per-type counts by the software's own type names -> :data:`QTYPES` plus ``other``
    (every type outside the set, and the software's own rest: BIND ``Others``, unbound and
    CoreDNS ``other``). Every member is present, zero included."""
    out = dict.fromkeys((*QTYPES, "other"), 0)
    for name, n in counts.items():
        key = name.upper()
        out[key if key in QTYPES else "other"] += count(n)
    return tuple(out.items())


def present(pairs: Iterable[tuple[str, float | None]]) -> Counts:
    """``(label, value or None)`` -> the pairs whose value the software counts."""
    return tuple((k, count(v)) for k, v in pairs if v is not None)
