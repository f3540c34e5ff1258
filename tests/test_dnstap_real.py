"""dnstap from real resolvers: unbound streams its client queries and responses
to the exporter's listener, and what dnsfleet counts equals what the clients got. Everything
on loopback; the resolvers' only upstreams are this test's own servers."""

from __future__ import annotations

import collections
import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.edns
import dns.message
import dns.query
import dns.rcode
import pytest

from dnsfleet.app import Exporter
from dnsfleet.dnstap.client import Ingest
from tests.harness.dnssec import SignedNamed, make_zones, validating_unbound
from tests.harness.inprocess import exporter, scrape
from tests.harness.metrics import Samples, matching
from tests.harness.resolverfamilies import Dnsdist, Kresd
from tests.harness.servers import ScriptedServer, Unbound, answer
from tests.harness.tools import binary, num

pytestmark = pytest.mark.integration

IDENTITY = "unbound-a"


def mapped(sock: Path, identity: str, address: str) -> dict[str, Any]:
    """The dnstap section with ``identity`` naming a target at ``address`` (an identity
    naming no target is refused). The target's probes ask TXT for localhost., which the
    counts here (A and AAAA responses, SERVFAILs) leave out."""
    return {
        "modules": {"probe": {"query_name": "localhost.", "query_type": "TXT"}},
        "targets": [{"address": address, "module": "probe"}],
        "dnstap": {"socket": str(sock), "identities": {identity: address}},
    }


def dnstap_clause(sock: Path) -> str:
    return f"""
dnstap:
  dnstap-enable: yes
  dnstap-bidirectional: yes
  dnstap-socket-path: "{sock}"
  dnstap-send-identity: yes
  dnstap-identity: "{IDENTITY}"
  dnstap-log-client-query-messages: yes
  dnstap-log-client-response-messages: yes
"""


@pytest.fixture
def refusing() -> Iterator[ScriptedServer]:
    """An authoritative that refuses everything: a broken delegation, SERVFAIL at unbound."""
    s = ScriptedServer(lambda q: [answer(q, rcode=dns.rcode.REFUSED)])
    yield s
    s.close()


def ask(address: str, name: str, qtype: str = "A") -> str:
    host, port = address.rsplit(":", 1)
    q = dns.message.make_query(name, qtype, use_edns=0)
    r = dns.query.udp(q, host, timeout=10, port=int(port))
    return dns.rcode.to_text(r.rcode())


def rcodes(
    s: Samples, *, target: str | None = None, qtypes: tuple[str, ...] | None = ("A", "AAAA")
) -> collections.Counter[str]:
    """dnsfleet's responses by rcode: of ``target`` (any when None), of ``qtypes`` (any
    when None). Tests send A and AAAA; start-up checks and probes ask other types."""
    got: collections.Counter[str] = collections.Counter()
    for (n, lab), v in s.items():
        labels = dict(lab)
        if n != "dnsfleet_dnstap_responses_total":
            continue
        if (target is None or labels["target"] == target) and (
            qtypes is None or labels["qtype"] in qtypes
        ):
            got[labels["rcode"]] += int(v)
    return got


def settle(
    exp: Exporter,
    want: int,
    *,
    target: str | None = None,
    qtypes: tuple[str, ...] | None = ("A", "AAAA"),
    timeout: float = 60,
) -> tuple[Samples, collections.Counter[str]]:
    """Scrape until ``want`` responses are counted (resolvers write dnstap
    asynchronously): the samples and the responses by rcode."""
    deadline = time.monotonic() + timeout
    while True:
        s = scrape(exp)
        got = rcodes(s, target=target, qtypes=qtypes)
        if got.total() >= want or time.monotonic() > deadline:
            return s, got
        time.sleep(0.2)


def test_unbound_dnstap_counts_equal_what_clients_got(
    tmp_path: Path, refusing: ScriptedServer
) -> None:
    sock = tmp_path / "dnstap.sock"
    u = Unbound(
        tmp_path / "unbound",
        local_data=["www.local.test. 3600 IN A 192.0.2.1"],
        stubs={"broken.test.": f"127.0.0.1@{refusing.port}"},
        extra_server="  ede: yes\n  serve-expired: no",
        extra_config=dnstap_clause(sock),
    )
    t = u.address
    # The listener is up before the resolver starts (as the exporter starts it at load).
    exp = exporter(
        tmp_path,
        {
            "modules": {"m": {"query_name": "www.local.test", "query_type": "TXT"}},
            "targets": [{"address": t, "module": "m", "labels": {"site": "lab"}}],
            "dnstap": {"socket": str(sock), "identities": {IDENTITY: t}},
        },
    )
    try:
        u.start()
        sent: collections.Counter[str] = collections.Counter()
        for i in range(300):
            if i % 3 == 0:
                sent[ask(u.address, "www.local.test.")] += 1
            elif i % 3 == 1:
                sent[ask(u.address, f"n{i}.local.test.", "AAAA")] += 1
            else:
                sent[ask(u.address, f"x{i % 7}.broken.test.")] += 1
        assert set(sent) == {"NOERROR", "NXDOMAIN", "SERVFAIL"}
        total = sum(sent.values())
        # The clients' queries are A and AAAA; the start-up check (SOA) and the exporter's
        # probes (TXT) are dnstap'd too, and counted apart here by their query type.
        s, by_rcode = settle(exp, total, target=t)
        assert by_rcode == sent
        for (n, lab), _ in s.items():
            if n == "dnsfleet_dnstap_responses_total":
                assert ("site", "lab") in lab  # the target's own labels
        servfail = sum(v for (n, lab), v in s.items() if n == "dnsfleet_dnstap_servfail_total")
        assert servfail == sent["SERVFAIL"]
        # Every response was matched with its query: each is in the latency histogram.
        answered = sum(v for (n, lab), v in s.items() if n == "dnsfleet_dnstap_responses_total")
        count = num(matching(s, "dnsfleet_dnstap_response_duration_seconds_count", target=t))
        assert count == answered >= total
        assert matching(s, "dnsfleet_dnstap_unmatched_responses_total", target=t) is None
        assert num(matching(s, "dnsfleet_dnstap_ingest_up")) == 1
        assert all(v == 0 for (n, _), v in s.items() if n == "dnsfleet_dnstap_errors_total"), (
            "no frame refused"
        )
    finally:
        u.stop()
        exp.close()


def ask_ede(address: str, name: str) -> tuple[str, tuple[int, ...]]:
    host, port = address.rsplit(":", 1)
    q = dns.message.make_query(name, "A", use_edns=0, want_dnssec=True)
    r = dns.query.udp(q, host, timeout=10, port=int(port))
    codes = tuple(int(o.code) for o in r.options if o.otype == dns.edns.OptionType.EDE)
    return dns.rcode.to_text(r.rcode()), codes


def test_expired_signatures_are_servfail_with_their_ede(tmp_path: Path) -> None:
    """1,000 queries for a name whose signatures expired: each SERVFAIL is counted under
    the EDE code the client got (7, Signature Expired)."""
    zones = make_zones(tmp_path / "zones")
    primary = SignedNamed(
        tmp_path / "primary",
        zone_files={z: f for z, f in zones.files.items() if z != "example.test.b"},
    )
    sock = tmp_path / "dnstap.sock"
    exp = None
    primary.start()
    u = validating_unbound(tmp_path / "validating", zones, primary.address)
    try:
        u.extra_config = dnstap_clause(sock)
        exp = exporter(
            tmp_path,
            mapped(sock, IDENTITY, u.address),
        )
        u.start()
        got: collections.Counter[tuple[str, tuple[int, ...]]] = collections.Counter()
        for _ in range(1000):
            got[ask_ede(u.address, "www.expired.test.")] += 1
        assert got == {("SERVFAIL", (7,)): 1000}, got
        deadline = time.monotonic() + 60
        while True:
            s = scrape(exp)
            n = matching(s, "dnsfleet_dnstap_servfail_total", target=u.address, ede="7")
            if n == 1000 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert n == 1000
        assert sum(v for (k, _), v in s.items() if k == "dnsfleet_dnstap_servfail_total") == 1000
    finally:
        u.stop()
        primary.stop()
        if exp is not None:
            exp.close()


def test_dnsdist_responses_carry_their_query_time(tmp_path: Path) -> None:
    """dnsdist logs responses only here (DnstapLogResponseAction): each carries its query
    time, so every response is in the latency histogram with no CLIENT_QUERY to match."""
    sock = tmp_path / "dnstap.sock"
    backend = Unbound(tmp_path / "backend", local_data=["www.local.test. 3600 IN A 192.0.2.1"])
    d = Dnsdist(
        tmp_path / "dnsdist",
        backends={"b": backend.address},
        extra=(
            f'fsul = newFrameStreamUnixLogger("{sock}", {{inputQueueSize=16384}})\n'
            'addResponseAction(AllRule(), DnstapLogResponseAction("dnsdist-edge", fsul))\n'
            'addCacheHitResponseAction(AllRule(), DnstapLogResponseAction("dnsdist-edge", fsul))\n'
        ),
    )
    exp = exporter(
        tmp_path,
        mapped(sock, "dnsdist-edge", d.address),
    )
    try:
        # dnsdist's logger connects when it starts and retries only after a long delay: the
        # ingest process (starting on a busy machine) listens first, as for kresd below.
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        backend.start()
        d.start()
        sent: collections.Counter[str] = collections.Counter()
        for i in range(200):
            name = "www.local.test." if i % 2 else f"n{i}.local.test."
            sent[ask(d.address, name)] += 1
        s, got = settle(exp, 200, target=d.address, qtypes=("A",))
        assert got == sent
        # Every response (health checks' too) timed from the query time it carries.
        answered = sum(v for (n, _), v in s.items() if n == "dnsfleet_dnstap_responses_total")
        count = matching(s, "dnsfleet_dnstap_response_duration_seconds_count", target=d.address)
        assert count == answered
        assert matching(s, "dnsfleet_dnstap_unmatched_responses_total", target=d.address) is None
        assert matching(s, "dnsfleet_dnstap_messages_total", type="client_query") is None
    finally:
        d.stop()
        backend.stop()
        exp.close()


def test_a_stalled_listener_never_blocks_the_resolver(tmp_path: Path) -> None:
    """The ingest process frozen (SIGSTOP) while clients query: unbound answers every
    query (its dnstap output drops instead of waiting), and once the process runs again it
    counts what it got, never more than was sent."""
    sock = tmp_path / "dnstap.sock"
    u = Unbound(
        tmp_path / "unbound",
        local_data=["www.local.test. 3600 IN A 192.0.2.1"],
        extra_config=dnstap_clause(sock),
    )
    exp = exporter(
        tmp_path,
        mapped(sock, IDENTITY, u.address),
    )
    ingest = exp.collector_state["dnstap"]
    assert isinstance(ingest, Ingest)
    try:
        u.start()
        os.kill(ingest.proc.pid, signal.SIGSTOP)
        try:
            answered = collections.Counter(ask(u.address, "www.local.test.") for _ in range(3000))
        finally:
            os.kill(ingest.proc.pid, signal.SIGCONT)
        assert answered == {"NOERROR": 3000}
        s = scrape(exp)
        got = sum(
            v
            for (n, lab), v in s.items()
            if n == "dnsfleet_dnstap_responses_total" and dict(lab)["qtype"] == "A"
        )
        assert got <= 3000
        assert num(matching(s, "dnsfleet_dnstap_ingest_up")) == 1
    finally:
        u.stop()
        exp.close()


def ldns_rcodes(capture: Path) -> collections.Counter[str]:
    """CLIENT_RESPONSE rcodes as dnstap-ldns (Debian's independent decoder) reads them."""
    out = subprocess.run(
        [binary("dnstap-ldns"), "-y", "-r", str(capture)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    got: collections.Counter[str] = collections.Counter()
    for doc in out.split("\n---")[0:]:
        if "type: CLIENT_RESPONSE" in doc:
            m = re.search(r"->>HEADER<<- opcode: \w+, rcode: (\w+)", doc)
            assert m, doc
            got[m.group(1)] += 1
    return got


def test_counts_equal_dnstap_ldns_on_the_same_frames(
    tmp_path: Path, refusing: ScriptedServer
) -> None:
    """unbound's real stream captured by fstrm_capture, decoded by dnstap-ldns, and the same
    file replayed into dnsfleet with fstrm_replay: the same responses by rcode."""
    sock, capture = tmp_path / "capture.sock", tmp_path / "unbound.fstrm"
    cap = subprocess.Popen(
        [binary("fstrm_capture"), "-t", "protobuf:dnstap.Dnstap", "-u", str(sock), "-w",
         str(capture)],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    u = Unbound(
        tmp_path / "unbound",
        local_data=["www.local.test. 3600 IN A 192.0.2.1"],
        stubs={"broken.test.": f"127.0.0.1@{refusing.port}"},
        extra_config=dnstap_clause(sock),
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        u.start()
        names = ["www.local.test.", "nope.local.test.", "x.broken.test."]
        for i in range(150):
            ask(u.address, names[i % 3])
    finally:
        u.stop()  # unbound flushes and closes its stream
        cap.terminate()
        cap.wait(timeout=30)
    want = ldns_rcodes(capture)
    assert set(want) == {"NOERROR", "NXDOMAIN", "SERVFAIL"}
    replay_sock = tmp_path / "dnstap.sock"
    exp = exporter(tmp_path, {"targets": [], "dnstap": {"socket": str(replay_sock)}})
    try:
        deadline = time.monotonic() + 30  # the ingest process is starting
        while not replay_sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        subprocess.run(
            [binary("fstrm_replay"), "-t", "protobuf:dnstap.Dnstap", "-u", str(replay_sock),
             "-r", str(capture)],
            check=True, timeout=60, capture_output=True,
        )  # fmt: skip
        s, got = settle(exp, want.total(), qtypes=None)
        # Unmapped: the identity itself is the target.
        assert {dict(lab)["target"] for (n, lab) in s if n.startswith("dnsfleet_dnstap_resp")} == {
            IDENTITY
        }
        assert got == want
    finally:
        exp.close()


def test_knot_resolver_counts_and_latency(tmp_path: Path) -> None:
    """Knot Resolver's dnstap module logs client queries and responses: counts by rcode equal
    what its clients got, each response timed against its matched query. kresd enables
    dnstap only if the socket exists when it starts: the exporter's listener is up first."""
    sock = tmp_path / "dnstap.sock"
    upstream = Unbound(
        tmp_path / "upstream",
        local_data=["www.local.test. 3600 IN A 192.0.2.1", "www.example.test. 3600 IN A 192.0.2.2"],
    )
    k = Kresd(
        tmp_path / "kresd",
        upstream=f"127.0.0.1@{upstream.port}",
        extra=(
            f"modules = {{ dnstap = {{ socket_path = '{sock}', identity = 'kresd-a', "
            "client = { log_queries = true, log_responses = true } } }\n"
        ),
    )
    exp = exporter(
        tmp_path,
        mapped(sock, "kresd-a", k.address),
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        upstream.start()
        k.start()
        sent: collections.Counter[str] = collections.Counter()
        for i in range(200):
            name = "www.local.test." if i % 2 else f"n{i}.local.test."
            sent[ask(k.address, name, "AAAA")] += 1  # kresd's start-up check asks for A
        assert set(sent) == {"NOERROR", "NXDOMAIN"}
        s, got = settle(exp, 200, target=k.address, qtypes=("AAAA",))
        assert got == sent
        answered = sum(v for (n, _), v in s.items() if n == "dnsfleet_dnstap_responses_total")
        count = matching(s, "dnsfleet_dnstap_response_duration_seconds_count", target=k.address)
        assert count == answered
    finally:
        k.stop()
        upstream.stop()
        exp.close()


def dnsperf(address: str, queries: Path, rate: int) -> tuple[int, collections.Counter[str]]:
    """Run ``queries`` through once at ``rate`` qps: (completed, dnsperf's own rcode counts)."""
    host, port = address.rsplit(":", 1)
    out = subprocess.run(
        [binary("dnsperf"), "-s", host, "-p", port, "-d", str(queries), "-n", "1",
         "-Q", str(rate), "-t", "5", "-c", "2"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    done = re.search(r"Queries completed:\s+(\d+)", out)
    codes = re.search(r"Response codes:\s+(.*)", out)
    assert done and codes, out
    counts = collections.Counter(
        {m.group(1): int(m.group(2)) for m in re.finditer(r"(\w+) (\d+) \(", codes.group(1))}
    )
    return int(done.group(1)), counts


def test_a_random_subdomain_flood_is_flagged_and_nothing_else(
    tmp_path: Path, refusing: ScriptedServer
) -> None:
    """dnsperf floods unbound with 5,000 random names under victim.test (NXDOMAIN) among
    ordinary traffic (a popular name, a few missing ones, SERVFAIL from a broken
    delegation): dnsfleet's counts by rcode equal dnsperf's, and victim.test, only it, is a
    random-subdomain suspect within 60 s."""
    sock = tmp_path / "dnstap.sock"
    u = Unbound(
        tmp_path / "unbound",
        local_data=[f"www.popular.test. 3600 IN A 192.0.2.{i}" for i in range(1, 4)],
        stubs={"broken.test.": f"127.0.0.1@{refusing.port}"},
        extra_server='  local-zone: "victim.test." static\n  local-zone: "popular.test." static',
        extra_config=dnstap_clause(sock),
    )
    exp = exporter(
        tmp_path,
        mapped(sock, IDENTITY, u.address),
    )
    rnd = random.Random(26)
    lines = []
    for i in range(5000):
        lines.append(f"{rnd.getrandbits(48):012x}.victim.test A")
        if i % 2:
            lines.append("www.popular.test A")
        if i % 50 == 0:
            lines.append(f"missing{i % 7}.popular.test A")
        if i % 100 == 0:
            lines.append(f"x{i % 3}.broken.test A")
    queries = tmp_path / "queries.txt"
    queries.write_text("\n".join(lines) + "\n")
    try:
        u.start()
        started = time.monotonic()
        completed, sent = dnsperf(u.address, queries, 2000)
        assert completed == len(lines) and set(sent) == {"NOERROR", "NXDOMAIN", "SERVFAIL"}
        while True:
            s = scrape(exp)
            got = rcodes(s, qtypes=("A",))
            suspects = {
                dict(lab)["parent"]
                for (n, lab), _ in s.items()
                if n == "dnsfleet_dnstap_random_subdomain_suspect"
            }
            if (got == sent and suspects) or time.monotonic() - started > 60:
                break
            time.sleep(0.5)
        assert got == sent
        assert suspects == {"victim.test"}
        kids = num(matching(s, "dnsfleet_dnstap_random_subdomain_distinct_children"))
        assert 4000 < kids < 6500  # 5,000 distinct names; linear counting's error
        assert num(matching(s, "dnsfleet_dnstap_random_subdomain_nxdomain_ratio")) == 1
    finally:
        u.stop()
        exp.close()
