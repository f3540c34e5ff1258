"""Fleet overview: is DNS answering everywhere."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash

from dashboards.gen.vocabulary import (
    RATE,
    REC,
    SEL,
    Panel,
    base,
    query,
    restart_annotations,
    single,
    tab,
    ts,
    variables,
    with_panels,
)


def fleet_overview() -> dash.Dashboard:
    d = base(
        "dnsfleet-overview",
        "dnsfleet / Fleet overview",
        "Is DNS answering everywhere: probe success and latency per resolver, what "
        "clients' stub resolvers wait, what pods' lookups cost and get, restarts, firing "
        "alerts.",
    )
    d = variables(d)
    d = restart_annotations(d, SEL)
    return with_panels(
        d,
        _at_a_glance(),
        _resolvers(),
        _stubs(),
        _pod_view(),
        _cluster_dns(),
        _alerts_and_scrapes(),
    )


def _at_a_glance() -> list[Panel]:
    """The four figures across the top."""
    return [
        single(
            "Resolvers answering",
            "Share of probed resolvers whose last probe succeeded.",
            "percentunit",
            query(f"avg(dnsfleet_probe_success{{{SEL}}})"),
        ),
        single(
            "Resolvers failing",
            "Resolvers whose last probe failed (DNSResolverDown fires after 2m).",
            "short",
            query(f"count(dnsfleet_probe_success{{{SEL}}} == 0) or vector(0)"),
        ),
        single(
            "Stub lookups delayed",
            "resolv.conf files whose glibc clients "
            "wait at least 1 s per lookup for a failing nameserver.",
            "short",
            query(
                f"count(dnsfleet_stub_expected_delay_seconds{{{SEL}, "
                f'libc="glibc"}} >= 1) or vector(0)'
            ),
        ),
        single(
            "Firing alerts",
            "dnsfleet alerts firing now (the Watchdog excluded).",
            "short",
            query(
                'count(ALERTS{alertstate="firing", alertname!="Watchdog", '
                'site=~"$site"}) or vector(0)'
            ),
        ),
    ]


def _resolvers() -> list[Panel]:
    """Each resolver as the probes see it."""
    return [
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
        ),
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
        ),
        ts(
            "Failed probes by reason",
            "Failed probes per second per resolver and reason (timeout, refused, rcode, ...).",
            "ops",
            query(
                "sum by (site, target, reason) (rate(dnsfleet_probe_failures_"
                f"total{{{SEL}}}[$__rate_interval])) > 0",
                "{{site}} {{target}} {{reason}}",
            ),
        ),
    ]


def _stubs() -> list[Panel]:
    """What the clients' stub resolvers wait, per watched resolv.conf."""
    return [
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
        ),
        ts(
            "Stub resolution failing",
            "1 when no nameserver of a watched "
            "resolv.conf answers: every lookup of its clients fails.",
            "bool_yes_no",
            query(
                f"max by (instance, resolv_conf, libc) (dnsfleet_stub_resolution_failing{{{SEL}}})",
                "{{instance}} {{resolv_conf}} {{libc}}",
            ),
            min_val=0,
            max_val=1,
        ),
    ]


def _pod_view() -> list[Panel]:
    """Cluster DNS as the pods see it: each configured name of a pod's resolv.conf looked
    up as its libc walks the search list (the exporter's pod_view)."""
    pod = "{{instance}} {{resolv_conf}} {{libc}}"
    return [
        ts(
            "Pod lookups failing",
            "Share of a pod resolv.conf's names whose lookup failed as its libc walks it "
            "(lookups the exporter cut short left out; DNSPodLookupsFailing pages above "
            "50 % for 5m).",
            "percentunit",
            query(f"resolv_conf:dnsfleet_podview_lookups_failing:ratio{{{REC}}}", pod),
            min_val=0,
            max_val=1,
        ),
        ts(
            "Pod lookup wait",
            "Seconds the application waited for each name's whole lookup: the search "
            "list, both address types and every timeout on the way.",
            "s",
            query(
                "max by (instance, resolv_conf, libc, name) "
                f"(dnsfleet_podview_lookup_duration_seconds{{{SEL}}})",
                "{{instance}} {{resolv_conf}} {{libc}} {{name}}",
            ),
        ),
        ts(
            "Queries per pod lookup",
            "DNS queries one lookup of each name sent: the search-list amplification "
            "(ndots:5 and an external name: 8; DNSPodQueryAmplificationHigh at 6 for an "
            "answered lookup).",
            "short",
            query(
                "max by (instance, resolv_conf, libc, name) "
                f"(dnsfleet_podview_queries_per_lookup{{{SEL}}})",
                "{{instance}} {{resolv_conf}} {{libc}} {{name}}",
            ),
        ),
        tab(
            "Pod lookups failing by reason",
            "Names whose last lookup failed, and what the application was told "
            "(timeout, servfail, refused, nxdomain, nodata).",
            "short",
            query(
                "max by (instance, resolv_conf, libc, name, reason) "
                f"(dnsfleet_podview_lookup_failure{{{SEL}}}) == 1",
                instant=True,
                fmt="table",
            ),
        ),
    ]


def _cluster_dns() -> list[Panel]:
    """What sits between the pods and the cluster DNS: NodeLocal DNSCache and who answers
    the node's pods now, and from the cluster DNS's dnstap the queries a lower ndots would
    not have sent and the cluster names it sent upstream."""
    return [
        tab(
            "Who answers each node's pods",
            "NodeLocal DNSCache up, and the path the node's pods take now: nodelocal, a "
            "fallback to the cluster DNS Service (resolv.conf or iptables), or none "
            "(DNSNodeLocalPodsFailing pages).",
            "short",
            query(
                f"dnsfleet_nodelocal_pod_path{{{SEL}}} == 1 or dnsfleet_nodelocal_up{{{SEL}}}",
                instant=True,
                fmt="table",
            ),
        ),
        ts(
            "Search-list expansions answered NXDOMAIN",
            "Client queries per second that read as an external name with a cluster or "
            "search suffix appended, beside all answers (DNSSearchExpansionShareHigh).",
            "short",
            query(
                f"sum by (instance, target) (rate(dnsfleet_dnstap_search_expansion_nxdomain_total"
                f"{{{SEL}}}{RATE}))",
                "{{target}} expansions",
            ),
        ),
        ts(
            "Cluster names sent upstream",
            "Queries per second the resolver sent on for names under the cluster domain, "
            "which only the cluster DNS can answer (DNSClusterDomainLeak).",
            "short",
            query(
                f"sum by (instance, target) (rate(dnsfleet_dnstap_cluster_domain_forwarded_total"
                f"{{{SEL}}}{RATE}))",
                "{{target}}",
            ),
        ),
    ]


def _alerts_and_scrapes() -> list[Panel]:
    """The alerts firing and the exporters' own scrape time."""
    return [
        tab(
            "Firing alerts by site",
            "Firing alerts per name, severity and site, from Prometheus' ALERTS series.",
            "short",
            query(
                'sum by (alertname, severity, site) (ALERTS{alertstate="firing", site=~"$site"})',
                instant=True,
                fmt="table",
            ),
        ),
        ts(
            "Exporter scrape duration",
            "Time each exporter spends on a scrape "
            "(probes and collectors run concurrently within the scrape "
            "timeout).",
            "s",
            query(f"dnsfleet_scrape_duration_seconds{{{SEL}}}", "{{instance}}"),
        ),
    ]
