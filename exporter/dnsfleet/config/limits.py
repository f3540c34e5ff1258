"""``limits``: how much the exporter takes on at once."""

from __future__ import annotations

from dataclasses import dataclass

from dnsfleet.config.reader import Node


@dataclass(frozen=True)
class Limits:
    max_concurrent_probes: int = 1024
    max_targets: int = 20000
    # Subtracted from X-Prometheus-Scrape-Timeout-Seconds (blackbox's --timeout-offset).
    scrape_timeout_offset: float = 0.5
    # Used when Prometheus sends no timeout header.
    default_scrape_timeout: float = 10.0



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

