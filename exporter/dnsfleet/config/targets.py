"""``targets``: the resolvers probed, their labels and where their own statistics are read."""

from __future__ import annotations

import functools
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from dnsfleet.config.addresses import Address, Endpoint, parse_address
from dnsfleet.config.checks import (
    JSON,
    Check,
    Choice,
    Duration,
    Number,
    Section,
    String,
    key,
    read_keys,
    yaml_keys,
)
from dnsfleet.config.concepts import LABEL_NAME_RE, HttpUrl, Labels
from dnsfleet.config.modules import Module
from dnsfleet.config.reader import Node
from dnsfleet.config.values import quote

__all__ = [
    "HTTP_STATS_TYPES",
    "LABEL_NAME_RE",
    "RESERVED_LABELS",
    "STATS_TYPES",
    "StatsSource",
    "StatsType",
    "Target",
]

# Labels the exporter sets on some series itself: a configured label of the same name would
# produce a sample with a duplicate label name, which Prometheus rejects (the whole scrape
# fails). `instance` and `job` belong to Prometheus.
RESERVED_LABELS = frozenset(
    {
        "target",
        "module",
        "reason",
        "le",
        "quantile",
        "instance",
        "job",
        # resolver internals, canary, backends
        "backend",
        "backend_address",
        "software",
        "version",
        "rcode",
        # Consul
        "agent",
        "service",
        "query",
        "tag",
        "node",
        "datacenter",
        "server",
        "method",
        "position",
        "side",
        # stub resolvers, host collectors, the exporter itself
        "resolv_conf",
        "libc",
        "nameserver",
        "collector",
        "device",
        "queue",
        "cpu",
        "level",
        "process",
        "bond",
        "slave",
        "mode",
        "state",
        "governor",
        "driver",
        "profile",
        "actor",
        "partner",
        "python",
    }
)


StatsType = Literal["unbound", "bind", "pdns-recursor", "dnsdist", "knot-resolver", "coredns"]
STATS_TYPES: tuple[StatsType, ...] = (
    "unbound",
    "bind",
    "pdns-recursor",
    "dnsdist",
    "knot-resolver",
    "coredns",
)
# Read over HTTP: BIND's statistics channel (base URL), the others' Prometheus /metrics.
HTTP_STATS_TYPES = frozenset({"bind", "pdns-recursor", "dnsdist", "knot-resolver", "coredns"})


# Default ports of the encrypted transports (RFC 7858, RFC 8484); udp and tcp default to 53.
TRANSPORT_PORTS = {"tls": 853, "https": 443}
UNBOUND: frozenset[str] = frozenset({"unbound"})
HTTP: frozenset[str] = HTTP_STATS_TYPES
API_KEY_TYPES: frozenset[str] = frozenset({"pdns-recursor", "dnsdist"})
_CONTROL_RE = re.compile(r"^(unix|tcp|tls)://(.+)$")
CONTROL_PATTERN = r"^(unix:///|tcp://|tls://).+$"


class Control(Check):
    """unbound-control's address: ``unix:///path``, ``tcp://host:port`` or
    ``tls://host:port``."""

    def read(self, node: Node) -> str:
        control = node.string()
        m = _CONTROL_RE.match(control)
        if not m:
            raise node.error(
                f"{quote(control)}: use unix:///path, tcp://host:port or tls://host:port"
            )
        if m.group(1) != "unix":
            try:
                parse_address(m.group(2), default_port=8953)
            except ValueError as e:
                raise node.error(str(e)) from None
        elif not m.group(2).startswith("/"):
            raise node.error("a unix socket path must be absolute (unix:///run/unbound.ctl)")
        return control

    def schema(self) -> JSON:
        return {"type": "string", "pattern": CONTROL_PATTERN}


@dataclass(frozen=True)
class StatsSource:
    """Where a resolver's own statistics are read.

    unbound: ``control`` is ``unix:///path/to/sock``, ``tcp://host:port`` (remote-control
    without certificates) or ``tls://host:port`` with the control keys. bind: ``url`` is the
    statistics channel base URL. pdns-recursor, dnsdist, knot-resolver, coredns: ``url`` is
    the daemon's Prometheus ``/metrics`` URL; ``api_key`` is sent as ``X-API-Key`` (the
    PowerDNS web servers ask for it)."""

    type: StatsType = field(metadata=key(Choice(STATS_TYPES)))
    timeout: float = field(default=2.0, metadata=key(Duration(maximum=60)))
    control: str = field(default="", metadata=key(Control(), omit="", types=UNBOUND, required=True))
    url: str = field(
        default="",
        metadata=key(
            HttpUrl(),
            omit="",
            types=HTTP,
            required=True,
            doc="bind: the statistics channel base URL; the others: their Prometheus /metrics",
        ),
    )
    server_cert: str | None = field(
        default=None,
        metadata=key(
            String(), types=UNBOUND, doc="unbound_server.pem: trust anchor for the control TLS"
        ),
    )
    client_cert: str | None = field(
        default=None, metadata=key(String(), types=UNBOUND, doc="unbound_control.pem")
    )
    client_key: str | None = field(
        default=None, metadata=key(String(), types=UNBOUND, doc="unbound_control.key")
    )
    api_key: str | None = field(
        default=None,
        metadata=key(
            String(),
            secret=True,
            types=API_KEY_TYPES,
            doc="Sent as X-API-Key (the PowerDNS web servers ask for it); never shown on /config",
        ),
    )


def _parse_stats(node: Node) -> StatsSource:
    f = node.fields()
    kind = cast("StatsType", Choice(STATS_TYPES).read(f.req("type")))
    group = HTTP if kind in HTTP_STATS_TYPES else UNBOUND
    # Every key of the group is read, so one that does not fit the type (bind's api_key) is
    # refused by name rather than as unknown.
    values = read_keys(f, StatsSource, skip=("type",), only=lambda k: _in_group(k, group))
    for name in _STATS_REQUIRED:
        if _in_group(name, group):
            f.req(name)
    if group is HTTP:
        if values["api_key"] is not None and kind not in API_KEY_TYPES:
            raise f.get("api_key").error("only meaningful with pdns-recursor or dnsdist")
        if kind == "bind":
            values["url"] = values["url"].rstrip("/")
    else:
        certs = {k: values[k] for k in ("server_cert", "client_cert", "client_key")}
        given = [k for k, v in certs.items() if v is not None]
        tls = values["control"].startswith("tls://")
        if tls and len(given) != len(certs):
            missing = ", ".join(k for k in certs if certs[k] is None)
            raise node.error(
                f"tls:// control needs server_cert, client_cert and client_key (missing: {missing})"
            )
        if not tls and given:
            raise f.get(given[0]).error("only meaningful with a tls:// control")
    f.done()
    return StatsSource(type=kind, **values)


def _in_group(name: str, group: frozenset[str]) -> bool:
    types = _STATS_KEY_TYPES[name]
    return types is None or bool(types & group)


_STATS_KEY_TYPES: dict[str, frozenset[str] | None] = {
    name: fld.metadata["types"] for name, fld, _ in yaml_keys(StatsSource)
}
_STATS_REQUIRED = tuple(name for name, fld, _ in yaml_keys(StatsSource) if fld.metadata["required"])


@dataclass(frozen=True)
class Target:
    address: str = field(
        metadata=key(
            Address(),
            doc="The resolver's IP address (names are not resolved), optional "
            ":port; also the target label",
        )
    )
    host: str  # literal IP address, from address
    port: int
    module: str = field(metadata=key(String(), doc="A name under modules"))
    labels: tuple[tuple[str, str], ...] = field(
        default=(),
        metadata=key(Labels(RESERVED_LABELS), doc="Extra labels on this target's series"),
    )
    scope_id: int = 0  # IPv6 link-local zone, from address
    stats: StatsSource | None = field(
        default=None,
        metadata=key(Section(StatsSource, _parse_stats), doc="The resolver's own statistics"),
    )
    capacity_qps: float | None = field(
        default=None, metadata=key(Number(minimum=1), doc="Declared capacity in queries per second")
    )
    backends: str = field(
        default="single",
        metadata=key(
            Choice(("single", "pool")),
            doc="single: one cache answers at this address; pool: several (SO_REUSEPORT "
            "processes, dnsdist or a load balancer, anycast): answering from another member "
            "is no backend change, and without NSID the canary cannot tell their caches "
            "apart",
        ),
    )

    # Cached: /probe reads a target's sockaddr and family on every request, and each read
    # built a frozen Endpoint (the instance dict is not a field: equality, hashing and
    # dataclasses.replace never see it).
    @functools.cached_property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.host, self.port, self.scope_id)

    @functools.cached_property
    def family(self) -> socket.AddressFamily:
        return self.endpoint.family

    @functools.cached_property
    def sockaddr(self) -> tuple[str, int] | tuple[str, int, int, int]:
        return self.endpoint.sockaddr


def parse_target(node: Node, modules: Mapping[str, Module]) -> Target:
    f = node.fields()
    addr_node = f.req("address")
    ep = Address().read(addr_node)
    mod_node = f.req("module")
    module = mod_node.string()
    if module not in modules:
        known = ", ".join(sorted(modules)) or "none defined"
        raise mod_node.error(f"unknown module {quote(module)} (modules: {known})")
    values: dict[str, Any] = read_keys(f, Target, skip=("address", "module"))
    f.done()
    port = ep.port
    default = TRANSPORT_PORTS.get(modules[module].transport)
    if default is not None and Address(default_port=0).read(addr_node).port == 0:
        port = default  # DoT 853 (RFC 7858), DoH 443, when the address gives none
    return Target(
        address=addr_node.string(),
        host=ep.host,
        port=port,
        module=module,
        scope_id=ep.scope_id,
        **values,
    )


def check_one_internals_entry(root: Node, targets: tuple[Target, ...]) -> None:
    """`stats` and `capacity_qps` describe the resolver at an address, not a module: two
    entries for one address could export conflicting series, so only one may carry them."""
    owner: dict[tuple[str, int, str], int] = {}
    for i, t in enumerate(targets):
        for name, value in (("stats", t.stats), ("capacity_qps", t.capacity_qps)):
            if value is None:
                continue
            first = owner.setdefault((t.host, t.port, name), i)
            if first != i:
                raise (
                    root.child("targets")
                    .child(i)
                    .child(name)
                    .error(
                        f"already set for {quote(t.address)} at targets[{first}] (set {name} on "
                        "one entry per address)"
                    )
                )
