"""Series per target, counted in a real ``/metrics`` scrape (the text exposition Prometheus
asks for by default): the families whose samples carry a ``target`` label, their series
divided by the distinct targets, and one target's series family by family. A classic
histogram costs a series per bucket plus ``_sum`` and ``_count``; the "native" count is the
same scrape with each histogram's label set counted once, which is what a native histogram
costs a scraper that negotiates it."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

TYPE = re.compile(r"^# TYPE (\S+) (\S+)$", re.M)
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^\n]*\})? ", re.M)
TARGET = re.compile(r'(?:\{|,)target="((?:[^"\\]|\\.)*)"')
LE = re.compile(r',?le="[^"]*"')
SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created", "_info", "_gcount", "_gsum")


@dataclass(frozen=True)
class SeriesCount:
    targets: int
    total: int  # series of the per-target families, over every target
    total_native: int
    one: dict[str, int]  # one target's series by family
    one_native: dict[str, int]

    @property
    def per_target(self) -> float:
        return self.total / max(self.targets, 1)

    @property
    def per_target_native(self) -> float:
        return self.total_native / max(self.targets, 1)


def family_of(name: str, types: dict[str, str]) -> str:
    if name in types:
        return name
    for suffix in SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in types:
            return name[: -len(suffix)]
    return name


def count_series(text: str, target: str) -> SeriesCount:
    """Series per target in ``text``; ``target`` is the one listed family by family."""
    types = {m.group(1): m.group(2) for m in TYPE.finditer(text)}
    classic: Counter[str] = Counter()
    native: set[tuple[str, str]] = set()
    one: Counter[str] = Counter()
    one_native: set[tuple[str, str]] = set()
    targets: set[str] = set()
    for m in SAMPLE.finditer(text):
        labels = m.group(2) or ""
        t = TARGET.search(labels)
        if t is None:
            continue
        family = family_of(m.group(1), types)
        targets.add(t.group(1))
        classic[family] += 1
        # A histogram's buckets, sum and count are one native series per label set.
        key = (family, LE.sub("", labels)) if types.get(family) == "histogram" else None
        native.add(key or (m.group(1), labels))
        if t.group(1) == target:
            one[family] += 1
            one_native.add(key or (m.group(1), labels))
    by_family: Counter[str] = Counter()
    for name, _ in one_native:
        by_family[family_of(name, types)] += 1
    return SeriesCount(
        targets=len(targets),
        total=sum(classic.values()),
        total_native=len(native),
        one=dict(sorted(one.items())),
        one_native=dict(by_family),
    )


def series_table(count: SeriesCount, target: str) -> list[str]:
    """The lines `make bench` prints for the series."""
    lines = [
        f"series per target: {count.per_target:.1f} ({count.total} series of per-target "
        f"families over {count.targets} targets); {count.per_target_native:.1f} with each "
        "histogram counted as one native series",
        f"  one default UDP target ({target}), by family:",
        f"  {'family':<48}{'classic':>8}{'native':>8}",
    ]
    for family, n in count.one.items():
        lines.append(f"  {family:<48}{n:>8}{count.one_native.get(family, 0):>8}")
    lines.append(f"  {'total':<48}{sum(count.one.values()):>8}{sum(count.one_native.values()):>8}")
    return lines
