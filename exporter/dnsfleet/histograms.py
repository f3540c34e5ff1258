"""Classic histograms: DNS latency's one bucket table (:data:`LATENCY_BUCKETS`) and one
writer (:class:`HistogramWriter`) for the probes', the resolvers' and dnstap's histograms,
``le`` spelled by :func:`exposition.le_text` (Prometheus 3's float form: ``"1.0"``)."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from itertools import accumulate

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
    :class:`Family`; :meth:`text` writes the same samples as exposition lines in one
    f-string call, for the per-target families of a large scrape (see compile_template)."""

    __slots__ = ("_bare", "_block", "bounds", "name")

    def __init__(self, name: str, bounds: Sequence[float]) -> None:
        self.name = name
        self.bounds = tuple(bounds)
        les = (*(le_text(b) for b in self.bounds), "+Inf")
        params = "p, l, s, " + ", ".join(f"a{i}" for i in range(len(les)))
        # {p} is the labels ahead of le (with their comma), {l} the labels alone; doubled
        # braces are the exposition's own.
        buckets = "".join(
            f'{name}_bucket{{{{{{p}}le="{le}"}}}} {{a{i}}}\n' for i, le in enumerate(les)
        )
        last = f"{{a{len(les) - 1}}}"
        self._block = compile_template(
            "histogram",
            params,
            f"{buckets}{name}_sum{{{{{{l}}}}}} {{s}}\n{name}_count{{{{{{l}}}}}} {last}\n",
        )
        self._bare = compile_template(
            "histogram", params, f"{buckets}{name}_sum {{s}}\n{name}_count {last}\n"
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

    def text(self, labels: Labels, counts: Sequence[float], total: float) -> str:
        block = self._block if labels.text else self._bare
        return block(labels.prefix, labels.text, format_value(total), *accumulate(counts))
