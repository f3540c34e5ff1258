"""io.prometheus.client's messages built with the protobuf package, to decode (and build)
the protobuf exposition in tests and bench/.

The schema is the upstream one, field for field: prometheus/client_model
io/prometheus/client/metrics.proto (proto2; Prometheus' own copy,
prompb/io/prometheus/client/metrics.proto, is its proto3 twin with the same wire
format), the parts the exposition uses: exemplars and summaries are left out, which a
decoder skips as unknown fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from dnsfleet.exposition import Family, Labels
from dnsfleet.nativehist import NativeSnapshot, spans_and_deltas

F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED

# message -> (field name, number, label, type, message type name or "")
SCHEMA: dict[str, list[tuple[str, int, int, int, str]]] = {
    "LabelPair": [("name", 1, _OPT, F.TYPE_STRING, ""), ("value", 2, _OPT, F.TYPE_STRING, "")],
    "Gauge": [("value", 1, _OPT, F.TYPE_DOUBLE, "")],
    "Counter": [("value", 1, _OPT, F.TYPE_DOUBLE, "")],
    "Untyped": [("value", 1, _OPT, F.TYPE_DOUBLE, "")],
    "Bucket": [
        ("cumulative_count", 1, _OPT, F.TYPE_UINT64, ""),
        ("cumulative_count_float", 4, _OPT, F.TYPE_DOUBLE, ""),
        ("upper_bound", 2, _OPT, F.TYPE_DOUBLE, ""),
    ],
    "BucketSpan": [("offset", 1, _OPT, F.TYPE_SINT32, ""), ("length", 2, _OPT, F.TYPE_UINT32, "")],
    "Histogram": [
        ("sample_count", 1, _OPT, F.TYPE_UINT64, ""),
        ("sample_count_float", 4, _OPT, F.TYPE_DOUBLE, ""),
        ("sample_sum", 2, _OPT, F.TYPE_DOUBLE, ""),
        ("bucket", 3, _REP, F.TYPE_MESSAGE, "Bucket"),
        ("schema", 5, _OPT, F.TYPE_SINT32, ""),
        ("zero_threshold", 6, _OPT, F.TYPE_DOUBLE, ""),
        ("zero_count", 7, _OPT, F.TYPE_UINT64, ""),
        ("zero_count_float", 8, _OPT, F.TYPE_DOUBLE, ""),
        ("negative_span", 9, _REP, F.TYPE_MESSAGE, "BucketSpan"),
        ("negative_delta", 10, _REP, F.TYPE_SINT64, ""),
        ("negative_count", 11, _REP, F.TYPE_DOUBLE, ""),
        ("positive_span", 12, _REP, F.TYPE_MESSAGE, "BucketSpan"),
        ("positive_delta", 13, _REP, F.TYPE_SINT64, ""),
        ("positive_count", 14, _REP, F.TYPE_DOUBLE, ""),
    ],
    "Metric": [
        ("label", 1, _REP, F.TYPE_MESSAGE, "LabelPair"),
        ("gauge", 2, _OPT, F.TYPE_MESSAGE, "Gauge"),
        ("counter", 3, _OPT, F.TYPE_MESSAGE, "Counter"),
        ("untyped", 5, _OPT, F.TYPE_MESSAGE, "Untyped"),
        ("histogram", 7, _OPT, F.TYPE_MESSAGE, "Histogram"),
        ("timestamp_ms", 6, _OPT, F.TYPE_INT64, ""),
    ],
    "MetricFamily": [
        ("name", 1, _OPT, F.TYPE_STRING, ""),
        ("help", 2, _OPT, F.TYPE_STRING, ""),
        ("type", 3, _OPT, F.TYPE_ENUM, "MetricType"),
        ("metric", 4, _REP, F.TYPE_MESSAGE, "Metric"),
        ("unit", 5, _OPT, F.TYPE_STRING, ""),
    ],
}
METRIC_TYPES = {"COUNTER": 0, "GAUGE": 1, "SUMMARY": 2, "UNTYPED": 3, "HISTOGRAM": 4}
TYPES = {"counter": 0, "gauge": 1, "untyped": 3, "histogram": 4}
PACKAGE = "io.prometheus.client"


@dataclass(frozen=True)
class Messages:
    MetricFamily: Any
    Metric: Any
    Histogram: Any


def messages() -> Messages:
    fd = descriptor_pb2.FileDescriptorProto(
        name="dnsfleet_test/metrics.proto", package=PACKAGE, syntax="proto2"
    )
    enum = fd.enum_type.add(name="MetricType")
    for name, number in METRIC_TYPES.items():
        enum.value.add(name=name, number=number)
    for message, fields in SCHEMA.items():
        m = fd.message_type.add(name=message)
        for name, number, label, kind, type_name in fields:
            f = m.field.add(name=name, number=number, label=label, type=kind)
            if type_name:
                f.type_name = f".{PACKAGE}.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    cls = {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name in ("MetricFamily", "Metric", "Histogram")
    }
    return Messages(**cls)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def decode(data: bytes, msgs: Messages | None = None) -> list[Any]:
    """The MetricFamily messages of a delimited stream (each behind its varint length)."""
    msgs = msgs or messages()
    out = []
    pos = 0
    while pos < len(data):
        size, pos = _varint(data, pos)
        fam = msgs.MetricFamily()
        fam.ParseFromString(data[pos : pos + size])
        out.append(fam)
        pos += size
    return out


def _length(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _whole(n: float) -> bool:
    return 0 <= n < 2**64 and n == int(n)


def build(families: list[Family], msgs: Messages) -> bytes:
    """The same delimited stream dnsfleet's encoder writes, built with the protobuf
    package from typed families (the reference for its bytes, and what bench/ times it
    against): classic buckets without the +Inf one (sample_count holds it), a count that
    is not a whole number up to 2**64 - 1 in its ``_float`` field, and the native part of
    a series that ``fam.native`` has."""
    out = []
    for fam in families:
        if not fam.samples:
            continue
        mf = msgs.MetricFamily(name=fam.name, help=fam.help, type=TYPES[fam.type])
        if fam.type != "histogram":
            for _, labels, value in fam.samples:
                m = mf.metric.add()
                _add_labels(m, labels)
                getattr(m, fam.type).value = value
        else:
            _histograms(mf, fam)
        data = mf.SerializeToString()
        out.append(_length(len(data)) + data)
    return b"".join(out)


def _add_labels(metric: Any, labels: Labels) -> None:
    for name, v in labels.pairs:
        metric.label.add(name=name, value=v)


def _histograms(mf: Any, fam: Family) -> None:
    series: dict[Labels, Any] = {}
    for suffix, labels, value in fam.samples:
        base = Labels(labels.pairs[:-1]) if suffix == "_bucket" else labels
        if base not in series:
            m = mf.metric.add()
            _add_labels(m, base)
            series[base] = m.histogram
        h = series[base]
        if suffix == "_bucket" and not math.isinf(bound := float(labels.pairs[-1][1])):
            b = h.bucket.add(upper_bound=bound)
            if _whole(value):
                b.cumulative_count = int(value)
            else:
                b.cumulative_count_float = value
        elif suffix == "_sum":
            h.sample_sum = value
        elif suffix == "_count":
            if _whole(value):
                h.sample_count = int(value)
            else:
                h.sample_count_float = value
    for base, h in series.items():
        snap = (fam.native or {}).get(base.text)
        if snap is not None:
            _native(h, snap)


def _native(h: Any, snap: NativeSnapshot) -> None:
    h.sample_count = snap.sample_count
    h.sample_sum = snap.sample_sum
    h.schema = snap.schema
    h.zero_threshold = snap.zero_threshold
    h.zero_count = snap.zero_count
    for side in ("positive", "negative"):
        spans, deltas = spans_and_deltas(getattr(snap, side))
        for offset, length in spans:
            getattr(h, f"{side}_span").add(offset=offset, length=length)
        getattr(h, f"{side}_delta").extend(deltas)
    if not h.positive_span and not h.negative_span:
        h.positive_span.add(offset=0, length=0)
