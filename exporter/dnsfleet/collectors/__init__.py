"""Collectors, one per subsystem, listed explicitly (node_exporter's ``collector/``).

Each collector module exposes ``COLLECTOR``; this list is the only registration. A module
is named for the metric prefix it emits (bond.py: ``dnsfleet_bond_*``); the ``collector``
label keeps the collector's name (``bonding``, ``cpu_latency``).
"""

from __future__ import annotations

from dnsfleet.collectors import (
    bond,
    conntrack,
    consul,
    cpu,
    dnstap,
    nic,
    nodelocal,
    podview,
    resolver,
    resolver_capacity,
    stub,
    zones,
)
from dnsfleet.collectors.base import (
    CollectContext,
    Collector,
    CollectorError,
    close_collectors,
    host_collector,
    run_beside,
    run_collectors,
    socket_demand,
    start_collectors,
)

_ALL: tuple[Collector, ...] = (
    consul.COLLECTOR,
    stub.COLLECTOR,
    resolver.COLLECTOR,
    resolver_capacity.COLLECTOR,
    bond.COLLECTOR,
    nic.COLLECTOR,
    cpu.COLLECTOR,
    conntrack.COLLECTOR,
    zones.COLLECTOR,
    dnstap.COLLECTOR,
    podview.COLLECTOR,
    nodelocal.COLLECTOR,
)

COLLECTORS: dict[str, Collector] = {c.name: c for c in _ALL}

__all__ = [
    "COLLECTORS",
    "CollectContext",
    "Collector",
    "CollectorError",
    "close_collectors",
    "host_collector",
    "run_beside",
    "run_collectors",
    "socket_demand",
    "start_collectors",
]
