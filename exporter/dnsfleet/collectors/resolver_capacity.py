"""Resolver capacity: the figure declared per target (``capacity_qps``) and the cache-hit and
cache-miss figures measured by ``dnsfleet capacity-test`` (the state file at
``resolver.capacity_file``), each with its ``kind``.

All figures are exported; the recording rules (alerts/rules/capacity.rules.yml) choose: a
declared figure wins (the operator knows limits resperf does not see: upstream bandwidth,
licence, a load balancer in front), then the hit/miss mix at the live cache-hit ratio. The
state file is re-read only when its mtime or size changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from dnsfleet.capacity.model import State, read_state
from dnsfleet.collectors.base import CollectContext, Collector, on_host_lane
from dnsfleet.config import Config, Target
from dnsfleet.exposition import Family, Labels, labelset

STATE_KEY = "resolver_capacity"
RESOLVERS_KEY = "resolver_capacity.resolvers"
Resolvers = dict[str, Target]  # resolver address key -> the configured entry naming it


@dataclass(frozen=True, slots=True)
class CapacityFigure:
    """One exported capacity figure (for the status page)."""

    address: str
    kind: str  # declared, hit, miss
    qps: float
    lower_bound: bool  # the run never reached its loss limit


def capacity_families(
    cfg: Config, measured: State, resolvers: Resolvers | None = None
) -> list[Family]:
    """Pure: the figures of every resolver address that has one, by kind: ``declared``
    (``capacity_qps`` in the config), ``hit`` and ``miss`` (measured). ``resolvers``:
    the entries of ``cfg`` naming the resolvers to look at (default: every resolver)."""
    cap = Family(
        "dnsfleet_resolver_capacity_qps",
        "Queries per second the resolver can answer, by kind: declared (capacity_qps "
        "in the config), hit (all queries cached) or miss (no query cached), the last "
        "two measured by `dnsfleet capacity-test`.",
    )
    lower = Family(
        "dnsfleet_resolver_capacity_lower_bound",
        "1 if the measured capacity is a lower bound: the run never reached its "
        "loss limit (the ramp or the sending client ended first).",
    )
    when = Family(
        "dnsfleet_resolver_capacity_measured_timestamp_seconds",
        "When `dnsfleet capacity-test` measured the capacity of the resolver.",
    )
    contradiction = Family(
        "dnsfleet_resolver_capacity_contradiction",
        "1 for each reason the last `dnsfleet capacity-test` of this kind is no capacity "
        "(client_bound, spread, miss_above_hit); dnsfleet_resolver_capacity_qps is then "
        "absent for the kind.",
    )
    spread = Family(
        "dnsfleet_resolver_capacity_spread_ratio",
        "(max - min) / median of the repeated capacity-test runs of this kind that the "
        "resolver limited.",
    )
    for key, t in (_resolvers(cfg) if resolvers is None else resolvers).items():

        def labels(kind: str, t: Target = t) -> Labels:
            return labelset([("target", t.address), ("kind", kind), *t.labels])

        if t.capacity_qps is not None:
            cap.add_raw(labels("declared"), t.capacity_qps)
        for kind, m in sorted(measured.get(key, {}).items()):
            kl = labels(kind)
            when.add_raw(kl, m.measured_at)
            if m.spread is not None:
                spread.add_raw(kl, m.spread)
            # A figure known to be wrong must not feed the headroom rules.
            for reason in m.contradictions:
                contradiction.add_raw(kl.with_(("reason", reason)), 1.0)
            if m.contradictions:
                continue
            cap.add_raw(kl, m.capacity_qps)
            lower.add_raw(kl, 1.0 if m.lower_bound else 0.0)
    return [cap, lower, when, contradiction, spread]


def capacity_figures(
    cfg: Config, measured: State, resolvers: Resolvers | None = None
) -> list[CapacityFigure]:
    """Pure: what capacity_families exports as dnsfleet_resolver_capacity_qps, as records."""
    out: list[CapacityFigure] = []
    for key, t in (_resolvers(cfg) if resolvers is None else resolvers).items():
        if t.capacity_qps is not None:
            out.append(CapacityFigure(t.address, "declared", t.capacity_qps, False))
        out.extend(
            CapacityFigure(t.address, kind, m.capacity_qps, m.lower_bound)
            for kind, m in sorted(measured.get(key, {}).items())
            if not m.contradictions
        )
    return out


def _resolvers(cfg: Config) -> Resolvers:
    """The configured entry that names each resolver address."""
    chosen: dict[str, Target] = {}
    for t in cfg.targets:
        key = t.endpoint.key()
        # The entry carrying capacity_qps or stats names the resolver; else the first one.
        if key not in chosen or (
            t.capacity_qps is not None or (t.stats is not None and chosen[key].capacity_qps is None)
        ):
            chosen[key] = t
    return chosen


def _load(ctx: CollectContext) -> State:
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


def _with_figures(ctx: CollectContext, measured: State) -> Resolvers:
    """The resolvers that have a figure, in configuration order: those declaring
    ``capacity_qps`` and those ``measured``. Which entry names each resolver is worked out
    once per configuration: walking every target twice a scrape cost 2.6 ms at 1,000
    targets, nearly all of it for resolvers with no figure at all."""
    cfg = ctx.config
    cached = ctx.state.get(RESOLVERS_KEY)
    if cached is None or cached[0] is not cfg:
        named = _resolvers(cfg)
        declared = {k: t for k, t in named.items() if t.capacity_qps is not None}
        cached = ctx.state[RESOLVERS_KEY] = (cfg, named, declared)
    _, named, declared = cached
    if not measured:
        return dict(declared)
    return {k: t for k, t in named.items() if t.capacity_qps is not None or k in measured}


async def collect(ctx: CollectContext) -> list[Family]:
    # The stat (and, when it changed, the read) of the file on the host lane, beside the
    # host collectors' reads: a thread of its own each scrape (asyncio.to_thread) cost a
    # hand-off and a wake of the loop of its own, ~50 us, for a stat of ~4 us.
    measured = await on_host_lane(ctx, lambda: _load(ctx))
    chosen = _with_figures(ctx, measured)
    ctx.findings.add(*capacity_figures(ctx.config, measured, chosen))
    return capacity_families(ctx.config, measured, chosen)


COLLECTOR = Collector(name="resolver_capacity", run=collect, enabled=lambda cfg: bool(cfg.targets))
