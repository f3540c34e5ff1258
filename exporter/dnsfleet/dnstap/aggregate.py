"""Bounded aggregates of dnstap messages, and their metric families.

Every label is bounded: ``target`` by the configured identity map plus at most
:data:`MAX_UNMAPPED` identities seen on the wire (then ``other``); ``rcode`` by the header's
four bits; ``qtype`` by :data:`QTYPES` (then ``other``); ``transport`` by dnstap's
SocketProtocol enum; ``ede`` by the INFO-CODEs up to :data:`MAX_EDE` (then ``other``).

Latency is response time minus query time. dnsdist puts the query time in its
CLIENT_RESPONSE; unbound, BIND and Knot Resolver do not, so each CLIENT_QUERY's time is kept
under (client address, port, DNS id, transport) until its response arrives, in a table of
at most :data:`PENDING_MAX` entries (the oldest is dropped, and counted, when it is full).

Nothing kept is sized by the sender: a client address is kept as its 4 or 16 bytes, or as
nothing when it is neither (a malformed address is "unknown"); an identity by its first
:data:`MAX_IDENTITY_LEN` bytes. A matching-table entry is then a key of at most
:data:`PENDING_KEY_MAX` bytes and a time: about :data:`PENDING_ENTRY_BYTES` bytes each with
the table's own overhead, so the full table holds at most :data:`PENDING_BYTES` (16 MiB).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Mapping

import dns.rdatatype
from dns.rcode import NXDOMAIN, SERVFAIL

from dnsfleet.dnstap.framestreams import Refusal
from dnsfleet.dnstap.insight import Insight
from dnsfleet.dnstap.leaks import OUTGOING, Classifier, Leaks
from dnsfleet.dnstap.message import (
    CLIENT_QUERY,
    CLIENT_RESPONSE,
    MESSAGE_TYPE_NAMES,
    TRANSPORTS,
    MessageFields,
    Undecodable,
    parse_frame,
    peek,
)
from dnsfleet.dnswire import rcode_text
from dnsfleet.exposition import Family, labelset
from dnsfleet.histograms import LATENCY_BUCKETS, HistogramWriter
from dnsfleet.parsers.resolverdetail import QTYPES as QTYPE_NAMES

LATENCY = HistogramWriter("dnsfleet_dnstap_response_duration_seconds", LATENCY_BUCKETS)
# The qtype label's values: the same closed set as the resolvers' own per-type counts.
QTYPES = {int(dns.rdatatype.from_text(name)): name for name in QTYPE_NAMES}
MAX_UNMAPPED = 32  # identities without a configured target that get a label of their own
MAX_IDENTITY_LEN = 64
MAX_EDE = 49  # RFC 8914 and the IANA registry assign 0-30 today; room for new ones
# The matching table's byte budget, and what one entry costs at most (a 26-byte key
# object, its time and the dict's slots: tests/test_dnstap_isolation.py measures it).
PENDING_BYTES = 16 * 1024 * 1024
PENDING_ENTRY_BYTES = 256
PENDING_MAX = PENDING_BYTES // PENDING_ENTRY_BYTES  # 65,536
_PORT_ID_PROTO = struct.Struct(">IHI")
PENDING_KEY_MAX = 16 + _PORT_ID_PROTO.size
# Why a frame or a stream was not counted (dnsfleet_dnstap_errors_total{reason}).
ERROR_REASONS = (
    *(r.value for r in Refusal),
    "handshake_timeout",  # no START within the handshake timeout
    "idle_timeout",  # a stream silent for longer than the idle timeout, mid-frame or not
    "too_many_connections",  # every slot taken by a writer active within evict_idle
    "idle_evicted",  # the longest-idle writer (silent ones first), cut for a new one
    "protobuf",  # a data frame that is no dnstap.Dnstap message
    "dns",  # a message whose DNS bytes do not parse
)
MESSAGE_TYPES = {i: n.lower() for i, n in enumerate(MESSAGE_TYPE_NAMES, 1)}


def client_address(raw: bytes) -> bytes:
    """A client address as its 4 (IPv4) or 16 (IPv6) bytes; anything else as nothing,
    whatever its size (dnstap's query_address is bytes of any length)."""
    return raw if len(raw) in (4, 16) else b""


def identity_text(raw: bytes) -> str:
    """A label-safe identity: printable ASCII, at most MAX_IDENTITY_LEN characters."""
    text = "".join(chr(b) if 0x20 < b < 0x7F else "?" for b in raw[:MAX_IDENTITY_LEN])
    return text or "unknown"


class Aggregator:
    """Counts what the dnstap messages say; :meth:`families` renders them."""

    def __init__(
        self,
        identities: Mapping[str, str],
        target_labels: Mapping[str, Mapping[str, str]] | None = None,
        top_n: int = 10,
        classifier: Classifier | None = None,
    ) -> None:
        self.identities = dict(identities)
        # A configured target's own labels (site, ...) go on its series, as on its probes'.
        self.target_labels = {t: dict(labels) for t, labels in (target_labels or {}).items()}
        self._targets: dict[bytes, str] = {}
        self._unmapped: set[str] = set()
        self.frames = 0
        self.errors = dict.fromkeys(ERROR_REASONS, 0)
        self.connections_total = 0
        self.connections_open = 0
        self.messages: dict[tuple[str, str], int] = {}
        self.responses: dict[tuple[str, int, int, int], int] = {}
        self.truncated: dict[str, int] = {}
        self.servfail: dict[tuple[str, str], int] = {}
        self.unmatched: dict[str, int] = {}
        self.latency: dict[str, list[float]] = {}  # bucket counts, then the sum
        self.pending: dict[bytes, int] = {}
        self.evicted = 0
        self.insight = Insight(top_n)
        self.leaks = Leaks(classifier or Classifier("cluster.local"), top_n)
        self._now = time.monotonic()

    def target(self, raw: bytes) -> str:
        identity = raw[:MAX_IDENTITY_LEN]  # all identity_text reads: the cache's key
        t = self._targets.get(identity)
        if t is not None:
            return t
        text = identity_text(identity)
        t = self.identities.get(text)
        if t is None:
            if text in self._unmapped or len(self._unmapped) < MAX_UNMAPPED:
                self._unmapped.add(text)
                t = text
            else:
                t = "other"
        if len(self._targets) < len(self.identities) + MAX_UNMAPPED + 1:
            self._targets[identity] = t
        return t

    def error(self, reason: str) -> None:
        self.errors[reason] += 1

    def ingest(self, frames: Iterable[bytes]) -> None:
        self._now = time.monotonic()  # one clock read per batch: the windows are a minute
        for frame in frames:
            self.frames += 1
            try:
                self._one(frame)
            except Undecodable as e:
                self.errors[e.reason] += 1

    def _one(self, frame: bytes) -> None:
        d = parse_frame(frame)
        m = d.message
        target = self.target(d.identity)
        mtype = m.type
        mkey = (target, MESSAGE_TYPES.get(mtype, "other"))
        self.messages[mkey] = self.messages.get(mkey, 0) + 1
        if mtype == CLIENT_QUERY:
            w = m.query_message
            if len(w) < 12:
                raise Undecodable("dns")
            key = _pending_key(m, (w[0] << 8) | w[1], m.socket_protocol)
            self.pending[key] = m.query_time_sec * 1_000_000_000 + m.query_time_nsec
            if len(self.pending) > PENDING_MAX:
                del self.pending[next(iter(self.pending))]
                self.evicted += 1
        elif mtype == CLIENT_RESPONSE:
            self._response(target, m)
        elif mtype in OUTGOING:
            self.leaks.outgoing(target, m.query_message)

    def _response(self, target: str, m: MessageFields) -> None:
        w: bytes = m.response_message
        p = peek(w, with_ede=len(w) > 3 and (w[3] & 0xF) == SERVFAIL)
        proto: int = m.socket_protocol
        key = (target, p.rcode, p.qtype if p.qtype in QTYPES else 0, proto)
        self.responses[key] = self.responses.get(key, 0) + 1
        if p.truncated:
            self.truncated[target] = self.truncated.get(target, 0) + 1
        client = client_address(m.query_address)
        self.insight.observe(target, client, p.rcode, p.qname, self._now)
        if p.rcode == NXDOMAIN:
            self.leaks.nxdomain(target, client, p.qname, self._now)
        if p.rcode == SERVFAIL:
            code = p.ede[0] if p.ede else None
            ede = "none" if code is None else str(code) if code <= MAX_EDE else "other"
            self.servfail[(target, ede)] = self.servfail.get((target, ede), 0) + 1
        pending = self.pending.pop(_pending_key(m, p.id, proto), None)
        if m.HasField("query_time_sec"):
            pending = m.query_time_sec * 1_000_000_000 + m.query_time_nsec
        if pending is None:
            self.unmatched[target] = self.unmatched.get(target, 0) + 1
            return
        answered = m.response_time_sec * 1_000_000_000 + m.response_time_nsec
        seconds = max(answered - pending, 0) / 1e9
        h = self.latency.get(target)
        if h is None:
            h = self.latency[target] = [0.0] * (len(LATENCY_BUCKETS) + 2)
        h[LATENCY.index(seconds)] += 1
        h[-1] += seconds

    def families(self) -> list[Family]:
        out = [
            Family(
                "dnsfleet_dnstap_frames_total",
                "Data frames received on the dnstap listener.",
                "counter",
            ).add(self.frames),
            _family(
                "dnsfleet_dnstap_errors_total",
                "Frames and streams not counted, by reason: a stream cut for a protocol "
                "error or a timeout, or a frame whose protobuf or DNS bytes do not parse.",
                (({"reason": r}, v) for r, v in self.errors.items()),
            ),
            Family(
                "dnsfleet_dnstap_connections_total",
                "dnstap writer connections accepted.",
                "counter",
            ).add(self.connections_total),
            Family("dnsfleet_dnstap_connections", "dnstap writer connections open.").add(
                self.connections_open
            ),
            _family(
                "dnsfleet_dnstap_messages_total",
                "dnstap messages by the resolver (target) that logged them and message type.",
                (({**self._labels(t), "type": k}, v) for (t, k), v in self.messages.items()),
            ),
            self._responses_family(),
            _family(
                "dnsfleet_dnstap_truncated_responses_total",
                "Responses to clients with the TC bit set.",
                ((self._labels(t), v) for t, v in self.truncated.items()),
            ),
            _family(
                "dnsfleet_dnstap_servfail_total",
                "SERVFAIL responses to clients by their first Extended DNS Error INFO-CODE "
                '(RFC 8914; "none" without one).',
                (({**self._labels(t), "ede": e}, v) for (t, e), v in self.servfail.items()),
            ),
            _family(
                "dnsfleet_dnstap_unmatched_responses_total",
                "Responses whose query time is unknown (not in the message, and its "
                "CLIENT_QUERY not seen): not in the latency histogram.",
                ((self._labels(t), v) for t, v in self.unmatched.items()),
            ),
            Family(
                "dnsfleet_dnstap_pending_queries",
                "Client queries waiting for their response in the matching table.",
            ).add(len(self.pending)),
            Family(
                "dnsfleet_dnstap_pending_evicted_total",
                f"Client queries dropped from the full matching table ({PENDING_MAX}).",
                "counter",
            ).add(self.evicted),
            self._latency_family(),
        ]
        labels = {t: self._labels(t) for t in self.insight.targets}
        out += self.insight.families(labels, time.monotonic())
        out += self.leaks.families(self._labels, self.messages, time.monotonic())
        return out

    def _labels(self, target: str) -> dict[str, str]:
        return {"target": target, **self.target_labels.get(target, {})}

    def _responses_family(self) -> Family:
        rows = (
            (
                {
                    **self._labels(t),
                    "rcode": rcode_text(rc),
                    "qtype": QTYPES.get(qt, "other"),
                    "transport": TRANSPORTS.get(pr, "unknown"),
                },
                v,
            )
            for (t, rc, qt, pr), v in self.responses.items()
        )
        return _family(
            "dnsfleet_dnstap_responses_total",
            "Responses resolvers sent their clients (CLIENT_RESPONSE), by rcode, query type "
            "and transport.",
            rows,
        )

    def _latency_family(self) -> Family:
        fam = Family(
            LATENCY.name,
            "Time from a client's query to the resolver's response, as the resolver logged "
            "both (BIND's clock has millisecond steps).",
            "histogram",
        )
        for t, h in self.latency.items():
            LATENCY.add(fam, labelset(self._labels(t)), h[:-1], h[-1])  # counts, then the sum
        return fam


def _pending_key(m: MessageFields, qid: int, proto: int) -> bytes:
    """(client address, port, DNS id, transport) in at most PENDING_KEY_MAX bytes."""
    addr = client_address(m.query_address)
    return addr + _PORT_ID_PROTO.pack(m.query_port & 0xFFFFFFFF, qid, proto & 0xFFFFFFFF)


def _family(name: str, help: str, rows: Iterable[tuple[dict[str, str], float]]) -> Family:
    fam = Family(name, help, "counter")
    for labels, v in rows:
        fam.add(v, labels)
    return fam
