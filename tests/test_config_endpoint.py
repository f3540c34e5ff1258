"""Endpoint: the one address type of targets and Consul agents, keyed as the capacity
measurements are."""

from __future__ import annotations

import socket

import pytest

from dnsfleet.config import Endpoint, builtin_default, parse

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "key", "sockaddr"),
    [
        ("127.0.0.1", "127.0.0.1:53", ("127.0.0.1", 53)),
        ("127.0.0.1:5353", "127.0.0.1:5353", ("127.0.0.1", 5353)),
        ("::1", "[::1]:53", ("::1", 53, 0, 0)),
        ("[::1]:5353", "[::1]:5353", ("::1", 5353, 0, 0)),
        ("[fe80::1%1]:53", "[fe80::1]:53", ("fe80::1", 53, 0, 1)),
    ],
)
def test_endpoint(text: str, key: str, sockaddr: tuple[object, ...]) -> None:
    ep = Endpoint.parse(text)
    assert ep.key() == key
    assert ep.sockaddr == sockaddr
    assert ep.family == (socket.AF_INET6 if ":" in ep.host else socket.AF_INET)
    assert Endpoint.parse(str(ep)) == ep


def test_targets_and_agents_carry_endpoints() -> None:
    cfg = parse(
        {
            "modules": {"m": {}},
            "targets": [{"address": "[fe80::1%1]:5353", "module": "m"}],
            "consul": {"agents": [{"name": "a", "dns_address": "[::1]"}], "services": ["web"]},
        },
        source="x.yml",
    )
    assert cfg.targets[0].endpoint == Endpoint("fe80::1", 5353, 1)
    assert cfg.targets[0].sockaddr == ("fe80::1", 5353, 0, 1)
    agent = cfg.consul.agents[0]
    assert agent.dns == Endpoint("::1", 8600)
    assert (agent.dns.host, agent.dns.port, agent.dns_sockaddr) == (
        "::1",
        8600,
        ("::1", 8600, 0, 0),
    )
    assert builtin_default(["127.0.0.53"]).targets[0].endpoint.key() == "127.0.0.53:53"
