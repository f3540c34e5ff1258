"""Strict YAML configuration: unknown keys rejected, defaults then validation, once at load.

Every error names the file, the key path and the problem, e.g.::

    dnsfleet.yml: modules.recursive.timeout: invalid duration "2x" (use a number and
    a unit: 500ms, 2s, 1m)

The schema lives here, one ``_parse_*`` function per top-level section. Readers of each
section get a :class:`Node`, which knows where it is in the file so messages can say so.
"""

from __future__ import annotations

import ipaddress
import math
import re
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import dns.rcode
import dns.rdataclass
import dns.rdatatype
import yaml

from dnsfleet.dnswire import encode_name

T = TypeVar("T")

DEFAULT_DNS_PORT = 53
BUILTIN_SOURCE = "<built-in default>"
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


class ConfigError(Exception):
    """A configuration problem, with the file and key path in the message."""


# --------------------------------------------------------------------------- strict reader


class Node:
    """A value at a key path in a config file."""

    __slots__ = ("file", "path", "value")

    def __init__(self, file: str, path: str, value: Any) -> None:
        self.file = file
        self.path = path
        self.value = value

    def error(self, problem: str) -> ConfigError:
        where = f"{self.file}: {self.path}: " if self.path else f"{self.file}: "
        return ConfigError(where + problem)

    def child(self, key: str | int) -> Node:
        path = f"{self.path}[{key}]" if isinstance(key, int) else (
            f"{self.path}.{key}" if self.path else str(key))
        return Node(self.file, path, None)

    # -- scalars
    def string(self, *, allow_empty: bool = False) -> str:
        if isinstance(self.value, bool) or not isinstance(self.value, str | int | float):
            raise self.error(f"expected a string, got {_kind(self.value)}")
        s = f"{self.value}"
        if not s and not allow_empty:
            raise self.error("must not be empty")
        return s

    def integer(self, *, minimum: int | None = None, maximum: int | None = None) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise self.error(f"expected an integer, got {_kind(self.value)}")
        if minimum is not None and self.value < minimum:
            raise self.error(f"must be at least {minimum}, got {self.value}")
        if maximum is not None and self.value > maximum:
            raise self.error(f"must be at most {maximum}, got {self.value}")
        return self.value

    def number(self, *, minimum: float | None = None) -> float:
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            raise self.error(f"expected a number, got {_kind(self.value)}")
        if not math.isfinite(self.value):
            raise self.error(f"expected a finite number, got {self.value}")
        if minimum is not None and self.value < minimum:
            raise self.error(f"must be at least {minimum}, got {self.value}")
        return float(self.value)

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            raise self.error(f"expected true or false, got {_kind(self.value)}")
        return self.value

    def duration(self, *, minimum: float = 0.0, maximum: float | None = None) -> float:
        seconds = parse_duration(self.value)
        if seconds is None:
            raise self.error(
                f"invalid duration {_show(self.value)} (use a number and a unit: 500ms, 2s, 1m)")
        if seconds <= minimum:
            raise self.error(f"duration must be greater than {minimum:g}s")
        if maximum is not None and seconds > maximum:
            raise self.error(f"duration must be at most {maximum:g}s")
        return seconds

    def choice(self, choices: tuple[str, ...]) -> str:
        s = self.string()
        if s not in choices:
            raise self.error(f"{_show(s)} is not one of: {', '.join(choices)}")
        return s

    # -- containers
    def items(self) -> Iterator[tuple[str, Node]]:
        if not isinstance(self.value, dict):
            raise self.error(f"expected a mapping, got {_kind(self.value)}")
        for k, v in self.value.items():
            n = self.child(str(k))
            n.value = v
            yield str(k), n

    def sequence(self) -> list[Node]:
        if self.value is None:
            return []
        if not isinstance(self.value, list):
            raise self.error(f"expected a list, got {_kind(self.value)}")
        out = []
        for i, v in enumerate(self.value):
            n = self.child(i)
            n.value = v
            out.append(n)
        return out

    def fields(self) -> Fields:
        if not isinstance(self.value, dict):
            raise self.error(f"expected a mapping, got {_kind(self.value)}")
        return Fields(self)


class Fields:
    """Reads the keys of a mapping; :meth:`done` rejects the keys nobody asked for."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.data: dict[Any, Any] = node.value
        self.seen: set[str] = set()

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def get(self, key: str) -> Node:
        self.seen.add(key)
        n = self.node.child(key)
        n.value = self.data.get(key)
        return n

    def req(self, key: str) -> Node:
        if not self.has(key):
            self.seen.add(key)
            raise self.node.error(f"missing required key {_show(key)}")
        return self.get(key)

    def opt(self, key: str, default: T, read: Callable[[Node], T]) -> T:
        if not self.has(key):
            self.seen.add(key)
            return default
        return read(self.get(key))

    def done(self, known: tuple[str, ...] = ()) -> None:
        valid = sorted(self.seen | set(known))
        for key in self.data:
            if str(key) not in self.seen and str(key) not in known:
                raise self.node.child(str(key)).error(
                    f"unknown key (valid keys: {', '.join(valid)})")


def _kind(v: Any) -> str:
    if v is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", bool: "a boolean", str: f"string {_show(v)}",
            int: f"integer {v}", float: f"number {v}"}.get(type(v), type(v).__name__)


def _show(v: Any) -> str:
    return '"' + str(v).replace('"', '\\"') + '"'


# Go's time.ParseDuration syntax, as the Prometheus ecosystem writes durations: one or more
# number+unit parts, `1m30s`, `500us`, `1.5h`.
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 0.001, "s": 1.0, "m": 60.0,
         "h": 3600.0}


def parse_duration(value: Any) -> float | None:
    """``500ms``, ``2s``, ``1m30s``, ``500us`` -> seconds; a bare number is seconds. None
    for anything else, NaN and infinities included."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    pos, total = 0, 0.0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if not m:
            return None
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    return total if text and math.isfinite(total) else None


# --------------------------------------------------------------------------- the schema


Transport = Literal["udp", "tcp"]
TRANSPORTS: tuple[Transport, ...] = ("udp", "tcp")


@dataclass(frozen=True)
class Module:
    """A probe definition: what to ask and what counts as a good answer."""

    name: str
    query_name: str = "."
    query_type: str = "NS"
    query_class: str = "IN"
    transport: Transport = "udp"
    timeout: float = 2.0
    valid_rcodes: tuple[str, ...] = ("NOERROR",)
    recursion_desired: bool = True
    edns: bool = True
    edns_udp_size: int = 1232
    # Fewer answer RRs than this is answer_mismatch.
    min_answers: int = 0
    # Regexes against each answer RR in presentation form ("name ttl IN TYPE rdata").
    fail_if_not_matches: tuple[str, ...] = ()
    fail_if_matches: tuple[str, ...] = ()
    # /probe may override query_name / query_type only when this is true.
    allow_query_override: bool = False
    # Restart and cache-flush detection (issue 4): a long-TTL name the resolver caches, whose
    # TTL is followed across scrapes, and how much slack TTL continuity gets.
    canary: str | None = None
    canary_type: str = "A"
    canary_tolerance: float = 2.0
    # Backend identity from CHAOS TXT (e.g. id.server.) instead of EDNS NSID.
    identity_query: str | None = None

    @property
    def qtype(self) -> int:
        return int(dns.rdatatype.from_text(self.query_type))

    @property
    def qclass(self) -> int:
        return int(dns.rdataclass.from_text(self.query_class))

    @property
    def valid_rcode_numbers(self) -> frozenset[int]:
        return frozenset(int(dns.rcode.from_text(r)) for r in self.valid_rcodes)


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


@dataclass(frozen=True)
class Limits:
    max_concurrent_probes: int = 1024
    max_targets: int = 20000
    # Subtracted from X-Prometheus-Scrape-Timeout-Seconds (blackbox's --timeout-offset).
    scrape_timeout_offset: float = 0.5
    # Used when Prometheus sends no timeout header.
    default_scrape_timeout: float = 10.0


@dataclass(frozen=True)
class HostConfig:
    """Host collectors (bonding, NIC interrupts, CPU latency)."""

    collectors: tuple[str, ...] = ("bonding", "nic", "cpu_latency")
    # Process name whose threads' CPUs are compared with the NIC's interrupt CPUs.
    resolver_process: str | None = None
    # Interfaces the nic collector reports (full-match regexes on the interface name).
    nic_include: str = ".*"
    nic_exclude: str = ""


# --------------------------------------------------------------------------- consul (issue 6)

CONSUL_DNS_PORT = 8600
CONSUL_DEFAULT_DNS = "127.0.0.1:8600"
CONSUL_DEFAULT_HTTP = "http://127.0.0.1:8500"
# A DNS label: Consul's DNS interface can only look up names and tags made of these.
_DNS_LABEL_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?$")
_HTTP_URL_RE = re.compile(r"^(https?)://(\[[0-9A-Fa-f:.]+\]|[^/:\[\]]+)(?::(\d+))?/?$")


@dataclass(frozen=True)
class ConsulService:
    """A service to watch; ``tag`` narrows it as ``<tag>.<name>.service.consul`` does."""

    name: str
    tag: str | None = None

    @property
    def label(self) -> str:
        """The ``service`` label: the DNS prefix, ``[tag.]name``."""
        return f"{self.tag}.{self.name}" if self.tag else self.name


@dataclass(frozen=True)
class ConsulAgent:
    name: str
    dns_host: str = "127.0.0.1"
    dns_port: int = CONSUL_DNS_PORT
    dns_scope_id: int = 0
    http_address: str = CONSUL_DEFAULT_HTTP
    # Path of a file holding the ACL token; read on every scrape so a rotated token is
    # picked up without a reload. The token itself is never logged or served on /config.
    token_file: str | None = None
    # The agent's data_dir; raft.db is <data_dir>/raft/raft.db on servers.
    data_dir: str | None = None
    # Must mirror the agent's dns_config.only_passing: when false (Consul's default) DNS
    # also serves instances whose checks are only "warning".
    dns_only_passing: bool = False
    # Must mirror the agent's dns_config.a_record_limit, if set: DNS then serves at most
    # this many A records, so fewer answers than passing instances is no mismatch.
    a_record_limit: int | None = None

    @property
    def dns_family(self) -> socket.AddressFamily:
        return socket.AF_INET6 if ":" in self.dns_host else socket.AF_INET

    @property
    def dns_sockaddr(self) -> tuple[str, int] | tuple[str, int, int, int]:
        if self.dns_family == socket.AF_INET6:
            return (self.dns_host, self.dns_port, 0, self.dns_scope_id)
        return (self.dns_host, self.dns_port)


@dataclass(frozen=True)
class ConsulConfig:
    agents: tuple[ConsulAgent, ...] = ()
    services: tuple[ConsulService, ...] = ()
    prepared_queries: tuple[str, ...] = ()
    timeout: float = 2.0


@dataclass(frozen=True)
class ResolvConfWatch:
    """A resolv.conf whose clients' failover the stub collector models (issue 3)."""

    path: str                     # as the host sees it; read through --path.rootfs
    query_name: str = "."         # what a client of this file would ask
    query_type: str = "NS"
    # How long a nameserver may take before it counts as silent. Deliberately shorter than
    # resolv.conf's timeout: a scrape must not wait 5 s to learn a server is blackholed.
    probe_timeout: float = 1.0

    @property
    def qtype(self) -> int:
        return int(dns.rdatatype.from_text(self.query_type))


DEFAULT_RESOLV_CONF: tuple[ResolvConfWatch, ...] = (ResolvConfWatch(path="/etc/resolv.conf"),)


# --------------------------------------------------------------------------- resolver (issue 4)

DEFAULT_CAPACITY_FILE = "/var/lib/dnsfleet/capacity.json"


@dataclass(frozen=True)
class ResolverConfig:
    """Resolver internals (issue 4)."""

    # Written by `dnsfleet capacity-test`, read by the exporter.
    capacity_file: str = DEFAULT_CAPACITY_FILE


@dataclass(frozen=True)
class Config:
    source: str
    modules: Mapping[str, Module]
    targets: tuple[Target, ...]
    limits: Limits = field(default_factory=Limits)
    host: HostConfig = field(default_factory=HostConfig)
    resolver: ResolverConfig = field(default_factory=ResolverConfig)
    probe_allowlist: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    consul: ConsulConfig = field(default_factory=ConsulConfig)
    resolv_conf: tuple[ResolvConfWatch, ...] = DEFAULT_RESOLV_CONF
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def module_for(self, target: Target) -> Module:
        return self.modules[target.module]


def parse_address(text: str, *, default_port: int = DEFAULT_DNS_PORT) -> tuple[str, int, int]:
    """``127.0.0.1``, ``127.0.0.1:5353``, ``::1``, ``[::1]:5353``, ``[fe80::1%eth0]:53`` ->
    (ip, port, scope_id). Raises ValueError with a reason. Names are not resolved: a monitor
    that depends on DNS to find its DNS servers fails exactly when it is needed."""
    text = text.strip()
    host, port_s = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"unbalanced [ in {_show(text)}")
        host, rest = text[1:end], text[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"unexpected {_show(rest)} after ]")
            port_s = rest[1:]
    elif text.count(":") == 1:
        host, port_s = text.split(":")
    scope = ""
    if "%" in host:
        host, scope = host.split("%", 1)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{_show(host)} is not an IP address (names are not resolved)") from None
    port = default_port
    if port_s:
        if not (port_s.isascii() and port_s.isdigit()) or not 0 < int(port_s) < 65536:
            raise ValueError(f"invalid port {_show(port_s)}")
        port = int(port_s)
    scope_id = 0
    if scope:
        if ip.version != 6:
            raise ValueError("a %zone is only valid on IPv6 addresses")
        scope_id = int(scope) if scope.isascii() and scope.isdigit() else _if_index(scope)
        if not 0 < scope_id < 2**32:
            raise ValueError(f"zone id {_show(scope)} out of range")
    return str(ip), port, scope_id


def _if_index(name: str) -> int:
    try:
        return socket.if_nametoindex(name)
    except OSError:
        raise ValueError(f"unknown interface {_show(name)}") from None


def _transport(n: Node) -> Transport:
    return "tcp" if n.choice(TRANSPORTS) == "tcp" else "udp"


def _parse_module(name: str, node: Node) -> Module:
    f = node.fields()
    qtype = f.opt("query_type", "NS", lambda n: n.string().upper())
    try:
        dns.rdatatype.from_text(qtype)
    except (dns.rdatatype.UnknownRdatatype, ValueError):
        raise f.get("query_type").error(f"unknown query type {_show(qtype)}") from None
    qclass = f.opt("query_class", "IN", lambda n: n.string().upper())
    try:
        dns.rdataclass.from_text(qclass)
    except (dns.rdataclass.UnknownRdataclass, ValueError):
        raise f.get("query_class").error(f"unknown query class {_show(qclass)}") from None
    qname = f.opt("query_name", ".", lambda n: n.string())
    try:
        encode_name(qname)
    except ValueError as e:
        raise f.get("query_name").error(f"invalid name {_show(qname)}: {e}") from None

    def rcodes(n: Node) -> tuple[str, ...]:
        out = []
        for item in n.sequence():
            r = item.string().upper()
            try:
                dns.rcode.from_text(r)
            except (dns.rcode.UnknownRcode, ValueError):  # out of range: ValueError
                raise item.error(f"unknown rcode {_show(r)}") from None
            out.append(r)
        if not out:
            raise n.error("must list at least one rcode")
        return tuple(out)

    def regexes(n: Node) -> tuple[str, ...]:
        # Matched with RE2 (probes/result.py): its syntax, Go's, is what is accepted.
        import re2  # noqa: PLC0415 - only configs with answer checks load it

        quiet = re2.Options()
        quiet.log_errors = False        # the error goes into our message, not to stderr
        out = []
        for item in n.sequence():
            try:
                re2.compile(item.string(), options=quiet)
            except re2.error as e:
                problem = e.args[0].decode() if isinstance(e.args[0], bytes) else str(e)
                raise item.error(f"invalid regular expression (RE2 syntax): {problem}") from None
            out.append(item.string())
        return tuple(out)

    mod = Module(
        name=name,
        query_name=qname,
        query_type=qtype,
        query_class=qclass,
        transport=f.opt("transport", "udp", _transport),
        timeout=f.opt("timeout", 2.0, lambda n: n.duration(maximum=60)),
        valid_rcodes=f.opt("valid_rcodes", ("NOERROR",), rcodes),
        recursion_desired=f.opt("recursion_desired", True, Node.boolean),
        edns=f.opt("edns", True, Node.boolean),
        edns_udp_size=f.opt("edns_udp_size", 1232, lambda n: n.integer(minimum=512, maximum=65535)),
        min_answers=f.opt("min_answers", 0, lambda n: n.integer(minimum=0)),
        fail_if_not_matches=f.opt("fail_if_not_matches", (), regexes),
        fail_if_matches=f.opt("fail_if_matches", (), regexes),
        allow_query_override=f.opt("allow_query_override", False, Node.boolean),
        **_parse_canary(f),
    )
    f.done()
    return mod


def _dns_name(n: Node) -> str:
    s = n.string()
    try:
        encode_name(s)
    except ValueError as e:
        raise n.error(f"invalid name {_show(s)}: {e}") from None
    return s


def _parse_canary(f: Fields) -> dict[str, Any]:
    canary = f.opt("canary", None, _dns_name)
    ctype = f.opt("canary_type", "A", lambda n: n.string().upper())
    try:
        dns.rdatatype.from_text(ctype)
    except (dns.rdatatype.UnknownRdatatype, ValueError):
        raise f.get("canary_type").error(f"unknown query type {_show(ctype)}") from None
    tolerance = f.opt("canary_tolerance", 2.0, lambda n: n.duration(maximum=300))
    if canary is None:
        for key in ("canary_type", "canary_tolerance"):
            if f.has(key):
                raise f.get(key).error("only meaningful with canary")
    return {"canary": canary, "canary_type": ctype, "canary_tolerance": tolerance,
            "identity_query": f.opt("identity_query", None, _dns_name)}


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


def _parse_resolver(node: Node) -> ResolverConfig:
    f = node.fields()
    cfg = ResolverConfig(capacity_file=f.opt("capacity_file", DEFAULT_CAPACITY_FILE,
                                             lambda n: n.string()))
    f.done()
    return cfg


def _parse_limits(node: Node) -> Limits:
    f = node.fields()
    d = Limits()
    lim = Limits(
        max_concurrent_probes=f.opt("max_concurrent_probes", d.max_concurrent_probes,
                                    lambda n: n.integer(minimum=1, maximum=65536)),
        max_targets=f.opt("max_targets", d.max_targets, lambda n: n.integer(minimum=1)),
        scrape_timeout_offset=f.opt("scrape_timeout_offset", d.scrape_timeout_offset,
                                    lambda n: n.duration(minimum=-0.000001, maximum=10)),
        default_scrape_timeout=f.opt("default_scrape_timeout", d.default_scrape_timeout,
                                     lambda n: n.duration(maximum=600)),
    )
    f.done()
    return lim


HOST_COLLECTORS = ("bonding", "nic", "cpu_latency")


def _parse_host(node: Node) -> HostConfig:
    f = node.fields()
    d = HostConfig()

    def names(n: Node) -> tuple[str, ...]:
        return tuple(item.choice(HOST_COLLECTORS) for item in n.sequence())

    def regex(n: Node) -> str:
        text = n.string(allow_empty=True)
        try:
            re.compile(text)
        except re.error as e:
            raise n.error(f"invalid regular expression: {e}") from None
        return text

    def process(n: Node) -> str:
        name = n.string()
        # /proc/<pid>/comm holds at most TASK_COMM_LEN - 1 = 15 bytes.
        if len(name.encode()) > 15 or "/" in name:
            raise n.error(f"process name {_show(name)} is longer than the kernel's 15-byte "
                          "comm or contains '/' (use the name `ps -o comm` shows)")
        return name

    host = HostConfig(
        collectors=f.opt("collectors", d.collectors, names),
        resolver_process=f.opt("resolver_process", None, process),
        nic_include=f.opt("nic_include", d.nic_include, regex),
        nic_exclude=f.opt("nic_exclude", d.nic_exclude, regex),
    )
    f.done()
    return host




def _dns_label(n: Node, what: str) -> str:
    s = n.string()
    if not _DNS_LABEL_RE.match(s):
        raise n.error(f"{_show(s)} is not usable as a DNS label in {what} (letters, digits, "
                      "- and _; at most 63)")
    return s


def _parse_consul_service(node: Node) -> ConsulService:
    if isinstance(node.value, str):
        return ConsulService(name=_dns_label(node, "a service name"))
    f = node.fields()
    svc = ConsulService(name=_dns_label(f.req("name"), "a service name"),
                        tag=f.opt("tag", None, lambda n: _dns_label(n, "a tag")))
    f.done()
    return svc


def _http_address(n: Node) -> str:
    s = n.string().strip()
    m = _HTTP_URL_RE.match(s)
    if not m:
        raise n.error(f"{_show(s)} is not an http:// or https:// address with host and "
                      "optional port, and no path")
    if m.group(3) and not 0 < int(m.group(3)) < 65536:
        raise n.error(f"invalid port {_show(m.group(3))}")
    return s.rstrip("/")


def _parse_consul_agent(node: Node) -> ConsulAgent:
    f = node.fields()
    name = f.req("name").string()
    dns_node = f.get("dns_address")
    dns_text = dns_node.string() if f.has("dns_address") else CONSUL_DEFAULT_DNS
    try:
        host, port, scope = parse_address(dns_text, default_port=CONSUL_DNS_PORT)
    except ValueError as e:
        raise dns_node.error(str(e)) from None
    agent = ConsulAgent(
        name=name, dns_host=host, dns_port=port, dns_scope_id=scope,
        http_address=f.opt("http_address", CONSUL_DEFAULT_HTTP, _http_address),
        token_file=f.opt("token_file", None, lambda n: n.string()),
        data_dir=f.opt("data_dir", None, lambda n: n.string()),
        dns_only_passing=f.opt("dns_only_passing", False, Node.boolean),
        a_record_limit=f.opt("a_record_limit", None, lambda n: n.integer(minimum=1)),
    )
    f.done()
    return agent


def _parse_consul(node: Node) -> ConsulConfig:
    f = node.fields()
    none: list[Node] = []
    agents = tuple(_parse_consul_agent(a) for a in f.opt("agents", none, Node.sequence))
    seen: set[str] = set()
    for i, a in enumerate(agents):
        if a.name in seen:
            raise node.child("agents").child(i).error(f"duplicate agent name {_show(a.name)}")
        seen.add(a.name)
    services = tuple(_parse_consul_service(s) for s in f.opt("services", none, Node.sequence))
    labels: set[str] = set()
    for i, svc in enumerate(services):
        if svc.label in labels:
            raise node.child("services").child(i).error(
                f"service {_show(svc.label)} is listed twice")
        labels.add(svc.label)
    queries: list[str] = []
    for q in f.opt("prepared_queries", none, Node.sequence):
        name = _dns_label(q, "a prepared query name")
        if name in queries:
            raise q.error(f"prepared query {_show(name)} is listed twice")
        queries.append(name)
    cfg = ConsulConfig(
        agents=agents, services=services, prepared_queries=tuple(queries),
        timeout=f.opt("timeout", 2.0, lambda n: n.duration(maximum=60)))
    f.done()
    if agents and not services and not queries:
        raise node.error("agents are configured but no services or prepared_queries to watch")
    return cfg


def _parse_allowlist(node: Node) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    out = []
    for item in node.sequence():
        try:
            out.append(ipaddress.ip_network(item.string(), strict=False))
        except ValueError as e:
            raise item.error(f"invalid CIDR: {e}") from None
    return tuple(out)


def _parse_resolv_conf(node: Node) -> tuple[ResolvConfWatch, ...]:
    out: list[ResolvConfWatch] = []
    for item in node.sequence():
        if isinstance(item.value, str):
            path_node, f = item, None
        else:
            f = item.fields()
            path_node = f.req("path")
        path = path_node.string()
        if not path.startswith("/"):
            raise path_node.error(f"path must be absolute, got {_show(path)}")
        if any(w.path == path for w in out):
            raise path_node.error(f"duplicate resolv.conf {_show(path)}")
        if f is None:
            out.append(ResolvConfWatch(path=path))
            continue
        qname = f.opt("query_name", ".", lambda n: n.string())
        try:
            encode_name(qname)
        except ValueError as e:
            raise f.get("query_name").error(f"invalid name {_show(qname)}: {e}") from None
        qtype = f.opt("query_type", "NS", lambda n: n.string().upper())
        try:
            dns.rdatatype.from_text(qtype)
        except (dns.rdatatype.UnknownRdatatype, ValueError):
            raise f.get("query_type").error(f"unknown query type {_show(qtype)}") from None
        out.append(ResolvConfWatch(
            path=path, query_name=qname, query_type=qtype,
            probe_timeout=f.opt("probe_timeout", 1.0, lambda n: n.duration(maximum=30))))
        f.done()
    return tuple(out)


def parse(data: Any, *, source: str) -> Config:
    """Validate a loaded YAML document into a :class:`Config`."""
    root = Node(source, "", data if data is not None else {})
    f = root.fields()
    modules: dict[str, Module] = {}
    module_nodes: list[tuple[str, Node]] = f.opt("modules", [], lambda n: list(n.items()))
    for name, mnode in module_nodes:
        modules[name] = _parse_module(name, mnode)
    target_nodes: list[Node] = f.opt("targets", [], Node.sequence)
    targets = tuple(_parse_target(t, modules) for t in target_nodes)
    seen: set[tuple[str, str]] = set()
    for i, t in enumerate(targets):
        if (t.address, t.module) in seen:
            raise root.child("targets").child(i).error(
                f"duplicate target {_show(t.address)} with module {_show(t.module)}")
        seen.add((t.address, t.module))
    _check_one_internals_entry(root, targets)
    limits = f.opt("limits", Limits(), _parse_limits)
    if len(targets) > limits.max_targets:
        raise root.child("targets").error(
            f"{len(targets)} targets exceed limits.max_targets ({limits.max_targets})")
    cfg = Config(
        source=source,
        modules=modules,
        targets=targets,
        limits=limits,
        host=f.opt("host", HostConfig(), _parse_host),
        resolver=f.opt("resolver", ResolverConfig(), _parse_resolver),
        probe_allowlist=f.opt("probe_allowlist", (), _parse_allowlist),
        consul=f.opt("consul", ConsulConfig(), _parse_consul),
        resolv_conf=f.opt("resolv_conf", DEFAULT_RESOLV_CONF, _parse_resolv_conf),
        raw=data if isinstance(data, dict) else {},
    )
    f.done()
    if not any(f.has(key) for key in MONITORING_KEYS):
        # An empty or truncated file (`: > dnsfleet.yml`, a half-written deploy) must not
        # quietly turn every probe series off: then no probe alert can ever fire.
        raise root.error(
            ("the file is empty" if not f.node.value else "nothing to monitor")
            + ": it has no targets, resolv_conf or consul section (write `targets: []` to "
            "run only the host collectors on purpose)")
    return cfg


# A config must set at least one of these, if only to an empty list (see parse); a key
# with no value (`targets:`, as a file cut short leaves it) does not count.
MONITORING_KEYS = ("targets", "resolv_conf", "consul")


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


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe loading that refuses duplicate keys, as Go's yaml.v2/v3 strict decoding does
    (the YAML spec says keys are unique; PyYAML keeps the last one silently)."""


def _unique_mapping(loader: Any, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable: construct_mapping says so
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return dict(loader.construct_mapping(node, deep=True))


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _unique_mapping)


def read_yaml_mapping(path: str | Path) -> dict[str, Any] | None:
    """A YAML file whose top level is a mapping (None when empty); ConfigError naming the
    file, and the line and column of a YAML error, otherwise."""
    path = str(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    try:
        # libyaml's loader when present: a 1,000-target file composes in a fraction of the
        # time and peak memory of the pure-Python one.
        data = yaml.load(text, Loader=_StrictLoader)
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {_kind(data)}")
    return data


def load(path: str | Path) -> Config:
    """Read and validate; ConfigError (file, key path, problem) for every bad input."""
    data = read_yaml_mapping(path)
    try:
        return parse(data, source=str(path))
    except ConfigError:
        raise
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply") from None
    except Exception as e:  # a validator that missed a case must not become a traceback
        raise ConfigError(f"{path}: invalid configuration ({type(e).__name__}: {e})") from None


DEFAULT_MODULE = Module(name="recursive")


def builtin_default(nameservers: list[str]) -> Config:
    """The configuration ``dnsfleet-exporter`` runs with no --config.file: probe every
    nameserver of the host's resolv.conf with the ``recursive`` module."""
    targets = []
    for ns in nameservers:
        try:
            host, port, scope = parse_address(ns)
        except ValueError:
            continue
        targets.append(Target(address=ns, host=host, port=port, module="recursive",
                              scope_id=scope))
    return Config(source=BUILTIN_SOURCE, modules={"recursive": DEFAULT_MODULE},
                  targets=tuple(targets))


def to_yaml(cfg: Config) -> str:
    """The effective configuration, defaults filled in (served on /config)."""
    doc: dict[str, Any] = {
        "modules": {
            m.name: {k: (list(v) if isinstance(v, tuple) else v)
                     for k, v in m.__dict__.items() if k != "name"}
            for m in cfg.modules.values()
        },
        "targets": [
            {"address": t.address, "module": t.module, "labels": dict(t.labels),
             **({"stats": {k: ("<secret>" if k == "api_key" else v)
                           for k, v in t.stats.__dict__.items() if v not in (None, "")}}
                if t.stats else {}),
             **({"capacity_qps": t.capacity_qps} if t.capacity_qps is not None else {}),
             **({"backends": t.backends} if t.backends != "single" else {})}
            for t in cfg.targets
        ],
        "limits": dict(cfg.limits.__dict__),
        "host": {"collectors": list(cfg.host.collectors),
                 "resolver_process": cfg.host.resolver_process,
                 "nic_include": cfg.host.nic_include,
                 "nic_exclude": cfg.host.nic_exclude},
        "resolver": dict(cfg.resolver.__dict__),
        "probe_allowlist": [str(n) for n in cfg.probe_allowlist],
        "consul": _consul_yaml(cfg.consul),
        "resolv_conf": [dict(w.__dict__) for w in cfg.resolv_conf],
    }
    return f"# source: {cfg.source}\n" + yaml.safe_dump(doc, sort_keys=False)


def _consul_yaml(c: ConsulConfig) -> dict[str, Any]:
    def dns(a: ConsulAgent) -> str:
        return f"[{a.dns_host}]:{a.dns_port}" if ":" in a.dns_host else f"{a.dns_host}:{a.dns_port}"

    return {
        # token_file is a path, never the token; the token is not in the config at all.
        "agents": [{"name": a.name, "dns_address": dns(a), "http_address": a.http_address,
                    "token_file": a.token_file, "data_dir": a.data_dir,
                    "dns_only_passing": a.dns_only_passing,
                    "a_record_limit": a.a_record_limit} for a in c.agents],
        "services": [{"name": s.name, "tag": s.tag} for s in c.services],
        "prepared_queries": list(c.prepared_queries),
        "timeout": c.timeout,
    }
