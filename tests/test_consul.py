"""Consul collector: configuration, pure parts, and the collector against the documented
Consul double (tests/harness/consul_double.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dnsfleet import config as config_mod
from dnsfleet.app import Exporter
from dnsfleet.collectors import COLLECTORS, CollectContext, run_collectors
from dnsfleet.collectors.consul import compare, decode_answer
from dnsfleet.config import Config, ConfigError
from dnsfleet.exposition import Family
from dnsfleet.hostfs import HostFS
from dnsfleet.parsers.consul import parse_health_service
from tests.harness.consul_double import CRITICAL, WARNING, ConsulDouble, consul_double
from tests.harness.messages import without_position
from tests.harness.metrics import Samples, of, promtool_check, value
from tests.harness.servers import scripted
from tests.harness.tools import free_port, num

# --------------------------------------------------------------------------- config


def load(tmp_path: Path, doc: object) -> Config:
    p = tmp_path / "dnsfleet.yml"
    p.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
    return config_mod.load(p)


@pytest.mark.unit
def test_config_defaults_and_forms(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        {
            "consul": {
                "agents": [{"name": "local"}],
                "services": ["web", {"name": "db", "tag": "primary"}],
                "prepared_queries": ["web-nearest"],
            }
        },
    )
    c = cfg.consul
    a = c.agents[0]
    assert (a.dns.host, a.dns.port, a.http_address) == ("127.0.0.1", 8600, "http://127.0.0.1:8500")
    assert [s.label for s in c.services] == ["web", "primary.db"]
    assert c.timeout == 2.0
    out = config_mod.to_yaml(cfg)
    assert "dns_address: 127.0.0.1:8600" in out and "primary" in out


INVALID = [
    (
        {"consul": {"agents": [{"name": "a", "colour": 1}], "services": ["web"]}},
        "consul.agents[0].colour: unknown key (valid keys: a_record_limit, data_dir, "
        "dns_address, dns_only_passing, http_address, name, token_file)",
    ),
    (
        {"consul": {"agents": [{"dns_address": "127.0.0.1"}], "services": ["web"]}},
        'consul.agents[0]: missing required key "name"',
    ),
    (
        {
            "consul": {
                "agents": [{"name": "a", "dns_address": "consul.local:8600"}],
                "services": ["web"],
            }
        },
        'consul.agents[0].dns_address: "consul.local" is not an IP address (names are not '
        "resolved)",
    ),
    (
        {
            "consul": {
                "agents": [{"name": "a", "http_address": "127.0.0.1:8500"}],
                "services": ["web"],
            }
        },
        'consul.agents[0].http_address: "127.0.0.1:8500" is not an http:// or https:// '
        "address with host and optional port, and no path",
    ),
    (
        {"consul": {"agents": [{"name": "a"}, {"name": "a"}], "services": ["web"]}},
        'consul.agents[1]: duplicate agent name "a"',
    ),
    (
        {"consul": {"agents": [{"name": "a"}]}},
        "consul: agents are configured but no services or prepared_queries to watch",
    ),
    (
        {"consul": {"agents": [{"name": "a"}], "services": ["web.prod"]}},
        'consul.services[0]: "web.prod" is not usable as a DNS label in a service name '
        "(letters, digits, - and _; at most 63)",
    ),
    (
        {"consul": {"agents": [{"name": "a"}], "services": [{"name": "web", "tags": ["x"]}]}},
        "consul.services[0].tags: unknown key (valid keys: name, tag)",
    ),
    (
        {"consul": {"agents": [{"name": "a"}], "services": ["web", {"name": "web"}]}},
        'consul.services[1]: service "web" is listed twice',
    ),
    (
        {"consul": {"agents": [{"name": "a"}], "services": ["web"], "timeout": "2x"}},
        'consul.timeout: invalid duration "2x" (use a number and a unit: 500ms, 2s, 1m)',
    ),
    (
        {"consul": {"agents": [{"name": "a", "a_record_limit": 0}], "services": ["web"]}},
        "consul.agents[0].a_record_limit: must be at least 1, got 0",
    ),
    (
        {"consul": {"agent": []}},
        "consul.agent: unknown key (valid keys: agents, prepared_queries, services, timeout)",
    ),
]


@pytest.mark.unit
@pytest.mark.parametrize(("doc", "message"), INVALID, ids=[m[:40] for _, m in INVALID])
def test_invalid_config_messages(tmp_path: Path, doc: object, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, doc)
    assert without_position(str(e.value), tmp_path / "dnsfleet.yml") == (
        f"{tmp_path / 'dnsfleet.yml'}: {message}"
    )


# --------------------------------------------------------------------------- pure parts


@pytest.mark.unit
def test_compare_stale_missing_and_limits() -> None:
    health = parse_health_service(
        '[{"Node":{"Node":"a","Address":"192.0.2.1"},"Service":{"Address":"","Port":1},'
        '"Checks":[{"Status":"passing"}]},'
        '{"Node":{"Node":"b","Address":"192.0.2.2"},"Service":{"Address":"","Port":1},'
        '"Checks":[{"Status":"warning"}]},'
        '{"Node":{"Node":"c","Address":"192.0.2.3"},"Service":{"Address":"192.0.2.99",'
        '"Port":1},"Checks":[{"Status":"passing"},{"Status":"critical"}]}]'
    )
    assert len(health.passing) == 1
    ok = frozenset({"192.0.2.1", "192.0.2.2"})
    c = compare(ok, health, only_passing=False, a_record_limit=None)
    assert (c.stale, c.missing) == (0, 0)
    c = compare(ok | {"192.0.2.99"}, health, only_passing=False, a_record_limit=None)
    assert (c.stale, c.missing) == (1, 0)
    c = compare(ok, health, only_passing=True, a_record_limit=None)
    assert (c.stale, c.missing) == (1, 0)  # warning served despite only_passing
    c = compare(frozenset({"192.0.2.1"}), health, only_passing=False, a_record_limit=None)
    assert (c.stale, c.missing) == (0, 1)
    c = compare(frozenset({"192.0.2.1"}), health, only_passing=False, a_record_limit=1)
    assert (c.stale, c.missing) == (0, 0)


@pytest.mark.unit
def test_decode_answer_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="undecodable"):
        decode_answer(b"\x00\x01\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\x03abc", 1)


# --------------------------------------------------------------------------- against the double


@pytest.fixture
def consul() -> Iterator[ConsulDouble]:
    with consul_double() as c:
        for i in range(1, 4):
            c.add_node(f"n{i}", f"10.0.0.{i}")
            c.register("web", f"n{i}", 8080, tags=("primary",) if i == 1 else ())
        c.add_node("far1", "198.51.100.9", datacenter="dc2")
        c.register("db", "far1", 5432, datacenter="dc2")
        c.create_query("db-q", "db", failover_datacenters=("dc2",))
        c.create_query("web-q", "web")
        yield c


def make_config(
    c: ConsulDouble, *, services: list[object] | None = None, **agent: object
) -> Config:
    doc = {
        "consul": {
            "agents": [
                {"name": "local", "dns_address": c.dns_address, "http_address": c.http_url, **agent}
            ],
            "services": services
            if services is not None
            else ["web", {"name": "web", "tag": "primary"}],
            "prepared_queries": ["db-q", "web-q"],
            # The double answers from a Python thread: on a busy machine an answer can take
            # more than a second (a 1 s timeout failed under a parallel test run).
            "timeout": "8s",
        }
    }
    return config_mod.parse(doc, source="test.yml")


def collect(cfg: Config, fs: HostFS | None = None) -> Samples:
    async def run() -> list[Family]:
        loop = asyncio.get_running_loop()
        ctx = CollectContext(fs=fs or HostFS(), config=cfg, deadline=loop.time() + 10, state={})
        return await run_collectors(ctx, {"consul": COLLECTORS["consul"]})

    return of(asyncio.run(run()))


def v(m: Samples, name: str, **labels: str) -> float | None:
    return value(m, name, **{"agent": "local", **labels})


@pytest.mark.integration
def test_healthy_cluster(consul: ConsulDouble) -> None:
    m = collect(make_config(consul))
    assert value(m, "dnsfleet_collector_success", collector="consul") == 1
    assert v(m, "dnsfleet_consul_up") == 1
    for q in (
        "web.service.consul A",
        "web.service.consul SRV",
        "primary.web.service.consul A",
        "db-q.query.consul A",
        "web-q.query.consul A",
    ):
        assert v(m, "dnsfleet_consul_dns_probe_success", query=q) == 1, q
        assert v(m, "dnsfleet_consul_dns_latency_seconds", query=q) is not None
    assert v(m, "dnsfleet_consul_dns_answers", service="web") == 3
    assert v(m, "dnsfleet_consul_dns_answers", service="primary.web") == 1
    assert v(m, "dnsfleet_consul_healthy_instances", service="web") == 3
    assert v(m, "dnsfleet_consul_dns_stale_answers", service="web") == 0
    assert v(m, "dnsfleet_consul_dns_missing_instances", service="web") == 0
    assert v(m, "dnsfleet_consul_dns_query_answers", query="web.service.consul SRV") == 3
    # The failure gauge has a series only while a lookup fails: none for a healthy agent.
    assert [k for k in m if k[0] == "dnsfleet_consul_dns_probe_failure"] == []
    # The prepared query fails over to dc2 and still answers.
    assert v(m, "dnsfleet_consul_dns_query_answers", query="db-q.query.consul A") == 1
    assert v(m, "dnsfleet_consul_prepared_queries") == 2
    assert v(m, "dnsfleet_consul_leader_present") == 1
    assert v(m, "dnsfleet_consul_raft_peers") == 3
    assert (
        v(
            m,
            "dnsfleet_consul_agent_info",
            version="1.20.1",
            datacenter="dc1",
            node="double",
            server="true",
        )
        == 1
    )
    assert v(m, "dnsfleet_consul_raft_db_bytes") is None  # no data_dir configured


@pytest.mark.integration
def test_critical_instance_leaves_dns_and_catalog_together(consul: ConsulDouble) -> None:
    consul.set_status("web-n2-8080", CRITICAL)
    m = collect(make_config(consul))
    assert v(m, "dnsfleet_consul_dns_answers", service="web") == 2
    assert v(m, "dnsfleet_consul_healthy_instances", service="web") == 2
    assert v(m, "dnsfleet_consul_dns_stale_answers", service="web") == 0
    assert v(m, "dnsfleet_consul_dns_missing_instances", service="web") == 0


@pytest.mark.integration
def test_warning_instance_in_dns_is_no_mismatch(consul: ConsulDouble) -> None:
    consul.set_status("web-n2-8080", WARNING)
    m = collect(make_config(consul))
    assert v(m, "dnsfleet_consul_healthy_instances", service="web") == 2
    assert v(m, "dnsfleet_consul_dns_answers", service="web") == 3
    assert v(m, "dnsfleet_consul_dns_stale_answers", service="web") == 0


@pytest.mark.integration
def test_dns_serving_a_failed_instance_is_a_mismatch(consul: ConsulDouble) -> None:
    consul.set_status("web-n2-8080", CRITICAL)
    consul.serve_failed = True
    m = collect(make_config(consul))
    assert v(m, "dnsfleet_consul_dns_probe_success", query="web.service.consul A") == 1
    assert v(m, "dnsfleet_consul_dns_answers", service="web") == 3
    assert v(m, "dnsfleet_consul_healthy_instances", service="web") == 2
    assert v(m, "dnsfleet_consul_dns_stale_answers", service="web") == 1


@pytest.mark.integration
def test_large_service_udp_trim_is_not_a_mismatch() -> None:
    with consul_double() as c:
        for i in range(100):
            c.add_node(f"n{i}", f"10.1.0.{i + 1}")
            c.register("big", f"n{i}", 80)
        m = collect(make_config(c, services=["big"]))
        assert v(m, "dnsfleet_consul_healthy_instances", service="big") == 100
        # UDP gave fewer (trimmed without TC); the TCP re-ask saw all of them.
        assert num(v(m, "dnsfleet_consul_dns_query_answers", query="big.service.consul A")) < 100
        assert v(m, "dnsfleet_consul_dns_answers", service="big") == 100
        assert v(m, "dnsfleet_consul_dns_missing_instances", service="big") == 0


@pytest.mark.integration
def test_leader_loss(consul: ConsulDouble) -> None:
    consul.leader = ""
    m = collect(make_config(consul))
    assert v(m, "dnsfleet_consul_up") == 1
    assert v(m, "dnsfleet_consul_leader_present") == 0


@pytest.mark.integration
def test_large_raft_db(consul: ConsulDouble, tmp_path: Path) -> None:
    data = tmp_path / "host" / "opt" / "consul"
    (data / "raft").mkdir(parents=True)
    size = 3 * 1024**3
    with open(data / "raft" / "raft.db", "wb") as f:
        f.truncate(size)  # sparse: 3 GiB apparent, no blocks
    fs = HostFS(rootfs=tmp_path / "host")
    m = collect(make_config(consul, data_dir="/opt/consul"), fs)
    assert v(m, "dnsfleet_consul_raft_db_bytes") == size


@pytest.mark.integration
def test_unreadable_data_dir_is_no_failed_scrape(consul: ConsulDouble, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root reads anything: make the path component a file instead.
        (tmp_path / "opt").write_text("not a directory")
    m = collect(make_config(consul, data_dir="/opt/consul"), HostFS(rootfs=tmp_path))
    assert value(m, "dnsfleet_collector_success", collector="consul") == 1
    assert v(m, "dnsfleet_consul_raft_db_bytes") is None
    assert v(m, "dnsfleet_consul_up") == 1


@pytest.mark.integration
def test_http_down(consul: ConsulDouble) -> None:
    consul.stop_http()
    m = collect(make_config(consul))
    assert value(m, "dnsfleet_collector_success", collector="consul") == 1
    assert v(m, "dnsfleet_consul_up") == 0
    assert v(m, "dnsfleet_consul_dns_probe_success", query="web.service.consul A") == 1
    assert v(m, "dnsfleet_consul_leader_present") is None
    assert v(m, "dnsfleet_consul_healthy_instances", service="web") is None
    assert v(m, "dnsfleet_consul_dns_stale_answers", service="web") is None


@pytest.mark.integration
def test_dns_down(consul: ConsulDouble) -> None:
    consul.stop_dns()
    m = collect(make_config(consul))
    q = "web.service.consul A"
    assert v(m, "dnsfleet_consul_dns_probe_success", query=q) == 0
    assert v(m, "dnsfleet_consul_dns_probe_failure", query=q, reason="refused") == 1
    assert v(m, "dnsfleet_consul_dns_probe_failure", query=q, reason="timeout") is None
    assert v(m, "dnsfleet_consul_up") == 1
    assert v(m, "dnsfleet_consul_dns_stale_answers", service="web") is None


@pytest.mark.integration
def test_garbage_dns_is_malformed(consul: ConsulDouble) -> None:
    def handler(q: bytes) -> list[bytes]:
        # Header of a valid response to the query, then an answer RR whose A rdata has
        # 3 octets: the core walker accepts the framing, dnspython refuses the record.
        head = q[:2] + b"\x84\x00" + b"\x00\x01\x00\x01\x00\x00\x00\x00"
        question = q[12 : 12 + q[12:].index(b"\x00") + 5]
        rr = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x00\x00\x03\x0a\x00\x00"
        return [head + question + rr]

    with scripted(handler) as s:
        cfg = config_mod.parse(
            {
                "consul": {
                    "agents": [
                        {"name": "local", "dns_address": s.address, "http_address": consul.http_url}
                    ],
                    "services": ["web"],
                    "timeout": "1s",
                }
            },
            source="t",
        )
        m = collect(cfg)
    q = "web.service.consul A"
    assert v(m, "dnsfleet_consul_dns_probe_success", query=q) == 0
    assert v(m, "dnsfleet_consul_dns_probe_failure", query=q, reason="malformed") == 1


@pytest.mark.integration
def test_acl_token_from_file(tmp_path: Path) -> None:
    with consul_double(token="s3cret") as c:
        c.add_node("n1", "192.0.2.1")
        c.register("web", "n1", 80)
        # Without a token the health list comes back filtered: no catalog, no comparison.
        m = collect(make_config(c, services=["web"]))
        assert v(m, "dnsfleet_consul_up") == 1
        assert v(m, "dnsfleet_consul_healthy_instances", service="web") is None
        assert v(m, "dnsfleet_consul_dns_stale_answers", service="web") is None
        token = tmp_path / "token"
        token.write_text("s3cret\n")
        m = collect(make_config(c, services=["web"], token_file=str(token)))
        assert v(m, "dnsfleet_consul_healthy_instances", service="web") == 1
        assert v(m, "dnsfleet_consul_dns_stale_answers", service="web") == 0
        assert (
            v(
                m,
                "dnsfleet_consul_agent_info",
                version="1.20.1",
                datacenter="dc1",
                node="double",
                server="true",
            )
            == 1
        )
        m = collect(make_config(c, services=["web"], token_file=str(tmp_path / "absent")))
        assert v(m, "dnsfleet_consul_up") == 0


@pytest.mark.integration
def test_token_never_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with consul_double(token="s3cret-token-value") as c:
        c.add_node("n1", "192.0.2.1")
        c.register("web", "n1", 80)
        token = tmp_path / "token"
        token.write_text("wrong-token-value")
        caplog.set_level("DEBUG")
        collect(make_config(c, services=["web"], token_file=str(token)))
    assert "filtered by ACLs" in caplog.text
    assert "token-value" not in caplog.text


@pytest.mark.integration
def test_deadline_bounds_a_silent_agent(blackhole: object) -> None:
    port = free_port()  # nothing listens for HTTP; DNS goes to a blackhole
    cfg = config_mod.parse(
        {
            "consul": {
                "agents": [
                    {
                        "name": "local",
                        "dns_address": blackhole.address,  # type: ignore[attr-defined]
                        "http_address": f"http://127.0.0.1:{port}",
                    }
                ],
                "services": ["web"],
                "timeout": "0.3s",
            }
        },
        source="t",
    )
    m = collect(cfg)
    assert value(m, "dnsfleet_collector_success", collector="consul") == 1
    q = "web.service.consul A"
    assert v(m, "dnsfleet_consul_dns_probe_failure", query=q, reason="timeout") == 1
    assert v(m, "dnsfleet_consul_up") == 0


@pytest.mark.integration
def test_exporter_scrape_passes_promtool(consul: ConsulDouble, tmp_path: Path) -> None:
    p = tmp_path / "dnsfleet.yml"
    p.write_text(
        yaml.safe_dump(
            {
                "resolv_conf": [],
                "consul": {
                    "agents": [
                        {
                            "name": "local",
                            "dns_address": consul.dns_address,
                            "http_address": consul.http_url,
                        }
                    ],
                    "services": ["web"],
                    "prepared_queries": ["web-q"],
                },
            }
        )
    )
    exp = Exporter(fs=HostFS(), config_file=str(p))
    text = asyncio.run(exp.scrape(5.0)).decode()
    assert 'dnsfleet_consul_up{agent="local"} 1' in text
    out = promtool_check(text)
    assert out.returncode == 0, out.stdout + out.stderr
