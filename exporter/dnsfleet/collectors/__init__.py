"""Collectors, one per subsystem, listed explicitly (node_exporter's ``collector/``).

Each collector module exposes ``COLLECTOR``; this list is the only registration.
"""

from __future__ import annotations

from dnsfleet.collectors import consul, stub
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
)

COLLECTORS: dict[str, Collector] = {c.name: c for c in _ALL}

__all__ = ["COLLECTORS", "CollectContext", "Collector", "CollectorError", "host_collector",
           "run_collectors"]
