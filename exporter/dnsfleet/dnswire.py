"""DNS messages on the wire: build a query once, read responses fast and defensively.

The query is built once per module and only its ID is patched per probe. A
response is read by a small bounds-checked walker rather than ``dns.message.from_wire``:
probing needs the header, the question, counts, answer TTLs and the EDNS OPT record (NSID,
extended rcode), and the walker does that in a fraction of the time. A compression pointer
ends a name; its target is checked as dnspython checks it: it must point backwards (so a
chain of pointers strictly decreases and cannot loop), inside the message and past the
header, to a well-formed name of at most 255 octets. A message with two OPT records, like
one with a bad pointer, is malformed (RFC 6891 6.1.1).
Full decoding with dnspython happens only for modules that match answer text, and
dnspython's message and name modules are imported only then: with their idna and
importlib.metadata dependencies they cost ~6 MB of RSS (tests check the hand-built query
byte for byte against dnspython's).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dns.message

HEADER = struct.Struct("!HHHHHH")
RR_FIXED = struct.Struct("!HHIH")
OPT = 41
NSID_OPTION = 3
FLAG_QR = 0x8000
FLAG_AA = 0x0400
FLAG_TC = 0x0200
FLAG_RA = 0x0080
MAX_TTL = 0x7FFFFFFF
# Servers may answer these without echoing the question (e.g. FORMERR to a question they
# could not parse): FORMERR, SERVFAIL, NOTIMP, REFUSED.
QUESTIONLESS_RCODES = frozenset({1, 2, 4, 5})


class Malformed(ValueError):
    """The bytes are not a well-formed DNS message."""


@dataclass(frozen=True, slots=True)
class Query:
    wire: bytes  # the whole query with ID 0
    question: bytes  # the question section, lower-cased, for matching
    qname: str
    qtype: int
    qclass: int

    def with_id(self, qid: int) -> bytes:
        return qid.to_bytes(2, "big") + self.wire[2:]


def encode_name(name: str) -> bytes:
    """A presentation-form name (ASCII, no escapes) as wire labels; raises ValueError."""
    if name in (".", ""):
        return b"\x00"
    if "\\" in name:
        raise ValueError("escapes are not supported in names")
    try:
        raw = name.encode("ascii")
    except UnicodeEncodeError:
        raise ValueError("not ASCII: use the A-label (xn--) form") from None
    labels = raw[:-1].split(b".") if raw.endswith(b".") else raw.split(b".")
    out = bytearray()
    for label in labels:
        if not label:
            raise ValueError("empty label")
        if len(label) > 63:
            raise ValueError("label longer than 63 octets")
        if any(c <= 0x20 or c == 0x7F for c in label):
            raise ValueError("whitespace or control character in a label")
        out.append(len(label))
        out += label
    out.append(0)
    if len(out) > 255:
        raise ValueError("name longer than 255 octets")
    return bytes(out)


FLAG_RD = 0x0100
EDNS_OPTION_NSID = b"\x00\x03\x00\x00"  # option code 3, empty payload (RFC 5001)


def build_query(
    qname: str,
    qtype: int,
    qclass: int = 1,
    *,
    recursion_desired: bool = True,
    edns: bool = True,
    payload: int = 1232,
    nsid: bool = True,
) -> Query:
    """The query as dnspython's make_query + use_edns would build it, ID 0."""
    question = encode_name(qname) + struct.pack("!HH", qtype, qclass)
    flags = FLAG_RD if recursion_desired else 0
    additional = b""
    if edns:
        options = EDNS_OPTION_NSID if nsid else b""
        # OPT RR: root owner, type 41, class = UDP payload size, TTL 0 (version 0, DO clear).
        additional = b"\x00" + struct.pack("!HHIH", OPT, payload, 0, len(options)) + options
    header = HEADER.pack(0, flags, 1, 0, 0, 1 if edns else 0)
    return Query(
        wire=header + question + additional,
        question=question.lower(),
        qname=qname,
        qtype=qtype,
        qclass=qclass,
    )


@dataclass(frozen=True, slots=True)
class Response:
    id: int
    flags: int
    rcode: int  # including the EDNS extended rcode bits
    answer_rrs: int  # RRs in the answer section
    matching_answers: int  # answer RRs of the query's type and class
    min_ttl: int | None  # smallest TTL among matching answers
    nsid: bytes | None
    wire: bytes

    @property
    def truncated(self) -> bool:
        return bool(self.flags & FLAG_TC)

    @property
    def authoritative(self) -> bool:
        return bool(self.flags & FLAG_AA)


def _skip_name(data: bytes, pos: int) -> int:
    """Offset just past the name at ``pos``, after checking any compression pointer it
    ends in (see the module docstring)."""
    n = len(data)
    total = 0
    while True:
        if pos >= n:
            raise Malformed("name runs past the end of the message")
        length = data[pos]
        if length == 0:
            return pos + 1
        kind = length & 0xC0
        if kind == 0xC0:
            if pos + 2 > n:
                raise Malformed("truncated compression pointer")
            _check_pointer(data, pos, total)
            return pos + 2
        if kind:
            raise Malformed(f"unsupported label type 0x{kind:02x}")
        total += length + 1
        if total > 255:
            raise Malformed("name longer than 255 octets")
        pos += length + 1


def _check_pointer(data: bytes, at: int, total: int) -> None:
    """Follow the pointer at ``at`` to the end of its name: every pointer must point before
    itself and past the header, and the whole name must stay within 255 octets."""
    n = len(data)
    while True:
        target = ((data[at] & 0x3F) << 8) | data[at + 1]
        if target >= at:
            raise Malformed("compression pointer does not point backwards")
        if target < 12:
            raise Malformed("compression pointer into the header")
        pos = target
        while True:
            length = data[pos]  # pos < at <= n - 2: in bounds
            if length == 0:
                return
            kind = length & 0xC0
            if kind == 0xC0:
                if pos + 2 > n:
                    raise Malformed("truncated compression pointer")
                at = pos
                break
            if kind:
                raise Malformed(f"unsupported label type 0x{kind:02x}")
            total += length + 1
            if total > 255:
                raise Malformed("name longer than 255 octets")
            pos += length + 1
            if pos >= at:
                raise Malformed("compressed name overlaps its pointer")


def header_id(data: bytes) -> int | None:
    return int.from_bytes(data[:2], "big") if len(data) >= 2 else None


def parse_response(data: bytes, query: Query, qid: int) -> Response | None:  # noqa: C901, PLR0912 (the hot response walker: one pass, no calls)
    """Read a response to ``query`` sent with ID ``qid``.

    Returns None for a datagram that is not an answer to this query (too short to carry a
    header, wrong ID, not a response, another question): a stub resolver ignores those and
    keeps waiting. Raises :class:`Malformed` for an answer to this query that is broken.
    """
    if len(data) < 12:
        return None
    rid, flags, qd, an, ns, ar = HEADER.unpack_from(data)
    if rid != qid or not flags & FLAG_QR:
        return None
    pos = 12
    if not qd and flags & 0x000F not in QUESTIONLESS_RCODES:
        # Without a question nothing ties the datagram to our query but the ID: a NOERROR
        # "answer" to no question is ignored (dnspython's Message.is_response does the same).
        return None
    if qd:
        if qd != 1:
            raise Malformed(f"{qd} questions in a response to one")
        end = _skip_name(data, pos) + 4
        if end > len(data):
            raise Malformed("question runs past the end of the message")
        if data[pos:end].lower() != query.question:
            return None
        pos = end
    rcode = flags & 0x000F
    tc = bool(flags & FLAG_TC)
    answer_rrs = 0
    matching = 0
    min_ttl: int | None = None
    nsid: bytes | None = None
    opts = 0
    n = len(data)
    try:
        for section, count in ((0, an), (1, ns), (2, ar)):
            for _ in range(count):
                pos = _skip_name(data, pos)
                if pos + 10 > n:
                    raise Malformed("resource record header runs past the end")
                rtype, rclass, ttl, rdlen = RR_FIXED.unpack_from(data, pos)
                pos += 10
                if pos + rdlen > n:
                    raise Malformed("rdata runs past the end of the message")
                if section == 0:
                    answer_rrs += 1
                    if rtype == query.qtype and rclass == query.qclass:
                        matching += 1
                        if ttl > MAX_TTL:
                            ttl = 0  # RFC 2181 §8: a TTL with the top bit set means zero
                        if min_ttl is None or ttl < min_ttl:
                            min_ttl = ttl
                elif section == 2 and rtype == OPT:
                    if opts:
                        raise Malformed("more than one OPT record")
                    opts += 1
                    rcode |= (ttl >> 24) << 4
                    nsid = _read_nsid(data, pos, pos + rdlen)
                pos += rdlen
    except Malformed:
        # A truncated answer may legitimately stop mid-section; report what we have.
        if not tc:
            raise
    return Response(
        id=rid,
        flags=flags,
        rcode=rcode,
        answer_rrs=answer_rrs,
        matching_answers=matching,
        min_ttl=min_ttl,
        nsid=nsid,
        wire=data,
    )


def _read_nsid(data: bytes, pos: int, end: int) -> bytes | None:
    while pos + 4 <= end:
        code, length = struct.unpack_from("!HH", data, pos)
        pos += 4
        if pos + length > end:
            raise Malformed("EDNS option runs past its record")
        if code == NSID_OPTION:
            return data[pos : pos + length]
        pos += length
    return None


def decode_message(wire: bytes) -> dns.message.Message:
    """The whole message, decoded by dnspython: the one full decoder, for answer text,
    CHAOS identities and Consul's records. Raises Malformed when dnspython cannot decode it.
    """
    import dns.message  # noqa: PLC0415 - see the module docstring

    try:
        return dns.message.from_wire(wire, ignore_trailing=True)
    except Exception as e:  # dnspython raises many exception types for hostile input
        raise Malformed(f"undecodable answer: {e}") from None


def answer_texts(wire: bytes) -> list[str]:
    """The answer section in presentation form, for modules that match answer text.
    Raises Malformed when dnspython cannot decode the message."""
    msg = decode_message(wire)
    return [line for rrset in msg.answer for line in rrset.to_text().splitlines()]


def nsid_text(raw: bytes) -> str:
    """NSID payload as a label value: printable ASCII as is, anything else as hex."""
    if raw and all(0x20 <= b < 0x7F for b in raw):
        return raw.decode("ascii")
    return raw.hex()
