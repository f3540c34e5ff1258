"""DNS messages on the wire: build a query once, read responses fast and defensively.

The query is built once per module and only its ID is patched per probe. A response is read
by a small bounds-checked walker rather than ``dns.message.from_wire``: probing needs the
header, the question, counts, answer TTLs and the EDNS OPT record (NSID, extended rcode,
Extended DNS Errors), and the walker does that in a fraction of the time. A compression
pointer ends a name; its target is checked as dnspython checks it: it must point backwards
(so a chain of pointers strictly decreases and cannot loop), inside the message and past the
header, to a well-formed name of at most 255 octets. A message with two OPT records, like
one with a bad pointer, is malformed (RFC 6891 6.1.1). The same walker reads the question
and the EDE codes of the dnstap messages (``dnstap.message.peek``), and the rcode and type
numbers and names are dnspython's (``dns.rcode``, ``dns.rdatatype``: small modules, ~150 KB
of RSS in the dnstap ingest process, which loads no other part of dnspython). Full decoding
with dnspython happens only for modules that match answer text, and dnspython's message and
name modules are imported only then: with their idna and importlib.metadata dependencies
they cost ~6 MB of RSS (tests check the hand-built query byte for byte against dnspython's).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dns.rcode
from dns.rcode import FORMERR, NOTIMP, REFUSED, SERVFAIL
from dns.rdatatype import OPT as _OPT

from dnsfleet.valueclass import value

if TYPE_CHECKING:
    import dns.message

HEADER = struct.Struct("!HHHHHH")
RR_FIXED = struct.Struct("!HHIH")
OPT = int(_OPT)  # a plain int: compared with every additional record's type
NSID_OPTION = 3
EDE_OPTION = 15  # Extended DNS Errors (RFC 8914)
FLAG_QR = 0x8000
FLAG_AA = 0x0400
FLAG_TC = 0x0200
FLAG_AD = 0x0020
DO_BIT = 0x8000  # in the OPT record's TTL: DNSSEC OK (RFC 3225)
# An EDE's EXTRA-TEXT is for people (the status page, logs), never a label: kept this short.
EDE_TEXT_MAX = 200
EDE_RAW_MAX = 2 + 4 * EDE_TEXT_MAX  # the INFO-CODE and as many octets as such text takes
MAX_TTL = 0x7FFFFFFF
# Servers may answer these without echoing the question (e.g. FORMERR to a question they
# could not parse).
QUESTIONLESS_RCODES = frozenset({FORMERR, SERVFAIL, NOTIMP, REFUSED})


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
EDNS_OPTION_NSID = struct.pack("!HH", NSID_OPTION, 0)  # empty: asks for the NSID (RFC 5001)


def build_query(
    qname: str,
    qtype: int,
    qclass: int = 1,
    *,
    recursion_desired: bool = True,
    edns: bool = True,
    payload: int = 1232,
    nsid: bool = True,
    dnssec_ok: bool = False,
    authenticated_data: bool = False,
) -> Query:
    """The query as dnspython's make_query + use_edns would build it, ID 0.

    ``dnssec_ok`` sets DO (it needs EDNS); ``authenticated_data`` sets AD in the header,
    which asks a validating resolver to say whether it validated the answer (RFC 6840 5.7).
    PowerDNS Recursor's default ``dnssec=process`` validates only queries with DO or AD."""
    question = encode_name(qname) + struct.pack("!HH", qtype, qclass)
    flags = FLAG_RD if recursion_desired else 0
    if authenticated_data:
        flags |= FLAG_AD
    additional = b""
    if edns:
        options = EDNS_OPTION_NSID if nsid else b""
        # OPT RR: root owner, type 41, class = UDP payload size, TTL: version 0 and DO.
        ttl = DO_BIT if dnssec_ok else 0
        additional = b"\x00" + struct.pack("!HHIH", OPT, payload, ttl, len(options)) + options
    header = HEADER.pack(0, flags, 1, 0, 0, 1 if edns else 0)
    return Query(
        wire=header + question + additional,
        question=question.lower(),
        qname=qname,
        qtype=qtype,
        qclass=qclass,
    )


@value
class Response:
    id: int
    flags: int
    rcode: int  # including the EDNS extended rcode bits
    answer_rrs: int  # RRs in the answer section
    matching_answers: int  # answer RRs of the query's type and class
    min_ttl: int | None  # smallest TTL among matching answers
    nsid: bytes | None
    wire: bytes
    # Extended DNS Errors (RFC 8914): every INFO-CODE in the OPT record, in order (a message
    # may carry several), and the first non-empty EXTRA-TEXT, cut to EDE_TEXT_MAX.
    ede: tuple[int, ...] = ()
    ede_text: str = ""

    @property
    def truncated(self) -> bool:
        return bool(self.flags & FLAG_TC)

    @property
    def authenticated(self) -> bool:
        """AD: the resolver validated the answer with DNSSEC."""
        return bool(self.flags & FLAG_AD)

    @property
    def authoritative(self) -> bool:
        return bool(self.flags & FLAG_AA)


def skip_name(data: bytes, pos: int) -> int:
    """Offset just past the name at ``pos``, its pointers followed to the name's end (see
    the module docstring): labels stop before ``limit`` (the message's end, then the last
    pointer followed) and within the ``room`` a name's 255 octets leave."""
    n = len(data)
    end = 0  # past the first pointer, once there is one: where the name ends in the message
    room = 256  # octets the labels of this segment may take, and one more
    start = pos  # where this segment of the name begins
    # Not min(): a call costs more than the rest of a short name's walk.
    limit = n if pos + room > n else pos + room
    while True:
        if pos >= limit:
            raise _past_limit(too_long=pos - start >= room, compressed=bool(end))
        length = data[pos]
        if length == 0:
            return end or pos + 1
        if length > 63:
            if length < 0xC0:
                raise Malformed(f"unsupported label type 0x{length & 0xC0:02x}")
            if pos + 2 > n:
                raise Malformed("truncated compression pointer")
            target = ((length & 0x3F) << 8) | data[pos + 1]
            if target >= pos:
                raise Malformed("compression pointer does not point backwards")
            if target < 12:
                raise Malformed("compression pointer into the header")
            end = end or pos + 2
            room -= pos - start
            start = target
            limit = pos if target + room > pos else target + room
            pos = target
            continue
        pos += length + 1


def _past_limit(*, too_long: bool, compressed: bool) -> Malformed:
    if too_long:
        return Malformed("name longer than 255 octets")
    if compressed:
        return Malformed("compressed name overlaps its pointer")
    return Malformed("name runs past the end of the message")


def header_id(data: bytes) -> int | None:
    return int.from_bytes(data[:2], "big") if len(data) >= 2 else None


def parse_response(data: bytes, query: Query, qid: int) -> Response | None:
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
        question = query.question
        end = pos + len(question)
        if data[pos:end].lower() != question:  # ours echoed is well-formed: no walk needed
            end = skip_name(data, pos) + 4
            if end > len(data):
                raise Malformed("question runs past the end of the message")
            if data[pos:end].lower() != question:
                return None
        pos = end
    answer_rrs, matching, min_ttl, rcode_high, (nsid, ede, raw_text) = read_sections(
        data,
        pos,
        counts=(an, ns, ar),
        qtype=query.qtype,
        qclass=query.qclass,
        truncated=flags & FLAG_TC != 0,
    )
    rcode = (flags & 0x000F) | rcode_high
    text = ede_text(raw_text) if raw_text else ""
    return Response(rid, flags, rcode, answer_rrs, matching, min_ttl, nsid, data, ede, text)


# NSID, the EDE info codes and the first non-empty EDE EXTRA-TEXT of an OPT record's RDATA,
# its raw bytes (at most EDE_RAW_MAX, no trailing NULs: ede_text decodes it for the one
# reader that shows it, the probe's Response).
Options = tuple[bytes | None, tuple[int, ...], bytes]
NO_OPTIONS: Options = (None, (), b"")
# What read_sections says: answer RRs, those of the question's type and class, their
# smallest TTL, the OPT record's extended rcode bits (above the header's four), its options.
Sections = tuple[int, int, int | None, int, Options]


def read_sections(  # noqa: C901, PLR0912 (the hot record walker: one pass, no calls but names)
    data: bytes,
    pos: int,
    *,
    counts: tuple[int, int, int],
    qtype: int,
    qclass: int,
    truncated: bool,
) -> Sections:
    """Walk the answer, authority and additional sections (``counts`` records each) from
    ``pos``; raises Malformed; a truncated message (TC) may stop mid-section: what was read
    is returned. The name at 12 was read before: an owner pointing to it is not walked."""
    answer_rrs = matching = rcode_high = opts = 0
    min_ttl: int | None = None
    options = NO_OPTIONS
    n = len(data)
    an, ns, ar = counts
    additional = an + ns  # the index of the first additional record
    try:
        for k in range(additional + ar):
            if pos < n and not data[pos]:
                pos += 1  # the root (an OPT record's owner): spared a call
            elif 12 < pos < n - 1 and data[pos] == 0xC0 and data[pos + 1] == 12:
                pos += 2  # the question's name, most answers' owner: read before
            else:
                pos = skip_name(data, pos)
            if pos + 10 > n:
                raise Malformed("resource record header runs past the end")
            rtype, rclass, ttl, rdlen = RR_FIXED.unpack_from(data, pos)
            pos += 10
            if pos + rdlen > n:
                raise Malformed("rdata runs past the end of the message")
            if k < an:
                answer_rrs += 1
                if rtype == qtype and rclass == qclass:
                    matching += 1
                    if ttl > MAX_TTL:
                        ttl = 0  # RFC 2181 §8: a TTL with the top bit set means zero
                    if min_ttl is None or ttl < min_ttl:
                        min_ttl = ttl
            elif rtype == OPT and k >= additional:
                if opts:
                    raise Malformed("more than one OPT record")
                opts += 1
                rcode_high = (ttl >> 24) << 4
                if rdlen:  # else no options, the usual OPT: what read_options says
                    options = read_options(data, pos, pos + rdlen)
            pos += rdlen
    except Malformed:
        if not truncated:
            raise
    return answer_rrs, matching, min_ttl, rcode_high, options


def read_options(data: bytes, pos: int, end: int) -> Options:
    """The options of an OPT record's RDATA (see Options)."""
    nsid: bytes | None = None
    codes: tuple[int, ...] = ()  # a tuple grown in place: cheaper than a list for one or two
    text = b""
    while pos + 4 <= end:
        code = (data[pos] << 8) | data[pos + 1]
        length = (data[pos + 2] << 8) | data[pos + 3]
        pos += 4
        stop = pos + length
        if stop > end:
            raise Malformed("EDNS option runs past its record")
        if code == EDE_OPTION:
            # INFO-CODE (2 octets), then EXTRA-TEXT: UTF-8, possibly empty (RFC 8914 2).
            if length < 2:
                raise Malformed("Extended DNS Error option shorter than its info code")
            codes += ((data[pos] << 8) | data[pos + 1],)
            if length > 2 and not text:
                text = data[pos + 2 : stop if length <= EDE_RAW_MAX else pos + EDE_RAW_MAX]
                if not text[-1]:  # trailing NULs are no text: a later option's may be taken
                    text = text.rstrip(b"\x00")
        elif code == NSID_OPTION and nsid is None:
            nsid = data[pos:stop]
        pos = stop
    return nsid, codes, text


def ede_text(raw: bytes) -> str:
    """An EDE's EXTRA-TEXT for people: UTF-8 (RFC 8914 2), bad bytes replaced, at most
    EDE_TEXT_MAX characters."""
    return raw.decode("utf-8", errors="replace")[:EDE_TEXT_MAX]


_PLAIN = bytes(range(0x21, 0x7F)).replace(b".", b"").replace(b"\\", b"")


def name_text(wire: bytes) -> str:
    """An uncompressed wire name in presentation form without the root's dot (``""`` for
    the root), lower-case; labels of plain printable ASCII are decoded whole, others byte by
    byte with ``\\DDD`` as in zone files."""
    labels, i, n = [], 0, len(wire)
    while i < n and wire[i]:
        ln = wire[i]
        raw = wire[i + 1 : i + 1 + ln]
        if not raw.translate(None, _PLAIN):
            labels.append(raw.decode("ascii"))
        else:
            labels.append("".join(chr(b) if b in _PLAIN else f"\\{b:03d}" for b in raw))
        i += ln + 1
    return ".".join(labels).lower()


def rcode_text(rcode: int) -> str:
    """dnspython's mnemonic of an rcode (``SERVFAIL``), the number for one it does not name:
    the one spelling of an rcode in every label and detail."""
    return dns.rcode.to_text(rcode)  # type: ignore[arg-type]  # any int: unnamed ones as digits


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
