"""The protobuf exposition: io.prometheus.client.MetricFamily messages, each behind its
length as a varint (``encoding=delimited``), what Prometheus asks for first when native
histograms are on (``--enable-feature=native-histograms`` in 2.x,
``scrape_native_histograms`` in 3.x).

Written by hand (five small messages of varints, little-endian doubles and length-prefixed
bytes): the tests compare every kind of family with the bytes of the protobuf package on the
upstream schema, and bench/bench_expoproto.py measures this against the package.

A :class:`TextFamily` whose producer gave it a protobuf writer (``TextFamily.proto``:
the per-target families, written straight from the prober's record by recordproto.py) is
encoded by it. Any other is encoded from its lines. They are the text renderer's own
output, so the protobuf exposition says exactly what the text one says whatever the
producer (several write their families straight as text for speed, and change them); the
one fact text cannot carry, a histogram's native buckets, comes beside the lines
(``TextFamily.native``, by the series' label text). The label sets of a scrape repeat
(a target's labels head every one of its series), so each label text is taken apart once
per scrape: the labels ahead of the last one, then the last one.
"""

from __future__ import annotations

import logging
import math
import re
import struct
from collections.abc import Iterable, Iterator, Mapping
from itertools import repeat
from operator import sub

from dnsfleet.exposition import Family, Labels, MetricType, TextFamily
from dnsfleet.nativehist import NativeSnapshot

log = logging.getLogger(__name__)

CONTENT_TYPE = (
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
)

# MetricFamily.type (io.prometheus.client.MetricType); untyped is UNTYPED, info a gauge.
_TYPE_CODE = {"counter": 0, "gauge": 1, "untyped": 3, "histogram": 4}
# The Metric field holding a value of each type: (field 3 counter, 2 gauge, 5 untyped),
# then its length (9) and Gauge/Counter/Untyped.value's tag (field 1, 64-bit).
_VALUE_HEAD = {"counter": b"\x1a\x09\x09", "gauge": b"\x12\x09\x09", "untyped": b"\x2a\x09\x09"}
double = struct.Struct("<d").pack
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"n": "\n", "\\": "\\", '"': '"'}
_MAX_UINT64 = 2**64 - 1


def varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    # Counts of a long-running exporter: two and three bytes, written without a loop.
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 0x200000:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [bytes((i,)) for i in range(0x80)]


def _sint(n: int) -> bytes:
    """A sint32/sint64: ZigZag, so small negative numbers stay short."""
    return varint(n << 1 if n >= 0 else ((-n) << 1) - 1)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (``tag`` is its number shifted, wire type 2)."""
    return varint(tag) + varint(len(payload)) + payload


def _text_field(tag: int, text: str) -> bytes:
    return _field(tag, text.encode())


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _UNESCAPE.sub(lambda m: _UNESCAPED.get(m.group(1), "\\" + m.group(1)), value)


def label_pairs(text: str) -> Iterator[tuple[str, str]]:
    """The (name, value) pairs of exposition label text ``a="1",b="2"``."""
    for m in _PAIR.finditer(text):
        yield m.group(1), _unescape(m.group(2))


def label_bytes(pairs: Iterable[tuple[str, str]]) -> bytes:
    """Metric.label fields (1) for ``pairs``: each a LabelPair of name (1) and value (2)."""
    return b"".join(
        _field(0x0A, _text_field(0x0A, name) + _text_field(0x12, value)) for name, value in pairs
    )


def split_last(text: str) -> tuple[str, str]:
    """Label text as (the labels ahead of the last one, the last one): the comma nearest
    before the last value's opening quote, the last quote ahead of the closing one that no
    backslash escapes (a value ending in ``=`` makes its closing quote a ``="``)."""
    opening = text.rfind('"', 0, len(text) - 1)
    while opening > 0 and (opening - len(text[:opening].rstrip("\\"))) % 2:
        opening = text.rfind('"', 0, opening)
    comma = text.rfind(",", 0, opening)
    return (text[:comma], text[comma + 1 :]) if comma >= 0 else ("", text)


class _Labels:
    """The encoded labels of one scrape, by label text, and the start of a scalar metric
    (its length, labels and value tag) by type and label text: within a scrape a
    target's label text heads a dozen series."""

    def __init__(self) -> None:
        self.full: dict[str, bytes] = {"": b""}
        self.last: dict[str, bytes] = {}
        self.starts: dict[str, dict[str, bytes]] = {kind: {} for kind in _VALUE_HEAD}
        self.bounds: dict[str, bytes] = {}  # le's value -> upper_bound field; b"": +Inf

    def __call__(self, text: str) -> bytes:
        got = self.full.get(text)
        if got is None:
            head, tail = split_last(text)
            got = self.full.get(head)
            if got is None:
                got = self.full[head] = label_bytes(label_pairs(head))
            end = self.last.get(tail)
            if end is None:
                end = self.last[tail] = label_bytes(label_pairs(tail))
            got = self.full[text] = got + end
        return got

    def bound(self, le: str) -> bytes:
        bound = float(_unescape(le))
        got = self.bounds[le] = b"" if math.isinf(bound) else b"\x11" + double(bound)
        return got


# One sample line of the text exposition: name, label text (inside the braces), value.
# A label value never holds a raw newline (it is escaped), and the value is the last word.
_LINE = re.compile(r"^([^{ \n]+)(?:\{(.*)\})? ([^ \n]+)$", re.MULTILINE)


def _samples(fam: Family | TextFamily) -> list[tuple[str, str, str | float]]:
    """(sample name, label text, value) of every sample; a pre-rendered value as text."""
    if isinstance(fam, TextFamily):
        return _LINE.findall(fam.lines)
    name = fam.name
    return [(name + suffix, labels.text, value) for suffix, labels, value in fam.samples]


def metric_family(name: str, helptext: str, kind: MetricType, metrics: list[bytes]) -> bytes:
    """One delimited MetricFamily of ``metrics`` (each a whole Metric field, tag 4)."""
    body = b"".join(
        [
            _text_field(0x0A, name),
            _text_field(0x12, helptext),
            b"\x18" + _SMALL[_TYPE_CODE[kind]],
            *metrics,
        ]
    )
    return varint(len(body)) + body


def _scalar_family(fam: Family | TextFamily, labels: _Labels) -> list[bytes]:
    head = _VALUE_HEAD[fam.type]
    starts = labels.starts[fam.type]
    name = fam.name
    metrics: list[bytes] = []
    append = metrics.append
    others: dict[str, list[bytes]] = {}
    for sample, text, value in _samples(fam):
        start = starts.get(text)
        if start is None:
            lab = labels(text)
            # Metric: 0x22, its length, its labels, then the value's field: 11 bytes.
            start = starts[text] = b"\x22" + varint(len(lab) + 11) + lab + head
        if sample == name:
            append(start + double(float(value)))
        else:  # a sample under another name than its family's: its own family
            others.setdefault(sample, []).append(start + double(float(value)))
    out = [metric_family(name, fam.help, fam.type, metrics)]
    out.extend(metric_family(n, fam.help, "untyped", m) for n, m in others.items())
    return out


def whole(n: float) -> bool:
    """Whether a count goes in its uint64 field; otherwise in the double field the schema
    has beside it (NaN, infinities, fractions, negatives, beyond 2**64 - 1)."""
    return 0 <= n <= _MAX_UINT64 and n == int(n)


def _bucket(bound: bytes, n: float) -> bytes:
    """A classic Bucket: cumulative_count (1) or cumulative_count_float (4), upper_bound (2)."""
    body = b"\x08" + varint(int(n)) + bound if whole(n) else bound + b"\x21" + double(n)
    return b"\x1a" + varint(len(body)) + body


# A Bucket of a cumulative count below 128 (most of a target's) but its bound: the field
# tag, the length (11), the count's field, by the count as a number or as text.
_SMALL_BUCKET: dict[str | float, bytes] = {
    **{str(i): b"\x1a\x0b\x08" + _SMALL[i] for i in range(0x80)},
    **{float(i): b"\x1a\x0b\x08" + _SMALL[i] for i in range(0x80)},
}


class _Deltas(dict[int, bytes]):
    """A delta of a bucket count (sint64) under one side's tag, by delta: written once,
    then looked up in C (``map(table.__getitem__, ...)``) for every bucket of every
    target. Counts grow all the time, so the table is emptied past a bound."""

    def __init__(self, tag: int) -> None:
        super().__init__()
        self.tag = bytes((tag,))

    def __missing__(self, d: int) -> bytes:
        if len(self) >= 1 << 16:
            self.clear()
        got = self[d] = self.tag + _sint(d)
        return got


_DELTAS = {tag: _Deltas(tag) for tag in (0x50, 0x68)}
# The schema, zero threshold and zero count's tag of a native histogram, by the first two.
_NATIVE_HEADS: dict[tuple[int, float], bytes] = {}
# The no-op span (0, 0) that marks a histogram without buckets as native.
_NO_SPAN = _field(0x62, b"\x08\x00\x10\x00")


def native_fields(h: NativeSnapshot) -> bytes:
    """Histogram fields 5 to 13: schema, zero threshold and count, then spans and deltas,
    the negative side's (9, 10) ahead of the positive side's (12, 13). A histogram without
    buckets gets the no-op span that marks it native."""
    start = _NATIVE_HEADS.get((h.schema, h.zero_threshold))
    if start is None:  # a few at most: the schema only ever falls, to -4
        start = b"\x28" + _sint(h.schema) + b"\x31" + double(h.zero_threshold) + b"\x38"
        _NATIVE_HEADS[h.schema, h.zero_threshold] = start
    head = start + varint(h.zero_count)
    if not h.positive:
        return head + (_side(h.negative, 0x4A, 0x50) if h.negative else _NO_SPAN)
    if h.negative:
        head += _side(h.negative, 0x4A, 0x50)
    return head + _side(h.positive, 0x62, 0x68)


def _side(counts: Mapping[int, int], span_tag: int, delta_tag: int) -> bytes:
    """One side's spans and deltas as nativehist.spans_and_deltas works them out (a gap of
    one or two empty buckets written as zero counts, a longer one as a new span), written
    straight as their fields: each span's counts read densely, then the deltas between
    them (across spans too), the counts and deltas in C loops (map): a bucket at a time
    in Python cost 13 us for a target of some 50 buckets in three spans, this about 8 us."""
    keys = sorted(counts)
    n = len(keys)
    if keys[-1] - keys[0] < n + 2:  # no gap of three empty buckets: one span
        ends = [n]
    else:  # a span ends before a key more than three above the one before it
        ends = [i for i in range(1, n) if keys[i] - keys[i - 1] > 3]
        ends.append(n)
    spans: list[bytes] = []
    values: list[int] = []
    first = 0
    offset = keys[0]
    for end in ends:
        lo, hi = keys[first], keys[end - 1]
        if end - first == hi - lo + 1:  # no empty bucket between: the keys' own counts
            values.extend(map(counts.__getitem__, keys[first:end]))
        else:
            values.extend(map(counts.get, range(lo, hi + 1), repeat(0)))
        spans.append(_field(span_tag, b"\x08" + _sint(offset) + b"\x10" + varint(hi - lo + 1)))
        if end < n:
            offset = keys[end] - hi - 1
        first = end
    steps = map(sub, values, [0, *values[:-1]])
    return b"".join(spans) + b"".join(map(_DELTAS[delta_tag].__getitem__, steps))


# A histogram's lines as HistogramWriter writes them, ``le`` last: a bucket's labels ahead
# of ``le`` (the greedy group: the last ``,le="`` before the closing brace), its ``le`` and
# its count; or, for a bucket line with ``le`` elsewhere, its whole label text.
_BUCKET_LINE = re.compile(
    r'^[^{ \n]*_bucket\{(?:(?:(.*),)?le="([^"\n]*)"|(.*))\} ([^ \n]+)$', re.MULTILINE
)
_TOTAL_LINE = re.compile(r"^[^{ \n]*_(sum|count)(?:\{(.*)\})? ([^ \n]+)$", re.MULTILINE)


def _histogram_samples(
    fam: Family | TextFamily,
) -> tuple[list[tuple[str, str, str | float]], list[tuple[str, str, str | float]]]:
    """A histogram's buckets as (labels ahead of ``le`` as text, ``le`` text, count) and
    its sums and counts as (``sum`` or ``count``, label text, value)."""
    buckets: list[tuple[str, str, str | float]] = []
    totals: list[tuple[str, str, str | float]] = []
    if isinstance(fam, TextFamily):
        for head, le, other, value in _BUCKET_LINE.findall(fam.lines):
            buckets.append((head, le, value) if not other else (*_without_le(other), value))
        return buckets, _TOTAL_LINE.findall(fam.lines)
    for suffix, labels, value in fam.samples:
        if suffix == "_bucket":
            buckets.append((*_without_le(labels.text), value))
        else:
            totals.append((suffix[1:], labels.text, value))
    return buckets, totals


def _without_le(text: str) -> tuple[str, str]:
    """Label text as (the labels but ``le``, rendered as the renderer renders them, and
    the text of ``le``'s value)."""
    head, tail = split_last(text)
    if tail.startswith('le="'):
        return head, tail[4:-1]
    pairs = list(label_pairs(text))
    le = next((v for k, v in pairs if k == "le"), "+Inf")
    return Labels([(k, v) for k, v in pairs if k != "le"]).text, le


def _histogram_family(fam: Family | TextFamily, labels: _Labels) -> list[bytes]:
    """Classic buckets (cumulative counts, the +Inf bucket left to sample_count as
    client_golang leaves it) and, where ``fam.native`` has the series, its native part."""
    series: dict[str, list[bytes]] = {}  # base label text -> Histogram fields
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    bounds = labels.bounds
    bucket_lines, total_lines = _histogram_samples(fam)
    last = None
    fields: list[bytes] = []
    for base, le, value in bucket_lines:
        if base != last:  # a series' buckets come one after the other
            last = base
            fields = series.setdefault(base, [])
        bound = bounds.get(le)
        if bound is None:
            bound = labels.bound(le)
        if not bound:  # the +Inf bucket: sample_count says it
            continue
        small = _SMALL_BUCKET.get(value)
        if small is not None:
            fields.append(small + bound)
        elif isinstance(value, str) and value.isdigit():  # a count below 10**15
            count = b"\x08" + varint(int(value)) + bound
            fields.append(b"\x1a" + _SMALL[len(count)] + count)
        else:
            fields.append(_bucket(bound, float(value)))
    for which, text, value in total_lines:
        series.setdefault(text, [])
        (sums if which == "sum" else counts)[text] = float(value)
    name = fam.name
    native: Mapping[str, NativeSnapshot] = fam.native or {}
    metrics: list[bytes] = []
    for base, buckets in series.items():
        # A native part brings its own count and sum: they are what its buckets add up to
        # (nativehist.Snapshots reads them later than the classic lines were written).
        snap = native.get(base)
        n = counts.get(base, 0.0) if snap is None else snap.sample_count
        total = sums.get(base, 0.0) if snap is None else snap.sample_sum
        is_whole = whole(n)
        # Fields in number order: sample_count (1), sample_sum (2), bucket (3), or
        # sample_count_float (4) after the buckets, then the native ones (5 to 13).
        body = [
            b"\x08" + varint(int(n)) if is_whole else b"",
            b"\x11" + double(total),
            *buckets,
            b"" if is_whole else b"\x21" + double(n),
        ]
        if snap is not None:
            body.append(native_fields(snap))
        hist = b"".join(body)
        metric = labels(base) + b"\x3a" + varint(len(hist)) + hist
        metrics.append(b"\x22" + varint(len(metric)) + metric)
    return [metric_family(name, fam.help, "histogram", metrics)]


def encode(families: Iterable[Family | TextFamily]) -> bytes:
    """Every family with samples, as delimited MetricFamily messages. A family that
    cannot be encoded (a value that is no number) is that family's error, logged and
    left out, never the scrape's."""
    labels = _Labels()
    out: list[bytes] = []
    for fam in families:
        write = fam.proto if isinstance(fam, TextFamily) else None
        if write is None and not fam.samples:
            continue
        if write is not None:
            try:  # empty when the family has no series: its text is not read (nor written)
                if metrics := write():
                    out.append(metric_family(fam.name, fam.help, fam.type, [metrics]))
            except (ValueError, OverflowError) as e:
                log.error("protobuf exposition: family %s left out: %s", fam.name, e)
            continue
        encode_family = _histogram_family if fam.type == "histogram" else _scalar_family
        try:
            out.extend(encode_family(fam, labels))
        except (ValueError, OverflowError) as e:
            log.error("protobuf exposition: family %s left out: %s", fam.name, e)
    return b"".join(out)
