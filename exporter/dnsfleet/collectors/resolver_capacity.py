"""Resolver capacity: the figure declared per target (``capacity_qps``) or measured by
``dnsfleet capacity-test`` (the state file at ``resolver.capacity_file``).

A declared figure wins over a measured one: the operator knows limits resperf does not see
(upstream bandwidth, licence, a load balancer in front). The state file is re-read only when
its mtime or size changes.
"""

from __future__ import annotations

import asyncio

from dnsfleet.capacity import Measurement, address_key, read_state
from dnsfleet.collectors.base import CollectContext, Collector
from dnsfleet.collectors.resolver import resolver_labels
from dnsfleet.config import Config, Target
from dnsfleet.exposition import Family

STATE_KEY = "resolver_capacity"


def capacity_families(cfg: Config, measured: dict[str, Measurement]) -> list[Family]:
    """Pure: one series per resolver address that has a figure."""
    cap = Family("dnsfleet_resolver_capacity_qps",
                 "Queries per second the resolver can answer: capacity_qps from the config, "
                 "else the last `dnsfleet capacity-test` measurement.")
    when = Family("dnsfleet_resolver_capacity_measured_timestamp_seconds",
                  "When `dnsfleet capacity-test` measured the capacity of the resolver.")
    chosen: dict[str, Target] = {}
    for t in cfg.targets:
        key = address_key(t.host, t.port)
        # The entry carrying capacity_qps or stats names the resolver; else the first one.
        if key not in chosen or (t.capacity_qps is not None or
                                 (t.stats is not None and chosen[key].capacity_qps is None)):
            chosen[key] = t
    for key, t in chosen.items():
        labels = resolver_labels(t)
        m = measured.get(key)
        if t.capacity_qps is not None:
            cap.add_raw(labels, t.capacity_qps)
        elif m is not None:
            cap.add_raw(labels, m.capacity_qps)
        if m is not None:
            when.add_raw(labels, m.measured_at)
    return [cap, when]


def _load(ctx: CollectContext) -> dict[str, Measurement]:
    # A host path, like every file the exporter reads: under --path.rootfs in a container.
    path = str(ctx.fs.root(ctx.config.resolver.capacity_file))
    try:
        st = ctx.fs.stat(path)
    except FileNotFoundError:
        return {}
    stamp = (path, st.st_mtime_ns, st.st_size)
    cached = ctx.state.get(STATE_KEY)
    if cached is not None and cached[0] == stamp:
        return dict(cached[1])
    measured = read_state(path)
    ctx.state[STATE_KEY] = (stamp, measured)
    return measured


async def collect(ctx: CollectContext) -> list[Family]:
    measured = await asyncio.to_thread(_load, ctx)
    return capacity_families(ctx.config, measured)


COLLECTOR = Collector(name="resolver_capacity", run=collect,
                      enabled=lambda cfg: bool(cfg.targets))
