"""The per-target families of a cycle's record as protobuf Metric messages, written
straight from its rows: what expoproto.py would otherwise get by parsing the record's own
text lines back (at 1,000 targets that parse cost ten times the text).

Each target's labels are encoded once and kept across scrapes (:class:`_Target`, by the
target's :class:`Labels`, which the prober keeps from one cycle to the next), as
``Labels.text`` is for the text: a Metric is the target's bytes, perhaps one more label
(``reason``, ``code``), and its value. Which rows make which series is the text writers'
(proberecord.py, probes/families.py); tests/test_recordproto.py holds the two to the same
families, series and values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import accumulate

from dnsfleet.expoproto import double, label_bytes, native_fields, varint, whole
from dnsfleet.exposition import Labels
from dnsfleet.histograms import LATENCY_BUCKETS
from dnsfleet.nativehist import NativeSnapshot
from dnsfleet.probes import REASONS, ProbeResult
from dnsfleet.probes.ede import code_label

# labels, last result, probes, failures (reason index, value shown) for the reasons the
# target has failed with, latency buckets, latency sum, EDE counts, queries sent of an
# expect_bogus module (None for other modules)
EdeCounts = tuple[tuple[str, int], ...]
FailureCounts = tuple[tuple[int, int], ...]
RecordRow = tuple[
    Labels, ProbeResult | None, int, FailureCounts, tuple[int, ...], float, EdeCounts, int | None
]

# The value's field of a Metric and its length (9), then Gauge/Counter.value's tag.
_GAUGE = b"\x12\x09\x09"
_COUNTER = b"\x1a\x09\x09"
_ONE = double(1.0)
_ZERO = double(0.0)
_REASON = [label_bytes([("reason", r.value)]) for r in REASONS]
_REASON_OF = dict(zip(REASONS, _REASON, strict=True))
_CODES: dict[str, bytes] = {}  # an EDE code label's bytes (registered codes, or other)


class _Buckets(dict[int, bytes]):
    """One classic bucket's messages (tag, length, cumulative_count, upper_bound) by count,
    written once and looked up in C (``map``) for every target: the targets of a fleet are
    probed as often as each other, so their counts are close. Counts grow all the time, so
    the table is emptied past a bound."""

    def __init__(self, bound: float) -> None:
        super().__init__()
        self.bound = b"\x11" + double(bound)

    def __missing__(self, n: int) -> bytes:
        if len(self) >= 4096:
            self.clear()
        body = b"\x08" + varint(n) + self.bound
        got = self[n] = b"\x1a" + varint(len(body)) + body
        return got


# The classic buckets but +Inf (sample_count says it), by bound.
_BUCKETS = [_Buckets(b) for b in LATENCY_BUCKETS]
_lookup = dict.__getitem__  # with a _Buckets, its __missing__ too


class _Target:
    """One target's encoded labels, and the start of its gauge and counter Metrics (tag,
    length, labels, value field) for the families without a label of their own."""

    __slots__ = ("counter", "gauge", "labels")

    def __init__(self, labels: Labels) -> None:
        lab = self.labels = label_bytes(labels.pairs)
        self.gauge = b"\x22" + varint(len(lab) + 11) + lab + _GAUGE
        self.counter = b"\x22" + varint(len(lab) + 11) + lab + _COUNTER

    def with_label(self, pair: bytes, value_field: bytes) -> bytes:
        """The start of a Metric of this target's labels and one more."""
        size = len(self.labels) + len(pair) + 11
        return b"\x22" + varint(size) + self.labels + pair + value_field


# Kept across scrapes by label set; rebuilt from one record's targets when a reload has
# left more than as many again behind.
_TARGETS: dict[Labels, _Target] = {}


def _targets(rows: Sequence[RecordRow]) -> list[_Target]:
    got = [_TARGETS.get(row[0]) or _new_target(row[0]) for row in rows]
    if len(_TARGETS) > 2 * len(rows) + 64:
        _TARGETS.clear()
        _TARGETS.update((row[0], t) for row, t in zip(rows, got, strict=True))
    return got


def _new_target(labels: Labels) -> _Target:
    t = _TARGETS[labels] = _Target(labels)
    return t


def _code(code: str) -> bytes:
    got = _CODES.get(code)
    if got is None:
        got = _CODES[code] = label_bytes([("code", code)])
    return got


class RecordProto:
    """The writers of one record's per-target families, by family name (what
    ``TextFamily.proto`` holds): each returns the family's Metric messages."""

    __slots__ = ("_native", "_probed", "_rows", "_targets")

    def __init__(self, rows: Sequence[RecordRow], native: Mapping[str, NativeSnapshot]) -> None:
        self._rows = rows
        self._native = native
        self._targets: list[_Target] | None = None
        self._probed: list[tuple[_Target, ProbeResult]] | None = None

    def writers(self) -> dict[str, Callable[[], bytes]]:
        return {
            "dnsfleet_probe_success": self.success,
            "dnsfleet_probe_duration_seconds": self.duration,
            "dnsfleet_probe_failure": self.failure,
            "dnsfleet_probe_dns_rcode": self.rcode,
            "dnsfleet_probe_answer_rrs": self.answer_rrs,
            "dnsfleet_probe_dnssec_authenticated": self.authenticated,
            "dnsfleet_probe_extended_error": self.extended_error,
            "dnsfleet_probe_tls_cert_expiry_timestamp_seconds": self.cert_expiry,
            "dnsfleet_probe_tls_handshake_seconds": self.handshake,
            "dnsfleet_probe_failures_total": self.failures,
            "dnsfleet_probe_attempts_total": self.attempts,
            "dnsfleet_probe_bogus_queries_total": self.bogus,
            "dnsfleet_probe_latency_seconds": self.latency,
            "dnsfleet_probe_extended_errors_total": self.extended_errors,
        }

    def targets(self) -> list[_Target]:
        if self._targets is None:
            self._targets = _targets(self._rows)
        return self._targets

    def each(self) -> Iterator[tuple[_Target, RecordRow]]:
        return zip(self.targets(), self._rows, strict=True)

    def probed(self) -> list[tuple[_Target, ProbeResult]]:
        """The targets with a last result (the probe-result families skip the others)."""
        if self._probed is None:
            self._probed = [(t, row[1]) for t, row in self.each() if row[1] is not None]
        return self._probed

    def success(self) -> bytes:
        return b"".join([t.gauge + (_ONE if r.success else _ZERO) for t, r in self.probed()])

    def duration(self) -> bytes:
        return b"".join([t.gauge + double(r.duration) for t, r in self.probed()])

    def failure(self) -> bytes:
        return b"".join(
            [
                t.with_label(_REASON_OF[r.reason], _GAUGE) + _ONE
                for t, r in self.probed()
                if r.reason is not None
            ]
        )

    def rcode(self) -> bytes:
        return b"".join([t.gauge + double(r.rcode) for t, r in self.probed()])

    def answer_rrs(self) -> bytes:
        return b"".join([t.gauge + double(r.answer_rrs) for t, r in self.probed()])

    def authenticated(self) -> bytes:
        return b"".join(
            [
                t.gauge + (_ONE if r.response is not None and r.response.authenticated else _ZERO)
                for t, r in self.probed()
                if r.dnssec
            ]
        )

    def extended_error(self) -> bytes:
        return b"".join(
            [
                t.with_label(_code(c), _GAUGE) + _ONE
                for t, r in self.probed()
                if r.response is not None and r.response.ede
                for c in dict.fromkeys(code_label(code) for code in r.response.ede)
            ]
        )

    def cert_expiry(self) -> bytes:
        return b"".join(
            [
                t.gauge + double(r.tls.cert_expiry)
                for t, r in self.probed()
                if r.tls is not None and r.tls.cert_expiry is not None
            ]
        )

    def handshake(self) -> bytes:
        return b"".join(
            [t.gauge + double(r.tls.handshake) for t, r in self.probed() if r.tls is not None]
        )

    def failures(self) -> bytes:
        return b"".join(
            [
                t.with_label(_REASON[i], _COUNTER) + double(n)
                for t, row in self.each()
                for i, n in row[3]
            ]
        )

    def attempts(self) -> bytes:
        return b"".join([t.counter + double(row[2]) for t, row in self.each()])

    def bogus(self) -> bytes:
        return b"".join(
            [t.counter + double(row[7]) for t, row in self.each() if row[7] is not None]
        )

    def extended_errors(self) -> bytes:
        return b"".join(
            [
                t.with_label(_code(code), _COUNTER) + double(n)
                for t, row in self.each()
                for code, n in row[6]
            ]
        )

    def latency(self) -> bytes:
        """Each target's classic buckets (cumulative; +Inf left to sample_count, as
        client_golang leaves it) and its native ones, which bring their own count and sum:
        they are what its buckets add up to (nativehist.Snapshots reads them later than
        the record's classic buckets were copied)."""
        native = self._native
        out: list[bytes] = []
        for t, row in self.each():
            cumulative = list(accumulate(row[4]))
            # The last count, +Inf's, has no table: sample_count says it.
            fields = list(map(_lookup, _BUCKETS, cumulative))
            snap = native.get(row[0].text)
            n = cumulative[-1] if snap is None else snap.sample_count
            total = row[5] if snap is None else snap.sample_sum
            # sample_count (1), sample_sum (2), buckets (3), or sample_count_float (4)
            # after the buckets, then the native fields (5 to 13).
            if whole(n):
                fields.insert(0, b"\x08" + varint(int(n)) + b"\x11" + double(total))
            else:
                fields.insert(0, b"\x11" + double(total))
                fields.append(b"\x21" + double(n))
            if snap is not None:
                fields.append(native_fields(snap))
            hist = b"".join(fields)
            metric = t.labels + b"\x3a" + varint(len(hist)) + hist
            out.append(b"\x22" + varint(len(metric)) + metric)
        return b"".join(out)
