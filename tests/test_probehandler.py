"""/probe rules without HTTP: probehandler.ProbeHandler decides what may be probed before
any packet is sent (the end-to-end paths are in test_probe_guard.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from dnsfleet.app import Exporter
from dnsfleet.config import Config, Module, Target, parse
from dnsfleet.endpoints.probe import ProbeHandler, Refusal, Refused
from dnsfleet.exposition import render
from dnsfleet.probes import REASONS, ProbeResult, Reason
from dnsfleet.probes.families import probe_exposition, probe_result_families

pytestmark = pytest.mark.unit

CFG = parse(
    {
        "modules": {
            "m": {"query_name": "a.test"},
            "open": {"query_name": "a.test", "allow_query_override": True},
        },
        "targets": [{"address": "192.0.2.1", "module": "m"}],
        "probe_allowlist": ["127.0.0.0/8"],
    },
    source="t.yml",
)


@dataclass
class FakeExporter:
    """Records the probes the handler would send instead of sending them."""

    config: Config = CFG
    sent: list[tuple[Target, Module, str | None, str | None]] = field(default_factory=list)

    def scrape_budget(self, header: float | None) -> float:
        return 1.0

    def max_concurrent_probes(self, cfg: Config | None = None) -> int:
        return (cfg or self.config).limits.max_concurrent_probes

    async def probe_one(
        self,
        target: Target,
        module: Module,
        timeout: float,
        *,
        qname: str | None = None,
        qtype: str | None = None,
    ) -> ProbeResult:
        self.sent.append((target, module, qname, qtype))
        return cast(ProbeResult, "probed")


def handle(params: dict[str, str], repeated: tuple[str, ...] = ()) -> tuple[Any, FakeExporter]:
    exp = FakeExporter()
    handler = ProbeHandler(cast(Exporter, exp))
    return asyncio.run(handler.handle(params, repeated=repeated)), exp


@pytest.mark.parametrize(
    "params,repeated,kind,reason",
    [
        ({"target": "192.0.2.1"}, ("target",), Refusal.INVALID, "repeated parameter: target"),
        ({}, (), Refusal.INVALID, "missing parameter: target"),
        ({"target": "dns.example"}, (), Refusal.INVALID, "invalid target"),
        ({"target": "127.0.0.5"}, (), Refusal.INVALID, "missing parameter: module"),
        ({"target": "127.0.0.5", "module": "x"}, (), Refusal.INVALID, "unknown module 'x'"),
        ({"target": "198.51.100.1", "module": "m"}, (), Refusal.FORBIDDEN, "neither configured"),
        # An IPv4-mapped address is judged as the IPv4 host it reaches.
        ({"target": "::ffff:198.51.100.1", "module": "m"}, (), Refusal.FORBIDDEN, "neither"),
        (
            {"target": "127.0.0.5", "module": "m", "name": "b.test"},
            (),
            Refusal.FORBIDDEN,
            "does not allow overriding",
        ),
    ],
)
def test_refusals_send_nothing(
    params: dict[str, str], repeated: tuple[str, ...], kind: Refusal, reason: str
) -> None:
    got, exp = handle(params, repeated)
    assert isinstance(got, Refused) and got.kind == kind and reason in got.reason
    assert exp.sent == []


def test_allowed_requests() -> None:
    got, exp = handle({"target": "192.0.2.1"})
    assert got == "probed"
    ((target, module, qname, qtype),) = exp.sent
    assert (module.name, target.host, target.port, qname, qtype) == (
        "m",
        "192.0.2.1",
        53,
        None,
        None,
    )
    got, exp = handle(
        {"target": "::ffff:127.0.0.9", "module": "open", "name": "b.test", "type": "aaaa"}
    )
    ((target, module, qname, qtype),) = exp.sent
    assert (target.host, qname, qtype) == ("127.0.0.9", "b.test", "AAAA")


@pytest.mark.parametrize("reason", [None, *REASONS])
@pytest.mark.parametrize("duration", [0.0, 1e-7, 0.000123, 1.5, 2.0, 123456.25])
def test_probe_exposition_fast_path_renders_as_metrics_does(
    reason: Reason | None, duration: float
) -> None:
    """/probe's output comes from a template per reason; it must equal what the family
    renderer (the /metrics path) writes for the same result, to the byte."""
    r = ProbeResult(
        success=reason is None,
        reason=reason,
        duration=duration,
        rcode=-1 if reason else 0,
        answer_rrs=3,
        detail="",
    )
    assert probe_exposition(r) == render(probe_result_families([("", r)]))


def test_a_target_in_use_stays_parsed_while_others_pass_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Least recently used out: a target asked for between every newcomer is parsed once,
    and the caches never hold more than their size."""
    from dnsfleet import config
    from dnsfleet.endpoints import probe as probehandler

    parsed: list[str] = []
    real = config.parse_address

    def counting(raw: str) -> tuple[str, int, int]:
        parsed.append(raw)
        return real(raw)

    monkeypatch.setattr(probehandler, "parse_address", counting)
    monkeypatch.setattr(probehandler, "ADDRESS_CACHE_SIZE", 4)
    exp = FakeExporter()
    handler = ProbeHandler(cast(Exporter, exp))

    async def run() -> None:
        for i in range(20):
            for target in ("127.0.0.5", f"127.0.1.{i}"):
                got: Any = await handler.handle({"target": target, "module": "m"})
                assert got == "probed"
                assert len(handler._parsed) <= 4 and len(handler._ready) <= 4

    asyncio.run(run())
    assert parsed.count("127.0.0.5") == 1
    hot = {id(t) for t, *_ in exp.sent if t.address == "127.0.0.5"}
    assert len(hot) == 1


def test_a_new_configuration_decides_afresh() -> None:
    """What a target and module resolved to is kept for one configuration only: after a
    reload, a target the allowlist no longer holds is refused, and a module's new settings
    are the ones probed with."""
    exp = FakeExporter()
    handler = ProbeHandler(cast(Exporter, exp))
    reloaded = parse(
        {
            "modules": {"m": {"query_name": "b.test"}},
            "targets": [{"address": "192.0.2.1", "module": "m"}],
            "probe_allowlist": ["127.0.0.0/16"],
        },
        source="t.yml",
    )

    async def run() -> list[Any]:
        asks = [{"target": "127.1.0.1", "module": "m"}, {"target": "192.0.2.1"}]
        got = [await handler.handle(p) for p in asks]
        exp.config = reloaded
        return got + [await handler.handle(p) for p in asks]

    got = asyncio.run(run())
    assert got[:2] == ["probed", "probed"]
    assert isinstance(got[2], Refused) and got[2].kind is Refusal.FORBIDDEN
    assert got[3] == "probed"
    assert [m.query_name for _, m, _, _ in exp.sent] == ["a.test", "a.test", "b.test"]
