"""Grafana dashboards for dnsfleet, generated with grafana-foundation-sdk (pinned in
pyproject.toml) and committed as JSON under dashboards/json/.

    .venv/bin/python -m dashboards.generate          # rewrite dashboards/json/*.json
    .venv/bin/python -m dashboards.generate --check  # exit 1 if the committed JSON is stale

tests/test_dashboards.py runs the check; tests/test_fullstack.py runs every query against
a real Prometheus fed by the real exporter.

Every dashboard has the variables datasource, job, instance and site; every panel a title,
a description and a unit. Queries select on `job=~"$job", instance=~"$instance",
site=~"$site"` (raw series) or `instance=~"$instance", site=~"$site"` (recording rules,
which aggregate `job` away).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alerts.generate import CONFIG as ALERTS_CONFIG
from alerts.generate import load_config, seconds
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders.common import StackingConfig, VizLegendOptions
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

OUT = Path(__file__).resolve().parent / "json"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'job=~"$job", instance=~"$instance", site=~"$site"'
# Recording rules aggregate by (instance, site, target): no job label.
REC = 'instance=~"$instance", site=~"$site"'
RESOLVER = f'{SEL}, target=~"$target"'
RESOLVER_REC = f'{REC}, target=~"$target"'
TAGS = ["dnsfleet", "dns"]

Panel = Any  # the SDK's panel builders share no public base type


def query(
    expr: str, legend: str = "", *, instant: bool = False, fmt: str | None = None
) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).datasource(DS)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant()
    if fmt == "table":
        q = q.format(PromQueryFormat.TABLE)
    return q


def _common(
    panel: Panel,
    title: str,
    description: str,
    unit: str,
    *queries: prometheus.Dataquery,
    height: int = 8,
    width: int = 12,
) -> Panel:
    panel = (
        panel.title(title)
        .description(description)
        .unit(unit)
        .datasource(DS)
        .height(height)
        .span(width)
    )
    for i, q in enumerate(queries):
        panel = panel.with_target(q.ref_id(chr(ord("A") + i)))
    return panel


def ts(
    title: str,
    description: str,
    unit: str,
    *queries: prometheus.Dataquery,
    width: int = 12,
    min_val: float | None = None,
    max_val: float | None = None,
    stack: bool = False,
) -> Panel:
    p = timeseries.Panel().legend(
        VizLegendOptions()
        .show_legend(True)
        .display_mode(common.LegendDisplayMode.TABLE)
        .placement(common.LegendPlacement.BOTTOM)
        .calcs(["lastNotNull", "max"])
    )
    p = p.line_width(1).fill_opacity(10 if not stack else 40)
    if stack:
        p = p.stacking(StackingConfig().mode(common.StackingMode.NORMAL))
    if min_val is not None:
        p = p.min(min_val)
    if max_val is not None:
        p = p.max(max_val)
    return _common(p, title, description, unit, *queries, width=width)


def single(
    title: str, description: str, unit: str, q: prometheus.Dataquery, *, width: int = 6
) -> Panel:
    p = (
        stat.Panel()
        .graph_mode(common.BigValueGraphMode.AREA)
        .color_mode(common.BigValueColorMode.VALUE)
    )
    return _common(p, title, description, unit, q, height=5, width=width)


def tab(
    title: str, description: str, unit: str, q: prometheus.Dataquery, *, width: int = 12
) -> Panel:
    return _common(table.Panel(), title, description, unit, q, width=width)


def heat(
    title: str, description: str, unit: str, q: prometheus.Dataquery, *, width: int = 24
) -> Panel:
    p = (
        heatmap.Panel()
        .calculate(False)
        .rows_frame(heatmap.RowsHeatmapOptions().layout(common.HeatmapCellLayout.AUTO))
    )
    return _common(p, title, description, unit, q, width=width)


def variables(
    d: dash.Dashboard, *, target: bool = False, device: bool = False, agent: bool = False
) -> dash.Dashboard:
    def var(name: str, label: str, q: str) -> dash.QueryVariable:
        return (
            dash.QueryVariable(name)
            .label(label)
            .datasource(DS)
            .query(q)
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )

    d = d.with_variable(
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus")
    )
    d = d.with_variable(var("job", "Job", "label_values(dnsfleet_build_info, job)"))
    d = d.with_variable(
        var("instance", "Exporter", 'label_values(dnsfleet_build_info{job=~"$job"}, instance)')
    )
    d = d.with_variable(
        var(
            "site",
            "Site",
            'label_values({__name__=~"dnsfleet_build_info|dnsfleet_probe_success", '
            'job=~"$job"}, site)',
        )
    )
    if target:
        d = d.with_variable(
            var("target", "Resolver", f"label_values(dnsfleet_probe_success{{{SEL}}}, target)")
        )
    if device:
        d = d.with_variable(
            var("device", "NIC", f"label_values(dnsfleet_nic_queues{{{SEL}}}, device)")
        )
    if agent:
        d = d.with_variable(
            var("agent", "Consul agent", f"label_values(dnsfleet_consul_up{{{SEL}}}, agent)")
        )
    return d


def base(uid: str, title: str, description: str) -> dash.Dashboard:
    return (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .editable()
    )


def restart_annotations(d: dash.Dashboard, selector: str) -> dash.Dashboard:
    # The annotation is placed at the value (the restart time the resolver reports), not
    # at the scrape that noticed it: see ANNOTATION_EXTRA.
    return d.annotation(
        dash.AnnotationQuery()
        .name("Resolver restarts")
        .datasource(DS)
        .enable(True)
        .icon_color("red")
        .expr(f"max by (site, target) (dnsfleet_resolver_start_time_seconds{{{selector}}}) * 1000")
    ).annotation(
        dash.AnnotationQuery()
        .name("Cache resets")
        .datasource(DS)
        .enable(True)
        .icon_color("orange")
        .expr(
            "max by (site, target) (dnsfleet_resolver_last_cache_reset_"
            f"timestamp_seconds{{{selector}}}) * 1000"
        )
    )


# Fields of Grafana's Prometheus annotation query that the SDK's AnnotationQuery model does
# not carry: `useValueForTime` makes each distinct value (a restart time in ms) one
# annotation at that time, so the marker sits at the exact restart, not at the scrape that
# saw it.
ANNOTATION_EXTRA = {
    "Resolver restarts": {
        "useValueForTime": True,
        "step": "1m",
        "titleFormat": "{{target}} restarted",
        "tagKeys": "site,target",
    },
    "Cache resets": {
        "useValueForTime": True,
        "step": "1m",
        "titleFormat": "{{target}} cache reset",
        "tagKeys": "site,target",
    },
}


# ------------------------------------------------------------------------------ dashboards


def fleet_overview() -> dash.Dashboard:
    d = base(
        "dnsfleet-overview",
        "dnsfleet / Fleet overview",
        "Is DNS answering everywhere: probe success and latency per resolver, what "
        "clients' stub resolvers wait, restarts, firing alerts.",
    )
    d = variables(d)
    d = restart_annotations(d, SEL)
    return (
        d.with_panel(
            single(
                "Resolvers answering",
                "Share of probed resolvers whose last probe succeeded.",
                "percentunit",
                query(f"avg(dnsfleet_probe_success{{{SEL}}})"),
            )
        )
        .with_panel(
            single(
                "Resolvers failing",
                "Resolvers whose last probe failed (DNSResolverDown fires after 2m).",
                "short",
                query(f"count(dnsfleet_probe_success{{{SEL}}} == 0) or vector(0)"),
            )
        )
        .with_panel(
            single(
                "Stub lookups delayed",
                "resolv.conf files whose glibc clients "
                "wait at least 1 s per lookup for a failing nameserver.",
                "short",
                query(
                    f"count(dnsfleet_stub_expected_delay_seconds{{{SEL}, "
                    f'libc="glibc"}} >= 1) or vector(0)'
                ),
            )
        )
        .with_panel(
            single(
                "Firing alerts",
                "dnsfleet alerts firing now (the Watchdog excluded).",
                "short",
                query(
                    'count(ALERTS{alertstate="firing", alertname!="Watchdog", '
                    'site=~"$site"}) or vector(0)'
                ),
            )
        )
        .with_panel(
            ts(
                "Probe success per resolver",
                "1 when the last probe of the resolver "
                "succeeded; 0 during an outage. Red markers: resolver restarts at the "
                "time the resolver reports.",
                "bool_yes_no",
                query(
                    f"min by (site, target) (dnsfleet_probe_success{{{SEL}}})",
                    "{{site}} {{target}}",
                ),
                min_val=0,
                max_val=1,
            )
        )
        .with_panel(
            ts(
                "Probe latency p90 per resolver",
                "90th percentile of answered "
                "probes' latency (DNSResolverLatencyHigh at 100 ms over 10m).",
                "s",
                query(
                    "histogram_quantile(0.9, sum by (site, target, le) (rate("
                    f"dnsfleet_probe_latency_seconds_bucket{{{SEL}}}"
                    "[$__rate_interval])))",
                    "{{site}} {{target}}",
                ),
            )
        )
        .with_panel(
            ts(
                "Failed probes by reason",
                "Failed probes per second per resolver and reason (timeout, refused, rcode, ...).",
                "ops",
                query(
                    "sum by (site, target, reason) (rate(dnsfleet_probe_failures_"
                    f"total{{{SEL}}}[$__rate_interval])) > 0",
                    "{{site}} {{target}} {{reason}}",
                ),
            )
        )
        .with_panel(
            ts(
                "Stub failover delay per host",
                "Extra seconds each lookup of a "
                "watched resolv.conf waits before an answer, per exporter host and "
                "libc model (DNSStubFailoverDelay at 1 s and at the file's timeout).",
                "s",
                query(
                    "max by (instance, resolv_conf, libc) (dnsfleet_stub_"
                    f"expected_delay_seconds{{{SEL}}})",
                    "{{instance}} {{resolv_conf}} {{libc}}",
                ),
            )
        )
        .with_panel(
            ts(
                "Stub resolution failing",
                "1 when no nameserver of a watched "
                "resolv.conf answers: every lookup of its clients fails.",
                "bool_yes_no",
                query(
                    "max by (instance, resolv_conf, libc) (dnsfleet_stub_"
                    f"resolution_failing{{{SEL}}})",
                    "{{instance}} {{resolv_conf}} {{libc}}",
                ),
                min_val=0,
                max_val=1,
            )
        )
        .with_panel(
            tab(
                "Firing alerts by site",
                "Firing alerts per name, severity and site, from Prometheus' ALERTS series.",
                "short",
                query(
                    "sum by (alertname, severity, site) (ALERTS{alertstate="
                    '"firing", site=~"$site"})',
                    instant=True,
                    fmt="table",
                ),
            )
        )
        .with_panel(
            ts(
                "Exporter scrape duration",
                "Time each exporter spends on a scrape "
                "(probes and collectors run concurrently within the scrape "
                "timeout).",
                "s",
                query(f"dnsfleet_scrape_duration_seconds{{{SEL}}}", "{{instance}}"),
            )
        )
    )


def resolver_detail() -> dash.Dashboard:
    d = base(
        "dnsfleet-resolver",
        "dnsfleet / Resolver detail",
        "One resolver from inside and outside: its own counters (QPS, cache hits, "
        "rcodes), the backend behind its address, the canary TTL and probe latency.",
    )
    d = variables(d, target=True)
    d = restart_annotations(d, RESOLVER)
    rate = "[$__rate_interval]"
    return resolver_stats_panels(
        d.with_panel(
            ts(
                "Queries per second",
                "Client queries the resolver received, from "
                "its own statistics (unbound stats_noreset, BIND statistics "
                "channel).",
                "reqps",
                query(
                    "sum by (site, target) (rate(dnsfleet_resolver_queries_total"
                    f"{{{RESOLVER}}}{rate}))",
                    "{{target}}",
                ),
            )
        )
        .with_panel(
            ts(
                "Cache-hit ratio",
                "Share of client queries answered from cache.",
                "percentunit",
                query(
                    f"sum by (site, target) (rate(dnsfleet_resolver_cache_hits_total"
                    f"{{{RESOLVER}}}{rate})) / (sum by (site, target) (rate("
                    f"dnsfleet_resolver_cache_hits_total{{{RESOLVER}}}{rate})) + "
                    f"sum by (site, target) (rate(dnsfleet_resolver_cache_misses_"
                    f"total{{{RESOLVER}}}{rate})))",
                    "{{target}}",
                ),
                min_val=0,
                max_val=1,
            )
        )
        .with_panel(
            ts(
                "Responses by rcode",
                "Responses per second the resolver sent, by response code.",
                "reqps",
                query(
                    "sum by (target, rcode) (rate(dnsfleet_resolver_responses_total"
                    f"{{{RESOLVER}}}{rate}))",
                    "{{target}} {{rcode}}",
                ),
                stack=True,
            )
        )
        .with_panel(
            ts(
                "SERVFAIL share",
                "Share of the resolver's responses that were "
                "SERVFAIL (its own counters) and of dnsfleet's probes that got "
                "SERVFAIL over 10m (DNSResolverServfailHigh: 10% / 50%).",
                "percentunit",
                query(
                    "sum by (target) (rate(dnsfleet_resolver_responses_total{"
                    f'{RESOLVER}, rcode="SERVFAIL"}}{rate})) / sum by (target) '
                    f"(rate(dnsfleet_resolver_responses_total{{{RESOLVER}}}{rate}))",
                    "{{target}} responses",
                ),
                query(
                    f"avg_over_time(target:dnsfleet_probe_servfail:bool{{{RESOLVER}}}[10m])",
                    "{{target}} probes",
                ),
                min_val=0,
            )
        )
        .with_panel(
            tab(
                "Backend identity",
                "Which backend answered the last probe behind "
                "this address (EDNS NSID or CHAOS TXT id.server).",
                "none",
                query(f"dnsfleet_resolver_backend_info{{{RESOLVER}}}", instant=True, fmt="table"),
            )
        )
        .with_panel(
            ts(
                "Backend changes",
                "Changes of the backend identity in the last hour "
                "(DNSResolverBackendFlapping at 4 in 30m).",
                "short",
                query(
                    "sum by (target) (increase(dnsfleet_resolver_backend_changes_"
                    f"total{{{RESOLVER}}}[1h]))",
                    "{{target}}",
                ),
            )
        )
        .with_panel(
            ts(
                "Canary TTL",
                "TTL of the canary record in the resolver's last "
                "answer: a sawtooth that counts down; a jump up before expiry is a "
                "cache flush or restart.",
                "s",
                query(f"dnsfleet_resolver_canary_ttl_seconds{{{RESOLVER}}}", "{{target}}"),
            )
        )
        .with_panel(
            ts(
                "Resolver uptime",
                "Seconds since the resolver process started, as the resolver reports it.",
                "s",
                query(f"time() - dnsfleet_resolver_start_time_seconds{{{RESOLVER}}}", "{{target}}"),
            )
        )
        .with_panel(
            ts(
                "Probe latency percentiles",
                "p50, p90 and p99 of answered probes.",
                "s",
                *(
                    query(
                        f"histogram_quantile({q}, sum by (target, le) (rate("
                        f"dnsfleet_probe_latency_seconds_bucket{{{RESOLVER}}}{rate})))",
                        f"p{int(q * 100)} {{{{target}}}}",
                    )
                    for q in (0.5, 0.9, 0.99)
                ),
            )
        )
        .with_panel(
            ts(
                "Cache resets seen from outside",
                "Cache resets (flush or restart) detected from the canary TTL, per hour.",
                "short",
                query(
                    "sum by (target) (increase(dnsfleet_resolver_cache_resets_total"
                    f"{{{RESOLVER}}}[1h]))",
                    "{{target}}",
                ),
            )
        )
    )


def resolver_stats_panels(d: dash.Dashboard) -> dash.Dashboard:
    """What unbound_exporter's and bind_exporter's dashboards chart, from the normalised
    families: the resolver's own latency, upstream round trips, drops and DNSSEC."""
    rate = "[$__rate_interval]"

    def quantiles(family: str) -> list[prometheus.Dataquery]:
        # Per target: bucket bounds differ by software, never mix them in one quantile.
        return [
            query(
                f"histogram_quantile({q}, sum by (target, le) (rate({family}_bucket"
                f"{{{RESOLVER}}}{rate})))",
                f"p{int(q * 100)} {{{{target}}}}",
            )
            for q in (0.5, 0.9, 0.99)
        ]

    return (
        d.with_panel(
            ts(
                "Response latency (resolver's own)",
                "Time the resolver took to answer clients, as it measures it, with its own "
                "bucket bounds. unbound counts cache-miss replies only; BIND counts none "
                "(see docs/metrics.md).",
                "s",
                *quantiles("dnsfleet_resolver_response_latency_seconds"),
            )
        )
        .with_panel(
            ts(
                "Upstream round-trip time",
                "Round trips of the resolver's queries to authoritative servers, as the "
                "resolver counts them (BIND, PowerDNS Recursor, CoreDNS).",
                "s",
                *quantiles("dnsfleet_resolver_upstream_rtt_seconds"),
            )
        )
        .with_panel(
            ts(
                "Queries dropped by reason",
                "Client queries the resolver dropped or refused per second: rate_limit, "
                "overload (out of recursion slots), policy, acl, malformed; and upstream "
                "timeouts.",
                "reqps",
                query(
                    "sum by (target, reason) (rate(dnsfleet_resolver_queries_dropped_total"
                    f"{{{RESOLVER}}}{rate}))",
                    "{{target}} {{reason}}",
                ),
                query(
                    "sum by (target) (rate(dnsfleet_resolver_upstream_timeouts_total"
                    f"{{{RESOLVER}}}{rate}))",
                    "{{target}} upstream timeouts",
                ),
                stack=True,
            )
        )
        .with_panel(
            ts(
                "DNSSEC validation",
                "Validation results per second (secure, insecure, bogus, indeterminate); "
                "answers or validations depending on the software (docs/metrics.md). "
                "Bogus answers reach clients as SERVFAIL.",
                "reqps",
                query(
                    "sum by (target, result) (rate(dnsfleet_resolver_dnssec_answers_total"
                    f"{{{RESOLVER}}}{rate}))",
                    "{{target}} {{result}}",
                ),
            )
        )
        .with_panel(
            ts(
                "Recursions in flight",
                "Client queries waiting for recursion, and the resolver's limit where it "
                "states it (unbound: num-queries-per-thread x threads).",
                "short",
                query(f"dnsfleet_resolver_recursions_in_flight{{{RESOLVER}}}", "{{target}}"),
                query(f"dnsfleet_resolver_recursions_limit{{{RESOLVER}}}", "{{target}} limit"),
                min_val=0,
            )
        )
    )


def host_latency() -> dash.Dashboard:
    d = base(
        "dnsfleet-host",
        "dnsfleet / Host latency tuning",
        "The host facts that decide whether a resolver answers in microseconds or "
        "milliseconds: NIC queue interrupts per CPU, IRQ affinity, CPU wake-up latency, "
        "governor, bonding.",
    )
    d = variables(d, device=True)
    dev = f'{SEL}, device=~"$device"'
    rate = "[$__rate_interval]"
    return (
        d.with_panel(
            heat(
                "NIC interrupts per CPU",
                "Interrupts per second each CPU takes "
                "for the selected NICs' queues: one hot row is an imbalance, a "
                "single row an affinity collapse.",
                "short",
                query(
                    f"sum by (cpu) (rate(dnsfleet_nic_cpu_interrupts_total{{{dev}}}{rate}))",
                    "{{cpu}}",
                ),
            )
        )
        .with_panel(
            ts(
                "Interrupt imbalance",
                "Busiest CPU's interrupt rate over the mean of "
                "the CPUs serving the NIC (1 = even; DNSNicQueueImbalance).",
                "short",
                query(
                    f"max by (instance, device) (rate(dnsfleet_nic_cpu_interrupts_"
                    f"total{{{dev}}}{rate})) / avg by (instance, device) (rate("
                    f"dnsfleet_nic_cpu_interrupts_total{{{dev}}}{rate}) > 0)",
                    "{{instance}} {{device}}",
                ),
            )
        )
        .with_panel(
            ts(
                "CPUs serving NIC interrupts",
                "Distinct CPUs that effectively serve "
                "a NIC's queue interrupts, against its queue count "
                "(DNSNicIrqAffinityCollapsed when 1).",
                "short",
                query(f"dnsfleet_nic_irq_cpus{{{dev}}}", "{{instance}} {{device}} cpus"),
                query(f"dnsfleet_nic_queues{{{dev}}}", "{{instance}} {{device}} queues"),
            )
        )
        .with_panel(
            ts(
                "Queue affinity width",
                "CPUs each queue's IRQ may be delivered to (smp_affinity_list).",
                "short",
                query(f"dnsfleet_nic_queue_affinity_cpus{{{dev}}}", "{{device}} {{queue}}"),
            )
        )
        .with_panel(
            ts(
                "NET_RX softirqs per CPU",
                "Receive softirqs per second per CPU (/proc/softirqs).",
                "short",
                query(
                    f"sum by (instance, cpu) (rate(dnsfleet_softirq_net_rx_total{{{SEL}}}{rate}))",
                    "{{instance}} cpu{{cpu}}",
                ),
            )
        )
        .with_panel(
            ts(
                "irqbalance running",
                "1 when an irqbalance process runs on the host.",
                "bool_yes_no",
                query(f"dnsfleet_irqbalance_running{{{SEL}}}", "{{instance}}"),
                min_val=0,
                max_val=1,
            )
        )
        .with_panel(
            ts(
                "CPU wake-up latency",
                "Worst exit latency a CPU can incur now "
                "(deepest enabled idle state the PM QoS limit allows) against the "
                "PM QoS limit (DNSCpuLatencyDrift above the 20 µs budget).",
                "s",
                query(f"dnsfleet_cpu_wakeup_latency_seconds{{{SEL}}}", "{{instance}} wake-up"),
                query(
                    f"dnsfleet_pm_qos_cpu_latency_seconds{{{SEL}}} < 2000",
                    "{{instance}} PM QoS limit",
                ),
            )
        )
        .with_panel(
            ts(
                "Idle state residency",
                "Seconds per second all CPUs spent in each "
                "idle state (deep states add wake-up latency).",
                "s",
                query(
                    f"sum by (instance, state) (rate(dnsfleet_cpuidle_state_"
                    f"residency_seconds_total{{{SEL}}}{rate}))",
                    "{{instance}} {{state}}",
                ),
                stack=True,
            )
        )
        .with_panel(
            ts(
                "Scaling governor",
                "CPUs per cpufreq governor (latency-sensitive resolvers want performance).",
                "short",
                query(f"dnsfleet_cpu_scaling_governor_cpus{{{SEL}}}", "{{instance}} {{governor}}"),
            )
        )
        .with_panel(
            tab(
                "Tuned profile and idle driver",
                "Active tuned profile and cpuidle driver/governor per host.",
                "none",
                query(
                    f"dnsfleet_tuned_profile_info{{{SEL}}} or "
                    f"dnsfleet_cpuidle_driver_info{{{SEL}}}",
                    instant=True,
                    fmt="table",
                ),
            )
        )
        .with_panel(
            ts(
                "Bond slaves up",
                "Slaves up against configured slaves per bond (DNSBondDegraded).",
                "short",
                query(f"dnsfleet_bond_slaves_up{{{SEL}}}", "{{instance}} {{bond}} up"),
                query(f"dnsfleet_bond_slaves{{{SEL}}}", "{{instance}} {{bond}} slaves"),
            )
        )
        .with_panel(
            ts(
                "Bond link failures",
                "Link failures per slave in the last 30m (DNSBondLinkFlapping at 3).",
                "short",
                query(
                    f"increase(dnsfleet_bond_slave_link_failures_total{{{SEL}}}[30m])",
                    "{{instance}} {{bond}} {{slave}}",
                ),
            )
        )
        .with_panel(
            tab(
                "Bond active slave and link monitoring",
                "Active slave per bond and "
                "its link monitoring interval (0 = none: DNSBondNoLinkMonitoring).",
                "s",
                query(
                    f"dnsfleet_bond_active_slave_info{{{SEL}}} or "
                    f"dnsfleet_bond_link_monitoring_interval_seconds{{{SEL}}}",
                    instant=True,
                    fmt="table",
                ),
            )
        )
    )


def consul_dns() -> dash.Dashboard:
    d = base(
        "dnsfleet-consul",
        "dnsfleet / Consul DNS",
        "Consul DNS as its clients see it, against what the catalog says: lookups, "
        "latency, stale and missing answers, leader, raft.db.",
    )
    d = variables(d, agent=True)
    ag = f'{SEL}, agent=~"$agent"'
    return (
        d.with_panel(
            ts(
                "Lookup success",
                "1 when a watched service or prepared-query lookup "
                "got NOERROR or NXDOMAIN (DNSConsulDNSDown when all fail for 2m).",
                "bool_yes_no",
                query(f"dnsfleet_consul_dns_probe_success{{{ag}}}", "{{agent}} {{query}}"),
                min_val=0,
                max_val=1,
            )
        )
        .with_panel(
            ts(
                "Lookup latency",
                "Duration of each lookup against the agent's DNS port.",
                "s",
                query(f"dnsfleet_consul_dns_latency_seconds{{{ag}}}", "{{agent}} {{query}}"),
            )
        )
        .with_panel(
            ts(
                "Answers against healthy instances",
                "Addresses in each service's A "
                "answer against instances with every check passing in the catalog.",
                "short",
                query(f"dnsfleet_consul_dns_answers{{{ag}}}", "{{service}} answered"),
                query(f"dnsfleet_consul_healthy_instances{{{ag}}}", "{{service}} healthy"),
            )
        )
        .with_panel(
            ts(
                "Stale and missing answers",
                "Answered addresses DNS should not serve, "
                "and instances it should serve but left out (DNSConsulDNSMismatch).",
                "short",
                query(f"dnsfleet_consul_dns_stale_answers{{{ag}}}", "{{service}} stale"),
                query(f"dnsfleet_consul_dns_missing_instances{{{ag}}}", "{{service}} missing"),
            )
        )
        .with_panel(
            ts(
                "Leader and API",
                "1 when the agent's HTTP API answers and when "
                "Raft has a leader (DNSConsulNoLeader, DNSConsulAPIDown).",
                "bool_yes_no",
                query(f"dnsfleet_consul_leader_present{{{ag}}}", "{{agent}} leader"),
                query(f"dnsfleet_consul_up{{{ag}}}", "{{agent}} API up"),
                min_val=0,
                max_val=1,
            )
        )
        .with_panel(
            ts(
                "Raft peers and prepared queries",
                "Raft peers and prepared queries defined, per agent.",
                "short",
                query(f"dnsfleet_consul_raft_peers{{{ag}}}", "{{agent}} peers"),
                query(f"dnsfleet_consul_prepared_queries{{{ag}}}", "{{agent}} prepared queries"),
            )
        )
        .with_panel(
            ts(
                "raft.db size",
                "Size of the server's raft.db; BoltDB never shrinks "
                "(DNSConsulRaftDbLarge above 1 GiB or +128 MiB in 6h).",
                "bytes",
                query(f"dnsfleet_consul_raft_db_bytes{{{ag}}}", "{{agent}}"),
            )
        )
        .with_panel(
            tab(
                "Agents",
                "Version, datacenter, node and role of each agent.",
                "none",
                query(f"dnsfleet_consul_agent_info{{{ag}}}", instant=True, fmt="table"),
            )
        )
    )


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
    qps = f"target:dnsfleet_resolver_queries:rate5m{{{RESOLVER_REC}}}"
    eff = f"target:dnsfleet_resolver_capacity_effective:qps{{{RESOLVER_REC}}}"
    head = f"target:dnsfleet_resolver_capacity_headroom:ratio{{{RESOLVER_REC}}}"
    days = f"target:dnsfleet_resolver_capacity_exhaustion:days{{{RESOLVER_REC}}}"
    hit = f"target:dnsfleet_resolver_cache_hit:ratio_rate5m{{{RESOLVER_REC}}}"
    kinds = f"dnsfleet_resolver_capacity_qps{{{RESOLVER}}}"
    d = d.time("now-14d", "now")
    return (
        d.with_panel(
            ts(
                "QPS against capacity",
                "Queries per second (5m rate of the "
                "resolver's own counters) against the effective capacity: declared, "
                "else 1 / (h / C_hit + (1 - h) / C_miss) at the live cache-hit ratio h "
                "(basis mix), else the miss or (optimistic) hit figure alone. The "
                "measured figures are drawn too: the gap between hit and miss is what "
                "a falling cache-hit ratio costs.",
                "reqps",
                query(qps, "{{target}} load"),
                query(eff, "{{target}} effective capacity ({{basis}})"),
                query(kinds, "{{target}} {{kind}} capacity"),
                width=24,
            )
        )
        .with_panel(
            ts(
                "Headroom",
                "1 - load / effective capacity (basis in the legend); "
                "DNSResolverCapacityHeadroomLow warns under 25%.",
                "percentunit",
                query(head, "{{target}} ({{basis}})"),
                max_val=1,
            )
        )
        .with_panel(
            ts(
                "Days to capacity",
                "Days until the load reaches the effective "
                "capacity, from predict_linear over 14 days of hourly means (two whole "
                "weeks: weekly seasonality cancels out); empty while load is flat or "
                "falling and before a week of history. "
                "DNSResolverCapacityExhaustionNear warns under 30.",
                "d",
                query(days, "{{target}} ({{basis}})"),
            )
        )
        .with_panel(
            ts(
                "Cache-hit trend",
                "Cache-hit ratio (5m) and its 1-day average: the h of the effective capacity.",
                "percentunit",
                query(hit, "{{target}} 5m"),
                query(f"avg_over_time({hit}[1d])", "{{target}} 1d"),
                min_val=0,
                max_val=1,
            )
        )
        .with_panel(
            ts(
                "Load and capacity per site",
                "Sum of load and of effective capacity "
                "over the resolvers of each site, and the lowest headroom in it.",
                "reqps",
                query(f"sum by (site) ({qps})", "{{site}} load"),
                query(f"sum by (site) ({eff})", "{{site}} capacity"),
            )
        )
        .with_panel(
            ts(
                "Lowest headroom per site",
                "The least headroom of any resolver in the site.",
                "percentunit",
                query(f"min by (site) ({head})", "{{site}}"),
                max_val=1,
            )
        )
        .with_panel(
            ts(
                "Peak QPS over 7 days",
                "Highest 5m query rate in the last 7 days, against effective capacity.",
                "reqps",
                query(f"max_over_time({qps}[7d])", "{{target}} peak"),
                query(eff, "{{target}} capacity ({{basis}})"),
            )
        )
        .with_panel(
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
            )
        )
        .with_panel(
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
            )
        )
        .with_panel(
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
                    "sum(kube_deployment_status_replicas_available{deployment=~"
                    '"coredns|kube-dns"})',
                    "available",
                ),
                width=24,
            )
        )
    )


def error_budget() -> dash.Dashboard:
    """The SLOs of alerts/config.yml (windows, period, burn rates from there): budget left
    per site and SLI, burn rate per window, the error ratios, the burn alerts firing."""
    cfg = load_config(ALERTS_CONFIG)
    d = base(
        "dnsfleet-error-budget",
        "dnsfleet / Error budget",
        f"The DNS service level objectives per site: how much of the {cfg.period} error "
        "budget is left, how fast each SLI burns it over each alerting window, and which "
        "burn-rate alerts fire (alerts/config.yml; docs/design.md, Service level "
        "objectives).",
    )
    d = variables(d).time("now-7d", "now")
    site = 'site=~"$site"'
    # Shown once a day of the period has data: before, "not enough data", not a figure
    # that rests on a few hours.
    budget = (
        f"site:dnsfleet_slo_error_budget_remaining:ratio{{{site}}}"
        " and on (site, slo, source)"
        f" site:dnsfleet_slo_period_coverage:ratio{{{site}}} * {_secs(cfg.period)} >= 86400"
    )
    burn = (
        "site:dnsfleet_slo_errors:ratio_rate{w}{{" + site + "}}"
        " / on (slo) group_left () (1 - dnsfleet:slo_objective:ratio)"
    )
    pages = [b for b in cfg.burn_rates if b.severity == "critical"]
    tickets = [b for b in cfg.burn_rates if b.severity != "critical"]

    def rates(windows: list[str]) -> list[prometheus.Dataquery]:
        return [query(burn.format(w=w), "{{site}} {{slo}}/{{source}} " + w) for w in windows]

    def pairs(rows: list[Any]) -> str:
        return "; ".join(f"{b.burn_rate:g}x over {b.long} and {b.short}" for b in rows)

    return (
        d.with_panel(
            tab(
                "Error budget left per site",
                f"1 - (bad share of the {cfg.period} period) / (1 - objective), per site, SLO "
                "and SLI source: 100% untouched, 0 spent, below 0 overspent. The "
                f"{cfg.budget_step} ratios are sampled every {cfg.budget_step} and summed "
                f"over the period, a {cfg.budget_step} without data spending nothing; "
                "empty (not enough data) until a day of the period has data.",
                "percentunit",
                query(budget, instant=True, fmt="table"),
                width=12,
            ).no_value("not enough data")
        )
        .with_panel(
            single(
                "Lowest budget left",
                "The least error budget any site has left, over every SLO and source "
                "(not enough data until a day of the period has data).",
                "percentunit",
                query(f"min({budget})"),
                width=6,
            ).no_value("not enough data")
        )
        .with_panel(
            single(
                "Burn alerts firing",
                "DNSAvailabilityBudgetBurn and DNSLatencyBudgetBurn firing now, pages and tickets.",
                "short",
                query(
                    'count(ALERTS{alertname=~"DNS.+BudgetBurn", alertstate="firing", '
                    f"{site}}}) or vector(0)"
                ),
                width=6,
            )
        )
        .with_panel(
            ts(
                "Error budget left over time",
                "The budget left per site, SLO and source over the time range, from the "
                "first day of data on.",
                "percentunit",
                query(budget, "{{site}} {{slo}}/{{source}}"),
                width=24,
            ).no_value("not enough data")
        )
        .with_panel(
            ts(
                "Burn rate, page windows",
                "Error ratio over each window divided by the budget rate (1 - objective): "
                "1 spends the budget exactly over the period. Pages while both windows of a "
                f"pair are above its rate: {pairs(pages)}.",
                "x",
                *rates(sorted({w for b in pages for w in (b.long, b.short)}, key=_secs)),
            )
        )
        .with_panel(
            ts(
                "Burn rate, ticket windows",
                "As on the left, over the ticket windows: a ticket while both windows of a "
                f"pair are above its rate: {pairs(tickets)}.",
                "x",
                *rates(sorted({w for b in tickets for w in (b.long, b.short)}, key=_secs)),
            )
        )
        .with_panel(
            ts(
                "Bad events per SLI",
                "Share of bad events over 5 minutes per site, SLO and source: for "
                "availability, probe rounds no resolver of the site answered, SERVFAIL "
                "answers of its resolvers, resolv.conf files resolving nothing, failed "
                "Consul lookups; for latency, answers and modelled stub delays over the "
                "threshold.",
                "percentunit",
                query(
                    f"site:dnsfleet_slo_errors:ratio_rate{cfg.windows()[0]}{{{site}}}",
                    "{{site}} {{slo}}/{{source}}",
                ),
            )
        )
        .with_panel(
            ts(
                "Fleet burn rate",
                "The fleet (the mean of its sites) over the fastest page's long window.",
                "x",
                query(
                    f"fleet:dnsfleet_slo_errors:ratio_rate{cfg.budget_step}"
                    " / on (slo) group_left () (1 - dnsfleet:slo_objective:ratio)",
                    "{{slo}}/{{source}}",
                ),
            )
        )
        .with_panel(
            tab(
                "Burn alerts",
                "The burn-rate alerts firing or pending, with their windows.",
                "short",
                query(f'ALERTS{{alertname=~"DNS.+BudgetBurn", {site}}}', instant=True, fmt="table"),
                width=24,
            )
        )
    )


def dnssec_zones() -> dash.Dashboard:
    """Issue 23: zone integrity, DNSSEC validation and EDE, encrypted transports."""
    d = base(
        "dnsfleet-dnssec",
        "dnsfleet / DNSSEC, zones and encrypted transports",
        "Zone integrity at the zones' own nameservers (signature expiry, serials, DS), "
        "resolvers validating DNSSEC and the Extended DNS Errors they send, and the DoT/DoH "
        "handshake and certificates.",
    )
    d = variables(d)
    enc = f'{SEL}, reason=~"tls_handshake|certificate|http_status"'
    return (
        d.with_panel(
            ts(
                "Signature expiry per zone",
                "Time left until each zone's SOA and DNSKEY set stops validating (the "
                "latest expiry among the set's valid RRSIGs), per nameserver "
                "(DNSZoneSignaturesExpiring: warning within the zone's margin, page under "
                "a day).",
                "s",
                query(
                    f"dnsfleet_zone_rrsig_expiry_timestamp_seconds{{{SEL}}} - time()",
                    "{{zone}} {{type}} @ {{nameserver}}",
                ),
            )
        )
        .with_panel(
            ts(
                "SOA serial per nameserver",
                "The serial each nameserver serves: lines apart mean a secondary lags.",
                "none",
                query(f"dnsfleet_zone_soa_serial{{{SEL}}}", "{{zone}} @ {{nameserver}}"),
            )
        )
        .with_panel(
            ts(
                "Serial drift against refresh",
                "How long the nameservers have disagreed, against the zone's SOA REFRESH "
                "(DNSZoneSerialDrift when drift exceeds it).",
                "s",
                query(f"dnsfleet_zone_serial_inconsistent_seconds{{{SEL}}}", "{{zone}} drift"),
                query(f"dnsfleet_zone_soa_refresh_seconds{{{SEL}}}", "{{zone}} refresh"),
            )
        )
        .with_panel(
            ts(
                "DS match and nameservers answering",
                "1 when the parent's DS matches a zone key at every nameserver "
                "(DNSZoneDSMismatch pages at 0), and each nameserver answering.",
                "bool_yes_no",
                query(f"dnsfleet_zone_ds_match{{{SEL}}}", "{{zone}} DS match"),
                query(f"dnsfleet_zone_nameserver_up{{{SEL}}}", "{{zone}} @ {{nameserver}} up"),
                min_val=0,
                max_val=1,
            )
        )
        .with_panel(
            ts(
                "Resolvers validating",
                "AD on the last answer of modules with dnssec set, and resolvers failing "
                "the validation checks (DNSResolverNotValidating).",
                "short",
                query(f"dnsfleet_probe_dnssec_authenticated{{{SEL}}}", "{{target}} {{module}} AD"),
                query(
                    f'dnsfleet_probe_failure{{{SEL}, reason=~"not_validated|validation_disabled"}}'
                    " == 1",
                    "{{target}} {{module}} {{reason}}",
                ),
                min_val=0,
            )
        )
        .with_panel(
            ts(
                "Extended DNS Errors per code",
                "Answers carrying each EDE code per second (RFC 8914: 6 DNSSEC Bogus, "
                "7 Signature Expired, 9 DNSKEY Missing, 18 Prohibited, 22 No Reachable "
                "Authority; other: unregistered).",
                "reqps",
                query(
                    "sum by (code) (rate(dnsfleet_probe_extended_errors_total"
                    f"{{{SEL}}}[$__rate_interval]))",
                    "EDE {{code}}",
                ),
                stack=True,
            )
        )
        .with_panel(
            ts(
                "TLS handshake share of latency",
                "The part of each DoT/DoH probe's duration spent in the TLS handshake: "
                "what a client pays per fresh connection.",
                "percentunit",
                query(
                    f"dnsfleet_probe_tls_handshake_seconds{{{SEL}}} "
                    f"/ dnsfleet_probe_duration_seconds{{{SEL}}}",
                    "{{target}} {{module}}",
                ),
                min_val=0,
                max_val=1,
            )
        )
        .with_panel(
            ts(
                "Certificate expiry",
                "Time left until the earliest certificate of each DoT/DoH chain expires "
                "(DNSResolverCertificateExpiring under 14 days).",
                "s",
                query(
                    f"dnsfleet_probe_tls_cert_expiry_timestamp_seconds{{{SEL}}} - time()",
                    "{{target}} {{module}}",
                ),
            )
        )
        .with_panel(
            ts(
                "Encrypted transport failures",
                "DoT/DoH probes failing per second by reason: tls_handshake, certificate, "
                "http_status.",
                "reqps",
                query(
                    "sum by (target, module, reason) (rate(dnsfleet_probe_failures_total"
                    f"{{{enc}}}[$__rate_interval]))",
                    "{{target}} {{module}} {{reason}}",
                ),
                width=24,
            )
        )
    )


def _secs(window: str) -> int:
    return seconds(window, "window")


DASHBOARDS: dict[str, Callable[[], dash.Dashboard]] = {
    "fleet-overview": fleet_overview,
    "resolver-detail": resolver_detail,
    "host-latency": host_latency,
    "consul-dns": consul_dns,
    "capacity-trend": capacity_trend,
    "error-budget": error_budget,
    "dnssec-zones": dnssec_zones,  # issue 23
}


def render(name: str) -> str:
    doc = json.loads(json.dumps(DASHBOARDS[name]().build(), cls=JSONEncoder))
    for ann in doc.get("annotations", {}).get("list", []):
        ann.update(ANNOTATION_EXTRA.get(ann.get("name", ""), {}))
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


# ------------------------------------------------------------------------- for the tests


def panel_queries(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every panel target of a rendered dashboard, and
    ("annotation: NAME", expr) of its annotation queries."""
    out = [(p["title"], t["expr"]) for p in doc["panels"] for t in p.get("targets", [])]
    out.extend(
        (f"annotation: {a['name']}", a["expr"])
        for a in doc.get("annotations", {}).get("list", [])
        if a.get("expr")
    )
    return out


def concrete(expr: str, *, rate_interval: str = "1m") -> str:
    """The query as Grafana sends it with every variable on "All" (`.*`)."""
    for var in ("job", "instance", "site", "target", "device", "agent"):
        expr = expr.replace(f'=~"${var}"', '=~".*"')
    return expr.replace("$__rate_interval", rate_interval)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--check", action="store_true", help="compare with the committed JSON instead of writing it"
    )
    args = p.parse_args(argv)
    stale = []
    OUT.mkdir(exist_ok=True)
    for name in DASHBOARDS:
        path = OUT / f"{name}.json"
        text = render(name)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale dashboards (run `python -m dashboards.generate`): {stale}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
