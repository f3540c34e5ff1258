"""``limits``: how much the exporter takes on at once."""

from __future__ import annotations

from dataclasses import dataclass, field

from dnsfleet.config.checks import Duration, Integer, key, read_section
from dnsfleet.config.reader import Node


@dataclass(frozen=True)
class Limits:
    max_concurrent_probes: int = field(
        default=1024, metadata=key(Integer(minimum=1, maximum=65536))
    )
    max_targets: int = field(default=20000, metadata=key(Integer(minimum=1)))
    scrape_timeout_offset: float = field(
        default=0.5,
        metadata=key(
            Duration(minimum=-0.000001, maximum=10),
            doc="Subtracted from X-Prometheus-Scrape-Timeout-Seconds (blackbox's --timeout-offset)",
        ),
    )
    default_scrape_timeout: float = field(
        default=10.0,
        metadata=key(Duration(maximum=600), doc="Used when Prometheus sends no timeout header"),
    )


def parse_limits(node: Node) -> Limits:
    return read_section(node, Limits)
