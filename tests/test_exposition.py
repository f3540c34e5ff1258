"""The sample model and its writers: typed :class:`Labels` rendered once, the one histogram
writer and its ``le`` spelling, and ``merge``, which joins one family's samples from several
producers and leaves a conflicting family out instead of failing the scrape (client_python's
registry refuses a duplicated name; one bad producer must not cost the whole /metrics)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dnsfleet.exposition import Family, FamilyConflict, Labels, TextFamily, le_text, merge, render
from dnsfleet.histograms import LATENCY_BUCKETS, HistogramWriter
from tests.harness.metrics import of, samples

pytestmark = pytest.mark.unit


@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), st.text(max_size=20), max_size=5
    )
)
def test_labels_render_once_and_read_back_as_they_were(labels: dict[str, str]) -> None:
    lab = Labels(labels)
    assert dict(lab.pairs) == labels and lab == Labels(list(labels.items()))
    assert hash(lab) == hash(Labels(labels)) and {lab: 1}[Labels(labels)] == 1
    got = of([Family("dnsfleet_x", "X.").add(1, lab)])
    assert got == {("dnsfleet_x", frozenset(labels.items())): 1}


def test_labels_are_extended_without_touching_the_original() -> None:
    base = Labels({"target": "a"})
    more = base.with_(("reason", "timeout"))
    assert base.text == 'target="a"' and more.text == 'target="a",reason="timeout"'
    assert more.pairs[-1] == ("reason", "timeout") and base.pairs == (("target", "a"),)
    with pytest.raises(AttributeError):
        base.text = "x"
    assert not Labels() and Labels().prefix == "" and base.prefix == 'target="a",'


@pytest.mark.parametrize(
    "bound,text",
    [(1.0, "1.0"), (0.005, "0.005"), (0.0005, "0.0005"), (5, "5.0"), (math.inf, "+Inf")],
)
def test_le_is_spelled_as_prometheus_3_normalises_it(bound: float, text: str) -> None:
    assert le_text(bound) == text


def test_one_histogram_writer_two_paths_one_text() -> None:
    """The typed path (collectors) and the template path (the per-target probe families)
    write the same lines, ``le`` in the float form."""
    w = HistogramWriter("dnsfleet_x_seconds", LATENCY_BUCKETS)
    counts = [0] * (len(LATENCY_BUCKETS) + 1)
    for d in (0.0004, 0.7, 1.0, 30.0):
        counts[w.index(d)] += 1
    lab = Labels({"target": "a"})
    fam = Family("dnsfleet_x_seconds", "X.", "histogram")
    w.add(fam, lab, counts, 31.7004)
    head = "# HELP dnsfleet_x_seconds X.\n# TYPE dnsfleet_x_seconds histogram\n"
    text = render([fam])
    assert text == head + w.text(lab, counts, 31.7004)
    assert 'dnsfleet_x_seconds_bucket{target="a",le="1.0"} 3\n' in text
    assert 'dnsfleet_x_seconds_bucket{target="a",le="0.001"} 1\n' in text
    assert 'dnsfleet_x_seconds_bucket{target="a",le="+Inf"} 4\n' in text
    assert 'dnsfleet_x_seconds_count{target="a"} 4\n' in text
    bare = render([TextFamily(w.name, "X.", "histogram", w.text(Labels(), counts, 1.5))])
    assert samples(bare)[("dnsfleet_x_seconds_sum", frozenset())] == 1.5


def test_merge_joins_samples_of_one_family() -> None:
    a = Family("dnsfleet_x", "X.").add(1, {"target": "a"})
    b = Family("dnsfleet_x", "X.").add(2, {"target": "b"})
    merged = merge([a, b, Family("dnsfleet_y", "Y.").add(3)])
    assert [f.name for f in merged] == ["dnsfleet_x", "dnsfleet_y"]
    assert render(merged[:1]).splitlines()[-2:] == [
        'dnsfleet_x{target="a"} 1',
        'dnsfleet_x{target="b"} 2',
    ]
    assert len(a.samples) == 1  # the inputs are left alone


@pytest.mark.parametrize(
    "other",
    [
        Family("dnsfleet_x", "X.", "counter").add(2, {"target": "b"}),
        Family("dnsfleet_x", "Another help.").add(2, {"target": "b"}),
        Family("dnsfleet_x", "X.").add(2, {"target": "a"}),
        TextFamily("dnsfleet_x", "X.", "gauge", 'dnsfleet_x{target="b"} 2\n'),
    ],
    ids=["type", "help", "series", "written-whole"],
)
def test_a_conflict_leaves_that_family_out_and_the_rest_in(other: Family | TextFamily) -> None:
    conflicts: list[FamilyConflict] = []
    first = Family("dnsfleet_x", "X.").add(1, {"target": "a"})
    merged = merge([first, other, Family("dnsfleet_y", "Y.").add(3)], conflicts.append)
    assert len(conflicts) == 1 and "dnsfleet_x" in str(conflicts[0])
    assert of(merged) == {
        ("dnsfleet_x", frozenset({("target", "a")})): 1,
        ("dnsfleet_y", frozenset()): 3,
    }


def test_merge_checks_every_family_the_prober_s_too() -> None:
    """A duplicated series inside one producer's family, and a collector emitting a name
    the prober writes whole, are both caught."""
    conflicts: list[FamilyConflict] = []
    dup = Family("dnsfleet_z", "Z.").add(1, {"target": "a"}).add(2, {"target": "a"})
    probe = TextFamily(
        "dnsfleet_probe_success", "P.", "gauge", 'dnsfleet_probe_success{target="a"} 1\n'
    )
    merged = merge([probe, dup, Family("dnsfleet_probe_success", "P.").add(0)], conflicts.append)
    assert [str(c) for c in conflicts] == [
        'duplicated series dnsfleet_z{target="a"}',
        "family dnsfleet_probe_success emitted twice, once written whole by one producer",
    ]
    assert of(merged) == {
        ("dnsfleet_probe_success", frozenset({("target", "a")})): 1,
        ("dnsfleet_z", frozenset({("target", "a")})): 1,
    }


def test_a_collector_family_clashing_with_the_prober_s_is_left_out_of_the_scrape() -> None:
    """A cycle's families are merged as one: a collector emitting a name the prober writes
    costs that family, logged, never the scrape (it once failed every /metrics with a 500)."""
    from dnsfleet.app import _exposition
    from dnsfleet.proberecord import ProbeRecord
    from dnsfleet.probes import ProbeResult

    ok = ProbeResult(success=True, reason=None, duration=0.01, rcode=0, answer_rrs=1, detail="")
    lab = Labels({"target": "a", "module": "m"})
    row = (lab, ok, 1, (), (1,) + (0,) * len(LATENCY_BUCKETS), 0.01, (), None)
    clash = Family("dnsfleet_probe_success", "Not the prober's.").add(0, {"target": "b"})
    fams = _exposition(ProbeRecord([row], []), [clash, Family("dnsfleet_other", "O.").add(1)])
    got = of(fams)
    assert got[("dnsfleet_probe_success", frozenset(lab.pairs))] == 1
    assert ("dnsfleet_probe_success", frozenset({("target", "b")})) not in got
    assert got[("dnsfleet_other", frozenset())] == 1
