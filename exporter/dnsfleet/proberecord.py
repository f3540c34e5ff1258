"""The record of the fleet's per-target state at the end of a cycle, and its families:
the probe-result gauges, failures by reason, attempts, expect_bogus queries, the latency
histogram and EDE counts, each written with one format call per target from templates
shared by every target. Copied (counters as tuples) so that a later cycle does not change
it: app.py keeps complete cycles as records, in a tenth of the memory of their rendered
text. The state it copies lives in prober.py (``TargetState``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dnsfleet.config import Target
from dnsfleet.exposition import (
    LATENCY_BUCKETS,
    Family,
    HistogramWriter,
    Labels,
    TextFamily,
    compile_template,
)
from dnsfleet.nativehist import NativeSnapshot
from dnsfleet.probes import REASONS, ProbeResult
from dnsfleet.probes.families import probe_result_families

__all__ = ["LATENCY", "LATENCY_BUCKETS", "ProbeRecord", "RecordRow", "TargetSnapshot"]

# labels, last result, probes, failures by reason, latency buckets, latency sum, EDE counts,
# queries sent of an expect_bogus module (None for other modules)
EdeCounts = tuple[tuple[str, int], ...]
RecordRow = tuple[
    Labels, ProbeResult | None, int, tuple[int, ...], tuple[int, ...], float, EdeCounts, int | None
]


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
        f-string at a time)."""
        rows = self.rows
        fams = probe_result_families([(row[0].text, row[1]) for row in rows])
        failures, attempts, bogus, hist, ede = _counter_texts(rows)
        return [
            *fams,
            TextFamily(
                _FAILURES_NAME,
                "Failed probes per target by reason since the exporter started.",
                "counter",
                failures,
            ),
            # The denominator of the failure ratio: a share of failed probes needs the
            # probes, and counting them here stays right when two Prometheus servers scrape
            # one exporter (each scrape is a probe; a sample count per server is not).
            TextFamily(
                _ATTEMPTS_NAME,
                "Probes sent to this target on /metrics since the exporter "
                "started, answered or not.",
                "counter",
                attempts,
            ),
            # Every probe of an expect_bogus check is a SERVFAIL in a validating resolver's
            # own counters and dnstap stream: the SLO rules subtract these. Every query
            # sent counts, one cut short by a scrape's own deadline too (unlike the
            # attempts): the resolver still answers it, and counts its SERVFAIL.
            TextFamily(
                _BOGUS_NAME,
                "Probes of a dnssec expect_bogus module sent on /metrics: each one a "
                "deliberate SERVFAIL in a validating resolver's own counts.",
                "counter",
                bogus,
            ),
            TextFamily(
                _LATENCY_NAME,
                "Latency of probes that got an answer (any rcode).",
                "histogram",
                hist,
                native=self.native,
            ),
            TextFamily(
                _EDE_TOTAL_NAME,
                "Answers carrying each Extended DNS Error code (RFC 8914; other: "
                "unregistered) since the exporter started.",
                "counter",
                ede,
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


def _counter_texts(rows: list[RecordRow]) -> tuple[str, str, str, str, str]:
    """The counter families' text: failures, attempts, bogus queries, latency, EDE."""
    attempts = "".join([_ATTEMPTS.format(labels.text, probes) for labels, _, probes, *_ in rows])
    bogus = "".join([_BOGUS.format(labels.text, n) for labels, *_, n in rows if n is not None])
    failures = "".join([_failures_block(labels.prefix, *fails) for labels, _, _, fails, *_ in rows])
    text = LATENCY.text
    hist = "".join(
        [text(labels, buckets, latency_sum) for labels, _, _, _, buckets, latency_sum, *_ in rows]
    )
    ede = "".join(
        [
            f'{_EDE_TOTAL_NAME}{{{labels.prefix}code="{code}"}} {n}\n'
            for labels, *_, counts, _ in rows
            for code, n in counts
        ]
    )
    return failures, attempts, bogus, hist, ede


# Each block's {p} is the labels ahead of one more label (Labels.prefix); doubled braces
# are the exposition's own.
_FAILURES_NAME = "dnsfleet_probe_failures_total"
_ATTEMPTS_NAME = "dnsfleet_probe_attempts_total"
_LATENCY_NAME = "dnsfleet_probe_latency_seconds"
_EDE_TOTAL_NAME = "dnsfleet_probe_extended_errors_total"
_BOGUS_NAME = "dnsfleet_probe_bogus_queries_total"
_ATTEMPTS = _ATTEMPTS_NAME + "{{{}}} {}\n"
_BOGUS = _BOGUS_NAME + "{{{}}} {}\n"
_failures_block = compile_template(
    "failures",
    "p, " + ", ".join(f"f{i}" for i in range(len(REASONS))),
    "".join(
        f'{_FAILURES_NAME}{{{{{{p}}reason="{r.value}"}}}} {{f{i}}}\n' for i, r in enumerate(REASONS)
    ),
)
# The probes' latency histogram: answers only (a timeout's duration is the timeout).
LATENCY = HistogramWriter(_LATENCY_NAME, LATENCY_BUCKETS)
