"""Classic histograms: DNS latency's one bucket table (:data:`LATENCY_BUCKETS`) and one
writer (:class:`HistogramWriter`) for the probes', the resolvers' and dnstap's histograms,
``le`` spelled by :func:`exposition.le_text` (Prometheus 3's float form: ``"1.0"``)."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from itertools import accumulate
from typing import cast

from dnsfleet.exposition import Family, Labels, compile_template, format_value, le_text

__all__ = ["LATENCY_BUCKETS", "HistogramWriter", "add_histogram"]


# The one bucket table for DNS latency (the probes' and dnstap's histograms): bounds around
# the SLO thresholds, from a cache hit (1 ms) to 1 s. Each bound is a series per target:
# nothing alerts below 1 ms or between 1 s and +Inf (an answer slower than 1 s already
# fails every latency SLO; +Inf and _sum still count and time it).
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip


def add_histogram(
    fam: Family,
    labels: Labels,
    buckets: Iterable[tuple[float, float]],
    *,
    total: float,
    count: float,
) -> None:
    """Write one classic histogram into ``fam``: ``buckets`` are (upper bound, cumulative
    count) pairs, the last bound +Inf; ``le`` is spelled by :func:`le_text`."""
    for bound, n in buckets:
        fam.samples.append(("_bucket", labels.with_(("le", le_text(bound))), n))
    fam.samples.append(("_sum", labels, total))
    fam.samples.append(("_count", labels, count))


class HistogramWriter:
    """The writer of one histogram family with fixed bucket bounds. Counts come in per
    bucket (one per bound, then the overflow above the last), as an observer keeps them
    (:meth:`index`); the writer accumulates them. :meth:`add` writes typed samples into a
    :class:`Family`; :meth:`lines` writes the same samples of many series as exposition
    text, one f-string per series in one compiled comprehension (see compile_template),
    for the per-target families of a large scrape."""

    __slots__ = ("_lines", "bounds", "name")

    def __init__(self, name: str, bounds: Sequence[float]) -> None:
        self.name = name
        self.bounds = tuple(bounds)
        les = (*(le_text(b) for b in self.bounds), "+Inf")
        counts = ", ".join(f"a{i}" for i in range(len(les)))
        # {l.prefix} is the labels ahead of le (with their comma), {l.text} the labels
        # alone; doubled braces are the exposition's own. A series without labels has
        # bare _sum and _count lines.
        buckets = "".join(
            f'{name}_bucket{{{{{{l.prefix}}le="{le}"}}}} {{a{i}}}\n' for i, le in enumerate(les)
        )
        last = f"{{a{len(les) - 1}}}"
        labelled = f"{buckets}{name}_sum{{{{{{l.text}}}}}} {{fmt(s)}}\n"
        labelled += f"{name}_count{{{{{{l.text}}}}}} {last}\n"
        bare = f"{buckets}{name}_sum {{fmt(s)}}\n{name}_count {last}\n"
        # One comprehension over the series: no call per series, each series' cumulative
        # counts unpacked into the f-string's fields.
        self._lines = compile_template(
            "histogram",
            "series, fmt",
            labelled,
            each=f"l, ({counts}), s in series",
            unless=("l.text", bare),
        )

    def index(self, value: float) -> int:
        """The bucket an observation counts in: the first bound at or above it."""
        return bisect_left(self.bounds, value)

    def add(self, fam: Family, labels: Labels, counts: Sequence[float], total: float) -> None:
        cumulative = list(accumulate(counts))
        add_histogram(
            fam,
            labels,
            zip((*self.bounds, math.inf), cumulative, strict=True),
            total=total,
            count=cumulative[-1],
        )

    def lines(self, series: Iterable[tuple[Labels, Iterable[float], float]]) -> list[str]:
        """Each series' lines as one string: ``series`` are (labels, cumulative counts, one
        per bound then +Inf's, sum)."""
        return cast(list[str], self._lines(series, format_value))  # with each: a list

    def text(self, labels: Labels, counts: Sequence[float], total: float) -> str:
        """One series' lines from its counts per bucket."""
        return self._lines([(labels, accumulate(counts), total)], format_value)[0]
