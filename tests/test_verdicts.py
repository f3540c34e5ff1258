"""The verdict functions as tables, in the style of blackbox_exporter's prober/dns_test.go:
one row per case (the module's settings and what the exchange brought back), the verdict,
reason and DNSSEC fields it must give, run for every transport. ``judge``
(probes/result.py), the DNSSEC verdicts (probes/dnssec.py), the Extended DNS Error labels
(probes/ede.py) and the failover classification and costs (collectors/stub.py, stubmodel.py,
failover.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import dns.rrset
import pytest

from dnsfleet.collectors.stub import classify
from dnsfleet.config import Module
from dnsfleet.config.modules import TRANSPORTS
from dnsfleet.dnswire import Response, parse_response
from dnsfleet.failover import ADVICE
from dnsfleet.probes import Exchange, ProbeResult, Reason, failed, judge, query_for
from dnsfleet.probes.dnssec import dnssec_verdict
from dnsfleet.probes.ede import OTHER, code_label, describe, ede_note
from dnsfleet.probes.families import probe_exposition
from dnsfleet.probes.result import TlsInfo
from dnsfleet.stubmodel import ServerOutcome, ServerState, glibc, musl

pytestmark = pytest.mark.unit

NAME = "www.example.test."
ENCRYPTED = ("tls", "https")
HANDSHAKE = TlsInfo(handshake=0.003, connect=0.001, cert_expiry=2e9, alpn=None)


@dataclass(frozen=True)
class Reply:
    """What the resolver sends back; ``None`` in a row's ``reply`` means nothing came."""

    rcode: int = dns.rcode.NOERROR
    answers: tuple[str, ...] = ("192.0.2.1",)  # A records of the query name
    ad: bool = False
    tc: bool = False
    ede: tuple[int, ...] = ()


def response(module: Module, reply: Reply) -> Response:
    query = query_for(module)
    msg = dns.message.make_response(dns.message.from_wire(query.with_id(7)))
    msg.set_rcode(dns.rcode.Rcode(reply.rcode))
    if reply.ad:
        msg.flags |= dns.flags.AD
    if reply.tc:
        msg.flags |= dns.flags.TC
    if reply.answers:
        msg.answer.append(dns.rrset.from_text(module.query_name, 300, "IN", "A", *reply.answers))
    msg.use_edns(0, msg.ednsflags, 1232, options=[dns.edns.EDEOption(c) for c in reply.ede])  # type: ignore[arg-type]
    resp = parse_response(msg.to_wire(), query, 7)
    assert resp is not None
    return resp


@dataclass(frozen=True)
class Row:
    name: str
    module: dict[str, Any]
    reply: Reply | None  # None: no response, ``error`` says why
    reason: Reason | None  # None: success
    dnssec: bool  # the result says DNSSEC was asked for (dnssec_authenticated is emitted)
    authenticated: int | None = None  # dnsfleet_probe_dnssec_authenticated, when emitted
    error: Reason | None = None
    detail: str = ""  # a substring of the result's detail
    only: tuple[str, ...] = field(default=TRANSPORTS)  # the transports the row applies to
    handshake: bool = True  # tls, https: the exchange got past the TLS handshake


JUDGE = [
    Row("answer", {}, Reply(), None, dnssec=False, detail="ok"),
    Row("timeout", {}, None, Reason.TIMEOUT, dnssec=False, error=Reason.TIMEOUT),
    Row("refused", {}, None, Reason.REFUSED, dnssec=False, error=Reason.REFUSED,
        handshake=False),
    Row("no reason given", {}, None, Reason.NETWORK_ERROR, dnssec=False),
    Row("rcode", {}, Reply(rcode=dns.rcode.NXDOMAIN, answers=()), Reason.RCODE, dnssec=False,
        detail="rcode NXDOMAIN not in NOERROR"),
    Row("rcode allowed", {"valid_rcodes": ("NOERROR", "NXDOMAIN")},
        Reply(rcode=dns.rcode.NXDOMAIN, answers=()), None, dnssec=False),
    Row("too few answers", {"min_answers": 2}, Reply(), Reason.ANSWER_MISMATCH, dnssec=False,
        detail="1 A answers, expected at least 2"),
    Row("no answer matches", {"fail_if_not_matches": (r"192\.0\.2\.9$",)}, Reply(),
        Reason.ANSWER_MISMATCH, dnssec=False, detail="no answer matches"),
    Row("an answer matches", {"fail_if_matches": (r"192\.0\.2\.1$",)}, Reply(),
        Reason.ANSWER_MISMATCH, dnssec=False, detail="matches"),
    Row("TC over UDP", {}, Reply(tc=True), Reason.TRUNCATED, dnssec=False,
        detail="does not fit in UDP", only=("udp",)),
    Row("TC over a stream", {}, Reply(tc=True), Reason.TRUNCATED, dnssec=False,
        detail="TC bit set on a TCP answer", only=("tcp", *ENCRYPTED)),
    Row("do: validated", {"dnssec": "do"}, Reply(ad=True), None, dnssec=True, authenticated=1),
    Row("do: not validated", {"dnssec": "do"}, Reply(), None, dnssec=True, authenticated=0),
    Row("do: timeout", {"dnssec": "do"}, None, Reason.TIMEOUT, dnssec=True, authenticated=0,
        error=Reason.TIMEOUT),
    Row("require_ad: AD", {"dnssec": "require_ad"}, Reply(ad=True), None, dnssec=True,
        authenticated=1),
    Row("require_ad: no AD", {"dnssec": "require_ad"}, Reply(), Reason.NOT_VALIDATED,
        dnssec=True, authenticated=0, detail="without AD"),
    Row("require_ad: SERVFAIL", {"dnssec": "require_ad"},
        Reply(rcode=dns.rcode.SERVFAIL, answers=()), Reason.RCODE, dnssec=True, authenticated=0),
    Row("expect_bogus: SERVFAIL", {"dnssec": "expect_bogus"},
        Reply(rcode=dns.rcode.SERVFAIL, answers=(), ede=(6,)), None, dnssec=True,
        authenticated=0, detail="SERVFAIL for the bogus name"),
    Row("expect_bogus: answered", {"dnssec": "expect_bogus"}, Reply(ad=True),
        Reason.VALIDATION_DISABLED, dnssec=True, authenticated=1, detail="NOERROR with AD"),
    Row("expect_bogus: timeout", {"dnssec": "expect_bogus"}, None, Reason.TIMEOUT, dnssec=True,
        authenticated=0, error=Reason.TIMEOUT),
    Row("handshake failed", {}, None, Reason.CERTIFICATE, dnssec=False,
        error=Reason.CERTIFICATE, only=ENCRYPTED, handshake=False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("transport", "row"),
    [(t, row) for row in JUDGE for t in row.only],
    ids=lambda v: v.name if isinstance(v, Row) else v,
)
def test_judge(transport: str, row: Row) -> None:
    module = Module(name="m", query_name=NAME, query_type="A", transport=transport, **row.module)  # type: ignore[arg-type]
    # An encrypted exchange carries its handshake whenever it got that far: on an answer and
    # on a timeout after the handshake alike.
    tls = HANDSHAKE if transport in ENCRYPTED and row.handshake else None
    resp = response(module, row.reply) if row.reply is not None else None
    result = judge(Exchange(resp, row.error, 0.25, "why", tls=tls), module)
    assert (result.success, result.reason) == (row.reason is None, row.reason)
    assert result.dnssec is row.dnssec
    assert result.tls is tls
    assert result.duration == 0.25
    assert result.rcode == (row.reply.rcode if row.reply else -1)
    assert row.detail in result.detail
    text = probe_exposition(result)
    if row.authenticated is None:
        assert "dnsfleet_probe_dnssec_authenticated" not in text
    else:
        assert f"dnsfleet_probe_dnssec_authenticated {row.authenticated}\n" in text
    assert ("dnsfleet_probe_tls_handshake_seconds" in text) is (tls is not None)


# dnssec_verdict alone: (mode, rcode, AD) -> (reason, detail) or None (the usual checks
# decide). Only require_ad and expect_bogus have a verdict of their own.
DNSSEC = [
    ("none", dns.rcode.NOERROR, False, None),
    ("none", dns.rcode.SERVFAIL, False, None),
    ("do", dns.rcode.NOERROR, False, None),
    ("do", dns.rcode.SERVFAIL, False, None),
    ("require_ad", dns.rcode.NOERROR, True, None),
    ("require_ad", dns.rcode.NOERROR, False, (Reason.NOT_VALIDATED, "without AD")),
    ("require_ad", dns.rcode.SERVFAIL, False, None),  # the rcode check fails it
    ("require_ad", dns.rcode.NXDOMAIN, False, None),  # NXDOMAIN is not a valid rcode here
    ("expect_bogus", dns.rcode.SERVFAIL, False, (None, "ok: SERVFAIL")),
    ("expect_bogus", dns.rcode.NOERROR, False, (Reason.VALIDATION_DISABLED, "answered NOERROR")),
    ("expect_bogus", dns.rcode.NOERROR, True, (Reason.VALIDATION_DISABLED, "NOERROR with AD")),
    ("expect_bogus", dns.rcode.NXDOMAIN, False, (Reason.VALIDATION_DISABLED, "NXDOMAIN")),
    ("expect_bogus", dns.rcode.REFUSED, False, (Reason.RCODE, "expected SERVFAIL")),
    ("expect_bogus", dns.rcode.FORMERR, False, (Reason.RCODE, "rcode FORMERR")),
]


@pytest.mark.parametrize(("mode", "rcode", "ad", "want"), DNSSEC)
def test_dnssec_verdict(
    mode: str, rcode: int, ad: bool, want: tuple[Reason | None, str] | None
) -> None:
    module = Module(name="m", query_name=NAME, query_type="A", dnssec=mode)  # type: ignore[arg-type]
    got = dnssec_verdict(response(module, Reply(rcode=rcode, ad=ad, answers=())), module)
    if want is None:
        assert got is None
    else:
        assert got is not None and got[0] is want[0] and want[1] in got[1]


# Extended DNS Errors: the codes an answer carries -> the `code` label values and the note
# the status page shows beside the reason.
EDE = [
    ((), [], ""),
    ((6,), ["6"], " (EDE 6 DNSSEC Bogus)"),
    ((7, 9), ["7", "9"], " (EDE 7 Signature Expired, 9 DNSKEY Missing)"),
    ((32,), ["32"], " (EDE 32 Over Quota)"),
    ((33,), [OTHER], " (EDE 33 unregistered)"),  # not registered (yet): bounded as other
    ((49152, 65535), [OTHER, OTHER], " (EDE 49152 unregistered, 65535 unregistered)"),
]


@pytest.mark.parametrize(("codes", "labels", "note"), EDE)
def test_ede(codes: tuple[int, ...], labels: list[str], note: str) -> None:
    module = Module(name="m", query_name=NAME, query_type="A")
    resp = response(module, Reply(rcode=dns.rcode.SERVFAIL, answers=(), ede=codes))
    assert resp.ede == codes
    assert [code_label(c) for c in resp.ede] == labels
    assert ede_note(resp) == note
    assert all(describe(c).startswith(f"{c} ") for c in codes)


def answered(rcode: int) -> ProbeResult:
    return ProbeResult(True, None, 0.002, rcode, 0, "ok")


# The failover classification: what a glibc client makes of a probe's result (the state),
# and what the server then costs a lookup in first place with timeout 5 (glibc: a silent
# server the whole wait, others the time their failure took; musl: nothing while another
# server answers).
FAILOVER = [
    ("NOERROR", answered(dns.rcode.NOERROR), "udp", ServerState.ANSWERING, 0.0),
    ("NXDOMAIN", answered(dns.rcode.NXDOMAIN), "udp", ServerState.ANSWERING, 0.0),
    ("SERVFAIL", answered(dns.rcode.SERVFAIL), "udp", ServerState.SERVFAIL, 0.002),
    ("NOTIMP", answered(dns.rcode.NOTIMP), "udp", ServerState.SERVFAIL, 0.002),
    ("REFUSED rcode", answered(dns.rcode.REFUSED), "udp", ServerState.RCODE_REFUSED, 0.002),
    ("timeout", failed(Reason.TIMEOUT, 2.0, ""), "udp", ServerState.SILENT, 5.0),
    ("port closed", failed(Reason.REFUSED, 0.001, ""), "udp", ServerState.REFUSED, 0.001),
    ("no route", failed(Reason.UNREACHABLE, 3.0, ""), "udp", ServerState.UNREACHABLE, 3.0),
    ("unreachable past the wait", failed(Reason.UNREACHABLE, 9.0, ""), "udp",
     ServerState.UNREACHABLE, 5.0),
    ("stray datagrams", failed(Reason.MALFORMED, 2.0, ""), "udp", ServerState.SILENT, 5.0),
    ("malformed stream", failed(Reason.MALFORMED, 0.01, ""), "tcp", ServerState.ERROR, 0.01),
    ("socket error", failed(Reason.NETWORK_ERROR, 0.01, ""), "udp", ServerState.ERROR, 0.01),
]  # fmt: skip


@pytest.mark.parametrize(
    ("result", "transport", "state", "cost"),
    [row[1:] for row in FAILOVER],
    ids=[row[0] for row in FAILOVER],
)
def test_failover(result: ProbeResult, transport: str, state: ServerState, cost: float) -> None:
    outcome = classify(result, transport=transport)
    assert outcome.state is state
    assert ADVICE[state]
    second = ServerOutcome(ServerState.ANSWERING)
    first = glibc((outcome, second), timeout=5, attempts=2)
    assert first.costs[0] == pytest.approx(cost)
    assert first.delay == pytest.approx(cost)
    assert not first.failing
    alone = glibc((outcome,), timeout=5, attempts=2)
    assert alone.failing is (state is not ServerState.ANSWERING)
    assert musl((outcome, second), timeout=5, attempts=2).delay == 0.0


def test_every_server_state_has_advice() -> None:
    assert set(ADVICE) == set(ServerState)
