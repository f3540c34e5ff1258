"""``consul``: agents, services and prepared queries watched (issue 6)."""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

from dnsfleet.config.addresses import parse_address
from dnsfleet.config.reader import Node, _show

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
