"""``resolver``: resolver internals (issue 4)."""

from __future__ import annotations

from dataclasses import dataclass

from dnsfleet.config.reader import Node

DEFAULT_CAPACITY_FILE = "/var/lib/dnsfleet/capacity.json"


@dataclass(frozen=True)
class ResolverConfig:
    """Resolver internals (issue 4)."""

    # Written by `dnsfleet capacity-test`, read by the exporter.
    capacity_file: str = DEFAULT_CAPACITY_FILE



def _parse_resolver(node: Node) -> ResolverConfig:
    f = node.fields()
    cfg = ResolverConfig(capacity_file=f.opt("capacity_file", DEFAULT_CAPACITY_FILE,
                                             lambda n: n.string()))
    f.done()
    return cfg
