"""Capacity trend: load against capacity, headroom and days left, for the capacity review."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash

from dashboards.gen.vocabulary import (
    RESOLVER,
    RESOLVER_REC,
    Panel,
    base,
    query,
    tab,
    ts,
    variables,
    with_panels,
)

QPS = f"target:dnsfleet_resolver_queries:rate5m{{{RESOLVER_REC}}}"
EFFECTIVE = f"target:dnsfleet_resolver_capacity_effective:qps{{{RESOLVER_REC}}}"
HEADROOM = f"target:dnsfleet_resolver_capacity_headroom:ratio{{{RESOLVER_REC}}}"
DAYS = f"target:dnsfleet_resolver_capacity_exhaustion:days{{{RESOLVER_REC}}}"
HIT = f"target:dnsfleet_resolver_cache_hit:ratio_rate5m{{{RESOLVER_REC}}}"
KINDS = f"dnsfleet_resolver_capacity_qps{{{RESOLVER}}}"


def capacity_trend() -> dash.Dashboard:
    d = base(
        "dnsfleet-capacity",
        "dnsfleet / Capacity trend",
        "For the capacity review: load against the capacity of today's workload (the "
        "cache-hit and cache-miss capacities mixed at the live cache-hit ratio, or a "
        "declared figure), headroom, days until capacity at the growth of the last two "
        "weeks, per resolver and per site; Kubernetes cluster DNS replicas.",
    )
    d = variables(d, target=True)
    d = d.time("now-14d", "now")
    return with_panels(d, _per_resolver(), _per_site(), _measurements())


def _per_resolver() -> list[Panel]:
    """Load, headroom, days left and cache hits per resolver."""
    return [
        ts(
            "QPS against capacity",
            "Queries per second (5m rate of the "
            "resolver's own counters) against the effective capacity: declared, "
            "else 1 / (h / C_hit + (1 - h) / C_miss) at the live cache-hit ratio h "
            "(basis mix), else the miss or (optimistic) hit figure alone. The "
            "measured figures are drawn too: the gap between hit and miss is what "
            "a falling cache-hit ratio costs.",
            "reqps",
            query(QPS, "{{target}} load"),
            query(EFFECTIVE, "{{target}} effective capacity ({{basis}})"),
            query(KINDS, "{{target}} {{kind}} capacity"),
            width=24,
        ),
        ts(
            "Headroom",
            "1 - load / effective capacity (basis in the legend); "
            "DNSResolverCapacityHeadroomLow warns under 25%.",
            "percentunit",
            query(HEADROOM, "{{target}} ({{basis}})"),
            max_val=1,
        ),
        ts(
            "Days to capacity",
            "Days until the load reaches the effective "
            "capacity, from predict_linear over 14 days of hourly means (two whole "
            "weeks: weekly seasonality cancels out); empty while load is flat or "
            "falling and before a week of history. "
            "DNSResolverCapacityExhaustionNear warns under 30.",
            "d",
            query(DAYS, "{{target}} ({{basis}})"),
        ),
        ts(
            "Cache-hit trend",
            "Cache-hit ratio (5m) and its 1-day average: the h of the effective capacity.",
            "percentunit",
            query(HIT, "{{target}} 5m"),
            query(f"avg_over_time({HIT}[1d])", "{{target}} 1d"),
            min_val=0,
            max_val=1,
        ),
    ]


def _per_site() -> list[Panel]:
    """The same summed up per site, and the week's peak."""
    return [
        ts(
            "Load and capacity per site",
            "Sum of load and of effective capacity "
            "over the resolvers of each site, and the lowest headroom in it.",
            "reqps",
            query(f"sum by (site) ({QPS})", "{{site}} load"),
            query(f"sum by (site) ({EFFECTIVE})", "{{site}} capacity"),
        ),
        ts(
            "Lowest headroom per site",
            "The least headroom of any resolver in the site.",
            "percentunit",
            query(f"min by (site) ({HEADROOM})", "{{site}}"),
            max_val=1,
        ),
        ts(
            "Peak QPS over 7 days",
            "Highest 5m query rate in the last 7 days, against effective capacity.",
            "reqps",
            query(f"max_over_time({QPS}[7d])", "{{target}} peak"),
            query(EFFECTIVE, "{{target}} capacity ({{basis}})"),
        ),
    ]


def _measurements() -> list[Panel]:
    """The capacity figures themselves, and cluster DNS replicas."""
    return [
        tab(
            "Capacity measurements",
            "Per resolver and kind (hit, miss, "
            "declared): the figure, whether it is a lower bound (the run never "
            "reached its loss limit: re-run with a higher --max-qps), and the "
            "age of the `dnsfleet capacity-test` run.",
            "short",
            query(
                f"dnsfleet_resolver_capacity_lower_bound{{{RESOLVER}}}",
                instant=True,
                fmt="table",
            ),
        ),
        tab(
            "Capacity measurement age",
            "Seconds since `dnsfleet capacity-test` "
            "measured each figure (declared capacities have none).",
            "s",
            query(
                f"time() - dnsfleet_resolver_capacity_measured_timestamp_seconds{{{RESOLVER}}}",
                instant=True,
                fmt="table",
            ),
        ),
        ts(
            "Cluster DNS replicas",
            "Kubernetes: the CoreDNS replicas the "
            "cluster-proportional-autoscaler's linear formula gives (from cores "
            "and nodes), the replicas the measured DNS load needs at 75% of one "
            "replica's capacity, and the replicas available. Needed above linear "
            "is DNSClusterDNSReplicasShort.",
            "short",
            query("cluster:dnsfleet_coredns_replicas:linear", "linear formula"),
            query("cluster:dnsfleet_coredns_replicas:needed", "needed by load"),
            query(
                'sum(kube_deployment_status_replicas_available{deployment=~"coredns|kube-dns"})',
                "available",
            ),
            width=24,
        ),
    ]
