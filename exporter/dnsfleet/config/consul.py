"""``consul``: agents, services and prepared queries watched."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

from dnsfleet.config.addresses import Address, Endpoint
from dnsfleet.config.checks import (
    Boolean,
    Duration,
    Integer,
    ListOf,
    Section,
    ShortSection,
    String,
    key,
    read_keys,
)
from dnsfleet.config.concepts import DnsLabel, HttpAddress
from dnsfleet.config.reader import Node
from dnsfleet.config.values import quote

CONSUL_DNS_PORT = 8600
CONSUL_DEFAULT_DNS = Endpoint("127.0.0.1", CONSUL_DNS_PORT)
CONSUL_DEFAULT_HTTP = "http://127.0.0.1:8500"


@dataclass(frozen=True)
class ConsulService:
    """A service to watch; ``tag`` narrows it as ``<tag>.<name>.service.consul`` does."""

    name: str = field(metadata=key(DnsLabel("a service name")))
    tag: str | None = field(default=None, metadata=key(DnsLabel("a tag")))

    @property
    def label(self) -> str:
        """The ``service`` label: the DNS prefix, ``[tag.]name``."""
        return f"{self.tag}.{self.name}" if self.tag else self.name


def _parse_consul_service(node: Node) -> ConsulService:
    if isinstance(node.value, str):
        return ConsulService(name=DnsLabel("a service name").read(node))
    f = node.fields()
    svc = ConsulService(**read_keys(f, ConsulService))
    f.done()
    return svc


@dataclass(frozen=True)
class ConsulAgent:
    name: str = field(metadata=key(String()))
    dns: Endpoint = field(
        default=CONSUL_DEFAULT_DNS,
        metadata=key(Address(default_port=CONSUL_DNS_PORT), name="dns_address"),
    )
    http_address: str = field(default=CONSUL_DEFAULT_HTTP, metadata=key(HttpAddress()))
    token_file: str | None = field(
        default=None,
        metadata=key(
            String(),
            doc="Path of a file holding the ACL token; read on every scrape so a "
            "rotated token is picked up without a reload. The token itself is "
            "never logged or served on /config.",
        ),
    )
    data_dir: str | None = field(
        default=None,
        metadata=key(
            String(), doc="The agent's data_dir; raft.db is <data_dir>/raft/raft.db on servers"
        ),
    )
    dns_only_passing: bool = field(
        default=False,
        metadata=key(
            Boolean(),
            doc="Must mirror the agent's dns_config.only_passing: when false (Consul's "
            "default) DNS also serves instances whose checks are only warning",
        ),
    )
    a_record_limit: int | None = field(
        default=None,
        metadata=key(
            Integer(minimum=1),
            doc="Must mirror the agent's dns_config.a_record_limit, if set: "
            "DNS then serves at most this many A records, so fewer "
            "answers than passing instances is no mismatch",
        ),
    )

    @property
    def dns_family(self) -> socket.AddressFamily:
        return self.dns.family

    @property
    def dns_sockaddr(self) -> tuple[str, int] | tuple[str, int, int, int]:
        return self.dns.sockaddr


def _parse_consul_agent(node: Node) -> ConsulAgent:
    f = node.fields()
    agent = ConsulAgent(**read_keys(f, ConsulAgent))
    f.done()
    return agent


@dataclass(frozen=True)
class ConsulConfig:
    agents: tuple[ConsulAgent, ...] = field(
        default=(), metadata=key(ListOf(Section(ConsulAgent, _parse_consul_agent)))
    )
    services: tuple[ConsulService, ...] = field(
        default=(),
        metadata=key(
            ListOf(
                ShortSection(ConsulService, _parse_consul_service, short=DnsLabel("a service name"))
            ),
            doc="Service names, or {name, tag} to narrow by tag",
        ),
    )
    prepared_queries: tuple[str, ...] = field(
        default=(), metadata=key(ListOf(DnsLabel("a prepared query name")))
    )
    timeout: float = field(default=2.0, metadata=key(Duration(maximum=60)))


def parse_consul(node: Node) -> ConsulConfig:
    f = node.fields()
    cfg = ConsulConfig(**read_keys(f, ConsulConfig))
    seen: set[str] = set()
    for i, a in enumerate(cfg.agents):
        if a.name in seen:
            raise node.child("agents").child(i).error(f"duplicate agent name {quote(a.name)}")
        seen.add(a.name)
    labels: set[str] = set()
    for i, svc in enumerate(cfg.services):
        if svc.label in labels:
            raise (
                node.child("services").child(i).error(f"service {quote(svc.label)} is listed twice")
            )
        labels.add(svc.label)
    queries: set[str] = set()
    for i, q in enumerate(cfg.prepared_queries):
        if q in queries:
            raise (
                node.child("prepared_queries")
                .child(i)
                .error(f"prepared query {quote(q)} is listed twice")
            )
        queries.add(q)
    f.done()
    if cfg.agents and not cfg.services and not cfg.prepared_queries:
        raise node.error("agents are configured but no services or prepared_queries to watch")
    return cfg
