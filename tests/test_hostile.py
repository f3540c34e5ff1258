"""Hostile and broken resolvers, over real loopback sockets: the probe never raises, never
outlives its timeout, and never takes a forged or broken datagram for the answer."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dns.message
import dns.rrset
import pytest
import yaml

from dnsfleet.config import Module
from dnsfleet.probes import ProbeResult, Reason, probe, query_for
from tests.harness.servers import answer, scripted
from tests.harness.tools import free_port

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
TIMEOUT = 0.3
UDP = Module(name="udp", query_name="www.example.test.", query_type="A", timeout=TIMEOUT)
TCP = Module(
    name="tcp", query_name="www.example.test.", query_type="A", transport="tcp", timeout=TIMEOUT
)
GOOD = "www.example.test. 60 IN A 192.0.2.10"
FORGED = "www.example.test. 60 IN A 203.0.113.66"
# The forged answers carry three records, the real one one: answer_rrs tells them apart.
FORGED3 = (
    FORGED,
    "www.example.test. 60 IN A 203.0.113.67",
    "www.example.test. 60 IN A 203.0.113.68",
)


def run_probe(port: int, module: Module = UDP, *, timeout: float = TIMEOUT) -> ProbeResult:
    async def go() -> ProbeResult:
        # A hang guard, not a speed check: the probe ends by its own timeout; if it did
        # not, wait_for raises TimeoutError and the test fails.
        return await asyncio.wait_for(
            probe(
                sockaddr=(HOST, port),
                family=socket.AF_INET,
                module=module,
                query=query_for(module),
                timeout=timeout,
            ),
            timeout + 10.0,
        )

    return asyncio.run(go())


# What the handler returns is ignored (a lambda's sendto count, say).
UdpFn = Callable[[bytes, tuple[str, int], socket.socket], object]


@contextlib.contextmanager
def udp_peer(fn: UdpFn, port: int = 0) -> Iterator[int]:
    """A UDP peer that hands each datagram, its sender and its own socket to ``fn``."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((HOST, port))
    s.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                data, peer = s.recvfrom(65535)
            except OSError:
                continue
            with contextlib.suppress(OSError):
                fn(data, peer, s)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield s.getsockname()[1]
    finally:
        stop.set()
        t.join(timeout=2)
        s.close()


ConnFn = Callable[[socket.socket], None]


@contextlib.contextmanager
def tcp_peer(fn: ConnFn) -> Iterator[int]:
    """A TCP peer that hands each accepted connection to ``fn`` (in its own thread)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((HOST, 0))
    s.listen(16)
    s.settimeout(0.05)
    stop = threading.Event()
    conns: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                c, _ = s.accept()
            except OSError:
                continue
            conns.append(c)
            threading.Thread(target=_quiet, args=(fn, c), daemon=True).start()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield s.getsockname()[1]
    finally:
        stop.set()
        t.join(timeout=2)
        for c in conns:
            c.close()
        s.close()


def _quiet(fn: ConnFn, c: socket.socket) -> None:
    with contextlib.suppress(OSError):
        fn(c)


def read_query(c: socket.socket) -> bytes:
    n = int.from_bytes(c.recv(2, socket.MSG_WAITALL), "big")
    return c.recv(n, socket.MSG_WAITALL)


def qid_of(wire: bytes) -> int:
    return int.from_bytes(wire[:2], "big")


def with_id(wire: bytes, qid: int) -> bytes:
    return qid.to_bytes(2, "big") + wire[2:]


# ------------------------------------------------------------------------ UDP


@pytest.mark.parametrize(
    "junk",
    [
        b"",
        b"\x00",
        b"\xff" * 5,
        b"\x00" * 11,
        os.urandom(12),
        os.urandom(512),
        os.urandom(4096),
    ],
    ids=["empty", "1", "5", "11", "12-random", "512-random", "4096-random"],
)
def test_random_bytes_are_ignored_not_taken(junk: bytes) -> None:
    with udp_peer(lambda d, p, s: s.sendto(junk, p)) as port:
        r = run_probe(port)
    assert not r.success
    assert r.reason is Reason.MALFORMED
    assert "not an answer to the query" in r.detail


def test_truncated_header_with_our_id_is_malformed_at_once() -> None:
    # Our ID and QR set, one answer promised, the message stops inside the question.
    def fn(d: bytes, p: tuple[str, int], s: socket.socket) -> None:
        s.sendto(d[:2] + struct.pack("!HHHHH", 0x8180, 1, 1, 0, 0) + d[12:20], p)

    with udp_peer(fn) as port:
        r = run_probe(port, timeout=5.0)
    assert r.reason is Reason.MALFORMED
    assert r.detail == "name runs past the end of the message"
    assert r.duration < 5.0  # at once, not at the timeout


def test_wrong_id_is_ignored_and_the_real_answer_wins() -> None:
    def fn(d: bytes, p: tuple[str, int], s: socket.socket) -> None:
        for delta in (1, 0x100, 0x8000):
            s.sendto(answer(d, *FORGED3, qid=(qid_of(d) + delta) & 0xFFFF), p)
        s.sendto(answer(d, GOOD), p)

    with udp_peer(fn) as port:
        r = run_probe(port)
    assert r.success and r.answer_rrs == 1


def test_wrong_id_only_is_not_success() -> None:
    with udp_peer(lambda d, p, s: s.sendto(answer(d, GOOD, qid=qid_of(d) ^ 1), p)) as port:
        r = run_probe(port)
    assert r.reason is Reason.MALFORMED
    assert r.detail.startswith("1 datagram(s) that were not an answer")


@pytest.mark.parametrize(
    ("qname", "qtype"),
    [
        ("www.example.test.", "AAAA"),
        ("evil.test.", "A"),
        ("www.example.test.", "ANY"),
        ("www.example.tes.", "A"),
    ],
)
def test_wrong_question_is_ignored(qname: str, qtype: str) -> None:
    def fn(d: bytes, p: tuple[str, int], s: socket.socket) -> None:
        forged = dns.message.make_query(qname, qtype)
        forged.id = qid_of(d)
        r = dns.message.make_response(forged)
        for rec in FORGED3:
            name, ttl, rdclass, rdtype, rdata = rec.split(maxsplit=4)
            r.answer.append(dns.rrset.from_text(name, int(ttl), rdclass, rdtype, rdata))
        s.sendto(r.to_wire(), p)
        s.sendto(answer(d, GOOD), p)

    with udp_peer(fn) as port:
        r = run_probe(port)
    assert r.success and r.answer_rrs == 1


def test_question_in_other_case_is_ours() -> None:
    """DNS names compare case-insensitively; resolvers using 0x20 randomisation echo the
    question in mixed case. That is our question."""

    def fn(d: bytes, p: tuple[str, int], s: socket.socket) -> None:
        wire = bytearray(answer(d, GOOD))
        wire[12:30] = bytes(wire[12:30]).upper()
        s.sendto(bytes(wire), p)

    with udp_peer(fn) as port:
        r = run_probe(port)
    assert r.success and r.answer_rrs == 1


def test_answer_without_question_is_not_taken() -> None:
    """Our ID, QR set, NOERROR, no question section and forged answers: not an answer to
    our question. Error rcodes without a question stay acceptable (FORMERR from servers
    that could not parse the question at all)."""

    def forged(d: bytes) -> bytes:
        m = dns.message.from_wire(answer(d, *FORGED3))
        m.question = []
        return m.to_wire()

    with udp_peer(lambda d, p, s: (s.sendto(forged(d), p), s.sendto(answer(d, GOOD), p))) as port:
        r = run_probe(port)
    assert r.success and r.answer_rrs == 1

    def formerr(d: bytes) -> bytes:
        return d[:2] + struct.pack("!HHHHH", 0x8001, 0, 0, 0, 0)

    with udp_peer(lambda d, p, s: s.sendto(formerr(d), p)) as port:
        r = run_probe(port, timeout=5.0)
    assert r.reason is Reason.RCODE and r.rcode_text == "FORMERR"


def test_replies_from_another_port_or_address_are_dropped() -> None:
    """The probe's connected socket only hears the address and port it asked: forged
    answers (right ID, right question) from a neighbour port or from 127.0.0.2 never
    reach it. The kernel drops them, so the probe times out instead of succeeding."""
    side_port = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    side_port.bind((HOST, 0))
    side_addr = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    side_addr.bind(("127.0.0.2", 0))
    try:

        def fn(d: bytes, p: tuple[str, int], s: socket.socket) -> None:
            side_port.sendto(answer(d, GOOD), p)
            side_addr.sendto(answer(d, GOOD), p)

        with udp_peer(fn) as port:
            r = run_probe(port)
    finally:
        side_port.close()
        side_addr.close()
    assert r.reason is Reason.TIMEOUT
    assert r.detail == f"no answer within {TIMEOUT:.3g}s"  # nothing even reached it


def test_compression_pointer_loops() -> None:
    """Answer names that point at each other (a forward pointer closing a loop): the fast
    reader checks pointers as dnspython does and reports malformed (it used to call this a
    success); so does the full decoder of answer-matching modules."""

    def looped(d: bytes) -> bytes:
        base = answer(d)  # header + question, no answers
        hdr = bytearray(base[:12])
        hdr[6:8] = (2).to_bytes(2, "big")  # two answers
        off1 = len(base)
        rr_tail = struct.pack("!HHIH", 1, 1, 60, 4) + bytes([192, 0, 2, 10])
        rr1 = (0xC000 | (off1 + 12 + 4)).to_bytes(2, "big") + rr_tail  # -> rr2's name
        rr2 = (0xC000 | off1).to_bytes(2, "big") + rr_tail  # -> rr1's name
        return bytes(hdr) + base[12:] + rr1 + rr2

    self_loop = Module(
        name="m",
        query_name="www.example.test.",
        query_type="A",
        timeout=TIMEOUT,
        fail_if_not_matches=("192\\.0\\.2\\.10",),
    )
    with udp_peer(lambda d, p, s: s.sendto(looped(d), p)) as port:
        fast = run_probe(port)
        full = run_probe(port, self_loop)
    assert fast.reason is Reason.MALFORMED
    assert fast.detail == "compression pointer does not point backwards"
    assert full.reason is Reason.MALFORMED


def test_pointer_loop_in_the_question_is_malformed() -> None:
    def fn(d: bytes, p: tuple[str, int], s: socket.socket) -> None:
        s.sendto(
            d[:2]
            + struct.pack("!HHHHH", 0x8180, 1, 0, 0, 0)
            + b"\xc0\x0c"
            + struct.pack("!HH", 1, 1),
            p,
        )

    with udp_peer(fn) as port:
        r = run_probe(port)
    assert r.reason is Reason.MALFORMED and "compression pointer" in r.detail


def test_answer_after_the_deadline_does_not_leak_into_the_next_probe() -> None:
    delayed: list[threading.Timer] = []

    def fn(d: bytes, p: tuple[str, int], s: socket.socket) -> None:
        t = threading.Timer(0.6, lambda: s.sendto(answer(d, *FORGED3), p))
        delayed.append(t)
        t.start()

    with udp_peer(fn) as port:
        late = run_probe(port, timeout=0.2)
        assert late.reason is Reason.TIMEOUT
        # The next probe has its own socket and ID: the first probe's late answer cannot
        # be taken for it; its own answer arrives after 0.6 s.
        nxt = run_probe(port, timeout=3.0)
        for t in delayed:
            t.join()
    assert nxt.success and nxt.duration >= 0.5


def test_a_flood_of_junk_does_not_hang_the_probe() -> None:
    def fn(d: bytes, p: tuple[str, int], s: socket.socket) -> None:
        for i in range(2000):
            s.sendto(with_id(answer(d, GOOD), (qid_of(d) + 1 + i) & 0xFFFF), p)

    with udp_peer(fn) as port:
        r = run_probe(port)
    assert r.reason is Reason.MALFORMED and not r.success


def test_huge_ttls_are_read_as_zero() -> None:
    """RFC 2181 §8: a TTL with the top bit set is treated as zero; a forged
    0xffffffff must not look like a record cached for 136 years."""

    def fn(d: bytes, p: tuple[str, int], s: socket.socket) -> None:
        wire = bytearray(answer(d, GOOD))
        ttl_at = wire.index(bytes([192, 0, 2, 10])) - 6  # TTL, RDLENGTH, then RDATA
        wire[ttl_at : ttl_at + 4] = b"\xff\xff\xff\xff"
        s.sendto(bytes(wire), p)

    with udp_peer(fn) as port:
        r = run_probe(port)
    assert r.success and r.response is not None
    assert r.response.min_ttl == 0


# ------------------------------------------------------------------------ TCP


def test_tcp_length_65535_and_no_body() -> None:
    def fn(c: socket.socket) -> None:
        read_query(c)
        c.sendall(b"\xff\xff")
        time.sleep(2)

    with tcp_peer(fn) as port:
        r = run_probe(port, TCP)
    assert r.reason is Reason.TIMEOUT
    assert r.detail == f"incomplete response: 2 of 65537 bytes within {TIMEOUT:.3g}s"


def test_tcp_server_that_accepts_and_never_reads() -> None:
    with tcp_peer(lambda c: time.sleep(2)) as port:
        r = run_probe(port, TCP)
    assert r.reason is Reason.TIMEOUT and r.detail == f"no answer within {TIMEOUT:.3g}s"


def test_tcp_listener_that_never_accepts() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((HOST, 0))
    s.listen(1)
    try:
        r = run_probe(s.getsockname()[1], TCP)
    finally:
        s.close()
    assert r.reason is Reason.TIMEOUT


def test_tcp_byte_by_byte_trickle_is_bounded() -> None:
    def fn(c: socket.socket) -> None:
        q = read_query(c)
        wire = answer(q, GOOD)
        for b in len(wire).to_bytes(2, "big") + wire:
            c.send(bytes([b]))
            time.sleep(0.05)

    with tcp_peer(fn) as port:
        r = run_probe(port, TCP)
    assert r.reason is Reason.TIMEOUT and r.detail.startswith("incomplete response: ")


@pytest.mark.parametrize(
    ("reply", "reason", "detail"),
    [
        (lambda q: b"", Reason.NETWORK_ERROR, "connection closed after 0 bytes of the response"),
        (lambda q: b"\x00", Reason.MALFORMED, "connection closed after 1 bytes of the response"),
        (lambda q: b"\x00\x00", Reason.MALFORMED, "answer does not match the query"),
        (
            lambda q: b"\x00\x40" + b"\x00" * 10,
            Reason.MALFORMED,
            "connection closed after 12 bytes of the response",
        ),
        (lambda q: b"\x01\x00" + os.urandom(256), Reason.MALFORMED, ""),
        (
            lambda q: (
                (len(q)).to_bytes(2, "big") + with_id(answer(q, GOOD)[: len(q)], qid_of(q) ^ 1)
            ),
            Reason.MALFORMED,
            "answer does not match the query",
        ),
    ],
)
def test_tcp_broken_replies(reply: Callable[[bytes], bytes], reason: Reason, detail: str) -> None:
    def fn(c: socket.socket) -> None:
        c.sendall(reply(read_query(c)))
        c.shutdown(socket.SHUT_WR)
        time.sleep(0.5)

    with tcp_peer(fn) as port:
        r = run_probe(port, TCP, timeout=5.0)
    assert r.reason is reason, r
    assert r.detail.startswith(detail)
    assert r.duration < 5.0


def test_tcp_good_answer_still_works() -> None:
    def fn(c: socket.socket) -> None:
        wire = answer(read_query(c), GOOD)
        c.sendall(len(wire).to_bytes(2, "big") + wire)
        time.sleep(0.2)

    with tcp_peer(fn) as port:
        r = run_probe(port, TCP)
    assert r.success and r.answer_rrs == 1


# ------------------------------------------------------------------------ the fleet


def test_hostile_targets_do_not_disturb_good_ones(tmp_path: Path) -> None:
    """One scrape of a fleet of hostile peers beside an honest one: each hostile target
    fails with its own reason, the honest one succeeds, nothing raises."""
    from dnsfleet.app import Exporter
    from dnsfleet.hostfs import HostFS

    good = lambda d, p, s: s.sendto(answer(d, GOOD), p)  # noqa: E731
    junk = lambda d, p, s: s.sendto(os.urandom(300), p)  # noqa: E731

    def flood(d: bytes, p: tuple[str, int], s: socket.socket) -> None:
        for _ in range(500):
            s.sendto(with_id(answer(d, GOOD), qid_of(d) ^ 1), p)

    closed = free_port()
    with udp_peer(good) as g, udp_peer(junk) as j, udp_peer(flood) as f:
        conf = tmp_path / "dnsfleet.yml"
        conf.write_text(
            yaml.safe_dump(
                {
                    "resolv_conf": [],  # never probe this machine's own resolver
                    "modules": {
                        "m": {
                            "query_name": "www.example.test.",
                            "query_type": "A",
                            "timeout": "300ms",
                        }
                    },
                    "targets": [
                        {"address": f"127.0.0.1:{p}", "module": "m"} for p in (g, j, f, closed)
                    ],
                }
            )
        )
        exp = Exporter(fs=HostFS(), config_file=str(conf))
        asyncio.run(exp.scrape(5.0))
    got = {st.target.port: st.last for st in exp.prober.states.values()}
    good_r, junk_r, flood_r, closed_r = got[g], got[j], got[f], got[closed]
    assert good_r is not None and good_r.success
    assert junk_r is not None and junk_r.reason is Reason.MALFORMED
    assert flood_r is not None and flood_r.reason is Reason.MALFORMED
    assert closed_r is not None and closed_r.reason is Reason.REFUSED


def _with_answer_name(d: bytes, name: bytes, *, extra: bytes = b"", arcount: int = 0) -> bytes:
    """A response to query ``d``: its question, one A record named ``name`` (raw wire),
    then ``extra`` as the additional section."""
    qend = 12
    while d[qend]:
        qend += d[qend] + 1
    qend += 5  # root label, type, class
    hdr = d[:2] + struct.pack("!HHHHH", 0x8180, 1, 1, 0, arcount)
    rr = name + struct.pack("!HHIH", 1, 1, 60, 4) + bytes([192, 0, 2, 10])
    return hdr + d[12:qend] + rr + extra


OPT_RR = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)


@pytest.mark.parametrize(
    ("name", "extra", "arcount", "detail"),
    [
        (b"\xc0\xff", b"", 0, "compression pointer does not point backwards"),  # past the end
        (b"\xc0\x05", b"", 0, "compression pointer into the header"),
        (b"\x03www\xc0\x0c", OPT_RR + OPT_RR, 2, "more than one OPT record"),
    ],
)
def test_hostile_answers_on_the_fast_path_are_malformed(
    name: bytes, extra: bytes, arcount: int, detail: str
) -> None:
    with udp_peer(
        lambda d, p, s: s.sendto(_with_answer_name(d, name, extra=extra, arcount=arcount), p)
    ) as port:
        r = run_probe(port)
    assert r.reason is Reason.MALFORMED and r.detail == detail, r


def test_tc_on_a_tcp_answer_is_not_success() -> None:
    mod = Module(
        name="m", query_name="www.example.test.", query_type="A", timeout=TIMEOUT, transport="tcp"
    )
    with scripted(lambda d: [answer(d, "www.example.test. 60 IN A 192.0.2.1", tc=True)]) as srv:
        r = run_probe(srv.port, mod)
    assert r.reason is Reason.TRUNCATED and r.detail == "TC bit set on a TCP answer"


def test_catastrophic_regex_cannot_stall_the_loop() -> None:
    """`(a+)+$` against a 1 KiB TXT of a's and one b: Python's re takes longer than the age
    of the universe; RE2 answers in linear time, so the probe ends with a verdict."""
    txt = "a" * 250
    mod = Module(
        name="m",
        query_name="www.example.test.",
        query_type="TXT",
        timeout=TIMEOUT,
        fail_if_matches=("(a+)+$",),
    )
    rec = f"www.example.test. 60 IN TXT {' '.join(chr(34) + txt + chr(34) for _ in range(4))}"
    with scripted(lambda d: [answer(d, rec + ' "b"')]) as srv:
        r = run_probe(srv.port, mod)
    assert r.success, r  # a verdict, and the text does not end in a's
