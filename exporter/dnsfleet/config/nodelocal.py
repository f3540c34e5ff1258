"""``nodelocal``: the node's NodeLocal DNSCache and the fallback its pods have."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import dns.rdatatype

from dnsfleet.config.checks import (
    JSON,
    Check,
    Duration,
    ListOf,
    String,
    check_needs,
    key,
    read_keys,
)
from dnsfleet.config.concepts import DnsName, QueryType
from dnsfleet.config.reader import Node
from dnsfleet.config.values import quote

# Linux's IFNAMSIZ is 16 with the terminating NUL.
MAX_IFNAME = 15


class IPv4Address(Check):
    """An IPv4 address written plainly (node-local-dns and kube-dns addresses are IPv4 in
    every kubelet ``clusterDNS`` we model; an IPv6 cluster can be added when needed)."""

    def read(self, node: Node) -> str:
        text = node.string()
        try:
            return str(ipaddress.IPv4Address(text))
        except ValueError:
            raise node.error(f"{quote(text)} is not an IPv4 address") from None

    def schema(self) -> JSON:
        return {"type": "string", "format": "ipv4"}


@dataclass(frozen=True)
class NodeLocalConfig:
    """NodeLocal DNSCache on this node: its address, the cluster DNS Service it forwards to,
    and what the node's pods have in their resolv.conf."""

    address: str | None = field(
        default=None,
        metadata=key(
            IPv4Address(),
            doc="The cache's link-local address (169.254.20.10); unset: the nodelocal "
            "collector does not run",
        ),
    )
    cluster_dns: str | None = field(
        default=None,
        metadata=key(
            IPv4Address(),
            needs="address",
            doc="The cluster DNS Service address (kube-dns ClusterIP) the cache forwards to",
        ),
    )
    pod_nameservers: tuple[str, ...] = field(
        default=(),
        metadata=key(
            ListOf(IPv4Address()),
            needs="address",
            doc="kubelet's clusterDNS: the nameservers pods' resolv.conf lists, in order "
            "(default: the cache's address alone)",
        ),
    )
    interface: str = field(
        default="nodelocaldns",
        metadata=key(String(), doc="The dummy interface node-cache puts its addresses on"),
    )
    query_name: str = field(
        default="kubernetes.default.svc.cluster.local.",
        metadata=key(DnsName(), doc="What a pod would ask"),
    )
    query_type: str = field(default="A", metadata=key(QueryType()))
    probe_timeout: float = field(
        default=1.0,
        metadata=key(
            Duration(maximum=30),
            doc="How long the cache or the Service may take before it counts as down",
        ),
    )

    @property
    def qtype(self) -> int:
        return int(dns.rdatatype.from_text(self.query_type))

    @property
    def nameservers(self) -> tuple[str, ...]:
        if self.pod_nameservers or self.address is None:
            return self.pod_nameservers
        return (self.address,)


def parse_nodelocal(node: Node) -> NodeLocalConfig:
    f = node.fields()
    cfg = NodeLocalConfig(**read_keys(f, NodeLocalConfig))
    check_needs(f, cfg)
    if cfg.address is not None and cfg.cluster_dns is None:
        raise node.error("cluster_dns is required with address: the cache forwards to it")
    if len(cfg.interface) > MAX_IFNAME or "/" in cfg.interface:
        raise f.get("interface").error(
            f"interface {quote(cfg.interface)} is not a Linux interface name (at most "
            f"{MAX_IFNAME} bytes, no '/')"
        )
    if cfg.address is not None and cfg.address == cfg.cluster_dns:
        raise f.get("cluster_dns").error("cluster_dns is the cache's own address")
    f.done()
    return cfg
