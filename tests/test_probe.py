"""Probes against real unbound and BIND on loopback, and scripted peers for broken servers."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pytest

from dnsfleet.config import Module, parse_address
from dnsfleet.dnswire import build_query, nsid_text
from dnsfleet.probes import ProbeResult, Reason, probe, query_for
from tests.harness.servers import Blackhole, Named, Unbound, answer, scripted
from tests.harness.tools import free_port


def run_probe(address: str, **module: Any) -> ProbeResult:
    mod = Module(name="t", **module)
    host, port, scope = parse_address(address)
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockaddr = (host, port, 0, scope) if fam == socket.AF_INET6 else (host, port)
    return asyncio.run(
        probe(sockaddr=sockaddr, family=fam, module=mod, query=query_for(mod), timeout=mod.timeout)
    )


@pytest.mark.integration
def test_success_through_unbound(unbound: Unbound) -> None:
    r = run_probe(unbound.address, query_name="www.example.test", query_type="A", min_answers=1)
    assert (r.success, r.reason, r.rcode, r.answer_rrs) == (True, None, 0, 1)
    assert 0 < r.duration < 2.0


@pytest.mark.integration
def test_success_over_tcp(unbound: Unbound, named: Named) -> None:
    for target in (unbound.address, named.address):
        r = run_probe(
            target, query_name="www.example.test", query_type="A", transport="tcp", min_answers=1
        )
        assert (r.success, r.rcode, r.answer_rrs) == (True, 0, 1), (target, r.detail)


@pytest.mark.integration
def test_servfail_when_upstream_is_dead(unbound: Unbound) -> None:
    r = run_probe(unbound.address, query_name="x.dead.test", query_type="A", timeout=5.0)
    assert (r.success, r.reason, r.rcode) == (False, Reason.RCODE, 2)
    assert "SERVFAIL" in r.detail


@pytest.mark.integration
def test_servfail_accepted_when_module_allows_it(unbound: Unbound) -> None:
    r = run_probe(
        unbound.address,
        query_name="y.dead.test",
        query_type="A",
        timeout=5.0,
        valid_rcodes=("NOERROR", "SERVFAIL"),
    )
    assert r.success and r.rcode == 2


@pytest.mark.integration
def test_refused_rcode_from_authoritative(named: Named) -> None:
    # BIND with recursion off refuses names outside its zones: an rcode, not "refused".
    r = run_probe(named.address, query_name="www.elsewhere.test", query_type="A")
    assert (r.success, r.reason, r.rcode_text) == (False, Reason.RCODE, "REFUSED")


@pytest.mark.integration
def test_closed_port_is_refused_at_once() -> None:
    port = free_port()
    r = run_probe(f"127.0.0.1:{port}", timeout=5.0)
    assert (r.success, r.reason, r.rcode) == (False, Reason.REFUSED, -1)
    # ICMP port unreachable arrives on a connected socket: nowhere near the 5 s timeout.
    assert r.duration < 2.5


@pytest.mark.integration
def test_closed_port_is_refused_over_tcp() -> None:
    r = run_probe(f"127.0.0.1:{free_port()}", transport="tcp", timeout=5.0)
    assert (r.success, r.reason) == (False, Reason.REFUSED)


@pytest.mark.integration
@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 in this kernel")
def test_ipv6_loopback_refused() -> None:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("::1 is not configured")
    r = run_probe(f"[::1]:{free_port()}", timeout=5.0)
    assert r.reason == Reason.REFUSED


@pytest.mark.integration
def test_blackhole_times_out(blackhole: Blackhole) -> None:
    r = run_probe(blackhole.address, timeout=0.3)
    assert (r.success, r.reason, r.rcode) == (False, Reason.TIMEOUT, -1)
    assert r.duration >= 0.3


@pytest.mark.integration
def test_blackhole_times_out_over_tcp(blackhole: Blackhole) -> None:
    r = run_probe(blackhole.address, transport="tcp", timeout=0.3)
    assert (r.success, r.reason) == (False, Reason.TIMEOUT)


@pytest.mark.integration
def test_wrong_answer(unbound: Unbound) -> None:
    r = run_probe(
        unbound.address,
        query_name="www.example.test",
        query_type="A",
        fail_if_not_matches=(r"IN A 192\.0\.2\.99$",),
    )
    assert (r.success, r.reason, r.rcode) == (False, Reason.ANSWER_MISMATCH, 0)
    ok = run_probe(
        unbound.address,
        query_name="www.example.test",
        query_type="A",
        fail_if_not_matches=(r"IN A 192\.0\.2\.10$",),
    )
    assert ok.success
    bad = run_probe(
        unbound.address,
        query_name="www.example.test",
        query_type="A",
        fail_if_matches=(r"192\.0\.2\.10",),
    )
    assert bad.reason == Reason.ANSWER_MISMATCH


@pytest.mark.integration
def test_no_answer_is_mismatch_when_answers_required(unbound: Unbound) -> None:
    # NODATA: the name exists, no AAAA.
    r = run_probe(unbound.address, query_name="www.example.test", query_type="AAAA", min_answers=1)
    assert (r.reason, r.rcode, r.answer_rrs) == (Reason.ANSWER_MISMATCH, 0, 0)


@pytest.mark.integration
def test_truncated_over_udp_then_fine_over_tcp(named: Named) -> None:
    r = run_probe(named.address, query_name="big.example.test", query_type="TXT", edns=False)
    assert (r.success, r.reason) == (False, Reason.TRUNCATED)
    r = run_probe(
        named.address,
        query_name="big.example.test",
        query_type="TXT",
        transport="tcp",
        min_answers=6,
    )
    assert r.success and r.answer_rrs == 6


@pytest.mark.integration
def test_garbage_bytes_are_malformed() -> None:
    with scripted(lambda q: [os.urandom(7), os.urandom(300)]) as s:
        r = run_probe(s.address, timeout=0.5)
    assert (r.success, r.reason) == (False, Reason.MALFORMED)
    assert "not an answer" in r.detail


@pytest.mark.integration
def test_broken_answer_with_our_id_is_malformed_at_once() -> None:
    # Right ID and QR bit, then a question that runs off the end.
    with scripted(lambda q: [q[:2] + b"\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\x05ab"]) as s:
        r = run_probe(s.address, timeout=5.0)
    assert (r.success, r.reason) == (False, Reason.MALFORMED)
    assert r.duration < 2.5


@pytest.mark.integration
def test_wrong_id_then_right_answer_wins() -> None:
    def handler(q: bytes) -> list[bytes]:
        wrong = (int.from_bytes(q[:2], "big") ^ 0xFFFF).to_bytes(2, "big")
        return [
            wrong + answer(q, "a.test. 60 IN A 192.0.2.1")[2:],
            answer(q, "a.test. 60 IN A 192.0.2.1"),
        ]

    with scripted(handler) as s:
        r = run_probe(s.address, query_name="a.test", query_type="A", min_answers=1)
    assert r.success, r.detail


@pytest.mark.integration
def test_nsid_is_read(tmp_path: Any, named: Named) -> None:
    u = Unbound(
        tmp_path / "ub",
        extra_server='  nsid: "ascii_backend-7"\n',
        stubs={"example.test.": f"127.0.0.1@{named.port}"},
    )
    u.start()
    try:
        r = run_probe(u.address, query_name="www.example.test", query_type="A")
    finally:
        u.stop()
    assert r.response is not None and r.response.nsid is not None
    assert nsid_text(r.response.nsid) == "backend-7"


@pytest.mark.unit
def test_query_is_built_once_with_nsid_and_rd() -> None:
    q = build_query("www.example.test", 1)
    assert q.wire[:2] == b"\x00\x00" and q.wire[2] & 0x01  # RD
    assert q.with_id(0xBEEF)[:2] == b"\xbe\xef" and q.with_id(1)[2:] == q.wire[2:]
    assert b"\x00\x03\x00\x00" in q.wire  # EDNS option NSID, empty


@pytest.mark.unit
@pytest.mark.parametrize(
    ("name", "qtype", "rd", "edns", "nsid"),
    [
        (".", "NS", True, True, True),
        ("www.example.test", "A", True, True, True),
        ("www.example.test.", "AAAA", False, True, False),
        ("_dns._udp.Example.TEST", "SRV", True, False, False),
        ("id.server", "TXT", False, True, True),
        ("a" * 63 + ".b", "TXT", True, True, True),
    ],
)
def test_hand_built_query_matches_dnspython(
    name: str, qtype: str, rd: bool, edns: bool, nsid: bool
) -> None:
    import dns.edns
    import dns.flags
    import dns.message
    import dns.rdatatype

    q = build_query(
        name,
        int(dns.rdatatype.from_text(qtype)),
        recursion_desired=rd,
        edns=edns,
        nsid=nsid,
        payload=1232,
    )
    ref = dns.message.make_query(name, qtype)
    ref.id = 0
    if not rd:
        ref.flags &= ~dns.flags.RD
    if edns:
        ref.use_edns(
            0, payload=1232, options=[dns.edns.GenericOption(dns.edns.NSID, b"")] if nsid else []
        )
    assert q.wire == ref.to_wire()


@pytest.mark.unit
@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("a..b", "empty label"),
        ("a" * 64, "longer than 63"),
        ("é.test", "not ASCII"),
        ("a b.test", "whitespace"),
        ("a\\046b", "escapes"),
        (".".join(["abcdefgh"] * 30), "255"),
    ],
)
def test_encode_name_rejects(name: str, problem: str) -> None:
    from dnsfleet.dnswire import encode_name

    with pytest.raises(ValueError, match=problem):
        encode_name(name)


@pytest.mark.integration
def test_batch_exchange_matches_single_exchanges(unbound: Unbound, blackhole: Blackhole) -> None:
    """A /metrics cycle sends plain UDP probes as one batch (udp.exchange_many); each item
    must come out as udp.exchange would have it: an answer, ICMP refused at once, a
    timeout, junk before the timeout; and a passed deadline leaves no time to start."""
    from dnsfleet.probes import udp

    mod = Module(name="t", query_name="www.example.test", query_type="A")
    q = query_for(mod)
    closed = free_port()
    with scripted(lambda qry: [os.urandom(40)]) as junk:
        targets = [unbound.address, f"127.0.0.1:{closed}", blackhole.address, junk.address]
        items: list[udp.BatchItem] = []
        for t in targets:
            host, port, _ = parse_address(t)
            items.append(((host, port), socket.AF_INET, q, 0.5))

        async def both() -> tuple[list[Any], list[Any]]:
            loop = asyncio.get_running_loop()
            got: list[Any] = [None] * len(items)
            calls: list[int] = []

            def on_result(i: int, ex: Any) -> None:
                calls.append(i)
                got[i] = ex

            await udp.exchange_many(
                items, deadline=loop.time() + 10, concurrency=2, on_result=on_result
            )
            assert sorted(calls) == list(range(len(items)))
            # A deadline already passed leaves no time to start: None for each, no packet.
            late: list[Any] = []
            await udp.exchange_many(
                items,
                deadline=loop.time() - 1,
                concurrency=2,
                on_result=lambda i, ex: late.append(ex),
            )
            assert late == [None] * len(items)
            single = [
                await udp.exchange(sockaddr=s, family=f, query=qq, timeout=to)
                for s, f, qq, to in items
            ]
            return got, single

        batch, single = asyncio.run(both())
    reasons = [None, Reason.REFUSED, Reason.TIMEOUT, Reason.MALFORMED]
    assert [ex.error for ex in batch[:4]] == reasons
    assert [ex.error for ex in single] == reasons
    assert batch[0].response is not None and batch[0].response.answer_rrs == 1
    assert [ex.detail for ex in batch[1:]] == [ex.detail for ex in single[1:]]
