"""DNSSEC from the resolver's side, pure: the DO/AD query bits and the Extended DNS Error
reader against dnspython, the EDE code table against dnspython's registry, and the DNSSEC
verdicts."""

from __future__ import annotations

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import pytest

from dnsfleet.config import Module
from dnsfleet.dnswire import Malformed, build_query, parse_response
from dnsfleet.probes import Exchange, Reason, judge
from dnsfleet.probes.ede import CODE_LABELS, EDE_CODES, code_label, describe

pytestmark = pytest.mark.unit


def test_query_bits_match_dnspython() -> None:
    q = build_query("www.example.test", 1, dnssec_ok=True, authenticated_data=True)
    ref = dns.message.make_query(
        "www.example.test", "A", use_edns=0, want_dnssec=True, payload=1232
    )
    ref.flags |= dns.flags.AD
    ref.use_edns(
        0, dns.flags.DO, 1232, options=[dns.edns.GenericOption(dns.edns.OptionType.NSID, b"")]
    )
    ref.id = 0
    assert q.wire == ref.to_wire()
    plain = dns.message.from_wire(build_query("x.test", 1).wire)
    assert not plain.ednsflags & dns.flags.DO and not plain.flags & dns.flags.AD


def answer(*options: dns.edns.Option, rcode: int = 2, ad: bool = False) -> tuple[bytes, object]:
    q = build_query("bogus.example.test", 1, dnssec_ok=True)
    msg = dns.message.from_wire(q.with_id(7))
    r = dns.message.make_response(msg)
    r.set_rcode(dns.rcode.Rcode(rcode))
    if ad:
        r.flags |= dns.flags.AD
    r.use_edns(0, dns.flags.DO, 1232, options=list(options))
    return r.to_wire(), q


def test_ede_read_like_dnspython() -> None:
    wire, q = answer(
        dns.edns.EDEOption(dns.edns.EDECode.DNSSEC_BOGUS, "signature crypto failed"),
        dns.edns.GenericOption(dns.edns.OptionType.NSID, b"backend-a"),
        dns.edns.EDEOption(40000),  # type: ignore[arg-type]  # private use
        dns.edns.EDEOption(dns.edns.EDECode.SIGNATURE_EXPIRED, ""),
    )
    resp = parse_response(wire, q, 7)  # type: ignore[arg-type]
    assert resp is not None
    theirs = [o.code for o in dns.message.from_wire(wire).options if o.otype == 15]
    assert list(resp.ede) == [int(c) for c in theirs] == [6, 40000, 7]
    assert resp.ede_text == "signature crypto failed"
    assert resp.nsid == b"backend-a"
    assert [code_label(c) for c in resp.ede] == ["6", "other", "7"]


def test_ede_text_is_bounded_and_tolerates_bad_utf8() -> None:
    wire, q = answer(
        dns.edns.GenericOption(dns.edns.OptionType.EDE, b"\x00\x06" + b"\xff" * 900 + b"\x00")
    )
    resp = parse_response(wire, q, 7)  # type: ignore[arg-type]
    assert resp is not None and resp.ede == (6,)
    assert len(resp.ede_text) == 200


def test_ede_shorter_than_its_code_is_malformed() -> None:
    wire, q = answer(dns.edns.GenericOption(dns.edns.OptionType.EDE, b"\x06"))
    with pytest.raises(Malformed, match="Extended DNS Error"):
        parse_response(wire, q, 7)  # type: ignore[arg-type]


def test_code_table_is_dnspythons_registry() -> None:
    assert {int(c) for c in dns.edns.EDECode} <= set(EDE_CODES)
    assert CODE_LABELS[-1] == "other" and len(CODE_LABELS) == len(EDE_CODES) + 1
    assert describe(7) == "7 Signature Expired"
    assert describe(60000) == "60000 unregistered"


@pytest.mark.parametrize(
    ("mode", "rcode", "ad", "reason"),
    [
        ("require_ad", 0, True, None),
        ("require_ad", 0, False, Reason.NOT_VALIDATED),
        ("require_ad", 2, False, Reason.RCODE),
        ("do", 0, False, None),
        ("expect_bogus", 2, False, None),
        ("expect_bogus", 0, False, Reason.VALIDATION_DISABLED),
        ("expect_bogus", 3, False, Reason.VALIDATION_DISABLED),
        ("expect_bogus", 5, False, Reason.RCODE),
    ],
)
def test_dnssec_verdicts(mode: str, rcode: int, ad: bool, reason: Reason | None) -> None:
    wire, q = answer(rcode=rcode, ad=ad)
    resp = parse_response(wire, q, 7)  # type: ignore[arg-type]
    module = Module(name="m", query_name="bogus.example.test", query_type="A", dnssec=mode)  # type: ignore[arg-type]
    result = judge(Exchange(resp, None, 0.01), module)
    assert result.reason is reason
    assert result.dnssec
