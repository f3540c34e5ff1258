"""The one reader of exposition text for the tests: samples by (name, label set), parsed
with prometheus_client's parser (so an exposition it rejects fails the test)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

from dnsfleet.exposition import Family, TextFamily, render

Labels = frozenset[tuple[str, str]]
Samples = dict[tuple[str, Labels], float]


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def of(fams: Iterable[Family | TextFamily]) -> Samples:
    """Families as the exporter would render them, read back."""
    return parse(render(list(fams)))


def exact(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample with exactly these labels, or None."""
    return samples.get((name, frozenset(labels.items())))


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The one sample of ``name`` carrying at least these labels, or None; more than one
    fails the test (a selector must not be ambiguous)."""
    want = set(labels.items())
    hits = [v for (n, lab), v in samples.items() if n == name and want <= lab]
    assert len(hits) <= 1, f"{name} {labels}: {len(hits)} series"
    return hits[0] if hits else None
