"""Search-list expansions and cluster-domain leaks from a real CoreDNS (tests/coredns, with
its dnstap plugin) streaming dnstap to the exporter's listener: the cluster DNS of a
cluster whose ``kubernetes`` zone is missing, so it forwards everything, cluster names
included, to its upstream (a scripted server on loopback that answers NXDOMAIN for all but
one name). A pod's walk of the search list is sent with dnspython from loopback; what
dnsfleet counts equals what the test sent and what the upstream received."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from dnsfleet.app import Exporter
from tests.harness import gotools
from tests.harness.inprocess import exporter, scrape
from tests.harness.metrics import Samples, matching
from tests.harness.process import ManagedProcess
from tests.harness.servers import ScriptedServer, Unbound, wait_dns
from tests.harness.tools import free_port, num

pytestmark = pytest.mark.integration

IDENTITY = "coredns-a"
NAMESPACE = "default"
SEARCH = (f"{NAMESPACE}.svc.cluster.local", "svc.cluster.local", "cluster.local")
FOUND = "www.example.com."  # the one name the upstream has an address for
# Names as a pod's application writes them (ndots:5 appends each search suffix first), with
# the tries of its walk that are expansions: an external name's three; none of a service's
# of the pod's namespace; for another namespace's service, the tries with this namespace or
# only the cluster domain appended (db.other.svc.cluster.local is the service itself).
EXPANDED = {
    "www.example.com": (0, 1, 2),
    "api.github.example": (0, 1, 2),
    "a.b.example.org": (0, 1, 2),
    "kubernetes": (),
    "db.other": (0, 2),
}
QTYPES = ("A", "AAAA")
ROUNDS = 2  # the second walk is answered from CoreDNS's cache: no query leaves it


class Upstream:
    """What the cluster DNS forwards to: NXDOMAIN with a SOA (so CoreDNS caches the
    denial) for every name but FOUND; it keeps the names it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.lock = threading.Lock()
        self.server = ScriptedServer(self.answer)

    def answer(self, wire: bytes) -> list[bytes]:
        q = dns.message.from_wire(wire)
        question = q.question[0]
        name = question.name.to_text().lower()
        with self.lock:
            self.asked.append(name)
        r = dns.message.make_response(q)
        r.flags |= dns.flags.AA  # unbound, iterating, takes only an authority's answer
        if name != FOUND:
            r.set_rcode(dns.rcode.NXDOMAIN)
            zone = "cluster.local." if in_cluster(name) else "."
            soa = "ns.test. hostmaster.test. 1 300 60 86400 300"
            r.authority.append(dns.rrset.from_text(zone, 300, "IN", "SOA", soa))
        elif question.rdtype == dns.rdatatype.A:
            r.answer.append(dns.rrset.from_text(name, 300, "IN", "A", "192.0.2.80"))
        return [r.to_wire()]

    def cluster_names(self) -> list[str]:
        with self.lock:
            return [n for n in self.asked if in_cluster(n)]


def in_cluster(name: str) -> bool:
    return name == "cluster.local." or name.endswith(".cluster.local.")


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    u = Upstream()
    yield u
    u.server.close()


def walk(name: str) -> list[str]:
    """The names glibc asks for ``name`` with ``ndots:5`` and a pod's search list: each
    suffix appended, then the name as written (it has fewer than 5 dots)."""
    return [f"{name}.{s}." for s in SEARCH] + [f"{name}."]


def ask(port: int, name: str, qtype: str) -> str:
    q = dns.message.make_query(name, qtype)
    r = dns.query.udp(q, "127.0.0.1", timeout=10, port=port)
    return dns.rcode.to_text(r.rcode())


def settle(
    exp: Exporter, name: str, target: str, want: float, *, timeout: float = 60, poke: int = 0
) -> Samples:
    """Scrape until ``name`` of ``target`` reaches ``want`` (dnstap is written
    asynchronously) or the deadline passes. ``poke``: a resolver's port to send a name of
    its own before each scrape, one it must forward (nothing cached answers it)."""
    deadline = time.monotonic() + timeout
    for n in range(10_000):
        if poke:
            q = dns.message.make_query(f"poke{n}.{time.monotonic_ns()}.example.", "A")
            with contextlib.suppress(OSError, dns.exception.Timeout):
                dns.query.udp(q, "127.0.0.1", port=poke, timeout=2)
        s = scrape(exp)
        got = matching(s, name, target=target)
        if (got is not None and got >= want) or time.monotonic() > deadline:
            return s
        time.sleep(0.2)
    raise AssertionError("unreachable: the loop ends at its deadline")


EXP = "dnsfleet_dnstap_search_expansion_nxdomain_total"
FWD = "dnsfleet_dnstap_cluster_domain_forwarded_total"


def send_walks(port: int, *, absolute: bool = True) -> tuple[collections.Counter[str], int]:
    """A pod's walks of EXPANDED's names, ROUNDS times, A and AAAA (without the name as
    written when not ``absolute``): the answers by rcode and the expansions answered
    NXDOMAIN."""
    sent: collections.Counter[str] = collections.Counter()
    expansions = 0
    for _ in range(ROUNDS):
        for name, expanded in EXPANDED.items():
            for qtype in QTYPES:
                tries = walk(name) if absolute else walk(name)[: len(SEARCH)]
                for i, asked in enumerate(tries):
                    rcode = ask(port, asked, qtype)
                    sent[rcode] += 1
                    expansions += i in expanded and rcode == "NXDOMAIN"
    return sent, expansions


def test_coredns_expansions_and_leaks_equal_what_was_sent(
    tmp_path: Path, upstream: Upstream
) -> None:
    sock = tmp_path / "dnstap.sock"
    port = free_port()
    t = f"127.0.0.1:{port}"
    # The listener is up before CoreDNS starts, as the exporter starts it at load.
    exp = exporter(
        tmp_path,
        {
            "modules": {"probe": {"query_name": "localhost.", "query_type": "TXT"}},
            "targets": [{"address": t, "module": "probe"}],
            "dnstap": {"socket": str(sock), "identities": {IDENTITY: t}},
        },
    )
    corefile = tmp_path / "Corefile"
    corefile.write_text(
        f".:{port} {{\n    bind 127.0.0.1\n"
        f"    dnstap unix://{sock} full {{\n        identity {IDENTITY}\n    }}\n"
        f"    cache 300\n    forward . 127.0.0.1:{upstream.server.port}\n}}\n"
    )
    core = ManagedProcess([gotools.coredns(), "-conf", str(corefile)], tmp_path / "coredns.log")
    try:
        wait_dns("127.0.0.1", port, "localhost.", "TXT", timeout=30)
        # CoreDNS drops what it logs before its dnstap connection is up, and the probe's
        # name is cached after its first forward: a fresh name per scrape is forwarded and
        # shows the series once the connection is up.
        s = settle(exp, FWD, t, 0, poke=port)
        assert num(matching(s, FWD, target=t)) == 0, core.output()
        sent, expansions = send_walks(port)
        queries = ROUNDS * len(EXPANDED) * len(QTYPES) * (len(SEARCH) + 1)
        assert sent == {"NXDOMAIN": queries - ROUNDS * 2, "NOERROR": ROUNDS * 2}
        assert expansions == ROUNDS * 2 * (3 * 3 + 2)
        s = settle(exp, EXP, t, expansions)
        assert num(matching(s, EXP, target=t)) == expansions
        # Each cluster-domain name left CoreDNS in the first walk only (the second came
        # from its cache), once per query type unless an attempt timed out and was sent
        # again: each is a leak.
        leaked = upstream.cluster_names()
        assert len(set(leaked)) == len(EXPANDED) * len(SEARCH)
        assert len(leaked) >= len(EXPANDED) * len(QTYPES) * len(SEARCH)
        s = settle(exp, FWD, t, len(leaked))
        assert num(matching(s, FWD, target=t)) == len(leaked)
        assert all(v == 0 for (n, _), v in s.items() if n == "dnsfleet_dnstap_errors_total")
    finally:
        core.stop(timeout=10)
        exp.close()


def test_unbound_resolver_queries_under_the_cluster_domain_are_leaks(
    tmp_path: Path, upstream: Upstream
) -> None:
    """unbound with a stub zone for the cluster domain (the stub-domain mistake) logs its
    queries to it as RESOLVER_QUERY, and its client responses: the same counts. Only the
    suffixed tries are sent (the names as written would go to the root)."""
    sock = tmp_path / "dnstap.sock"
    u = Unbound(
        tmp_path / "unbound",
        stubs={"cluster.local.": f"127.0.0.1@{upstream.server.port}"},
        extra_server="  qname-minimisation: no",  # one query per name asked, none for its parents
        extra_config=f"""
dnstap:
  dnstap-enable: yes
  dnstap-bidirectional: yes
  dnstap-socket-path: "{sock}"
  dnstap-send-identity: yes
  dnstap-identity: "unbound-a"
  dnstap-log-client-response-messages: yes
  dnstap-log-resolver-query-messages: yes
""",
    )
    t = u.address
    exp = exporter(
        tmp_path,
        {
            "modules": {"probe": {"query_name": "localhost.", "query_type": "TXT"}},
            "targets": [{"address": t, "module": "probe"}],
            "dnstap": {"socket": str(sock), "identities": {"unbound-a": t}},
        },
    )
    try:
        u.start()
        # unbound drops what it logs before its stream is up; nothing so far left it (its
        # start-up check and the probes are answered from its local zones).
        deadline = time.monotonic() + 60
        while matching(scrape(exp), "dnsfleet_dnstap_connections") != 1:
            assert time.monotonic() < deadline, "unbound never connected"
            time.sleep(0.2)
        assert upstream.cluster_names() == []
        sent, expansions = send_walks(u.port, absolute=False)
        assert sent == {"NXDOMAIN": ROUNDS * len(EXPANDED) * len(QTYPES) * len(SEARCH)}
        assert expansions == ROUNDS * 2 * (3 * 3 + 2)
        s = settle(exp, EXP, t, expansions)
        assert num(matching(s, EXP, target=t)) == expansions
        leaked = upstream.cluster_names()
        assert len(set(leaked)) == len(EXPANDED) * len(SEARCH)
        assert len(leaked) >= len(EXPANDED) * len(QTYPES) * len(SEARCH)
        s = settle(exp, FWD, t, len(leaked))
        assert num(matching(s, FWD, target=t)) == len(leaked)
        assert all(v == 0 for (n, _), v in s.items() if n == "dnsfleet_dnstap_errors_total")
    finally:
        u.stop()
        exp.close()
