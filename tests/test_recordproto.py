"""The per-target families written as protobuf straight from a cycle's record
(recordproto.py) say what their text says: the same families, series and values, and the
native buckets beside the classic ones; their bytes are those of the text read back
(expoproto's parser, itself held to the protobuf package's bytes in test_expoproto)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from dnsfleet import proberecord, recordproto
from dnsfleet.dnswire import Response
from dnsfleet.expoproto import encode
from dnsfleet.exposition import Family, Labels, TextFamily, le_text, render
from dnsfleet.histograms import LATENCY_BUCKETS, HistogramWriter
from dnsfleet.nativehist import NativeHistogram, NativeSnapshot
from dnsfleet.proberecord import LATENCY, ProbeRecord, RecordRow
from dnsfleet.probes import REASONS, ProbeResult, Reason
from dnsfleet.probes.result import TlsInfo
from tests.harness.metricsproto import Messages, build, decode, messages

pytestmark = pytest.mark.unit

MSGS: Messages = messages()
ODD = 'quote " back \\ newline \n é } { = , le="x"'


def response(*, rcode: int = 0, ad: bool = False, ede: tuple[int, ...] = ()) -> Response:
    return Response(
        id=1,
        flags=0x81A0 if ad else 0x8180,
        rcode=rcode,
        answer_rrs=1,
        matching_answers=1,
        min_ttl=60,
        nsid=None,
        wire=b"",
        ede=ede,
    )


def ok(duration: float, **kw: Any) -> ProbeResult:
    kw.setdefault("response", response())
    return ProbeResult(
        success=True, reason=None, duration=duration, rcode=0, answer_rrs=1, detail="", **kw
    )


def failed(reason: Reason, rcode: int = -1, **kw: Any) -> ProbeResult:
    return ProbeResult(
        success=False, reason=reason, duration=5.0, rcode=rcode, answer_rrs=0, detail="x", **kw
    )


def every_kind() -> ProbeRecord:
    """A record with a row of every kind: healthy, failing, never probed, dnssec (validated
    and not), TLS with and without a certificate expiry, EDE (a code twice, an unregistered
    one), expect_bogus, a failures counter born at zero beside one that counts, counts past
    one byte, odd label values."""
    cases: list[tuple[dict[str, str], ProbeResult | None, list[float]]] = [
        ({"target": "127.0.0.1"}, ok(0.0012), [0.0004, 0.0012, 0.0012, 0.03, 2.0]),
        ({"target": "127.0.0.2", "odd": ODD}, failed(Reason.TIMEOUT), [0.004]),
        ({"target": "127.0.0.3"}, None, []),
        ({"target": "127.0.0.4"}, ok(0.01, dnssec=True, response=response(ad=True)), [0.01]),
        ({"target": "127.0.0.5"}, failed(Reason.RCODE, 2, dnssec=True, response=response()), []),
        (
            {"target": "127.0.0.6"},
            ok(0.02, tls=TlsInfo(handshake=0.004, connect=0.001, cert_expiry=1.9e9)),
            [0.02],
        ),
        ({"target": "127.0.0.7"}, ok(0.02, tls=TlsInfo(0.003, 0.001, None)), [0.02]),
        ({"target": "127.0.0.8"}, ok(0.002, response=response(ede=(18, 18, 3, 999))), [0.002]),
        ({}, ok(0.5), [0.5] * 300 + [0.0] + [1e-7] * 20),
    ]
    rows: list[RecordRow] = []
    native: dict[str, NativeSnapshot] = {}
    for i, (pairs, result, seen) in enumerate(cases):
        labels = Labels(pairs)
        buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        hist = NativeHistogram()
        for d in seen:
            buckets[LATENCY.index(d)] += 1
            hist.observe(d)
        if i != 2:  # a target never probed has no native histogram in this record
            native[labels.text] = hist.snapshot()
        failures = ((REASONS.index(Reason.TIMEOUT), 0), (REASONS.index(Reason.RCODE), 3))
        rows.append(
            (
                labels,
                result,
                len(seen) + 200 * i,
                failures if i in (1, 4) else (),
                tuple(buckets),
                sum(seen),
                (("18", 2), ("other", 1)) if i == 7 else (),
                12345 if i == 4 else 0 if i == 5 else None,
            )
        )
    canary = [Family("dnsfleet_canary_x", "A typed family.").add(1, {"target": "127.0.0.1"})]
    return ProbeRecord(rows=rows, canary=canary, native=native)


Samples = dict[str, dict[tuple[str, frozenset[Any]], float]]  # by family, by sample


def from_text(fams: list[Family | TextFamily]) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(render(fams)):
        name = fam.name + ("_total" if fam.type == "counter" else "")
        out[name] = {(s.name, frozenset(s.labels.items())): s.value for s in fam.samples}
    return out


def from_protobuf(data: bytes) -> Samples:
    """The decoded families as the text's samples: a histogram's classic buckets with +Inf
    from sample_count, then _sum and _count."""
    out: Samples = {}
    for fam in decode(data, MSGS):
        samples = out[fam.name] = {}
        for m in fam.metric:
            labels = {lp.name: lp.value for lp in m.label}
            if fam.type != 4:
                value = (m.counter, m.gauge)[fam.type].value
                samples[(fam.name, frozenset(labels.items()))] = value
                continue
            h = m.histogram
            for b in [*h.bucket, None]:
                le = "+Inf" if b is None else le_text(b.upper_bound)
                n = h.sample_count if b is None else b.cumulative_count
                samples[(fam.name + "_bucket", frozenset({**labels, "le": le}.items()))] = n
            samples[(fam.name + "_sum", frozenset(labels.items()))] = h.sample_sum
            samples[(fam.name + "_count", frozenset(labels.items()))] = h.sample_count
    return out


def native_of(h: Any) -> tuple[dict[int, int], dict[int, int]]:
    sides = []
    for spans, deltas in ((h.positive_span, h.positive_delta), (h.negative_span, h.negative_delta)):
        got: dict[int, int] = {}
        key = n = 0
        it = iter(deltas)
        for i, span in enumerate(spans):
            key = span.offset if i == 0 else key + span.offset
            for _ in range(span.length):
                n += next(it)
                if n:
                    got[key] = n
                key += 1
        sides.append(got)
    return sides[0], sides[1]


def test_every_per_target_family_has_its_protobuf_writer() -> None:
    fams = every_kind().families()
    texts = [f for f in fams if isinstance(f, TextFamily)]
    assert len(texts) == 14 and all(f.samples for f in texts)
    assert [f.name for f in texts if f.proto is None] == []


def test_structured_encoding_says_what_the_text_says() -> None:
    record = every_kind()
    fams = record.families()
    data = encode(fams)
    assert from_protobuf(data) == from_text(fams)
    # Byte for byte what reading the text back gives (and that, the protobuf package's).
    parsed = [replace(f, proto=None) if isinstance(f, TextFamily) else f for f in fams]
    assert data == encode(parsed)
    # ... plus each target's native buckets, as its histogram holds them.
    (latency,) = [f for f in decode(data, MSGS) if f.name == "dnsfleet_probe_latency_seconds"]
    by_text = {Labels([(lp.name, lp.value) for lp in m.label]).text: m for m in latency.metric}
    assert len(by_text) == len(record.rows)
    for labels, *_ in record.rows:
        h = by_text[labels.text].histogram
        snap = record.native.get(labels.text)
        if snap is None:
            assert not h.positive_span and not h.HasField("schema")
            continue
        assert native_of(h) == (snap.positive, snap.negative)
        assert (h.schema, h.zero_count) == (snap.schema, snap.zero_count)
    assert by_text[""].histogram.zero_count == 1  # the 0.0 (1e-7 is above 2**-128)


SPARSE = st.dictionaries(st.integers(-40, 40), st.integers(1, 300), max_size=12)


@given(SPARSE, SPARSE, st.integers(0, 3))
def test_native_spans_and_deltas_are_the_protobuf_packages(
    positive: dict[int, int], negative: dict[int, int], zeros: int
) -> None:
    """Any sparse buckets on either side, gaps of every width (one or two empty buckets
    written as zeros, wider ones as a new span), as the package writes nativehist's spans."""
    fam = Family("dnsfleet_h_seconds", "H.", "histogram")
    HistogramWriter(fam.name, (0.5,)).add(fam, Labels({"a": "1"}), [1, 2], 3.0)
    count = sum(positive.values()) + sum(negative.values()) + zeros
    snap = NativeSnapshot(3, 2.0**-128, zeros, count, 3.0, positive, negative)
    fam.native = {'a="1"': snap}
    data = encode([fam])
    assert data == build([fam], MSGS)
    (h,) = [m.histogram for m in decode(data, MSGS)[0].metric]
    assert native_of(h) == (positive, negative)


def test_target_labels_are_encoded_once_across_scrapes() -> None:
    """A target's label bytes are kept from one record to the next (the prober keeps its
    Labels); a reload that drops targets leaves their bytes to go at the next encoding."""
    first = every_kind()
    encode(first.families())
    kept = {labels: recordproto._TARGETS[labels] for labels, *_ in first.rows}
    encode(every_kind().families())  # new Labels objects, the same label sets
    assert all(recordproto._TARGETS[labels] is t for labels, t in kept.items())
    for n in range(3):
        others = [(Labels({"target": f"127.1.{n}.{i}"}), *first.rows[0][1:]) for i in range(50)]
        encode(ProbeRecord(rows=others, canary=[]).families())
    assert len(recordproto._TARGETS) <= 2 * 50 + 64


def test_a_protobuf_scrape_writes_no_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cycle's families write their text when a text scrape first reads it, all at once:
    a protobuf scrape reads their writers alone and writes none. Requests of either
    format share a cycle, in any order, and each gets what the cycle says."""
    written: list[int] = []
    counter_texts = proberecord._counter_texts

    def counting(rows: list[RecordRow]) -> tuple[str, list[str], str, list[str], str]:
        written.append(len(rows))
        return counter_texts(rows)

    monkeypatch.setattr(proberecord, "_counter_texts", counting)
    record = every_kind()
    fams = record.families()
    data = encode(fams)
    assert written == []
    text = render(fams)
    assert written == [len(record.rows)]
    assert encode(fams) == data and render(fams) == text and len(written) == 1
    assert from_protobuf(data) == from_text(fams)
    # Another scrape of the same record (a kept cycle) writes its text afresh, the same.
    again = record.families()
    assert encode(again) == data and len(written) == 1
    assert render(again) == text and len(written) == 2
