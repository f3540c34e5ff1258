"""One reader of the Prometheus text exposition format for every test: text in, samples
keyed by name and label set out (prometheus_client's parser, not ours); and the one
``promtool check metrics`` call."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

from dnsfleet.exposition import Family, TextFamily, render
from tests.harness.tools import binary

Labels = frozenset[tuple[str, str]]
Samples = dict[tuple[str, Labels], float]


def samples(text: str) -> Samples:
    """Every sample of ``text`` by (sample name, label set); a repeated series keeps the
    last value."""
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def of(fams: Iterable[Family | TextFamily]) -> Samples:
    """Families as the exporter would render them, read back."""
    return samples(render(list(fams)))


def value(text: str | Samples, name: str, **labels: str) -> float | None:
    """The value of the series with exactly these labels, or None."""
    got = samples(text) if isinstance(text, str) else text
    return got.get((name, frozenset(labels.items())))


def matching(got: Samples, name: str, **labels: str) -> float | None:
    """The value of the one series of ``name`` whose labels include ``labels`` (others may
    be present), or None; more than one such series is an error."""
    want = set(labels.items())
    hits = [v for (n, lab), v in got.items() if n == name and want <= lab]
    assert len(hits) <= 1, f"{name} {labels}: {len(hits)} series"
    return hits[0] if hits else None


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    """``promtool check metrics`` on an exposition (text or OpenMetrics): the one lint of
    what the exporter emits, as Prometheus's own tool judges it."""
    return subprocess.run(
        [binary("promtool"), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
