"""Fuzzing the response path: ``dnswire.parse_response``, ``answer_texts`` and
``probes.result.judge`` with hypothesis, on random bytes and on structure-aware mutations
of valid responses (bit flips, truncation, splices, forged counts, compression pointers,
rewritten lengths).

Bounded and reproducible in CI: each of the three fuzz tests runs ``max_examples`` = 3,000
cases with ``derandomize=True`` (random bytes, mutations, mutations with a foreign ID):
9,000 cases in all (a tenth in the fast loop, ``pytest -m unit``).
Raise FUZZ_EXAMPLES in the environment for a longer hand-run (e.g. 200000).

Properties: nothing raises but :class:`Malformed`; a result is either None (not ours) or a
Response whose counts fit the message; ``judge`` always returns a verdict from the closed
reason set; and a response that does not carry our ID, or our question, never succeeds.
"""

from __future__ import annotations

import os
import struct

import dns.edns
import dns.message
import dns.rrset
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dnsfleet.config import Module
from dnsfleet.dnswire import Malformed, Response, answer_texts, build_query, parse_response
from dnsfleet.probes.reasons import REASONS
from dnsfleet.probes.result import Exchange, judge
from tests.harness.tools import examples

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", examples(3000)))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

QID = 0x1234
QUERY = build_query("www.example.test.", 1)
MODULES = (
    Module(name="plain", query_name="www.example.test.", query_type="A"),
    Module(
        name="strict",
        query_name="www.example.test.",
        query_type="A",
        min_answers=1,
        fail_if_not_matches=(r"192\.0\.2\.",),
        fail_if_matches=(r"203\.0\.113\.",),
    ),
    Module(
        name="tcp",
        query_name="www.example.test.",
        query_type="A",
        transport="tcp",
        valid_rcodes=("NOERROR", "NXDOMAIN"),
    ),
)


def valid_response(n_answers: int, *, nsid: bytes, tc: bool, rcode: int) -> bytes:
    q = dns.message.make_query(
        "www.example.test.", "A", use_edns=0, options=[dns.edns.GenericOption(dns.edns.NSID, b"")]
    )
    q.id = QID
    r = dns.message.make_response(q)
    r.set_rcode(rcode)  # type: ignore[arg-type]
    for i in range(n_answers):
        r.answer.append(
            dns.rrset.from_text("www.example.test.", 60 + i, "IN", "A", f"192.0.2.{i + 1}")
        )
    r.authority.append(dns.rrset.from_text("example.test.", 300, "IN", "NS", "ns1.example.test."))
    r.use_edns(0, payload=1232, options=[dns.edns.GenericOption(dns.edns.NSID, nsid)])
    if tc:
        r.flags |= dns.flags.TC
    return r.to_wire()


def check(data: bytes) -> None:
    try:
        resp = parse_response(data, QUERY, QID)
    except Malformed:
        return
    if resp is None:
        return
    assert isinstance(resp, Response)
    assert resp.id == QID
    assert data[12 : 12 + len(QUERY.question)].lower() == QUERY.question or data[4:6] == b"\x00\x00"
    assert 0 <= resp.matching_answers <= resp.answer_rrs <= int.from_bytes(data[6:8], "big")
    assert 0 <= resp.rcode <= 4095
    assert resp.min_ttl is None or 0 <= resp.min_ttl <= 0x7FFFFFFF
    try:
        texts = answer_texts(resp.wire)
        assert all(isinstance(t, str) for t in texts)
    except Malformed:
        pass
    for m in MODULES:
        v = judge(Exchange(resp, None, 0.001), m)
        assert v.reason is None or v.reason in REASONS
        assert v.success == (v.reason is None)
        assert v.rcode == resp.rcode


@pytest.mark.unit
@FUZZ
@given(st.binary(min_size=0, max_size=600))
def test_random_bytes(data: bytes) -> None:
    check(data)
    # With our ID and the QR bit forced, the walker gets past the header check.
    if len(data) >= 12:
        check(struct.pack("!H", QID) + bytes([data[2] | 0x80]) + data[3:])


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    wire = bytearray(
        valid_response(
            draw(st.integers(0, 6)),
            nsid=draw(st.binary(max_size=40)),
            tc=draw(st.booleans()),
            rcode=draw(st.sampled_from([0, 2, 3, 5])),
        )
    )
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(
                ["flip", "truncate", "count", "pointer", "length", "splice", "byte", "extend"]
            )
        )
        n = len(wire)
        if kind == "flip" and n > 0:
            i = draw(st.integers(0, n - 1))
            wire[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate" and n > 1:
            del wire[draw(st.integers(0, n - 1)) :]
        elif kind == "count" and n >= 12:
            i = draw(st.sampled_from([4, 6, 8, 10]))
            wire[i : i + 2] = draw(st.integers(0, 0xFFFF)).to_bytes(2, "big")
        elif kind == "pointer" and n > 13:
            i = draw(st.integers(12, n - 2))
            target = draw(st.one_of(st.integers(0, n + 4), st.just(i)))
            wire[i : i + 2] = (0xC000 | (target & 0x3FFF)).to_bytes(2, "big")
        elif kind == "length" and n > 13:
            i = draw(st.integers(12, n - 2))
            wire[i : i + 2] = draw(st.sampled_from([0, 1, 255, 0x3FFF, 0xFFFF])).to_bytes(2, "big")
        elif kind == "splice" and n > 4:
            a = draw(st.integers(0, n - 1))
            b = draw(st.integers(a, n))
            wire[a:a] = wire[a:b]
        elif kind == "byte" and n > 0:
            wire[draw(st.integers(0, n - 1))] = draw(st.sampled_from([0, 0x3F, 0x40, 0xC0, 0xFF]))
        elif kind == "extend":
            wire += draw(st.binary(min_size=1, max_size=64))
    return bytes(wire)


@pytest.mark.unit
@FUZZ
@given(mutated())
def test_mutated_valid_responses(data: bytes) -> None:
    check(data)


@pytest.mark.unit
def test_unmutated_valid_responses_are_read() -> None:
    """The baseline the mutations start from parses and succeeds: the fuzz cases are near
    real answers, not just noise."""
    wire = valid_response(3, nsid=b"ns1", tc=False, rcode=0)
    resp = parse_response(wire, QUERY, QID)
    assert resp is not None and resp.answer_rrs == 3 and resp.nsid == b"ns1"
    assert judge(Exchange(resp, None, 0.001), MODULES[1]).success
    assert parse_response(wire, QUERY, QID ^ 1) is None


@pytest.mark.unit
@FUZZ
@given(mutated())
def test_foreign_id_never_succeeds(data: bytes) -> None:
    """Whatever the bytes, a response with another ID is not ours."""
    if len(data) >= 2 and int.from_bytes(data[:2], "big") != QID:
        assert parse_response(data, QUERY, QID) is None
