"""``/probe?target=...&module=...``: the rules of an on-demand probe, kept out of the HTTP
layer as blackbox_exporter keeps them in ``prober/handler.go``. The web layer passes the
query parameters in and maps a refusal to its status code; everything about which target
may be probed, with which module and query, and how many at once, is decided here."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Set
from dataclasses import dataclass

import dns.exception

from dnsfleet.app import Exporter
from dnsfleet.config import Config, Module, Target, parse_address
from dnsfleet.exposition import render
from dnsfleet.prober import probe_result_families
from dnsfleet.probes import REASONS, ProbeResult


class ProbeRefused(Exception):
    """The request is not probed: ``status`` (400, 403, 503) and the reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ProbeRequest:
    target: Target
    module: Module
    qname: str | None
    qtype: str | None


def parse_request(cfg: Config, params: Mapping[str, str], repeated: Set[str]) -> ProbeRequest:
    """Pure: which target, module and query a request asks for, if the config allows it.
    Raises ProbeRefused."""
    if repeated:
        # Two targets in one URL: a proxy and the exporter might each honour another.
        raise ProbeRefused(400, f"repeated parameter: {', '.join(sorted(repeated))}")
    raw_target = params.get("target", "")
    if not raw_target:
        raise ProbeRefused(400, "missing parameter: target")
    try:
        host, port, scope = parse_address(raw_target)
    except ValueError as e:
        raise ProbeRefused(400, f"invalid target: {e}") from None
    ip = ipaddress.ip_address(host)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        # ::ffff:a.b.c.d reaches the IPv4 host: judge it as that host, so an IPv6 entry
        # in the allowlist cannot open the IPv4 space (or a v4 target hide behind v6).
        ip = ip.ipv4_mapped
        host, scope = str(ip), 0
    configured = [t for t in cfg.targets if (t.host, t.port, t.scope_id) == (host, port, scope)]
    module_name = params.get("module") or (configured[0].module if configured else "")
    if not module_name:
        raise ProbeRefused(400, "missing parameter: module")
    module = cfg.modules.get(module_name)
    if module is None:
        raise ProbeRefused(400, f"unknown module {module_name!r}")
    if not configured and not any(ip in net for net in cfg.probe_allowlist):
        raise ProbeRefused(403, f"target {raw_target} is neither configured nor inside "
                                "probe_allowlist")
    qname, qtype = params.get("name"), params.get("type")
    if (qname or qtype) and not module.allow_query_override:
        raise ProbeRefused(403, f"module {module_name!r} does not allow overriding the query")
    target = Target(address=raw_target, host=host, port=port, module=module_name,
                    scope_id=scope)
    return ProbeRequest(target=target, module=module, qname=qname,
                        qtype=qtype.upper() if qtype else None)


def probe_exposition(result: ProbeResult) -> str:
    """/probe output: the per-probe gauges without target labels."""
    reason_labels = tuple(f'reason="{r.value}"' for r in REASONS)
    return render(probe_result_families([("", reason_labels, result)]))


class ProbeHandler:
    """Runs allowed requests, at most ``limits.max_concurrent_probes`` at once: each holds
    a socket, and a flood must not exhaust descriptors."""

    def __init__(self) -> None:
        self.in_flight = 0

    async def handle(self, exp: Exporter, params: Mapping[str, str], repeated: Set[str],
                     scrape_timeout: float | None) -> str:
        cfg = exp.config
        req = parse_request(cfg, params, repeated)
        budget = exp.scrape_budget(scrape_timeout)
        limit = cfg.limits.max_concurrent_probes
        if self.in_flight >= limit:
            raise ProbeRefused(503, "too many concurrent probes "
                                    f"(limits.max_concurrent_probes: {limit})")
        self.in_flight += 1
        try:
            result = await exp.probe_one(req.target, req.module, budget, qname=req.qname,
                                         qtype=req.qtype)
        except (ValueError, dns.exception.DNSException) as e:  # invalid override name/type
            raise ProbeRefused(400, f"invalid query: {e}") from None
        finally:
            self.in_flight -= 1
        return probe_exposition(result)
