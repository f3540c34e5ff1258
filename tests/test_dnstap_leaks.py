"""Search-list expansions and cluster-domain leaks from dnstap: the classification rules as
tables, what the aggregator counts of a stream of frames, the per-client top of a minute,
and the settings that carry the domains to the ingest process. A real CoreDNS streaming
dnstap: test_dnstap_leaks_real.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dns.message
import dns.rcode
import pytest

from dnsfleet import config
from dnsfleet.collectors.dnstap import settings_of
from dnsfleet.dnstap.aggregate import Aggregator
from dnsfleet.dnstap.leaks import FORWARDER_QUERY, RESOLVER_QUERY, Classifier, Leaks
from dnsfleet.dnstap.message import CLIENT_RESPONSE, Dnstap
from dnsfleet.dnstap.protocol import ChannelError, IngestSettings
from dnsfleet.dnswire import encode_name
from dnsfleet.exposition import Family
from tests.harness.metrics import of

pytestmark = pytest.mark.unit

CLASSIFIER = Classifier("cluster.local", ["corp.example.com", "us-east-1.compute.internal"])

# (question name, answered NXDOMAIN: is it a search-list expansion?)
EXPANSIONS = [
    # An external name with each of a pod's search suffixes appended (ndots:5).
    ("www.example.com.default.svc.cluster.local", True),
    ("www.example.com.svc.cluster.local", True),  # read as www.example in namespace com
    ("www.example.com.cluster.local", True),
    ("example.com.default.svc.cluster.local", True),
    ("example.com.cluster.local", True),
    ("WWW.Example.COM.Default.SVC.Cluster.Local.", True),  # 0x20 and a trailing dot
    ("api.github.com.corp.example.com", True),
    ("www.example.com.us-east-1.compute.internal", True),
    ("web.other.default.svc.cluster.local", True),  # web.other from namespace default
    # Missed: a one-dot name under svc reads as a service in a namespace.
    ("example.com.svc.cluster.local", False),
    # Single-label names: service lookups, found or not, are not expansions.
    ("web.default.svc.cluster.local", False),
    ("web.svc.cluster.local", False),
    ("web.cluster.local", False),
    ("db.corp.example.com", False),
    # The cluster's own subtrees and the suffixes themselves.
    ("10-0-0-1.default.pod.cluster.local", False),
    ("a.b.pod.cluster.local", False),
    ("svc.cluster.local", False),
    ("cluster.local", False),
    ("default.svc.cluster.local", False),
    ("corp.example.com", False),
    # Not under any suffix, or only looking like one.
    ("www.example.com", False),
    ("www.example.com.local", False),
    ("a.b.notcluster.local", False),
    ("a.b.xcorp.example.com", False),
    ("", False),
    # Caught although the cluster's own: a missing StatefulSet pod, an SRV name.
    ("web-3.nginx.default.svc.cluster.local", True),
    ("_http._tcp.web.default.svc.cluster.local", True),
]


@pytest.mark.parametrize(("name", "expected"), EXPANSIONS)
def test_expansion_rule(name: str, expected: bool) -> None:
    assert CLASSIFIER.expansion(encode_name(name)) is expected


def test_a_label_holding_the_suffix_bytes_is_no_suffix() -> None:
    # One label whose bytes are "\x03svc\x07cluster\x05local": the name's wire form ends as
    # the suffix's does, but no label boundary is there.
    inner = b"\x03svc\x07cluster\x05local"
    wire = bytes([len(inner)]) + inner + b"\x00"
    assert wire.endswith(b"\x03svc\x07cluster\x05local\x00")
    assert not CLASSIFIER.expansion(b"\x01a\x01b" + wire)
    assert not CLASSIFIER.in_cluster(wire)


# (question of a query the resolver sent, under the cluster domain?)
LEAKS = [
    ("web.default.svc.cluster.local", True),
    ("www.example.com.default.svc.cluster.local", True),
    ("cluster.local", True),  # a QNAME-minimising resolver's first step into it
    ("Kubernetes.Default.SVC.CLUSTER.local.", True),
    ("local", False),
    ("notcluster.local", False),
    ("cluster.local.example.com", False),
    ("www.example.com", False),
    ("api.github.com.corp.example.com", False),  # a search suffix is no cluster name
]


@pytest.mark.parametrize(("name", "expected"), LEAKS)
def test_leak_rule(name: str, expected: bool) -> None:
    query = dns.message.make_query(name or ".", "A").to_wire()
    assert CLASSIFIER.leaked(query) is expected
    assert CLASSIFIER.in_cluster(encode_name(name)) is expected


def test_another_cluster_domain() -> None:
    c = Classifier("k8s.example.")
    assert c.expansion(encode_name("www.example.com.default.svc.k8s.example"))
    assert not c.expansion(encode_name("www.example.com.default.svc.cluster.local"))
    assert c.in_cluster(encode_name("web.default.svc.k8s.example"))
    assert not c.in_cluster(encode_name("web.default.svc.cluster.local"))


@pytest.mark.parametrize("domain", [".", ""])
def test_the_root_is_refused(domain: str) -> None:
    with pytest.raises(ValueError, match="root"):
        Classifier(domain)
    with pytest.raises(ValueError, match="root"):
        Classifier("cluster.local", [domain])


# ------------------------------------------------------------------- the aggregator


def message(
    mtype: int,
    name: str,
    *,
    rcode: int = 0,
    client: bytes = bytes([10, 0, 0, 1]),
    identity: bytes = b"coredns-a",
) -> bytes:
    """A dnstap frame: a client response answering ``name``, or an outgoing query for it."""
    q = dns.message.make_query(name, "A")
    d: Any = Dnstap()
    d.identity = identity
    d.type = 1
    m = d.message
    m.type = mtype
    m.socket_family = 1
    m.socket_protocol = 1
    m.query_address = client
    m.query_port = 40000
    m.query_time_sec = 1_700_000_000
    if mtype == CLIENT_RESPONSE:
        r = dns.message.make_response(q)
        r.set_rcode(dns.rcode.Rcode(rcode))
        m.response_message = r.to_wire()
        m.response_time_sec = 1_700_000_000
    else:
        m.query_message = q.to_wire()
    return bytes(d.SerializeToString())


def values(fams: list[Family], name: str) -> dict[str, float]:
    """The samples of ``name`` as the exporter renders them, by their labels written
    ``a=x,b=y`` (sorted)."""
    return {
        ",".join(f"{k}={v}" for k, v in sorted(lab)): value
        for (n, lab), value in of(fams).items()
        if n == name
    }


EXP = "dnsfleet_dnstap_search_expansion_nxdomain_total"
FWD = "dnsfleet_dnstap_cluster_domain_forwarded_total"
TOP = "dnsfleet_dnstap_top_client_search_expansion_nxdomain"


def test_the_aggregator_counts_expansions_and_leaks_exactly() -> None:
    agg = Aggregator({}, top_n=5, classifier=CLASSIFIER)
    frames: list[bytes] = []
    want_exp = want_fwd = 0
    for i, (name, expansion) in enumerate(EXPANSIONS * 3):
        if not name:
            continue
        for rcode in (dns.rcode.NXDOMAIN, dns.rcode.NOERROR, dns.rcode.SERVFAIL):
            frames.append(message(CLIENT_RESPONSE, name, rcode=rcode, client=bytes([10, 0, 0, i])))
        want_exp += expansion  # only the NXDOMAIN answer counts
    for i, (name, leak) in enumerate(LEAKS * 2):
        mtype = (RESOLVER_QUERY, FORWARDER_QUERY)[i % 2]
        frames.append(message(mtype, name or ".", identity=b"coredns-b"))
        want_fwd += leak
    # Client queries, resolver responses: neither is read by these counts.
    frames.append(message(CLIENT_RESPONSE - 1, "www.example.com.cluster.local"))
    frames.append(message(RESOLVER_QUERY + 1, "web.default.svc.cluster.local"))
    agg.ingest(frames)
    fams = agg.families()
    assert values(fams, EXP) == {"target=coredns-a": want_exp}
    assert values(fams, FWD) == {"target=coredns-b": want_fwd}
    assert want_exp == 3 * 11 and want_fwd == 2 * 4
    assert all(v == 0 for k, v in values(fams, "dnsfleet_dnstap_errors_total").items())


def test_a_target_that_logs_its_queries_shows_zero_leaks_from_its_first_message() -> None:
    """Counters are shown from 0 for a target that logs what they count, so the first leak
    reads as an increase to an alert; a target that logs no outgoing query has none."""
    agg = Aggregator({}, top_n=5, classifier=CLASSIFIER)
    agg.ingest([message(FORWARDER_QUERY, "www.example.com")])
    agg.ingest([message(CLIENT_RESPONSE, "www.example.com", identity=b"unbound-c")])
    fams = agg.families()
    assert values(fams, FWD) == {"target=coredns-a": 0}
    assert values(fams, EXP) == {"target=unbound-c": 0}
    agg.ingest([message(FORWARDER_QUERY, "web.default.svc.cluster.local")])
    assert values(agg.families(), FWD) == {"target=coredns-a": 1}


def test_an_outgoing_query_that_does_not_parse_is_a_dns_error() -> None:
    agg = Aggregator({}, classifier=CLASSIFIER)
    d: Any = Dnstap.FromString(message(FORWARDER_QUERY, "web.default.svc.cluster.local"))
    d.message.query_message = d.message.query_message[:-4]  # no QTYPE, no QCLASS
    agg.ingest([d.SerializeToString()])
    assert values(agg.families(), "dnsfleet_dnstap_errors_total")["reason=dns"] == 1


def test_the_per_client_top_is_the_last_complete_minute() -> None:
    leaks = Leaks(CLASSIFIER, top_n=2)
    name = encode_name("www.example.com.default.svc.cluster.local")
    clients = {bytes([10, 0, 0, 1]): 7, bytes([10, 0, 0, 2]): 5, bytes([10, 0, 0, 3]): 1}
    for client, n in clients.items():
        for _ in range(n):
            leaks.nxdomain("t", client, name, 100.0)
    leaks.nxdomain("t", bytes(16), encode_name("web.default.svc.cluster.local"), 100.0)

    def top(now: float) -> dict[str, float]:
        return values(leaks.families(lambda t: {"target": t}, {}, now), TOP)

    assert top(150.0) == {}  # the first minute is not complete yet
    assert top(161.0) == {
        "client=10.0.0.1,target=t": 7,
        "client=10.0.0.2,target=t": 5,
    }
    assert values(leaks.families(lambda t: {"target": t}, {}, 161.0), EXP) == {"target=t": 13}
    assert top(300.0) == {}  # two windows without an expansion: nothing to show


def test_a_top_n_of_zero_keeps_no_client() -> None:
    leaks = Leaks(CLASSIFIER, top_n=0)
    leaks.nxdomain("t", bytes(4), encode_name("a.b.cluster.local"), 1.0)
    assert leaks.clients == {}
    assert leaks.expansions == {"t": 1}


# ------------------------------------------------------------------- settings


def test_the_configuration_reaches_the_settings_in_lower_case(tmp_path: Path) -> None:
    path = tmp_path / "dnsfleet.yml"
    path.write_text(
        "resolv_conf: []\ndnstap:\n  socket: /run/dnstap.sock\n"
        "  cluster_domain: K8S.Example.\n  search_suffixes: [Corp.Example., ec2.internal]\n"
    )
    s = settings_of(config.load(path))
    assert (s.cluster_domain, s.search_suffixes) == (
        "k8s.example",
        ("corp.example", "ec2.internal"),
    )
    path.write_text("resolv_conf: []\ndnstap:\n  socket: /run/dnstap.sock\n")
    s = settings_of(config.load(path))
    assert (s.cluster_domain, s.search_suffixes) == ("cluster.local", ())


def test_settings_carry_the_domains_to_the_ingest_process() -> None:
    s = IngestSettings(
        socket="/run/x.sock", cluster_domain="k8s.example", search_suffixes=("corp.example",)
    )
    assert IngestSettings.decode(s.encode()) == s
    assert IngestSettings.decode(IngestSettings(socket="/s").encode()).cluster_domain == (
        "cluster.local"
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("cluster_domain", ".", "settings.cluster_domain: the root"),
        ("cluster_domain", "a..b", "settings.cluster_domain: empty label"),
        ("search_suffixes", ["ok.example", 3], r"settings.search_suffixes\[1\]: not a string"),
        ("search_suffixes", "corp.example", "settings.search_suffixes: not a list"),
    ],
)
def test_settings_with_a_bad_domain_are_refused(key: str, value: object, message: str) -> None:
    doc = json.loads(IngestSettings(socket="/s").encode())
    doc[key] = value
    with pytest.raises(ChannelError, match=message):
        IngestSettings.decode(json.dumps(doc))
