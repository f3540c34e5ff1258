"""Collectors, one per subsystem, listed explicitly (node_exporter's ``collector/``).

Each collector module exposes ``COLLECTOR``; this list is the only registration.
"""

from __future__ import annotations

from dnsfleet.collectors import bonding, consul, cpu_latency, nic, resolver, resolver_capacity, stub
from dnsfleet.collectors.base import (
    CollectContext,
    Collector,
    CollectorError,
    host_collector,
    run_collectors,
)

_ALL: tuple[Collector, ...] = (
    consul.COLLECTOR,
    stub.COLLECTOR,
    resolver.COLLECTOR,
    resolver_capacity.COLLECTOR,
    bonding.COLLECTOR,
    nic.COLLECTOR,
    cpu_latency.COLLECTOR,
)

COLLECTORS: dict[str, Collector] = {c.name: c for c in _ALL}

__all__ = ["COLLECTORS", "CollectContext", "Collector", "CollectorError", "host_collector",
           "run_collectors"]
