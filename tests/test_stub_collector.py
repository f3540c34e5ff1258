"""The stub collector against real loopback servers: unbound (conftest), a blackhole, a
closed port and a scripted SERVFAIL peer. resolv.conf cannot name a port, so the files
name 127.0.0.11.. and the test maps each to a server's real loopback port (the collector's
``resolve`` seam); tests/test_stub_oracle.py runs the exporter itself against port 53 in a
network namespace."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from dnsfleet.collectors.stub import SockAddr, assess, classify, families
from dnsfleet.config import ConfigError, ResolvConfWatch, builtin_default, parse
from dnsfleet.exposition import Family, render
from dnsfleet.hostfs import HostFS
from dnsfleet.parsers.resolvconf import Nameserver
from dnsfleet.probes import Reason, failed
from dnsfleet.stubmodel import ServerState
from tests.harness.servers import Blackhole, ScriptedServer, Unbound, answer, scripted
from tests.harness.tools import free_port


def value(fams: list[Family], name: str, **labels: str) -> float | None:
    fam = next(f for f in fams if f.name == name)
    return fam.value(labels)


@pytest.fixture
def servfail() -> Iterator[ScriptedServer]:
    with scripted(lambda q: [answer(q, rcode=2)]) as s:
        yield s


@pytest.mark.integration
def test_collector_classifies_and_models(
    tmp_path: Path, unbound: Unbound, blackhole: Blackhole, servfail: ScriptedServer
) -> None:
    closed = free_port()
    ports = {
        "127.0.0.11": unbound.port,
        "127.0.0.12": blackhole.port,
        "127.0.0.13": closed,
        "127.0.0.14": servfail.port,
    }

    def resolve(ns: Nameserver) -> tuple[SockAddr, socket.AddressFamily]:
        return ("127.0.0.1", ports[ns.address]), socket.AF_INET

    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "resolv.conf").write_text(
        "nameserver 127.0.0.12\nnameserver 127.0.0.11\noptions timeout:2 attempts:1\n"
    )
    (etc / "dead.conf").write_text(
        "nameserver 127.0.0.13\nnameserver 127.0.0.14\nnameserver 127.0.0.12\n"
        "nameserver 127.0.0.11\noptions timeout:1 bogus\n"
    )
    watches = tuple(
        ResolvConfWatch(path=p, query_name="a.local.test.", query_type="A", probe_timeout=0.3)
        for p in ("/etc/resolv.conf", "/etc/dead.conf", "/etc/missing.conf")
    )

    async def run() -> list[Family]:
        loop = asyncio.get_running_loop()
        reports = await assess(
            HostFS(rootfs=tmp_path), watches, deadline=loop.time() + 5, resolve=resolve
        )
        return families(reports)

    fams = asyncio.run(run())
    main = {"resolv_conf": "/etc/resolv.conf"}
    assert value(fams, "dnsfleet_stub_nameservers", **main) == 2
    assert value(fams, "dnsfleet_stub_timeout_seconds", **main) == 2
    assert value(fams, "dnsfleet_stub_attempts", **main) == 1
    assert (
        value(fams, "dnsfleet_stub_nameserver_up", **main, nameserver="127.0.0.12", position="0")
        == 0
    )
    assert (
        value(
            fams,
            "dnsfleet_stub_nameserver_failure",
            **main,
            nameserver="127.0.0.12",
            position="0",
            reason="silent",
        )
        == 1
    )
    assert (
        value(
            fams,
            "dnsfleet_stub_nameserver_failure",
            **main,
            nameserver="127.0.0.12",
            position="0",
            reason="refused",
        )
        == 0
    )
    assert (
        value(fams, "dnsfleet_stub_nameserver_up", **main, nameserver="127.0.0.11", position="1")
        == 1
    )
    assert value(fams, "dnsfleet_stub_expected_delay_seconds", **main, libc="glibc") == 2
    assert value(fams, "dnsfleet_stub_expected_delay_seconds", **main, libc="musl") == 0
    assert value(fams, "dnsfleet_stub_resolution_failing", **main, libc="glibc") == 0
    assert value(fams, "dnsfleet_stub_resolv_conf_problems", **main) == 0

    dead = {"resolv_conf": "/etc/dead.conf"}
    assert value(fams, "dnsfleet_stub_nameservers", **dead) == 3  # the fourth is unused
    for pos, ns, reason in (
        ("0", "127.0.0.13", "refused"),
        ("1", "127.0.0.14", "servfail"),
        ("2", "127.0.0.12", "silent"),
    ):
        assert (
            value(
                fams,
                "dnsfleet_stub_nameserver_failure",
                **dead,
                nameserver=ns,
                position=pos,
                reason=reason,
            )
            == 1
        ), (ns, reason)
    assert value(fams, "dnsfleet_stub_resolution_failing", **dead, libc="glibc") == 1
    assert value(fams, "dnsfleet_stub_resolution_failing", **dead, libc="musl") == 1
    # The blackhole (index 2 of 3, timeout 1) costs (1 << 2) / 3 = 1 s in each of the 2
    # default rounds; refused and SERVFAIL add what they took to show, capped by their
    # own 1 s waits (bounds from the model, not timing thresholds).
    glibc_delay = value(fams, "dnsfleet_stub_expected_delay_seconds", **dead, libc="glibc")
    assert glibc_delay is not None and 2.0 <= glibc_delay <= 6.0
    assert value(fams, "dnsfleet_stub_expected_delay_seconds", **dead, libc="musl") == 1
    assert value(fams, "dnsfleet_stub_resolv_conf_problems", **dead) == 2

    missing = {"resolv_conf": "/etc/missing.conf"}
    assert value(fams, "dnsfleet_stub_resolv_conf_readable", **missing) == 0
    assert value(fams, "dnsfleet_stub_resolv_conf_read_failure", **missing, reason="missing") == 1
    assert value(fams, "dnsfleet_stub_nameservers", **missing) is None
    assert "dnsfleet_stub_expected_delay_seconds" in render(fams)


@pytest.mark.unit
def test_classify_network_failures() -> None:
    assert classify(failed(Reason.TIMEOUT, 1.0, ""), transport="udp").state is ServerState.SILENT
    assert classify(failed(Reason.MALFORMED, 0.1, ""), transport="udp").state is ServerState.SILENT
    assert classify(failed(Reason.MALFORMED, 0.1, ""), transport="tcp").state is ServerState.ERROR
    out = classify(failed(Reason.UNREACHABLE, 0.2, ""), transport="udp")
    assert (out.state, out.duration) == (ServerState.UNREACHABLE, 0.2)


@pytest.mark.unit
def test_config_resolv_conf_section() -> None:
    assert [w.path for w in builtin_default([]).resolv_conf] == ["/etc/resolv.conf"]
    assert [w.path for w in parse({"targets": []}, source="t.yml").resolv_conf] == [
        "/etc/resolv.conf"
    ]
    assert parse({"resolv_conf": []}, source="t.yml").resolv_conf == ()
    cfg = parse(
        {
            "resolv_conf": [
                "/etc/resolv.conf",
                {
                    "path": "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/x/resolv.conf",
                    "query_name": "kubernetes.default.svc.cluster.local.",
                    "query_type": "a",
                    "probe_timeout": "500ms",
                },
            ]
        },
        source="t.yml",
    )
    assert cfg.resolv_conf[1].query_type == "A"
    assert cfg.resolv_conf[1].probe_timeout == 0.5


@pytest.mark.unit
@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"resolv_conf": ["etc/resolv.conf"]},
            't.yml: resolv_conf[0]: path must be absolute, got "etc/resolv.conf"',
        ),
        ({"resolv_conf": ["/a", "/a"]}, 't.yml: resolv_conf[1]: duplicate resolv.conf "/a"'),
        (
            {"resolv_conf": [{"path": "/a", "qtype": "A"}]},
            "t.yml: resolv_conf[0].qtype: unknown key (valid keys: path, probe_timeout, "
            "query_name, query_type)",
        ),
        (
            {"resolv_conf": [{"path": "/a", "query_type": "BOGUS"}]},
            't.yml: resolv_conf[0].query_type: unknown query type "BOGUS"',
        ),
        (
            {"resolv_conf": [{"query_name": "x."}]},
            't.yml: resolv_conf[0]: missing required key "path"',
        ),
        (
            {"resolv_conf": "/etc/resolv.conf"},
            't.yml: resolv_conf: expected a list, got string "/etc/resolv.conf"',
        ),
    ],
)
def test_config_errors(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse(doc, source="t.yml")
    assert str(e.value) == message
