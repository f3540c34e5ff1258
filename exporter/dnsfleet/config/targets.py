"""``targets``: the resolvers probed, their labels and where their own statistics are read."""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

from dnsfleet.config.addresses import parse_address
from dnsfleet.config.modules import Module
from dnsfleet.config.reader import Node, _show

LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Labels the exporter sets itself; a target may not override them.
# Labels the exporter sets on some series itself: a configured label of the same name would
# produce a sample with a duplicate label name, which Prometheus rejects (the whole scrape
# fails). `instance` and `job` belong to Prometheus.
RESERVED_LABELS = frozenset({
    "target", "module", "reason", "le", "quantile", "instance", "job",
    # resolver internals, canary, backends
    "backend", "backend_address", "software", "version", "rcode",
    # Consul
    "agent", "service", "query", "tag", "node", "datacenter", "server", "method",
    "position", "side",
    # stub resolvers, host collectors, the exporter itself
    "resolv_conf", "libc", "nameserver", "collector", "device", "queue", "cpu", "level",
    "process", "bond", "slave", "mode", "state", "governor", "driver", "profile", "actor",
    "partner", "python",
})


StatsType = Literal["unbound", "bind", "pdns-recursor", "dnsdist", "knot-resolver", "coredns"]
STATS_TYPES: tuple[StatsType, ...] = ("unbound", "bind", "pdns-recursor", "dnsdist",
                                      "knot-resolver", "coredns")
# Read over HTTP: BIND's statistics channel (base URL), the others' Prometheus /metrics.
HTTP_STATS_TYPES = frozenset({"bind", "pdns-recursor", "dnsdist", "knot-resolver", "coredns"})


@dataclass(frozen=True)
class StatsSource:
    """Where a resolver's own statistics are read (issue 4).

    unbound: ``control`` is ``unix:///path/to/sock``, ``tcp://host:port`` (remote-control
    without certificates) or ``tls://host:port`` with the control keys. bind: ``url`` is the
    statistics channel base URL. pdns-recursor, dnsdist, knot-resolver, coredns: ``url`` is
    the daemon's Prometheus ``/metrics`` URL; ``api_key`` is sent as ``X-API-Key`` (the
    PowerDNS web servers ask for it)."""

    type: StatsType
    control: str = ""
    url: str = ""
    server_cert: str | None = None   # unbound_server.pem: trust anchor for the control TLS
    client_cert: str | None = None   # unbound_control.pem
    client_key: str | None = None    # unbound_control.key
    timeout: float = 2.0
    api_key: str | None = None       # X-API-Key for the PowerDNS web servers


@dataclass(frozen=True)
class Target:
    address: str                  # as configured: the `target` label
    host: str                     # literal IP address
    port: int
    module: str
    labels: tuple[tuple[str, str], ...] = ()
    scope_id: int = 0             # IPv6 link-local zone
    stats: StatsSource | None = None      # the resolver's own statistics (issue 4)
    capacity_qps: float | None = None     # declared capacity (issue 4)
    # "single": one cache answers at this address; "pool": several (SO_REUSEPORT
    # processes, dnsdist or a load balancer, anycast): answering from another member is no
    # backend change, and without NSID the canary cannot tell their caches apart.
    backends: str = "single"

    @property
    def family(self) -> socket.AddressFamily:
        return socket.AF_INET6 if ":" in self.host else socket.AF_INET

    @property
    def sockaddr(self) -> tuple[str, int] | tuple[str, int, int, int]:
        if self.family == socket.AF_INET6:
            return (self.host, self.port, 0, self.scope_id)
        return (self.host, self.port)


def _parse_labels(node: Node) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for k, v in node.items():
        if not isinstance(k, str) or not LABEL_NAME_RE.fullmatch(k) or k.startswith("__"):
            raise v.error("invalid label name")
        if k in RESERVED_LABELS:
            raise v.error(f"label {_show(k)} is set by the exporter and cannot be configured")
        out.append((k, v.string(allow_empty=True)))
    return tuple(sorted(out))


def _parse_target(node: Node, modules: Mapping[str, Module]) -> Target:
    f = node.fields()
    addr_node = f.req("address")
    address = addr_node.string()
    try:
        host, port, scope = parse_address(address)
    except ValueError as e:
        raise addr_node.error(str(e)) from None
    mod_node = f.req("module")
    module = mod_node.string()
    if module not in modules:
        known = ", ".join(sorted(modules)) or "none defined"
        raise mod_node.error(f"unknown module {_show(module)} (modules: {known})")
    labels: tuple[tuple[str, str], ...] = f.opt("labels", (), _parse_labels)
    stats = f.opt("stats", None, _parse_stats)
    capacity = f.opt("capacity_qps", None, lambda n: n.number(minimum=1))
    backends = f.opt("backends", "single", lambda n: n.choice(("single", "pool")))
    f.done()
    return Target(address=address, host=host, port=port, module=module, labels=labels,
                  scope_id=scope, stats=stats, capacity_qps=capacity, backends=backends)


_CONTROL_RE = re.compile(r"^(unix|tcp|tls)://(.+)$")


def _parse_stats(node: Node) -> StatsSource:
    f = node.fields()
    kind = cast("StatsType", f.req("type").choice(STATS_TYPES))
    timeout = f.opt("timeout", 2.0, lambda n: n.duration(maximum=60))
    if kind in HTTP_STATS_TYPES:
        url_node = f.req("url")
        url = url_node.string()
        if not re.match(r"^https?://[^/]+", url):
            raise url_node.error(f"{_show(url)} is not an http:// or https:// URL")
        api_key = f.opt("api_key", None, lambda n: n.string())
        if api_key is not None and kind not in ("pdns-recursor", "dnsdist"):
            raise f.get("api_key").error("only meaningful with pdns-recursor or dnsdist")
        f.done()
        return StatsSource(type=kind, url=url.rstrip("/") if kind == "bind" else url,
                           timeout=timeout, api_key=api_key)
    ctl_node = f.req("control")
    control = ctl_node.string()
    m = _CONTROL_RE.match(control)
    if not m:
        raise ctl_node.error(f"{_show(control)}: use unix:///path, tcp://host:port or "
                             "tls://host:port")
    if m.group(1) != "unix":
        try:
            parse_address(m.group(2), default_port=8953)
        except ValueError as e:
            raise ctl_node.error(str(e)) from None
    elif not m.group(2).startswith("/"):
        raise ctl_node.error("a unix socket path must be absolute (unix:///run/unbound.ctl)")
    certs = {k: f.opt(k, None, lambda n: n.string())
             for k in ("server_cert", "client_cert", "client_key")}
    given = [k for k, v in certs.items() if v is not None]
    if m.group(1) == "tls" and len(given) != len(certs):
        missing = ", ".join(k for k in certs if certs[k] is None)
        raise node.error(f"tls:// control needs server_cert, client_cert and client_key "
                         f"(missing: {missing})")
    if m.group(1) != "tls" and given:
        raise f.get(given[0]).error("only meaningful with a tls:// control")
    f.done()
    return StatsSource(type="unbound", control=control, timeout=timeout,
                       server_cert=certs["server_cert"], client_cert=certs["client_cert"],
                       client_key=certs["client_key"])


def _check_one_internals_entry(root: Node, targets: tuple[Target, ...]) -> None:
    """`stats` and `capacity_qps` describe the resolver at an address, not a module: two
    entries for one address could export conflicting series, so only one may carry them."""
    owner: dict[tuple[str, int, str], int] = {}
    for i, t in enumerate(targets):
        for key, value in (("stats", t.stats), ("capacity_qps", t.capacity_qps)):
            if value is None:
                continue
            first = owner.setdefault((t.host, t.port, key), i)
            if first != i:
                raise root.child("targets").child(i).child(key).error(
                    f"already set for {_show(t.address)} at targets[{first}] (set {key} on "
                    "one entry per address)")

