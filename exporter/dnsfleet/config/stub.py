"""``resolv_conf``: the stub resolver configurations whose failover is modelled (issue 3)."""

from __future__ import annotations

from dataclasses import dataclass

import dns.rdatatype

from dnsfleet.config.reader import Node, _show
from dnsfleet.dnswire import encode_name


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
