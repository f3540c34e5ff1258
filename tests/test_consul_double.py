"""The Consul double against the behaviours Consul documents (see tests/harness/consul_double.py for
the sources). If these pass, the collector's tests run against a faithful stand-in."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from tests.harness.consul_double import CRITICAL, WARNING, ConsulDouble, consul_double

pytestmark = pytest.mark.integration


@pytest.fixture
def consul() -> Iterator[ConsulDouble]:
    with consul_double() as c:
        c.add_node("n1", "192.0.2.1")
        c.add_node("n2", "192.0.2.2")
        c.add_node("n3", "192.0.2.3")
        c.add_node("far1", "198.51.100.9", datacenter="dc2")
        c.register("web", "n1", 8080, tags=("primary",))
        c.register("web", "n2", 8080)
        c.register("web", "n3", 8080, status=CRITICAL)
        c.register("api", "n1", 9000, address="192.0.2.65")
        c.register("db", "far1", 5432, datacenter="dc2")
        yield c


def ask(
    c: ConsulDouble, name: str, qtype: str = "A", *, tcp: bool = False, edns: bool = True
) -> dns.message.Message:
    q = dns.message.make_query(name, qtype, use_edns=0 if edns else False)
    if tcp:
        return dns.query.tcp(q, "127.0.0.1", port=c.dns_port, timeout=2)
    return dns.query.udp(q, "127.0.0.1", port=c.dns_port, timeout=2)


def addrs(m: dns.message.Message) -> set[str]:
    return {rd.address for rs in m.answer for rd in rs}


def get(c: ConsulDouble, path: str, token: str | None = None) -> tuple[int, Any, dict[str, str]]:
    req = urllib.request.Request(c.http_url + path)
    if token:
        req.add_header("X-Consul-Token", token)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def test_service_a_answers_only_healthy_instances_with_ttl_0_and_flags(
    consul: ConsulDouble,
) -> None:
    m = ask(consul, "web.service.consul")
    assert addrs(m) == {"192.0.2.1", "192.0.2.2"}  # n3 is critical
    assert all(rs.ttl == 0 for rs in m.answer)
    assert m.flags & dns.flags.QR and m.flags & dns.flags.AA and m.flags & dns.flags.RD
    assert not m.flags & dns.flags.RA


def test_warning_instances_are_served_unless_only_passing() -> None:
    for only_passing, expect in ((False, {"192.0.2.1", "192.0.2.2"}), (True, {"192.0.2.1"})):
        with consul_double(only_passing=only_passing) as c:
            c.add_node("n1", "192.0.2.1")
            c.add_node("n2", "192.0.2.2")
            c.register("web", "n1", 80)
            c.register("web", "n2", 80, status=WARNING)
            assert addrs(ask(c, "web.service.consul")) == expect


def test_answers_are_shuffled() -> None:
    with consul_double() as c:
        for i in range(8):
            c.add_node(f"n{i}", f"10.0.0.{i + 1}")
            c.register("web", f"n{i}", 80)
        orders = {
            tuple(rd.address for rs in ask(c, "web.service.consul").answer for rd in rs)
            for _ in range(10)
        }
        assert len(orders) > 1


def test_tag_and_rfc2782_forms(consul: ConsulDouble) -> None:
    assert addrs(ask(consul, "primary.web.service.consul")) == {"192.0.2.1"}
    srv = ask(consul, "_web._tcp.service.consul", "SRV")  # _tcp: no tag filter
    assert {rd.target.to_text() for rs in srv.answer for rd in rs} == {
        "n1.node.dc1.consul.",
        "n2.node.dc1.consul.",
    }
    srv = ask(consul, "_web._primary.service.consul", "SRV")
    assert {rd.target.to_text() for rs in srv.answer for rd in rs} == {"n1.node.dc1.consul."}


def test_srv_has_the_address_in_additional_and_addr_form_for_own_address(
    consul: ConsulDouble,
) -> None:
    m = ask(consul, "web.service.consul", "SRV")
    srv = [rd for rs in m.answer for rd in rs]
    assert {(rd.priority, rd.weight, rd.port) for rd in srv} == {(1, 1, 8080)}
    extra = {
        rs.name.to_text(): rs[0].address for rs in m.additional if rs.rdtype == dns.rdatatype.A
    }
    assert extra == {"n1.node.dc1.consul.": "192.0.2.1", "n2.node.dc1.consul.": "192.0.2.2"}
    m = ask(consul, "api.service.consul", "SRV")
    target = m.answer[0][0].target.to_text()
    assert target == "c0000241.addr.dc1.consul."  # 192.0.2.65 in hex
    assert addrs(ask(consul, target)) == {"192.0.2.65"}


def test_nxdomain_carries_the_consul_soa(consul: ConsulDouble) -> None:
    for name in ("nope.service.consul", "nope.node.consul", "nope.query.consul", "junk.consul"):
        m = ask(consul, name)
        assert m.rcode() == dns.rcode.NXDOMAIN, name
        soa = m.authority[0]
        assert soa.name.to_text() == "consul." and soa.ttl == 0
        assert soa[0].mname.to_text() == "ns.consul."
        assert soa[0].rname.to_text() == "postmaster.consul."
        assert (soa[0].refresh, soa[0].retry, soa[0].expire, soa[0].minimum) == (
            3600,
            600,
            86400,
            0,
        )


def test_node_lookup_and_datacenter_forms(consul: ConsulDouble) -> None:
    assert addrs(ask(consul, "n2.node.consul")) == {"192.0.2.2"}
    assert addrs(ask(consul, "far1.node.dc2.consul")) == {"198.51.100.9"}
    assert addrs(ask(consul, "db.service.dc2.consul")) == {"198.51.100.9"}
    assert addrs(ask(consul, "db.service.dc2.dc.consul")) == {"198.51.100.9"}
    assert ask(consul, "db.service.consul").rcode() == dns.rcode.NXDOMAIN


def test_prepared_query_with_failover(consul: ConsulDouble) -> None:
    consul.create_query("web-q", "web")
    consul.create_query("db-q", "db", failover_datacenters=("dc2",))
    assert addrs(ask(consul, "web-q.query.consul")) == {"192.0.2.1", "192.0.2.2"}
    # db has no instance in dc1: the query fails over to dc2.
    assert addrs(ask(consul, "db-q.query.consul")) == {"198.51.100.9"}
    srv = ask(consul, "_db-q._tcp.query.consul", "SRV")
    assert srv.answer[0][0].target.to_text() == "far1.node.dc2.consul."
    status, body, _ = get(consul, "/v1/query/db-q/execute")
    assert status == 200 and body["Datacenter"] == "dc2" and body["Failovers"] == 1


def test_udp_trims_silently_tcp_does_not() -> None:
    with consul_double() as c:
        for i in range(100):
            c.add_node(f"n{i}", f"10.1.{i // 250}.{i % 250 + 1}")
            c.register("big", f"n{i}", 80)
        plain = ask(c, "big.service.consul", edns=False)
        assert len(addrs(plain)) == 3 and not plain.flags & dns.flags.TC
        edns = ask(c, "big.service.consul")
        assert 3 < len(addrs(edns)) < 100 and not edns.flags & dns.flags.TC
        assert len(addrs(ask(c, "big.service.consul", tcp=True))) == 100
    with consul_double(enable_truncate=True) as c:
        for i in range(5):
            c.add_node(f"n{i}", f"10.1.0.{i + 1}")
            c.register("big", f"n{i}", 80)
        assert ask(c, "big.service.consul", edns=False).flags & dns.flags.TC


def test_http_health_status_agent_and_queries(consul: ConsulDouble) -> None:
    status, body, _ = get(consul, "/v1/health/service/web")
    assert status == 200 and len(body) == 3
    status, body, _ = get(consul, "/v1/health/service/web?passing")
    assert {e["Node"]["Address"] for e in body} == {"192.0.2.1", "192.0.2.2"}
    status, body, _ = get(consul, "/v1/health/service/web?tag=primary")
    assert [e["Node"]["Node"] for e in body] == ["n1"]
    assert get(consul, "/v1/status/leader")[1] == "127.0.0.1:8300"
    consul.leader = ""
    assert get(consul, "/v1/status/leader")[1] == ""
    assert len(get(consul, "/v1/status/peers")[1]) == 3
    assert get(consul, "/v1/agent/self")[1]["Config"]["Version"] == "1.20.1"
    consul.create_query("q1", "web")
    assert len(get(consul, "/v1/query")[1]) == 1


def test_acl_filters_lists_and_denies_agent_self() -> None:
    with consul_double(token="s3cret") as c:
        c.add_node("n1", "192.0.2.1")
        c.register("web", "n1", 80)
        status, body, headers = get(c, "/v1/health/service/web")
        assert status == 200 and body == []
        assert headers.get("X-Consul-Results-Filtered-By-ACLs") == "true"
        assert get(c, "/v1/agent/self")[0] == 403
        assert len(get(c, "/v1/health/service/web", token="s3cret")[1]) == 1
        assert get(c, "/v1/status/leader")[0] == 200  # status needs no ACL


def test_fault_switch_serves_failed_instances(consul: ConsulDouble) -> None:
    consul.serve_failed = True
    assert addrs(ask(consul, "web.service.consul")) == {"192.0.2.1", "192.0.2.2", "192.0.2.3"}
    _, body, _ = get(consul, "/v1/health/service/web?passing")
    assert len(body) == 2  # the catalog is not fooled
