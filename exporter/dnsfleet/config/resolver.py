"""``resolver``: resolver internals."""

from __future__ import annotations

from dataclasses import dataclass, field

from dnsfleet.config.checks import String, key, read_section
from dnsfleet.config.reader import Node

DEFAULT_CAPACITY_FILE = "/var/lib/dnsfleet/capacity.json"


@dataclass(frozen=True)
class ResolverConfig:
    """Resolver internals."""

    capacity_file: str = field(
        default=DEFAULT_CAPACITY_FILE,
        metadata=key(String(), doc="Written by `dnsfleet capacity-test`, read by the exporter"),
    )


def parse_resolver(node: Node) -> ResolverConfig:
    return read_section(node, ResolverConfig)
