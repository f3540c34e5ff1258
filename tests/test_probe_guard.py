"""/probe is not an open reflector or SSRF hop: configured targets and probe_allowlist only,
no name resolution, no query overrides unless the module allows them, bounded input.

The exporter's real aiohttp app on a loopback port, driven by a real HTTP client."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from dnsfleet.app import Exporter
from dnsfleet.endpoints.router import make_router
from dnsfleet.hostfs import HostFS
from dnsfleet.web.server import serve
from tests.harness.servers import Blackhole, answer, scripted

pytestmark = pytest.mark.integration

GOOD = "www.example.test. 60 IN A 192.0.2.10"


@pytest.fixture(scope="module")
def peer() -> Iterator[int]:
    """A scripted resolver on 127.0.0.1 that answers everything, counting queries."""
    with scripted(lambda q: [answer(q, GOOD)]) as s:
        yield s.port


def make_config(tmp: Path, port: int, **extra: Any) -> Path:
    doc = {
        "resolv_conf": [],  # never probe this machine's own resolver
        "modules": {
            "fixed": {"query_name": "www.example.test.", "query_type": "A", "timeout": "500ms"},
            "open": {
                "query_name": "www.example.test.",
                "query_type": "A",
                "timeout": "500ms",
                "allow_query_override": True,
            },
        },
        "targets": [
            {"address": f"127.0.0.1:{port}", "module": "fixed"},
            {"address": "[fe80::1%lo]:53", "module": "fixed"},
        ],
        "probe_allowlist": ["127.0.0.0/24"],
        **extra,
    }
    p = tmp / "dnsfleet.yml"
    p.write_text(yaml.safe_dump(doc))
    return p


Get = Callable[..., Any]


@pytest.fixture
def client_for(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Yields ``run(port, scenario, **config)``: runs ``scenario(get)`` against a live app,
    ``get(query) -> (status, text)``."""

    def run(port: int, scenario: Callable[[Get], Any], **extra: Any) -> Any:
        async def go() -> Any:
            exp = Exporter(fs=HostFS(), config_file=str(make_config(tmp_path, port, **extra)))
            server = await serve(make_router(exp), "127.0.0.1", 0)
            base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/probe"
            try:
                async with aiohttp.ClientSession() as client:

                    async def get(query: str) -> tuple[int, str]:
                        url = base + "?" + query if query else base
                        async with client.get(url) as r:
                            return r.status, await r.text()

                    return await scenario(get)
            finally:
                server.close()
                await server.wait_closed()

        return asyncio.run(go())

    yield run


def statuses(
    client_for: Callable[..., Any], port: int, queries: list[str], **extra: Any
) -> list[tuple[int, str]]:
    async def scenario(get: Get) -> list[tuple[int, str]]:
        return [await get(q) for q in queries]

    out: list[tuple[int, str]] = client_for(port, scenario, **extra)
    return out


def test_configured_and_allowlisted_targets(client_for: Any, peer: int) -> None:
    got = statuses(
        client_for,
        peer,
        [
            f"target=127.0.0.1:{peer}",  # configured: module from config
            f"target=127.0.0.1:{peer}&module=fixed",
            f"target=[::ffff:127.0.0.1]:{peer}&module=fixed",  # v4-mapped: same host
        ],
    )
    for status, text in got:
        assert status == 200, text
        assert "dnsfleet_probe_success 1" in text


@pytest.mark.parametrize(
    ("query", "status", "reason"),
    [
        # Outside the allowlist, whichever way the address is spelled.
        ("target=192.0.2.1&module=fixed", 403, "neither configured nor inside probe_allowlist"),
        ("target=127.0.1.1&module=fixed", 403, "neither configured nor inside probe_allowlist"),
        ("target=[::1]:53&module=fixed", 403, "neither configured nor inside probe_allowlist"),
        ("target=::ffff:192.0.2.1&module=fixed", 403, "neither configured"),
        ("target=::ffff:c000:201&module=fixed", 403, "neither configured"),
        ("target=[fe80::1%25lo]:54&module=fixed", 403, "neither configured"),  # other port
        ("target=[fe80::2%25lo]:53&module=fixed", 403, "neither configured"),
        # The configured fe80::1 is on lo; the same address on another link is another host.
        ("target=[fe80::1%2542]:53&module=fixed", 403, "neither configured"),
        # Names are never resolved.
        ("target=localhost&module=fixed", 400, '"localhost" is not an IP address'),
        ("target=localhost:53&module=fixed", 400, "is not an IP address (names are not resolved)"),
        ("target=resolver.example.test&module=fixed", 400, "is not an IP address"),
        ("target=0x7f000001&module=fixed", 400, "is not an IP address"),
        ("target=2130706433&module=fixed", 400, "is not an IP address"),
        ("target=127.1&module=fixed", 400, "is not an IP address"),
        ("target=0177.0.0.1&module=fixed", 400, "is not an IP address"),
        # Ports and zones.
        ("target=127.0.0.1:0&module=fixed", 400, 'invalid port "0"'),
        ("target=127.0.0.1:65536&module=fixed", 400, 'invalid port "65536"'),
        ("target=127.0.0.1:-1&module=fixed", 400, 'invalid port "-1"'),
        ("target=127.0.0.1:53:53&module=fixed", 400, "is not an IP address"),
        ("target=[::1]x&module=fixed", 400, 'unexpected "x" after ]'),
        ("target=[::1&module=fixed", 400, "unbalanced ["),
        ("target=127.0.0.1%25lo&module=fixed", 400, "a %zone is only valid on IPv6 addresses"),
        ("target=[fe80::1%25nosuchif0]:53&module=fixed", 400, 'unknown interface "nosuchif0"'),
        # Parameters.
        ("", 400, "missing parameter: target"),
        ("target=", 400, "missing parameter: target"),
        ("target=127.0.0.2", 400, "missing parameter: module"),
        ("target=127.0.0.2&module=nope", 400, "unknown module 'nope'"),
        ("target=127.0.0.2&module=fixed&target=192.0.2.1", 400, "repeated parameter: target"),
        ("target=127.0.0.2&module=fixed&module=open", 400, "repeated parameter: module"),
        # Query overrides only where the module allows them.
        ("target=127.0.0.2&module=fixed&name=victim.test", 403, "does not allow overriding"),
        ("target=127.0.0.2&module=fixed&type=ANY", 403, "does not allow overriding"),
        ("target=127.0.0.2&module=open&name=" + "a" * 64 + ".test", 400, "invalid query: "),
        ("target=127.0.0.2&module=open&name=" + ("a" * 60 + ".") * 5, 400, "invalid query: "),
        ("target=127.0.0.2&module=open&name=a..b", 400, "invalid query: "),
        ("target=127.0.0.2&module=open&type=BOGUS", 400, "invalid query: "),
    ],
)
def test_refusals(client_for: Any, peer: int, query: str, status: int, reason: str) -> None:
    ((got, text),) = statuses(client_for, peer, [query])
    assert got == status, text
    assert reason in text


def test_refused_requests_send_no_packet(client_for: Any, tmp_path: Path) -> None:
    """A refused /probe must not reach the network at all."""
    with scripted(lambda q: [answer(q, GOOD)]) as s:
        # The scripted peer is on 127.0.0.1 but the allowlist is elsewhere and the
        # configured target is another port: nothing may reach it.
        statuses(
            client_for,
            s.port + 1 if s.port < 65535 else s.port - 1,
            [
                f"target=127.0.0.1:{s.port}&module=fixed",
                f"target=[::ffff:127.0.0.1]:{s.port}&module=fixed",
            ],
            probe_allowlist=["192.0.2.0/24"],
        )
        assert s.received == 0


def test_names_are_not_resolved(
    client_for: Any, peer: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_up: list[object] = []
    real = socket.getaddrinfo

    def spy(host: Any, *a: Any, **kw: Any) -> Any:
        looked_up.append(host)
        return real(host, *a, **kw)

    async def scenario(get: Get) -> list[tuple[int, str]]:
        monkeypatch.setattr(socket, "getaddrinfo", spy)
        monkeypatch.setattr(socket, "gethostbyname", lambda h: looked_up.append(h) or "127.0.0.1")  # type: ignore[func-returns-value]
        return [
            await get("target=localhost&module=fixed"),
            await get("target=dns.example.test:53&module=fixed"),
        ]

    got = client_for(peer, scenario)
    assert [s for s, _ in got] == [400, 400]
    assert looked_up == []


def test_override_allowed_by_module(client_for: Any, peer: int) -> None:
    ((status, text),) = statuses(
        client_for, peer, [f"target=127.0.0.1:{peer}&module=open&name=other.example.test&type=txt"]
    )
    assert status == 200 and "dnsfleet_probe_dns_rcode 0" in text


def test_oversized_request_is_refused(client_for: Any, peer: int) -> None:
    got = statuses(client_for, peer, ["target=127.0.0.1&module=fixed&pad=" + "x" * 20000])
    assert got[0] == (431, "request head too large\n")


def test_concurrent_probe_requests_are_bounded(client_for: Any) -> None:
    """A flood of /probe requests cannot hold more sockets than
    limits.max_concurrent_probes: the excess gets 503 at once."""
    hole = Blackhole()
    try:

        async def scenario(get: Get) -> list[int]:
            results = await asyncio.gather(
                *(get(f"target=127.0.0.1:{hole.port}&module=fixed") for _ in range(12))
            )
            return sorted(s for s, _ in results)

        got = client_for(hole.port, scenario, limits={"max_concurrent_probes": 4})
    finally:
        hole.close()
    assert got == [200] * 4 + [503] * 8
