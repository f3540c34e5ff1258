"""The protobuf exposition: the hand-written encoder's bytes are the protobuf package's
for the same messages (io.prometheus.client, the upstream schema), for every metric type
and odd values; a pre-rendered family encodes as its typed twin does; the probe latency
histogram carries its native buckets beside the classic ones; and /metrics picks
protobuf only when the requester weighs it highest."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dnsfleet.config import parse
from dnsfleet.dnswire import Response
from dnsfleet.endpoints.router import wants_protobuf
from dnsfleet.expoproto import encode, split_last
from dnsfleet.exposition import Family, Labels, MetricType, TextFamily, format_value, render
from dnsfleet.histograms import HistogramWriter
from dnsfleet.nativehist import NativeHistogram, bucket_key
from dnsfleet.prober import Prober
from dnsfleet.probes import Reason
from dnsfleet.probes.result import Exchange, judge
from tests.harness.metricsproto import Messages, build, decode, messages

pytestmark = pytest.mark.unit

MSGS: Messages = messages()
ODD = 'quote " back \\ newline \n tab \t vt \x0b ls \u2028 é 🦆 } { = , le="x"'


def as_text(fam: Family) -> TextFamily:
    """The family as pre-rendered lines, as the per-target producers write them."""
    text = render([fam])
    lines = text.split("\n", 2)[2] if text else ""
    return TextFamily(fam.name, fam.help, fam.type, lines, native=fam.native)


def as_written(fam: Family) -> Family:
    """The family with each value as the text renderer writes it (it writes -0 as 0)."""
    samples = [(s, lab, float(format_value(v))) for s, lab, v in fam.samples]
    return Family(fam.name, fam.help, fam.type, samples, native=fam.native)


def odd_families() -> list[Family]:
    lab = Labels({"target": "127.0.0.1:53", "odd": ODD})
    latency = Family("dnsfleet_x_latency_seconds", "Latency.\nSecond \\ line.", "histogram")
    writer = HistogramWriter(latency.name, (0.001, 0.5, 1.0))
    writer.add(latency, lab, [1, 0, 2, 3], 4.25)
    writer.add(latency, Labels(), [0, 0, 0, 0], 0.0)
    floats = Family("dnsfleet_x_float_seconds", "Float counts.", "histogram")
    writer = HistogramWriter(floats.name, (1.0,))
    writer.add(floats, Labels({"a": "1"}), [2.5, 2.0**64], -0.0)
    native = NativeHistogram()
    for v in (0.0004, 0.0004, 0.003, 0.02, 0.7, 2.0, 0.0):
        native.observe(v)
    latency.native = {lab.text: native.snapshot(), "": NativeHistogram().snapshot()}
    return [
        Family("dnsfleet_x_total", "A counter.", "counter")
        .add(0, lab)
        .add(2.0**63, {"b": ""})
        .add(2.0**64 - 1, {"b": "2"}),
        Family("dnsfleet_x_gauge", "Odd values.", "gauge")
        .add(math.nan, {"v": "nan"})
        .add(math.inf, {"v": "+inf"})
        .add(-math.inf, {"v": "-inf"})
        .add(-0.0, {"v": "-0"})
        .add(5e-324, {"v": "denormal"})
        .add(1.7976931348623157e308, {"v": "max"})
        .add(0.1, {"v": "tenth"}),
        Family("dnsfleet_x_info", "An info gauge.", "gauge").add(1, {"version": ODD}),
        Family("dnsfleet_x_untyped", "", "untyped").add(-1),
        latency,
        floats,
        Family("dnsfleet_x_empty", "No samples: no family.", "gauge"),
    ]


def test_bytes_are_the_protobuf_packages() -> None:
    fams = odd_families()
    assert encode(fams) == build(fams, MSGS)
    texts = [as_text(f) for f in fams]
    assert encode(texts) == encode([as_written(f) for f in fams])


def test_decoded_values() -> None:
    got = {f.name: f for f in decode(encode(odd_families()), MSGS)}
    assert list(got) == [
        "dnsfleet_x_total",
        "dnsfleet_x_gauge",
        "dnsfleet_x_info",
        "dnsfleet_x_untyped",
        "dnsfleet_x_latency_seconds",
        "dnsfleet_x_float_seconds",
    ]
    counter = got["dnsfleet_x_total"]
    assert counter.type == 0 and [m.counter.value for m in counter.metric] == [0, 2.0**63, 2**64]
    labels = {lp.name: lp.value for lp in counter.metric[0].label}
    assert labels == {"target": "127.0.0.1:53", "odd": ODD}
    gauge = {m.label[0].value: m.gauge.value for m in got["dnsfleet_x_gauge"].metric}
    assert math.isnan(gauge["nan"]) and gauge["+inf"] == math.inf and gauge["-inf"] == -math.inf
    assert math.copysign(1.0, gauge["-0"]) == -1.0 and gauge["denormal"] == 5e-324
    assert gauge["tenth"] == 0.1 and gauge["max"] == 1.7976931348623157e308
    assert got["dnsfleet_x_info"].metric[0].label[0].value == ODD
    assert (
        got["dnsfleet_x_untyped"].type == 3
        and got["dnsfleet_x_untyped"].metric[0].untyped.value == -1
    )
    assert got["dnsfleet_x_latency_seconds"].help == "Latency.\nSecond \\ line."

    odd, empty = got["dnsfleet_x_latency_seconds"].metric
    h = odd.histogram
    # The native part's count and sum, which its buckets add up to (the classic lines
    # may be a cycle older: nativehist.Snapshots).
    assert (h.sample_count, h.sample_sum) == (7, 0.0004 + 0.0004 + 0.003 + 0.02 + 0.7 + 2.0)
    assert [(b.upper_bound, b.cumulative_count) for b in h.bucket] == [
        (0.001, 1),
        (0.5, 1),
        (1.0, 3),
    ]
    assert (h.schema, h.zero_threshold, h.zero_count) == (3, 2.0**-128, 1)
    keys = native_buckets(h)
    assert keys == {
        bucket_key(0.0004, 3): 2,
        **{bucket_key(v, 3): 1 for v in (0.003, 0.02, 0.7, 2.0)},
    }
    assert keys[8] == 1  # 2.0 tops bucket 8 at schema 3
    # A native histogram without observations carries the no-op span that marks it native.
    e = empty.histogram
    assert [(s.offset, s.length) for s in e.positive_span] == [(0, 0)] and not e.positive_delta

    (f,) = got["dnsfleet_x_float_seconds"].metric
    assert f.histogram.sample_count_float == 2.5 + 2.0**64 and not f.histogram.HasField(
        "sample_count"
    )
    assert math.copysign(1.0, f.histogram.sample_sum) == -1.0
    (b,) = f.histogram.bucket
    assert b.cumulative_count_float == 2.5 and not b.HasField("cumulative_count")


def native_buckets(h: Any) -> dict[int, int]:
    out: dict[int, int] = {}
    key = n = 0
    deltas = iter(h.positive_delta)
    for i, span in enumerate(h.positive_span):
        key = span.offset if i == 0 else key + span.offset
        for _ in range(span.length):
            n += next(deltas)
            if n:
                out[key] = n
            key += 1
    return out


NAMES = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,6}", fullmatch=True)
VALUES = st.floats(allow_nan=False) | st.integers(0, 2**70).map(float)


# No per-example deadline: a loaded machine (the whole suite runs three workers on two
# cores) missed hypothesis' 200 ms once; what this test holds is the bytes, not the time.
@settings(deadline=None)
@given(
    st.sampled_from(["counter", "gauge", "untyped", "histogram"]),
    st.lists(
        st.tuples(
            st.dictionaries(NAMES.filter(lambda n: n != "le"), st.text(), max_size=3), VALUES
        ),
        max_size=6,
    ),
)
def test_any_family_encodes_as_the_protobuf_package_does(
    kind: MetricType, series: list[tuple[dict[str, str], float]]
) -> None:
    fam = Family("dnsfleet_any", "Any.", kind)
    unique = {Labels(labels): value for labels, value in series}
    for labels, value in unique.items():
        if kind == "histogram":
            HistogramWriter(fam.name, (0.1, 1.0)).add(fam, labels, [abs(value), 1, 0], value)
        else:
            fam.add_raw(labels, value)
    assert encode([fam]) == build([fam], MSGS)
    assert encode([as_text(fam)]) == encode([as_written(fam)])


@pytest.mark.parametrize(
    ("text", "head", "last"),
    [
        ("", "", ""),
        ('a="1"', "", 'a="1"'),
        ('a="1",le="0.5"', 'a="1"', 'le="0.5"'),
        ('a="x\\",le=\\"y",b="2"', 'a="x\\",le=\\"y"', 'b="2"'),
        ('a="1,b=2",reason="timeout"', 'a="1,b=2"', 'reason="timeout"'),
        # A value that ends in "=" has a '="' at its closing quote.
        ('A=",="', "", 'A=",="'),
        ('a="1",b=",=",c="x="', 'a="1",b=",="', 'c="x="'),
        # A quote after an escaped backslash closes its value; after an escaped quote not.
        ('a="x\\\\",b=",="', 'a="x\\\\"', 'b=",="'),
        ('a="1",b="\\",="', 'a="1"', 'b="\\",="'),
    ],
)
def test_split_last(text: str, head: str, last: str) -> None:
    assert split_last(text) == (head, last)


def answer(duration: float) -> Exchange:
    resp = Response(
        id=1,
        flags=0x8180,
        rcode=0,
        answer_rrs=1,
        matching_answers=1,
        min_ttl=60,
        nsid=None,
        wire=b"",
    )
    return Exchange(response=resp, error=None, duration=duration)


def test_probe_latency_carries_native_buckets_beside_classic_ones() -> None:
    """Every family of the per-target record is in the protobuf exposition, the latency
    histogram of each target with its classic buckets and its native ones (answers only:
    a timeout is no latency), and a reload that keeps the target keeps both."""
    targets = [{"address": f"127.0.0.{i}", "module": "m", "labels": {"odd": ODD}} for i in (1, 2)]
    cfg = parse({"modules": {"m": {}}, "targets": targets, "resolv_conf": []}, source="x.yml")
    prober = Prober()
    prober.configure(cfg)
    one, _ = prober.states.values()
    module = cfg.modules["m"]
    for d in (0.0003, 0.004, 0.004, 0.9):
        one.observe(judge(answer(d), module), 0.0)
    one.observe(judge(Exchange(response=None, error=Reason.TIMEOUT, duration=5.0), module), 0.0)
    cfg2 = parse(
        {"modules": {"m": {}}, "targets": [{**targets[0], "labels": {"odd": "new"}}, targets[1]]},
        source="x.yml",
    )
    prober.configure(cfg2)
    fams = prober.families()
    decoded = {f.name: f for f in decode(encode(fams), MSGS)}
    assert set(decoded) == {f.name for f in fams if f.samples}
    by_target = {
        next(lp.value for lp in m.label if lp.name == "target"): m.histogram
        for m in decoded["dnsfleet_probe_latency_seconds"].metric
    }
    h = by_target["127.0.0.1"]
    assert h.sample_count == 4 and h.sample_sum == pytest.approx(0.9083)
    # bounds 1 ms, 2.5 ms, 5 ms: 0.3 ms in the first, the two 4 ms in the third
    assert [b.cumulative_count for b in h.bucket][:3] == [1, 1, 3]
    assert native_buckets(h) == {
        bucket_key(0.0003, 3): 1,
        bucket_key(0.004, 3): 2,
        bucket_key(0.9, 3): 1,
    }
    empty = by_target["127.0.0.2"]
    assert empty.sample_count == 0 and [(s.offset, s.length) for s in empty.positive_span] == [
        (0, 0)
    ]


PROMETHEUS_2_NATIVE = (
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,"
    "application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
PROMETHEUS_2 = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
PROMETHEUS_3_PROTO_FIRST = (
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
    "encoding=delimited;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=1.0.0;"
    "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
)
PROMETHEUS_3_PROTO_LAST = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,text/plain;"
    "version=0.0.4;q=0.4,application/vnd.google.protobuf;"
    "proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.3,*/*;q=0.2"
)
PB = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily"


@pytest.mark.parametrize(
    ("accept", "protobuf"),
    [
        (PROMETHEUS_2_NATIVE, True),
        (PROMETHEUS_2, False),
        (PROMETHEUS_3_PROTO_FIRST, True),
        (PROMETHEUS_3_PROTO_LAST, False),
        ("", False),
        ("*/*", False),
        (f"{PB}; encoding=delimited", True),
        (f'{PB}; encoding="delimited"', True),
        (f"{PB}; encoding=delimited, */*", True),  # a tie: the format it names
        (f"{PB}; encoding=delimited; q=0", False),
        (f"{PB}; encoding=delimited; q=2", False),  # not a weight
        (f"{PB}; encoding=delimited; q=0.5, text/plain; q=0.6", False),
        (f"{PB}; encoding=text", False),  # the text and compact-text encodings: not served
        (f"{PB}; encoding=compact-text", False),
        ("application/vnd.google.protobuf; proto=other.Message; encoding=delimited", False),
        (
            "APPLICATION/VND.GOOGLE.PROTOBUF;PROTO=io.prometheus.client.MetricFamily;ENCODING=DELIMITED",
            True,
        ),
    ],
)
def test_negotiation(accept: str, protobuf: bool) -> None:
    assert wants_protobuf(accept) is protobuf


def test_varint_lengths_of_large_families() -> None:
    """A family longer than 127 and 16383 bytes: multi-byte length prefixes."""
    fam = Family("dnsfleet_big", "Big.", "gauge")
    for i in range(2000):
        fam.add(i, {"i": str(i)})
    data = encode([fam, Family("dnsfleet_small", "S.").add(1)])
    assert data == build([fam, Family("dnsfleet_small", "S.").add(1)], MSGS)
    assert [f.name for f in decode(data, MSGS)] == ["dnsfleet_big", "dnsfleet_small"]
    assert struct.unpack("<d", data[-8:]) == (1.0,)


def test_le_anywhere_in_a_bucket_line() -> None:
    """HistogramWriter puts le last; a bucket whose le comes elsewhere is read as well."""
    last = Family("dnsfleet_h_seconds", "H.", "histogram")
    first = Family("dnsfleet_h_seconds", "H.", "histogram")
    lab = Labels({"a": ODD, "b": "2"})
    HistogramWriter(last.name, (0.5,)).add(last, lab, [1, 2], 3.0)
    for suffix, labels, value in last.samples:
        pairs = labels.pairs if suffix != "_bucket" else (labels.pairs[-1], *labels.pairs[:-1])
        first.add_raw(Labels(pairs), value, suffix)
    assert "le=" in render([first]).split("\n")[2].split(",")[0]
    want = encode([last])
    assert encode([first]) == want and encode([as_text(first)]) == want


def test_a_family_that_cannot_be_encoded_is_left_out() -> None:
    bad = TextFamily("dnsfleet_bad", "Bad.", "gauge", 'dnsfleet_bad{a="1"} notanumber\n')
    good = Family("dnsfleet_good", "Good.").add(1)
    assert encode([bad, good]) == encode([good])


def test_a_kept_record_reads_native_buckets_when_encoded() -> None:
    """A cycle's record keeps no copy of the native histograms: a protobuf scrape of it
    reads them as they are then, with their own count and sum, so its native buckets
    never hold more than its count while its classic buckets are the record's."""
    cfg = parse(
        {"modules": {"m": {}}, "targets": [{"address": "127.0.0.1", "module": "m"}]},
        source="x.yml",
    )
    prober = Prober()
    prober.configure(cfg)
    (st,) = prober.states.values()
    st.observe(judge(answer(0.002), cfg.modules["m"]), 0.0)
    record = prober.record()
    st.observe(judge(answer(0.3), cfg.modules["m"]), 0.0)
    (fam,) = [
        f
        for f in decode(encode(record.families()), MSGS)
        if f.name == "dnsfleet_probe_latency_seconds"
    ]
    h = fam.metric[0].histogram
    assert h.sample_count == 2 and h.sample_sum == 0.302
    assert native_buckets(h) == {bucket_key(0.002, 3): 1, bucket_key(0.3, 3): 1}
    assert [b.cumulative_count for b in h.bucket][-1] == 1  # the record's classic buckets


def test_a_lone_surrogate_in_a_label_fails_no_scrape() -> None:
    """A label value with a lone surrogate (JSON's "\\ud800" decodes to one; a config given
    as a mapping can carry it) is written as U+FFFD: the text body encodes, and the
    protobuf body keeps every target's family, not one family fewer for all of them."""
    targets = [
        {"address": "127.0.0.1", "module": "m", "labels": {"site": "bad\ud800site"}},
        {"address": "127.0.0.2", "module": "m", "labels": {"site": "good"}},
    ]
    cfg = parse({"modules": {"m": {}}, "targets": targets, "resolv_conf": []}, source="x.yml")
    prober = Prober()
    prober.configure(cfg)
    for state in prober.states.values():
        state.observe(judge(answer(0.002), cfg.modules["m"]), 0.0)
    fams = prober.families()
    text = render(fams).encode()
    assert 'site="bad\ufffdsite"'.encode() in text
    decoded = {f.name: f for f in decode(encode(fams), MSGS)}
    sites = {
        lp.value
        for m in decoded["dnsfleet_probe_success"].metric
        for lp in m.label
        if lp.name == "site"
    }
    assert sites == {"bad\ufffdsite", "good"}
