"""The record of the fleet's per-target state at the end of a cycle, and its families:
the probe-result gauges, failures by reason, attempts, expect_bogus queries, the latency
histogram and EDE counts, each written from templates shared by every target, at most one
f-string per target and no Python call per target where C can do the loop. Copied
(counters as tuples) so that a later cycle does not change it: app.py keeps complete
cycles as records, in a tenth of the memory of their rendered text. The state it copies
lives in prober.py (``TargetState``); its failures counters are a :class:`FailureCounter`,
kept here beside the row it writes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate, chain, compress, repeat
from operator import attrgetter, is_not, itemgetter

from dnsfleet.config import Target
from dnsfleet.exposition import Family, MetricType, TextFamily, compile_template
from dnsfleet.histograms import LATENCY_BUCKETS, HistogramWriter
from dnsfleet.nativehist import NativeSnapshot
from dnsfleet.probes import REASONS, ProbeResult, Reason
from dnsfleet.probes.families import probe_result_families
from dnsfleet.recordproto import FailureCounts, RecordProto, RecordRow

__all__ = [
    "LATENCY",
    "LATENCY_BUCKETS",
    "FailureCounter",
    "ProbeRecord",
    "RecordRow",
    "TargetSnapshot",
]

# A row (RecordRow) is a target's labels, last result, probes, failures (reason index,
# value shown) for the reasons it has failed with, latency buckets, latency sum, EDE counts
# and queries sent of an expect_bogus module (None for other modules): recordproto.py
# defines it, as it writes the rows' protobuf.


@dataclass(frozen=True, slots=True)
class ProbeRecord:
    rows: list[RecordRow]
    canary: list[Family]
    # Each target's latency in native buckets, by its label text (the protobuf exposition's;
    # read when a scraper asks for it, see nativehist.Snapshots).
    native: Mapping[str, NativeSnapshot] = field(default_factory=dict)

    def families(self) -> list[TextFamily | Family]:
        """The per-target families, each rendered with one format call per target from a
        template shared by all targets (a 1,000-target cycle wrote 36,000 lines one
        f-string at a time), when the first of them is read: a protobuf scrape reads none
        (_Texts). Each carries its protobuf writer (recordproto.py), which writes the same
        series from the rows."""
        proto = RecordProto(self.rows, self.native).writers()
        texts = _Texts(self.rows)
        native = {_LATENCY_NAME: self.native}
        return [
            *(
                TextFamily(name, help_, kind, texts.reader(name), native.get(name), proto[name])
                for name, help_, kind in _HEADS
            ),
            *self.canary,
        ]


@dataclass(frozen=True, slots=True)
class TargetSnapshot:
    """What the status page shows of one target, copied from its ``prober.TargetState`` when
    the page is built: the page never holds the prober's live state."""

    target: Target
    last: ProbeResult | None  # None: not probed yet
    last_wall: float  # epoch seconds of the last probe
    failing_since: float | None  # epoch seconds; None while the last probe succeeded


class FailureCounter:
    """A target's failed probes by reason, for the reasons it has failed with, each series
    born at zero. A series that first appeared at its count would hide that count from
    rate() and increase(), which count from a series' first sample: so a reason first
    failed since the last record shows 0 in the next record (:meth:`row`) and its count
    from the one after on. The record is one cycle's, whole and frozen: a kept cycle that
    answers a later request serves its zero again, never a count then a zero."""

    __slots__ = ("counts", "newborn")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}  # by index in REASONS, in order of first failure
        self.newborn: frozenset[int] = frozenset()  # first failed since the last row

    def add(self, reason: Reason) -> None:
        i = REASONS.index(reason)
        n = self.counts.get(i, 0)
        if not n:
            self.newborn |= {i}
        self.counts[i] = n + 1

    def row(self) -> FailureCounts:
        """The values of a cycle's record, (reason index, value) per series; a record is
        taken once per cycle (prober.Prober.record), so this ends the newborns' zero."""
        if not self.newborn:
            return tuple(self.counts.items())
        born, self.newborn = self.newborn, frozenset()
        return tuple((i, 0 if i in born else n) for i, n in self.counts.items())


def _counter_texts(rows: list[RecordRow]) -> tuple[str, list[str], str, list[str], str]:
    """The counter families' text: failures, attempts, bogus queries, latency, EDE; the
    largest in pieces of :data:`_PIECE` targets."""
    # The few rows each of these families has a line for, picked out in C: a Python pass
    # over every row (a star unpacking each) cost as much as the lines.
    sent = map(is_not, map(_SENT, rows), repeat(None))
    bogus = "".join([_BOGUS.format(row[0].text, row[7]) for row in compress(rows, sent)])
    failures = "".join(
        [
            _FAILURE_LINE[i](row[0].prefix, n)
            for row in compress(rows, map(_FAILS, rows))
            for i, n in row[3]
        ]
    )
    ede = "".join(
        [
            f'{_EDE_TOTAL_NAME}{{{row[0].prefix}code="{code}"}} {n}\n'
            for row in compress(rows, map(_EDE, rows))
            for code, n in row[6]
        ]
    )
    pieces = [rows[i : i + _PIECE] for i in range(0, len(rows), _PIECE)]
    return failures, list(map(_attempts, pieces)), bogus, list(map(_latency, pieces)), ede


def _attempts(rows: list[RecordRow]) -> str:
    """One line per target joined in C (no format call a line)."""
    labels = map(_TEXT, map(_LABELS, rows))
    probes = map(format, map(_PROBES, rows))
    pieces = zip(repeat(_ATTEMPTS_NAME + "{"), labels, repeat("} "), probes, repeat("\n"))
    return "".join(chain.from_iterable(pieces))


def _latency(rows: list[RecordRow]) -> str:
    # accumulate unpacked straight into each target's f-string: a tuple of it first cost
    # more than the accumulating.
    cumulative = map(accumulate, map(_BUCKETS, rows))
    series = zip(map(_LABELS, rows), cumulative, map(_SUM, rows), strict=True)
    return "".join(LATENCY.lines(series))


class _Texts:
    """A record's per-target families as text, all written when the first is read (and
    never for a scrape that reads none)."""

    __slots__ = ("_got", "_rows")

    def __init__(self, rows: list[RecordRow]) -> None:
        self._rows = rows
        self._got: dict[str, str | list[str]] | None = None

    def reader(self, name: str) -> Callable[[], str | list[str]]:
        return lambda: self.all()[name]

    def all(self) -> dict[str, str | list[str]]:
        got = self._got
        if got is None:
            rows = self._rows
            results = probe_result_families([(row[0].text, row[1]) for row in rows])
            got = {f.name: f.lines for f in results}
            got.update(zip(_COUNTER_NAMES, _counter_texts(rows), strict=True))
            self._got = got
        return got


# Each block's {p} is the labels ahead of one more label (Labels.prefix); doubled braces
# are the exposition's own.
_FAILURES_NAME = "dnsfleet_probe_failures_total"
_ATTEMPTS_NAME = "dnsfleet_probe_attempts_total"
_LATENCY_NAME = "dnsfleet_probe_latency_seconds"
_EDE_TOTAL_NAME = "dnsfleet_probe_extended_errors_total"
_BOGUS_NAME = "dnsfleet_probe_bogus_queries_total"
_COUNTER_NAMES = (_FAILURES_NAME, _ATTEMPTS_NAME, _BOGUS_NAME, _LATENCY_NAME, _EDE_TOTAL_NAME)
# Each per-target family's name, help and type, in exposition order: the probe results'
# (probes/families.py), then the counters' and the latency histogram.
_HEADS: list[tuple[str, str, MetricType]] = [
    *((f.name, f.help, f.type) for f in probe_result_families([])),
    # A series only for the reasons the target has failed with, born at zero: it appears
    # with 0 in the cycle of its first failure and counts from the next (FailureCounter),
    # so rate() sees the first failure too.
    (
        _FAILURES_NAME,
        "Failed probes per target by reason since the exporter started; a reason's "
        "series appears at 0 in the scrape of its first failure, then counts.",
        "counter",
    ),
    # The denominator of the failure ratio: a share of failed probes needs the probes, and
    # counting them here stays right when two Prometheus servers scrape one exporter (each
    # scrape is a probe; a sample count per server is not).
    (
        _ATTEMPTS_NAME,
        "Probes sent to this target on /metrics since the exporter started, answered or not.",
        "counter",
    ),
    # Every probe of an expect_bogus check is a SERVFAIL in a validating resolver's own
    # counters and dnstap stream: the SLO rules subtract these. Every query sent counts,
    # one cut short by a scrape's own deadline too (unlike the attempts): the resolver
    # still answers it, and counts its SERVFAIL.
    (
        _BOGUS_NAME,
        "Probes of a dnssec expect_bogus module sent on /metrics: each one a deliberate "
        "SERVFAIL in a validating resolver's own counts.",
        "counter",
    ),
    (_LATENCY_NAME, "Latency of probes that got an answer (any rcode).", "histogram"),
    (
        _EDE_TOTAL_NAME,
        "Answers carrying each Extended DNS Error code (RFC 8914; other: unregistered) "
        "since the exporter started.",
        "counter",
    ),
]
# Targets per piece of the largest families' text: a piece of the latency histogram's
# (~1.4 KB a target) stays under glibc's mmap threshold (malloc.py), its memory reused.
_PIECE = 32
_TEXT = attrgetter("text")
_LABELS = itemgetter(0)
_PROBES = itemgetter(2)
_BUCKETS = itemgetter(4)
_SUM = itemgetter(5)
_FAILS = itemgetter(3)
_EDE = itemgetter(6)
_SENT = itemgetter(7)
_BOGUS = _BOGUS_NAME + "{{{}}} {}\n"
_FAILURE_LINE = [
    compile_template("failures", "p, n", f'{_FAILURES_NAME}{{{{{{p}}reason="{r.value}"}}}} {{n}}\n')
    for r in REASONS
]
# The probes' latency histogram: answers only (a timeout's duration is the timeout).
LATENCY = HistogramWriter(_LATENCY_NAME, LATENCY_BUCKETS)
