"""NodeLocal DNSCache: whether the node's cache answers, and what its pods get when not.

node-cache (k8s.io/dns, a CoreDNS build) runs on every node with its addresses on a dummy
interface (``nodelocaldns``): the link-local 169.254.20.10, and in kube-proxy's iptables
mode the cluster DNS Service address too, with NOTRACK rules so queries to either stay on
the node. Its CoreDNS statistics are a ``type: coredns`` target (the resolver collector).
This collector probes the cache and the Service from the node, reads whether the dummy
interface exists (through the host door: /sys/class/net), and models the pods' view:

- pods' resolv.conf names the cache (``clusterDNS: 169.254.20.10``): the cache answers,
  else the next nameserver of that file if it is the Service and answers
  (``resolv_conf_fallback``), else nothing;
- pods name only the Service (iptables mode): while the dummy interface exists the node
  owns the Service address, so the cache answers or nothing does (a crashed node-cache
  that left its interface behind black-holes every pod); once node-cache removed its
  interface and rules on exit, the queries fall through to kube-proxy and the Service
  (``iptables_fallback``).
"""

from __future__ import annotations

import asyncio
import enum
import socket
from dataclasses import dataclass

import dns.rcode

from dnsfleet.collectors.base import DEADLINE_MARGIN, CollectContext, Collector
from dnsfleet.config import Module, NodeLocalConfig
from dnsfleet.dnswire import build_query
from dnsfleet.exposition import Family
from dnsfleet.hostfs import HostFS
from dnsfleet.probes import ProbeResult, probe

MIN_PROBE_TIMEOUT = 0.05
DNS_PORT = 53


class PodPath(enum.Enum):
    """Who answers the node's pods (a closed set: the ``path`` label)."""

    NODELOCAL = "nodelocal"
    RESOLV_CONF_FALLBACK = "resolv_conf_fallback"
    IPTABLES_FALLBACK = "iptables_fallback"
    NONE = "none"


@dataclass(frozen=True)
class NodeView:
    cache_up: bool
    service_up: bool
    interface_present: bool


def pod_path(view: NodeView, *, cache: str, service: str, nameservers: tuple[str, ...]) -> PodPath:
    """What the pods' lookups reach, from the node's facts and the pods' nameservers."""
    if cache in nameservers:
        if view.cache_up:
            return PodPath.NODELOCAL
        # glibc and musl both move on to the next nameserver of the file; an earlier entry
        # that is neither the cache nor the Service is not modelled (a node has none).
        after = nameservers[nameservers.index(cache) + 1 :]
        if service in after and view.service_up:
            return PodPath.RESOLV_CONF_FALLBACK
        return PodPath.NONE
    if service not in nameservers:
        return PodPath.NONE
    if view.interface_present:
        # The Service address is the node's own while the interface carries it: the node's
        # probe of it reached the cache, not the Service.
        return PodPath.NODELOCAL if view.cache_up else PodPath.NONE
    return PodPath.IPTABLES_FALLBACK if view.service_up else PodPath.NONE


def answered(result: ProbeResult) -> bool:
    return result.rcode in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN)


async def _ask(cfg: NodeLocalConfig, address: str, timeout: float) -> ProbeResult:
    module = Module(
        name="nodelocal",
        query_name=cfg.query_name,
        query_type=cfg.query_type,
        transport="udp",
    )
    query = build_query(
        cfg.query_name,
        cfg.qtype,
        module.qclass,
        recursion_desired=True,
        edns=False,
        payload=1232,
        nsid=False,
    )
    return await probe(
        sockaddr=(address, DNS_PORT),
        family=socket.AF_INET,
        module=module,
        query=query,
        timeout=timeout,
    )


def interface_present(fs: HostFS, name: str) -> bool:
    return fs.exists(fs.sys("class", "net", name))


async def observe(fs: HostFS, cfg: NodeLocalConfig, *, deadline: float) -> NodeView:
    assert cfg.address is not None and cfg.cluster_dns is not None
    loop = asyncio.get_running_loop()
    timeout = max(
        min(cfg.probe_timeout, deadline - loop.time() - DEADLINE_MARGIN), MIN_PROBE_TIMEOUT
    )
    cache, service = await asyncio.gather(
        _ask(cfg, cfg.address, timeout), _ask(cfg, cfg.cluster_dns, timeout)
    )
    present = await asyncio.to_thread(interface_present, fs, cfg.interface)
    return NodeView(
        cache_up=answered(cache), service_up=answered(service), interface_present=present
    )


def families(view: NodeView, path: PodPath) -> list[Family]:
    path_family = Family(
        "dnsfleet_nodelocal_pod_path",
        "Who answers the node's pods: 1 for the current path (nodelocal, "
        "resolv_conf_fallback, iptables_fallback, none), 0 for the others.",
    )
    for p in PodPath:
        path_family.add(1.0 if p is path else 0.0, {"path": p.value})
    return [
        Family("dnsfleet_nodelocal_up", "1 if NodeLocal DNSCache answered the node's probe.").add(
            1.0 if view.cache_up else 0.0
        ),
        Family(
            "dnsfleet_nodelocal_cluster_dns_up",
            "1 if the cluster DNS Service address answered the node's probe (in iptables "
            "mode, while the interface exists, that is the cache answering).",
        ).add(1.0 if view.service_up else 0.0),
        Family(
            "dnsfleet_nodelocal_interface_present",
            "1 if node-cache's dummy interface exists on the node.",
        ).add(1.0 if view.interface_present else 0.0),
        path_family,
    ]


async def collect(ctx: CollectContext) -> list[Family]:
    cfg = ctx.config.nodelocal
    assert cfg.address is not None and cfg.cluster_dns is not None
    view = await observe(ctx.fs, cfg, deadline=ctx.deadline)
    path = pod_path(view, cache=cfg.address, service=cfg.cluster_dns, nameservers=cfg.nameservers)
    return families(view, path)


COLLECTOR = Collector(
    name="nodelocal", run=collect, enabled=lambda cfg: cfg.nodelocal.address is not None
)
