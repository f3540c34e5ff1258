"""Resolver detail: one resolver (`$target`) from inside and outside."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus

from dashboards.gen.vocabulary import (
    RATE,
    RESOLVER,
    Panel,
    base,
    query,
    restart_annotations,
    tab,
    ts,
    variables,
    with_panels,
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
    return with_panels(
        d,
        _traffic(),
        _servfail_and_backend(),
        _canary_and_probes(),
        # What unbound_exporter's and bind_exporter's dashboards chart, from the
        # normalised families.
        _resolver_latency(),
        _resolver_load(),
    )


def _quantiles(family: str) -> list[prometheus.Dataquery]:
    # Per target: bucket bounds differ by software, never mix them in one quantile.
    return [
        query(
            f"histogram_quantile({q}, sum by (target, le) (rate({family}_bucket"
            f"{{{RESOLVER}}}{RATE})))",
            f"p{int(q * 100)} {{{{target}}}}",
        )
        for q in (0.5, 0.9, 0.99)
    ]


def _traffic() -> list[Panel]:
    """Queries, cache hits and rcodes from the resolver's own counters."""
    return [
        ts(
            "Queries per second",
            "Client queries the resolver received, from "
            "its own statistics (unbound stats_noreset, BIND statistics "
            "channel).",
            "reqps",
            query(
                "sum by (site, target) (rate(dnsfleet_resolver_queries_total"
                f"{{{RESOLVER}}}{RATE}))",
                "{{target}}",
            ),
        ),
        ts(
            "Cache-hit ratio",
            "Share of client queries answered from cache.",
            "percentunit",
            query(
                f"sum by (site, target) (rate(dnsfleet_resolver_cache_hits_total"
                f"{{{RESOLVER}}}{RATE})) / (sum by (site, target) (rate("
                f"dnsfleet_resolver_cache_hits_total{{{RESOLVER}}}{RATE})) + "
                f"sum by (site, target) (rate(dnsfleet_resolver_cache_misses_"
                f"total{{{RESOLVER}}}{RATE})))",
                "{{target}}",
            ),
            min_val=0,
            max_val=1,
        ),
        ts(
            "Responses by rcode",
            "Responses per second the resolver sent, by response code.",
            "reqps",
            query(
                "sum by (target, rcode) (rate(dnsfleet_resolver_responses_total"
                f"{{{RESOLVER}}}{RATE}))",
                "{{target}} {{rcode}}",
            ),
            stack=True,
        ),
    ]


def _servfail_and_backend() -> list[Panel]:
    """SERVFAIL seen from inside and outside; the backend behind the address."""
    return [
        ts(
            "SERVFAIL share",
            "Share of the resolver's responses that were "
            "SERVFAIL (its own counters) and of dnsfleet's probes that got "
            "SERVFAIL over 10m (DNSResolverServfailHigh: 10% / 50%).",
            "percentunit",
            query(
                "sum by (target) (rate(dnsfleet_resolver_responses_total{"
                f'{RESOLVER}, rcode="SERVFAIL"}}{RATE})) / sum by (target) '
                f"(rate(dnsfleet_resolver_responses_total{{{RESOLVER}}}{RATE}))",
                "{{target}} responses",
            ),
            query(
                f"avg_over_time(target:dnsfleet_probe_servfail:bool{{{RESOLVER}}}[10m])",
                "{{target}} probes",
            ),
            min_val=0,
        ),
        tab(
            "Backend identity",
            "Which backend answered the last probe behind "
            "this address (EDNS NSID or CHAOS TXT id.server).",
            "none",
            query(f"dnsfleet_resolver_backend_info{{{RESOLVER}}}", instant=True, fmt="table"),
        ),
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
        ),
    ]


def _canary_and_probes() -> list[Panel]:
    """The canary's TTL, uptime, probe latency and cache resets."""
    return [
        ts(
            "Canary TTL",
            "TTL of the canary record in the resolver's last "
            "answer: a sawtooth that counts down; a jump up before expiry is a "
            "cache flush or restart.",
            "s",
            query(f"dnsfleet_resolver_canary_ttl_seconds{{{RESOLVER}}}", "{{target}}"),
        ),
        ts(
            "Resolver uptime",
            "Seconds since the resolver process started, as the resolver reports it.",
            "s",
            query(f"time() - dnsfleet_resolver_start_time_seconds{{{RESOLVER}}}", "{{target}}"),
        ),
        ts(
            "Probe latency percentiles",
            "p50, p90 and p99 of answered probes.",
            "s",
            *_quantiles("dnsfleet_probe_latency_seconds"),
        ),
        ts(
            "Cache resets seen from outside",
            "Cache resets (flush or restart) detected from the canary TTL, per hour.",
            "short",
            query(
                "sum by (target) (increase(dnsfleet_resolver_cache_resets_total"
                f"{{{RESOLVER}}}[1h]))",
                "{{target}}",
            ),
        ),
    ]


def _resolver_latency() -> list[Panel]:
    """The resolver's own latency, upstream round trips and drops."""
    return [
        ts(
            "Response latency (resolver's own)",
            "Time the resolver took to answer clients, as it measures it, with its own "
            "bucket bounds. unbound counts cache-miss replies only; BIND counts none "
            "(see docs/metrics.md).",
            "s",
            *_quantiles("dnsfleet_resolver_response_latency_seconds"),
        ),
        ts(
            "Upstream round-trip time",
            "Round trips of the resolver's queries to authoritative servers, as the "
            "resolver counts them (BIND, PowerDNS Recursor, CoreDNS).",
            "s",
            *_quantiles("dnsfleet_resolver_upstream_rtt_seconds"),
        ),
        ts(
            "Queries dropped by reason",
            "Client queries the resolver dropped or refused per second: rate_limit, "
            "overload (out of recursion slots), policy, acl, malformed; and upstream "
            "timeouts.",
            "reqps",
            query(
                "sum by (target, reason) (rate(dnsfleet_resolver_queries_dropped_total"
                f"{{{RESOLVER}}}{RATE}))",
                "{{target}} {{reason}}",
            ),
            query(
                "sum by (target) (rate(dnsfleet_resolver_upstream_timeouts_total"
                f"{{{RESOLVER}}}{RATE}))",
                "{{target}} upstream timeouts",
            ),
            stack=True,
        ),
    ]


def _resolver_load() -> list[Panel]:
    """DNSSEC validation results and recursions in flight."""
    return [
        ts(
            "DNSSEC validation",
            "Validation results per second (secure, insecure, bogus, indeterminate); "
            "answers or validations depending on the software (docs/metrics.md). "
            "Bogus answers reach clients as SERVFAIL.",
            "reqps",
            query(
                "sum by (target, result) (rate(dnsfleet_resolver_dnssec_answers_total"
                f"{{{RESOLVER}}}{RATE}))",
                "{{target}} {{result}}",
            ),
        ),
        ts(
            "Recursions in flight",
            "Client queries waiting for recursion, and the resolver's limit where it "
            "states it (unbound: num-queries-per-thread x threads).",
            "short",
            query(f"dnsfleet_resolver_recursions_in_flight{{{RESOLVER}}}", "{{target}}"),
            query(f"dnsfleet_resolver_recursions_limit{{{RESOLVER}}}", "{{target}} limit"),
            min_val=0,
        ),
    ]
