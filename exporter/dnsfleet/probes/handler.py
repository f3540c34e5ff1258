"""The ``/probe`` rules: which target, which module, which query, how many at once.

As blackbox_exporter keeps them in ``prober/handler.go``, the rules live here and not in the
HTTP layer: a request's parameters go in, a probe result or a refusal comes out, and
``web.py`` only maps a refusal's kind to a status code.

- ``target`` is an IP literal (never a name to resolve: the exporter would probe whatever
  the name resolves to today), optionally with a port and an IPv6 zone.
- An IPv4-mapped IPv6 address is judged as the IPv4 host it reaches.
- The target must be configured or inside ``probe_allowlist``.
- ``module`` defaults to the configured target's module; it must exist.
- ``name``/``type`` override the query only for a module with ``allow_query_override``.
- At most ``limits.max_concurrent_probes`` probes are in flight: each holds a socket.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dns.exception

from dnsfleet.config import Target, parse_address
from dnsfleet.exposition import render
from dnsfleet.prober import probe_result_families
from dnsfleet.probes import REASONS, ProbeResult

if TYPE_CHECKING:
    from dnsfleet.app import Exporter


class Refusal(enum.Enum):
    """Why a /probe request was not probed; the HTTP layer maps each to a status code."""

    INVALID = "invalid"  # malformed or missing parameters
    FORBIDDEN = "forbidden"  # a target or override the configuration does not allow
    BUSY = "busy"  # the concurrency cap is reached


@dataclass(frozen=True, slots=True)
class Refused:
    kind: Refusal
    reason: str


class ProbeHandler:
    """Applies the /probe rules and runs the probe; keeps the count of probes in flight."""

    def __init__(self, exp: Exporter) -> None:
        self.exp = exp
        self.in_flight = 0

    async def handle(
        self,
        params: Mapping[str, str],
        *,
        repeated: Iterable[str] = (),
        header_timeout: float | None = None,
    ) -> ProbeResult | Refused:
        exp = self.exp
        cfg = exp.config
        repeated = sorted(repeated)
        if repeated:
            # Two targets in one URL: a proxy and the exporter might each honour another.
            return Refused(Refusal.INVALID, f"repeated parameter: {', '.join(repeated)}")
        raw_target = params.get("target", "")
        if not raw_target:
            return Refused(Refusal.INVALID, "missing parameter: target")
        try:
            host, port, scope = parse_address(raw_target)
        except ValueError as e:
            return Refused(Refusal.INVALID, f"invalid target: {e}")
        ip = ipaddress.ip_address(host)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            # ::ffff:a.b.c.d reaches the IPv4 host: judge it as that host, so an IPv6 entry
            # in the allowlist cannot open the IPv4 space (or a v4 target hide behind v6).
            ip = ip.ipv4_mapped
            host, scope = str(ip), 0
        configured = [t for t in cfg.targets if (t.host, t.port, t.scope_id) == (host, port, scope)]
        module_name = params.get("module") or (configured[0].module if configured else "")
        if not module_name:
            return Refused(Refusal.INVALID, "missing parameter: module")
        module = cfg.modules.get(module_name)
        if module is None:
            return Refused(Refusal.INVALID, f"unknown module {module_name!r}")
        allowed = bool(configured) or any(ip in net for net in cfg.probe_allowlist)
        if not allowed:
            return Refused(
                Refusal.FORBIDDEN,
                f"target {raw_target} is neither configured nor inside probe_allowlist",
            )
        qname, qtype = params.get("name"), params.get("type")
        if (qname or qtype) and not module.allow_query_override:
            return Refused(
                Refusal.FORBIDDEN, f"module {module_name!r} does not allow overriding the query"
            )
        budget = exp.scrape_budget(header_timeout)
        target = Target(
            address=raw_target, host=host, port=port, module=module_name, scope_id=scope
        )
        if self.in_flight >= cfg.limits.max_concurrent_probes:
            # Each /probe holds a socket: a flood must not exhaust descriptors.
            return Refused(
                Refusal.BUSY,
                "too many concurrent probes "
                f"(limits.max_concurrent_probes: {cfg.limits.max_concurrent_probes})",
            )
        self.in_flight += 1
        try:
            return await exp.probe_one(
                target, module, budget, qname=qname, qtype=qtype.upper() if qtype else None
            )
        except (ValueError, dns.exception.DNSException) as e:  # invalid override name/type
            return Refused(Refusal.INVALID, f"invalid query: {e}")
        finally:
            self.in_flight -= 1


def probe_exposition(result: ProbeResult) -> str:
    """/probe output: the per-probe gauges without target labels."""
    reason_labels = tuple(f'reason="{r.value}"' for r in REASONS)
    return render(probe_result_families([("", reason_labels, result)]))
