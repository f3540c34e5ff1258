"""The one wire walker (dnswire) as each of its readers sees it: the same table of messages
(compression pointers, loops, cut messages, EDE options) through the probes' response
reader (``parse_response``, which the zone checks ask through too), dnstap's ``peek`` and
dnstap's aggregates, and one table of names through ``name_text`` and ``peek``'s question.
A row means the same to every reader: the EDE codes read, or a malformed message."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import pytest

from dnsfleet import dnswire
from dnsfleet.dnstap.aggregate import MAX_EDE, Aggregator
from dnsfleet.dnstap.message import CLIENT_RESPONSE, Dnstap, Undecodable, peek
from dnsfleet.dnswire import Malformed, build_query, name_text, parse_response

pytestmark = pytest.mark.unit

QID = 0x1234
QUERY = build_query("www.example.test.", 1, nsid=False)
QUESTION = QUERY.wire[12 : 12 + len(QUERY.question)]  # at offset 12: 18-octet name, type, class
RECORDS = 12 + len(QUESTION)  # where the first record starts (34)
SERVFAIL = 0x8182  # QR RD RA, rcode 2: dnstap reads EDE codes of SERVFAIL answers
TC = 0x0200


def rr(name: bytes, rtype: int = 1, rdata: bytes = b"\xc0\x00\x02\x01", ttl: int = 60) -> bytes:
    return name + struct.pack("!HHIH", rtype, 1, ttl, len(rdata)) + rdata


def ede(code: int, text: bytes = b"") -> bytes:
    return struct.pack("!HH", 15, 2 + len(text)) + code.to_bytes(2, "big") + text


def opt(*options: bytes) -> bytes:
    return rr(b"\x00", 41, b"".join(options), ttl=0)


def message(
    *,
    answers: tuple[bytes, ...] = (),
    additional: tuple[bytes, ...] = (opt(),),
    flags: int = SERVFAIL,
    cut: int | None = None,
) -> bytes:
    head = struct.pack("!HHHHHH", QID, flags, 1, len(answers), 0, len(additional))
    wire = head + QUESTION + b"".join(answers) + b"".join(additional)
    return wire if cut is None else wire[:cut]


A_PTR = rr(b"\xc0\x0c")  # the question's name
LONG = b"".join(b"\x3f" + b"a" * 63 for _ in range(4)) + b"\x00"  # 256 octets of labels


@dataclass(frozen=True)
class Row:
    id: str
    wire: bytes
    ede: tuple[int, ...] | None  # None: malformed


ROWS = [
    Row("no records", message(additional=()), ()),
    Row("pointer to the question", message(answers=(A_PTR,)), ()),
    Row("pointer into the question's name", message(answers=(rr(b"\x03foo\xc0\x10"),)), ()),
    # The second answer's name points at the first's, which ends in a pointer itself.
    Row("chain of pointers", message(answers=(rr(b"\x01a\xc0\x0c"), rr(b"\xc0\x22"))), ()),
    Row("pointer to itself", message(answers=(rr(b"\xc0\x22"),)), None),
    Row("pointer forward", message(answers=(rr(b"\xc0\x30"),)), None),
    Row("pointer past the end", message(answers=(rr(b"\xc0\xff"),)), None),
    Row("pointer into the header", message(answers=(rr(b"\xc0\x05"),)), None),
    # 34: "a", then a pointer back to 34: a loop for a walker that follows it blindly.
    Row("name looping through its own start", message(answers=(rr(b"\x01a\xc0\x22"),)), None),
    Row("pointer cut in half", message(answers=(A_PTR,), cut=RECORDS + 1), None),
    Row("label type 0x40", message(answers=(rr(b"\x41a\x00"),)), None),
    Row("name of 256 octets", message(answers=(rr(LONG),)), None),
    Row(
        "name over 255 octets through a pointer",
        message(answers=(rr(LONG[64:]), rr(b"\x3f" + b"a" * 63 + b"\xc0\x22"))),
        None,
    ),
    Row("question cut", message(cut=20), None),
    Row("record cut", message(answers=(A_PTR,), cut=RECORDS + 8), None),
    Row("record cut, TC set", message(answers=(A_PTR,), flags=SERVFAIL | TC, cut=RECORDS + 8), ()),
    Row("EDE codes in order", message(additional=(opt(ede(6, b"bogus"), ede(22)),)), (6, 22)),
    Row("EDE after an answer", message(answers=(A_PTR,), additional=(opt(ede(7)),)), (7,)),
    Row("EDE private-use code", message(additional=(opt(ede(49152)),)), (49152,)),
    Row("NSID and EDE", message(additional=(opt(struct.pack("!HH", 3, 2) + b"ns", ede(9)),)), (9,)),
    Row("OPT in the answer section is not EDNS", message(answers=(opt(ede(6)),)), ()),
    Row(
        "EDE shorter than its code", message(additional=(opt(struct.pack("!HHB", 15, 1, 6)),)), None
    ),
    Row("EDE option past its record", message(additional=(rr(b"\x00", 41, ede(6)[:-1]),)), None),
    Row("two OPT records", message(additional=(opt(ede(6)), opt(ede(7)))), None),
    Row("EDE cut, TC set", message(additional=(opt(ede(6)),), flags=SERVFAIL | TC, cut=-3), ()),
    # No question: a pointer to 12 at 12 points at itself, whatever the walker spares.
    Row("no question, pointer at 12", struct.pack("!6H", QID, SERVFAIL, 0, 1, 0, 0) + A_PTR, None),
    Row("pointer to the question, cut after it", message(answers=(A_PTR,), cut=RECORDS + 2), None),
]


def probe_reads(wire: bytes) -> tuple[int, ...] | None:
    try:
        r = parse_response(wire, QUERY, QID)
    except Malformed:
        return None
    assert r is not None, "an answer to the query"
    return r.ede


def peek_reads(wire: bytes) -> tuple[int, ...] | None:
    try:
        return peek(wire, with_ede=True).ede
    except Undecodable as e:
        assert e.reason == "dns"
        return None


def aggregate_reads(wire: bytes) -> str | None:
    """What dnstap's counters say of one CLIENT_RESPONSE carrying ``wire``: the ``ede``
    label of a SERVFAIL, or None for a frame counted as a dns error."""
    d: Any = Dnstap()
    d.identity, d.type = b"r1", 1
    d.message.type, d.message.response_message = CLIENT_RESPONSE, wire
    agg = Aggregator({})
    agg.ingest([d.SerializeToString()])
    if agg.errors["dns"]:
        return None
    [(_, label)] = agg.servfail
    return label


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_every_reader_walks_a_message_alike(row: Row) -> None:
    assert probe_reads(row.wire) == row.ede
    assert peek_reads(row.wire) == row.ede
    assert aggregate_reads(row.wire) == ede_label(row.ede)


def ede_label(codes: tuple[int, ...] | None) -> str | None:
    """dnsfleet_dnstap_servfail_total's ``ede``: the first code, ``none``, ``other``."""
    if codes is None:
        return None
    if not codes:
        return "none"
    return str(codes[0]) if codes[0] <= MAX_EDE else "other"


NAMES = [
    (b"\x00", ""),
    (b"\x03www\x07Example\x04TEST\x00", "www.example.test"),
    (b"\x03a.b\x02\x00\xff\x00", "a\\046b.\\000\\255"),
    (b"\x04a\\ b\x00", "a\\092\\032b"),
    (b"\x01*\x02_x\x00", "*._x"),
]


@pytest.mark.parametrize(("wire", "text"), NAMES, ids=[t or "root" for _, t in NAMES])
def test_every_reader_shows_a_question_name_alike(wire: bytes, text: str) -> None:
    assert name_text(wire) == text
    question = struct.pack("!HHHHHH", QID, SERVFAIL, 1, 0, 0, 0) + wire + b"\x00\x01\x00\x01"
    p = peek(question)
    assert (p.qname, name_text(p.qname)) == (wire, text)


def test_ede_text_is_the_first_that_is_not_only_nuls() -> None:
    wire = message(additional=(opt(ede(6, b"\0\0"), ede(7, b"signature expired\0")),))
    r = parse_response(wire, QUERY, QID)
    assert r is not None and (r.ede, r.ede_text) == ((6, 7), "signature expired")


OTHER_TYPE = QUESTION[:-4] + b"\x00\x1c\x00\x01"  # AAAA
QUESTIONS = [
    ("echoed", QUESTION, True),
    ("echoed in another case", QUESTION.upper(), True),
    ("another type", OTHER_TYPE, False),
    ("another name", b"\x03www\x07example\x05other\x00\x00\x01\x00\x01", False),
    ("our name then more", QUESTION[:-5] + b"\x03xyz\x00\x00\x01\x00\x01", False),
]


@pytest.mark.parametrize(
    ("question", "ours"), [q[1:] for q in QUESTIONS], ids=[q[0] for q in QUESTIONS]
)
def test_an_answer_is_ours_only_with_our_question(question: bytes, ours: bool) -> None:
    """Our question echoed (in any case) ties an answer to the query; any other is not ours,
    whether it differs in type, in a label, or runs on past our name."""
    head = struct.pack("!HHHHHH", QID, 0x8180, 1, 1, 0, 0)
    r = parse_response(head + question + A_PTR, QUERY, QID)
    assert (r is not None) is ours
    if r is not None:
        assert (r.answer_rrs, r.matching_answers) == (1, 1)


def test_an_owner_pointing_to_the_question_is_not_walked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Most answers name their owner as a pointer to the question's name, which the reader
    has read already: the walker takes it as it is (a walk each cost ~180 bytecodes a
    probe); a pointer anywhere else is still walked."""
    walked: list[int] = []
    walk = dnswire.skip_name

    def counting(data: bytes, pos: int) -> int:
        walked.append(pos)
        return walk(data, pos)

    monkeypatch.setattr(dnswire, "skip_name", counting)
    r = parse_response(message(answers=(A_PTR, A_PTR), flags=0x8180), QUERY, QID)
    assert r is not None and (r.answer_rrs, r.matching_answers, r.min_ttl) == (2, 2, 60)
    assert walked == []
    parse_response(message(answers=(rr(b"\xc0\x10"),), flags=0x8180), QUERY, QID)
    assert walked == [RECORDS]
