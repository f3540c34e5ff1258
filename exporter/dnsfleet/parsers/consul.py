"""Consul HTTP API bodies -> typed facts. Pure: text in, frozen dataclasses out, no I/O.

Shapes follow Consul's API documentation: Health (``/v1/health/service/:service``), Status
(``/v1/status/leader``, ``/v1/status/peers``), Agent (``/v1/agent/self``) and Prepared
Query (``/v1/query``). Every parser raises ValueError with the reason for a body that is
not what the documentation describes.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any

PASSING = "passing"
CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class Instance:
    node: str
    address: str  # what Consul DNS answers: Service.Address, else Node.Address
    port: int
    statuses: tuple[str, ...]

    @property
    def passing(self) -> bool:
        """All checks passing: what ``?passing`` keeps (Health API, ``passing`` param)."""
        return all(s == PASSING for s in self.statuses)

    @property
    def critical(self) -> bool:
        return any(s == CRITICAL for s in self.statuses)


@dataclass(frozen=True, slots=True)
class ServiceHealth:
    instances: tuple[Instance, ...]

    @property
    def passing(self) -> tuple[Instance, ...]:
        return tuple(i for i in self.instances if i.passing)

    def dns_addresses(self, *, only_passing: bool) -> frozenset[str]:
        """The addresses Consul DNS should serve. With ``dns_config.only_passing`` false
        (the default) DNS drops only instances with a critical check, so "warning"
        instances are still answered; with it true only passing ones are."""
        keep = (i for i in self.instances if (i.passing if only_passing else not i.critical))
        return frozenset(i.address for i in keep)


@dataclass(frozen=True, slots=True)
class AgentSelf:
    datacenter: str
    node: str
    version: str
    server: bool


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise ValueError(f"{what}: not JSON: {e}") from None


def _address(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}: address is not a string")
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        # Consul allows a hostname as a service address; DNS then answers a CNAME, not an A.
        return value


def parse_health_service(text: str) -> ServiceHealth:
    data = _json(text, "health/service")
    if not isinstance(data, list):
        raise ValueError("health/service: expected a JSON list of service entries")
    out = []
    for i, entry in enumerate(data):
        what = f"health/service[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{what}: not an object")
        node, svc, checks = entry.get("Node"), entry.get("Service"), entry.get("Checks")
        if not isinstance(node, dict) or not isinstance(svc, dict) or not isinstance(checks, list):
            raise ValueError(f"{what}: lacks Node, Service or Checks")
        addr = svc.get("Address") or node.get("Address")
        statuses = []
        for c in checks:
            if not isinstance(c, dict) or not isinstance(c.get("Status"), str):
                raise ValueError(f"{what}: a check without a Status")
            statuses.append(c["Status"])
        port = svc.get("Port", 0)
        out.append(
            Instance(
                node=str(node.get("Node", "")),
                address=_address(addr, what),
                port=port if isinstance(port, int) else 0,
                statuses=tuple(statuses),
            )
        )
    return ServiceHealth(instances=tuple(out))


def parse_leader(text: str) -> str:
    """The leader's ``ip:port``; ``""`` when the cluster has no leader."""
    data = _json(text, "status/leader")
    if not isinstance(data, str):
        raise ValueError("status/leader: expected a JSON string")
    return data


def parse_peers(text: str) -> tuple[str, ...]:
    data = _json(text, "status/peers")
    if not isinstance(data, list) or not all(isinstance(p, str) for p in data):
        raise ValueError("status/peers: expected a JSON list of strings")
    return tuple(data)


def parse_agent_self(text: str) -> AgentSelf:
    data = _json(text, "agent/self")
    cfg = data.get("Config") if isinstance(data, dict) else None
    if not isinstance(cfg, dict):
        raise ValueError("agent/self: no Config object")
    return AgentSelf(
        datacenter=str(cfg.get("Datacenter", "")),
        node=str(cfg.get("NodeName", "")),
        version=str(cfg.get("Version", "")),
        server=bool(cfg.get("Server", False)),
    )


def parse_query_list(text: str) -> int:
    """Number of prepared queries defined (those the token may read)."""
    data = _json(text, "query")
    if not isinstance(data, list):
        raise ValueError("query: expected a JSON list of prepared queries")
    return len(data)
