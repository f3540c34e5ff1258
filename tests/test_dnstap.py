"""dnstap: Frame Streams, the DNS peeks, the aggregates, and the ingest process
against writers that behave and writers that do not. Real resolvers: test_dnstap_real.py."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dnsfleet.dnstap import aggregate
from dnsfleet.dnstap.aggregate import MAX_UNMAPPED, Aggregator
from dnsfleet.dnstap.client import Ingest
from dnsfleet.dnstap.framestreams import (
    ACCEPT,
    CONTENT_TYPE,
    FINISH,
    READY,
    START,
    STOP,
    ProtocolError,
    Receiver,
    Refusal,
    encode_control,
)
from dnsfleet.dnstap.insight import Insight
from dnsfleet.dnstap.message import Undecodable, parse_frame, peek
from dnsfleet.dnstap.protocol import IngestSettings
from dnsfleet.dnswire import name_text
from dnsfleet.exposition import Family
from tests.harness.dnstapwriter import Writer, frames, ingest_settings, pair

# ------------------------------------------------------------------- Frame Streams


def control_types(reply: bytes) -> list[int]:
    out, off = [], 0
    while off < len(reply):
        assert reply[off : off + 4] == b"\0\0\0\0"
        (n,) = struct.unpack_from(">I", reply, off + 4)
        out.append(struct.unpack_from(">I", reply, off + 8)[0])
        off += 8 + n
    return out


BIDIRECTIONAL = (
    encode_control(READY, (b"other", CONTENT_TYPE))
    + encode_control(START, (CONTENT_TYPE,))
    + frames(b"one", b"two")
    + encode_control(STOP)
)


@pytest.mark.unit
def test_bidirectional_stream() -> None:
    rx = Receiver()
    got, reply, done = rx.feed(BIDIRECTIONAL)
    assert got == [b"one", b"two"] and done
    assert control_types(reply) == [ACCEPT, FINISH]
    # ACCEPT names the one content type taken.
    assert CONTENT_TYPE in reply and b"other" not in reply


@pytest.mark.unit
def test_unidirectional_stream_gets_no_reply() -> None:
    rx = Receiver()
    data = encode_control(START, (CONTENT_TYPE,)) + frames(b"x") + encode_control(STOP)
    assert rx.feed(data) == ([b"x"], b"", True)


@pytest.mark.unit
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(BIDIRECTIONAL)), max_size=12))
def test_any_split_of_the_bytes_gives_the_same_stream(cuts: list[int]) -> None:
    rx = Receiver()
    got: list[bytes] = []
    reply = b""
    done = False
    bounds = [0, *sorted(cuts), len(BIDIRECTIONAL)]
    for a, b in itertools.pairwise(bounds):
        f, r, done = rx.feed(BIDIRECTIONAL[a:b])
        got += f
        reply += r
        if done:
            break
    assert got == [b"one", b"two"] and done and control_types(reply) == [ACCEPT, FINISH]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("data", "refusal"),
    [
        (encode_control(READY, (b"protobuf:other",)), Refusal.CONTENT_TYPE),
        (frames(b"data before start"), Refusal.UNEXPECTED_CONTROL),
        (encode_control(START) + encode_control(START), Refusal.UNEXPECTED_CONTROL),
        (encode_control(START) + struct.pack(">I", 10**9), Refusal.OVERSIZED_FRAME),
        (struct.pack(">II", 0, 10**6), Refusal.CONTROL_FRAME),
        (struct.pack(">III", 0, 6, READY) + b"\0\0", Refusal.CONTROL_FRAME),
    ],
)
def test_protocol_errors_are_refusals(data: bytes, refusal: Refusal) -> None:
    with pytest.raises(ProtocolError) as e:
        Receiver().feed(data)
    assert e.value.refusal is refusal


@pytest.mark.unit
def test_unknown_control_types_are_ignored() -> None:
    data = encode_control(START) + encode_control(99) + frames(b"x")
    assert Receiver().feed(data)[0] == [b"x"]


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_is_a_refusal_or_waits_for_more(data: bytes) -> None:
    rx = Receiver()
    with contextlib.suppress(ProtocolError):
        rx.feed(encode_control(START) + data)


# ------------------------------------------------------------------- DNS peeks


def response(
    name: str = "www.Example.test.", rcode: int = 0, ede: tuple[int, ...] = (), tc: bool = False
) -> bytes:
    q = dns.message.make_query(name, "AAAA", use_edns=0)
    r = dns.message.make_response(q)
    r.set_rcode(dns.rcode.Rcode(rcode))
    r.use_edns(0, options=[dns.edns.EDEOption(dns.edns.EDECode(c)) for c in ede])
    if tc:
        r.flags |= dns.flags.TC
    return r.to_wire()


@pytest.mark.unit
def test_peek_reads_rcode_question_tc_and_ede() -> None:
    p = peek(response(rcode=2, ede=(7, 22), tc=True))
    assert (p.rcode, p.qtype, p.truncated, p.ede) == (2, 28, True, (7, 22))
    assert name_text(p.qname) == "www.example.test"
    assert peek(response()).ede == ()
    assert peek(response(rcode=2, ede=(7,)), with_ede=False).ede == ()


@pytest.mark.unit
def test_peek_walks_answers_with_compression_to_the_opt_record() -> None:
    q = dns.message.make_query("a.example.test.", "A", use_edns=0)
    r = dns.message.from_text(
        f"id {q.id}\nopcode QUERY\nrcode SERVFAIL\nflags QR RD RA\nedns 0\n;QUESTION\n"
        "a.example.test. IN A\n;ANSWER\na.example.test. 60 IN A 192.0.2.1\n"
        "a.example.test. 60 IN A 192.0.2.2\n;AUTHORITY\nexample.test. 60 IN NS ns.example.test.\n"
    )
    r.use_edns(0, options=[dns.edns.EDEOption(dns.edns.EDECode.DNSSEC_BOGUS)])
    assert peek(r.to_wire()).ede == (6,)


@pytest.mark.unit
def test_name_text_escapes_what_is_not_printable() -> None:
    assert name_text(b"\x03a.b\x02\x00\xff\x00") == "a\\046b.\\000\\255"
    assert name_text(b"\x00") == ""


@pytest.mark.unit
@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_peek_on_garbage_raises_only_undecodable(data: bytes) -> None:
    try:
        peek(data)
    except Undecodable as e:
        assert e.reason == "dns"


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_parse_frame_on_garbage_raises_only_undecodable(data: bytes) -> None:
    try:
        parse_frame(data)
    except Undecodable as e:
        assert e.reason == "protobuf"


@pytest.mark.unit
@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=400), st.binary(min_size=1, max_size=8))
def test_peek_of_a_cut_or_spliced_response_never_raises_anything_else(
    cut: int, junk: bytes
) -> None:
    w = response(rcode=2, ede=(7,))
    for data in (w[:cut], w[:cut] + junk):
        with contextlib.suppress(Undecodable):
            peek(data)


# ------------------------------------------------------------------- aggregates


def samples(fams: list[Family]) -> dict[tuple[str, str], float]:
    return {(f.name + s, lab.text): v for f in fams for s, lab, v in f.samples}


@pytest.mark.unit
def test_aggregator_counts_rcodes_latency_ede_and_errors() -> None:
    agg = Aggregator({"r1": "127.0.0.1:53"})
    evs: list[bytes] = []
    for i in range(6):
        evs += pair("a.test.", rcode=3 if i < 2 else 0, qid=i, port=2000 + i, latency=0.003)
    # dnsdist's way: the query time inside the response, no CLIENT_QUERY.
    evs.append(pair("b.test.", rcode=2, ede=7, qid=50, query_time_in_response=True)[1])
    evs.append(pair("c.test.", rcode=2, qid=51, port=9)[1])  # no query: unmatched
    evs.append(pair("d.test.", tc=True, qid=52, port=10, identity=b"")[1])
    agg.ingest([*evs, b"\xff garbage"])
    s = samples(agg.families())
    t = 'target="127.0.0.1:53"'
    resp = "dnsfleet_dnstap_responses_total"
    assert s[(resp, f'{t},rcode="NXDOMAIN",qtype="A",transport="udp"')] == 2
    assert s[(resp, f'{t},rcode="NOERROR",qtype="A",transport="udp"')] == 4
    assert s[(resp, f'{t},rcode="SERVFAIL",qtype="A",transport="udp"')] == 2
    assert s[("dnsfleet_dnstap_servfail_total", f'{t},ede="7"')] == 1
    assert s[("dnsfleet_dnstap_servfail_total", f'{t},ede="none"')] == 1
    assert s[("dnsfleet_dnstap_unmatched_responses_total", t)] == 1
    assert s[("dnsfleet_dnstap_truncated_responses_total", 'target="unknown"')] == 1
    lat = "dnsfleet_dnstap_response_duration_seconds"
    assert s[(lat + "_count", t)] == 7
    assert s[(lat + "_bucket", f'{t},le="0.001"')] == 0
    assert s[(lat + "_bucket", f'{t},le="0.005"')] == 7
    assert s[(lat + "_sum", t)] == pytest.approx(6 * 0.003 + 0.002, abs=1e-6)
    assert s[("dnsfleet_dnstap_errors_total", 'reason="protobuf"')] == 1
    assert s[("dnsfleet_dnstap_frames_total", "")] == len(evs) + 1
    assert s[("dnsfleet_dnstap_pending_queries", "")] == 0


@pytest.mark.unit
def test_labels_stay_bounded_whatever_the_identities_and_names() -> None:
    agg = Aggregator({})
    evs = []
    for i in range(2000):
        _q, r = pair(f"x{i}.random.test.", qtype="TYPE65000" if i % 2 else "A", qid=i % 65536)
        evs.append(_with_identity(r, f"id-{i}".encode()))
    agg.ingest(evs)
    fams = agg.families()
    texts = [lab.text for f in fams for _, lab, _ in f.samples]
    targets = {lab.split('"')[1] for lab in texts if "target=" in lab}
    assert len(targets) == MAX_UNMAPPED + 1 and "other" in targets
    qtypes = {
        lab.text.split('qtype="')[1].split('"')[0]
        for f in fams
        if f.name == "dnsfleet_dnstap_responses_total"
        for _, lab, _ in f.samples
    }
    assert qtypes == {"A", "other"}


def _with_identity(frame: bytes, identity: bytes) -> bytes:
    d: Any = parse_frame(frame)
    d.identity = identity
    return bytes(d.SerializeToString())


@pytest.mark.unit
def test_the_matching_table_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    limit, extra = 300, 100
    monkeypatch.setattr(aggregate, "PENDING_MAX", limit)
    agg = Aggregator({})
    agg.ingest([pair("a.test.", qid=i, port=1000 + i)[0] for i in range(limit + extra)])
    s = samples(agg.families())
    assert s[("dnsfleet_dnstap_pending_queries", "")] == limit
    assert s[("dnsfleet_dnstap_pending_evicted_total", "")] == extra
    # The oldest went first: the newest query is still matched.
    agg.ingest([pair("a.test.", qid=limit + extra - 1, port=1000 + limit + extra - 1)[1]])
    assert samples(agg.families())[("dnsfleet_dnstap_pending_queries", "")] == limit - 1


# ------------------------------------------------------------------- the ingest process


def settings_for(path: Path, **over: Any) -> IngestSettings:
    # Eviction of idle writers off: these tests count refusals (test_dnstap_isolation.py
    # has the eviction).
    return ingest_settings(path, **{"evict_idle": 3600.0, **over})


@pytest.fixture
def ingest(tmp_path: Path) -> Iterator[Ingest]:
    ing = Ingest(settings_for(tmp_path / "dnstap.sock"))
    yield ing
    ing.close()


def read(ing: Ingest) -> dict[tuple[str, str], float]:
    return samples(asyncio.run(asyncio.wait_for(ing.families(), 30)))


def wait_for(
    ing: Ingest, key: tuple[str, str], want: float, timeout: float = 30
) -> dict[tuple[str, str], float]:
    deadline = time.monotonic() + timeout
    while True:
        s = read(ing)
        if s.get(key) == want or time.monotonic() > deadline:
            return s
        time.sleep(0.05)


@pytest.mark.integration
def test_ingest_counts_a_well_behaved_stream(ingest: Ingest) -> None:
    w = Writer(ingest.settings.socket)
    assert w.handshake() == ACCEPT
    for i in range(200):
        w.send(*pair("a.test.", rcode=i % 4, qid=i, port=3000 + i))
    assert w.stop()  # FINISH
    s = wait_for(ingest, ("dnsfleet_dnstap_frames_total", ""), 400)
    t = 'target="127.0.0.1:53"'
    for rc in ("NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN"):
        key = f'{t},rcode="{rc}",qtype="A",transport="udp"'
        assert s[("dnsfleet_dnstap_responses_total", key)] == 50
    assert s[("dnsfleet_dnstap_connections_total", "")] == 1
    assert all(v == 0 for (n, _), v in s.items() if n == "dnsfleet_dnstap_errors_total")


@pytest.mark.integration
def test_ingest_survives_writers_that_misbehave(tmp_path: Path) -> None:
    ing = Ingest(settings_for(tmp_path / "dnstap.sock", max_connections=3))
    path = ing.settings.socket
    try:
        # Garbage instead of a handshake; an oversized frame; a content type not ours.
        for data in (
            b"\x00\x00\x00\x00\x00\x0f\xff\xff" + b"x" * 64,
            encode_control(START) + struct.pack(">I", 2**31),
            encode_control(READY, (b"protobuf:other",)),
        ):
            w = Writer(path)
            w.sock.settimeout(30)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                w.sock.sendall(data)
                assert w.sock.recv(100) == b""  # cut
            w.close()
        # Never finishes the handshake; stops in the middle of a frame.
        silent = Writer(path)
        midframe = Writer(path)
        midframe.handshake()
        midframe.sock.sendall(struct.pack(">I", 1000) + b"partial")
        s = wait_for(ing, ("dnsfleet_dnstap_errors_total", 'reason="idle_timeout"'), 1)
        assert s[("dnsfleet_dnstap_errors_total", 'reason="handshake_timeout"')] == 1
        assert s[("dnsfleet_dnstap_errors_total", 'reason="idle_timeout"')] == 1
        assert s[("dnsfleet_dnstap_errors_total", 'reason="control_frame"')] == 1
        assert s[("dnsfleet_dnstap_errors_total", 'reason="oversized_frame"')] == 1
        assert s[("dnsfleet_dnstap_errors_total", 'reason="content_type"')] == 1
        silent.close()
        midframe.close()
        # Undecodable frames in a good stream are counted and the stream goes on.
        w = Writer(path)
        w.handshake()
        w.send(b"\x0a\xff", *pair("a.test.", qid=7), b"\x08")
        assert w.stop()
        s = wait_for(ing, ("dnsfleet_dnstap_frames_total", ""), 4)
        assert s[("dnsfleet_dnstap_errors_total", 'reason="protobuf"')] == 2
        # More writers than max_connections: the extra one is refused and counted.
        held = [Writer(path) for _ in range(3)]
        for h in held:
            h.handshake()
        wait_for(ing, ("dnsfleet_dnstap_connections", ""), 3)
        extra = Writer(path)
        extra.sock.settimeout(30)
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            extra.handshake()
        s = read(ing)
        assert s[("dnsfleet_dnstap_errors_total", 'reason="too_many_connections"')] == 1
        for h in held:
            assert h.stop()
        assert ing.alive() and ing.starts == 1
    finally:
        ing.close()


@pytest.mark.integration
def test_ingest_is_started_again_when_it_dies(ingest: Ingest) -> None:
    ingest.proc.kill()
    ingest.proc.wait()
    ingest.ensure()
    assert ingest.starts == 2
    w = Writer(ingest.settings.socket)
    w.handshake()
    w.send(*pair("a.test."))
    assert w.stop()
    assert (
        wait_for(ingest, ("dnsfleet_dnstap_frames_total", ""), 2)[
            ("dnsfleet_dnstap_frames_total", "")
        ]
        == 2
    )


@pytest.mark.integration
def test_ingest_exits_with_the_exporter_and_removes_its_socket(tmp_path: Path) -> None:
    ing = Ingest(settings_for(tmp_path / "dnstap.sock"))
    Writer(ing.settings.socket).close()  # it listens
    ing.control.close()  # as when the exporter's process ends
    assert ing.proc.wait(timeout=30) == 0
    assert not (tmp_path / "dnstap.sock").exists()


@pytest.mark.unit
def test_a_dnstap_section_without_protobuf_is_refused_with_the_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on an install without protobuf: no ``google`` package at all, so importing the
    parent fails (a mocked find_spec answering None hid that the check itself raised)."""
    from dnsfleet import config

    for name in [m for m in sys.modules if m == "google" or m.startswith("google.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "google", None)
    p = tmp_path / "dnsfleet.yml"
    p.write_text("resolv_conf: []\ndnstap:\n  socket: /run/dnstap.sock\n")
    with pytest.raises(config.ConfigError) as e:
        config.load(p)
    assert str(e.value) == (
        f"{p}:3:11: dnstap.socket: dnstap needs the protobuf Python module, which is not "
        "installed (pip install 'dnsfleet[dnstap]', or Debian's python3-protobuf)"
    )


# ------------------------------------------------------------------- bounded insight


def wire(name: str) -> bytes:
    return b"".join(bytes([len(x)]) + x.encode() for x in name.split(".")) + b"\0"


@pytest.mark.unit
def test_fifty_thousand_random_names_flag_only_the_attacked_parent() -> None:
    """A flood of random names under one parent among 50,000 random names under 50,000
    other parents and legitimate traffic: exactly the attacked parent is a suspect, and
    no family grows past its bound."""
    ins = Insight(top_n=10)
    rnd = random.Random(26)
    client = bytes([127, 0, 0, 1])
    t = "127.0.0.1:53"
    for i in range(50_000):
        ins.observe(t, client, 3, wire(f"{rnd.getrandbits(40):x}.victim.test"), 1.0)
        ins.observe(t, bytes([10, 0, i % 250, 1]), 3, wire(f"w.p{i}.test"), 1.0)
        ins.observe(t, client, 0, wire(f"www{i % 20}.popular.test"), 1.0)
    fams = {f.name: f for f in ins.families({t: {"target": t, "site": "lab"}}, 2.0)}
    suspects = fams["dnsfleet_dnstap_random_subdomain_suspect"].samples
    assert [lab.text for _, lab, _ in suspects] == [
        'target="127.0.0.1:53",site="lab",parent="victim.test"'
    ]
    kids = fams["dnsfleet_dnstap_random_subdomain_distinct_children"].samples[0][2]
    assert kids > 10_000  # linear counting saturates at 34,069
    # Counts show once the minute is over: at most top_n per kind.
    fams = {f.name: f for f in ins.families({}, 62.0)}
    top = [(s, lab.text, v) for s, lab, v in fams["dnsfleet_dnstap_top_domain_responses"].samples]
    assert 0 < len(top) <= 10
    assert top[0] == ("", 'target="127.0.0.1:53",rcode="NXDOMAIN",domain="victim.test"', 50_000)
    clients = [
        (s, lab.text, v) for s, lab, v in fams["dnsfleet_dnstap_top_client_responses"].samples
    ]
    assert 0 < len(clients) <= 10
    assert ("", 'target="127.0.0.1:53",client="127.0.0.1"', 100_000) in clients
    # A minute later with nothing new, nothing is shown: a stopped attack ages out.
    fams = {f.name: f for f in ins.families({}, 200.0)}
    assert all(not fams[n].samples for n in fams if "public_suffix" not in n)


@pytest.mark.unit
def test_insight_covers_at_most_sixteen_targets() -> None:
    ins = Insight(top_n=3)
    for i in range(100):
        ins.observe(f"t{i}", b"\x7f\0\0\1", 3, wire("a.b.test"), 1.0)
    assert len(ins.targets) == 16


@pytest.mark.unit
def test_insight_name_text_is_the_presentation_form() -> None:
    assert name_text(wire("WWW.Example.test")) == "www.example.test"
    assert name_text(b"\x03a.b\x01\xff\x00") == "a\\046b.\\255"


@pytest.mark.integration
def test_a_second_listener_never_takes_a_live_socket(ingest: Ingest, tmp_path: Path) -> None:
    """Another ingest process (a second exporter) on the same path exits with an error; a
    config check does not even start one; the first listener keeps its socket."""
    Writer(ingest.settings.socket).close()  # the first listens (it may still be starting)
    second = Ingest(ingest.settings)
    assert second.proc.wait(timeout=30) == 1
    second.control.close()
    conf = tmp_path / "dnsfleet.yml"
    conf.write_text(f"resolv_conf: []\ndnstap:\n  socket: {ingest.settings.socket}\n")
    check = subprocess.run(
        [sys.executable, "-m", "dnsfleet", "--config.file", str(conf), "--config.check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
    w = Writer(ingest.settings.socket)
    assert w.handshake() == ACCEPT
    w.send(*pair("a.test."))
    assert w.stop()
    assert (
        wait_for(ingest, ("dnsfleet_dnstap_frames_total", ""), 2)[
            ("dnsfleet_dnstap_frames_total", "")
        ]
        == 2
    )


@pytest.mark.integration
def test_a_stale_socket_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "dnstap.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens: a process that died
    ing = Ingest(settings_for(path))
    try:
        w = Writer(str(path))
        assert w.handshake() == ACCEPT
        w.close()
    finally:
        ing.close()


@pytest.mark.integration
def test_a_listener_that_stops_leaves_a_successors_socket_alone(tmp_path: Path) -> None:
    """Restarts overlap: the old process stopped listening, a new one bound the same path,
    then the old one exits. Its clean-up must not remove the new socket."""
    path = tmp_path / "dnstap.sock"
    old = Ingest(settings_for(path))
    Writer(str(path)).close()  # listening
    path.unlink()  # as if the old one had stopped listening and a successor took the path
    successor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    successor.bind(str(path))
    successor.listen(1)
    try:
        old.close()
        assert path.exists()
    finally:
        successor.close()
