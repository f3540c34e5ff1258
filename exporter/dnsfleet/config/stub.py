"""``resolv_conf``: the stub resolver configurations whose failover is modelled."""

from __future__ import annotations

from dataclasses import dataclass, field

import dns.rdatatype

from dnsfleet.config.checks import Duration, key, read_keys
from dnsfleet.config.concepts import AbsolutePath, DnsName, QueryType
from dnsfleet.config.reader import Node
from dnsfleet.config.values import quote


@dataclass(frozen=True)
class ResolvConfWatch:
    """A resolv.conf whose clients' failover the stub collector models."""

    path: str = field(
        metadata=key(AbsolutePath(), doc="As the host sees it; read through --path.rootfs")
    )
    query_name: str = field(
        default=".", metadata=key(DnsName(), doc="What a client of this file would ask")
    )
    query_type: str = field(default="NS", metadata=key(QueryType()))
    probe_timeout: float = field(
        default=1.0,
        metadata=key(
            Duration(maximum=30),
            # Deliberately shorter than resolv.conf's timeout: a scrape must not wait 5 s to
            # learn a server is blackholed.
            doc="How long a nameserver may take before it counts as silent",
        ),
    )

    @property
    def qtype(self) -> int:
        return int(dns.rdatatype.from_text(self.query_type))


DEFAULT_RESOLV_CONF: tuple[ResolvConfWatch, ...] = (ResolvConfWatch(path="/etc/resolv.conf"),)


def _parse_resolv_conf_entry(node: Node) -> ResolvConfWatch:
    if isinstance(node.value, str):
        return ResolvConfWatch(path=AbsolutePath().read(node))
    f = node.fields()
    watch = ResolvConfWatch(**read_keys(f, ResolvConfWatch))
    f.done()
    return watch


def parse_resolv_confs(node: Node) -> tuple[ResolvConfWatch, ...]:
    out: list[ResolvConfWatch] = []
    for item in node.sequence():
        watch = _parse_resolv_conf_entry(item)
        if any(w.path == watch.path for w in out):
            where = item if isinstance(item.value, str) else item.child("path")
            raise where.error(f"duplicate resolv.conf {quote(watch.path)}")
        out.append(watch)
    return tuple(out)
