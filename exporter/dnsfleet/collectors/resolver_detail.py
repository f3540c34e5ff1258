"""The ``dnsfleet_resolver_*`` families of :class:`~dnsfleet.parsers.resolverdetail.ResolverDetail`
(latency, upstream, drops, recursions, cache, memory, query types, DNSSEC), emitted by the
``resolver_stats`` collector next to the counters of collectors/resolver.py.

A family is absent for a resolver whose software does not count the thing (docs/metrics.md
has the table per software), never a zero standing for "unknown".
"""

from __future__ import annotations

import math

from dnsfleet.exposition import Family, MetricType, format_value, join_labels, labelset
from dnsfleet.parsers.resolverdetail import Counts, Histogram, ResolverDetail


def _histogram(fam: Family, labels: str, h: Histogram) -> None:
    for le, n in h.buckets:
        bound = "+Inf" if math.isinf(le) else format_value(le)
        fam.add_raw(join_labels(labels, labelset([("le", bound)])), n, "_bucket")
    fam.add_raw(labels, h.sum, "_sum")
    fam.add_raw(labels, h.count, "_count")


def _by(fam: Family, labels: str, key: str, counts: Counts) -> None:
    for name, n in counts:
        fam.add_raw(join_labels(labels, labelset([(key, name)])), n)


# key -> (family name, help, type); fresh Family objects per scrape from this table.
SPECS: dict[str, tuple[str, str, MetricType]] = {
    "latency": (
        "dnsfleet_resolver_response_latency_seconds",
        "Time the resolver took to answer clients, as the resolver measures it, with its "
        "own bucket bounds (what is counted differs by software: unbound counts cache-miss "
        "replies only; see docs/metrics.md).",
        "histogram",
    ),
    "rtt": (
        "dnsfleet_resolver_upstream_rtt_seconds",
        "Round-trip time of the resolver's queries to upstream (authoritative) servers, "
        "with the resolver's own bucket bounds.",
        "histogram",
    ),
    "upstream": (
        "dnsfleet_resolver_upstream_queries_total",
        "Queries the resolver sent upstream (CoreDNS: responses received from upstream).",
        "counter",
    ),
    "timeouts": (
        "dnsfleet_resolver_upstream_timeouts_total",
        "Upstream queries that timed out.",
        "counter",
    ),
    "dropped": (
        "dnsfleet_resolver_queries_dropped_total",
        "Client queries the resolver dropped or refused for load or policy, by reason "
        "(rate_limit, overload, policy, acl, malformed).",
        "counter",
    ),
    "in_flight": (
        "dnsfleet_resolver_recursions_in_flight",
        "Client queries waiting for recursion (unbound request list, BIND recursive "
        "clients, PowerDNS concurrent queries...).",
        "gauge",
    ),
    "limit": (
        "dnsfleet_resolver_recursions_limit",
        "The most recursions the resolver holds at once, where it states it (unbound "
        "num-queries-per-thread x threads).",
        "gauge",
    ),
    "cache": (
        "dnsfleet_resolver_cache_entries",
        "Entries in the resolver's caches, by cache (message, rrset, packet, negative, "
        "key, infra).",
        "gauge",
    ),
    "memory": (
        "dnsfleet_resolver_memory_bytes",
        "Memory the resolver reports in use, by pool (cache, modules, buffers, other; "
        "disjoint, so their sum is the total).",
        "gauge",
    ),
    "qtypes": (
        "dnsfleet_resolver_queries_by_type_total",
        "Client queries by query type: the common types by name, every other as other.",
        "counter",
    ),
    "dnssec": (
        "dnsfleet_resolver_dnssec_answers_total",
        "DNSSEC validation results (secure, insecure, bogus, indeterminate) where the "
        "resolver counts them; answers or validations depending on the software.",
        "counter",
    ),
}


def detail_families(rows: list[tuple[str, ResolverDetail]]) -> list[Family]:
    """Pure: (resolver labels, detail) of each readable resolver -> families."""
    f = {key: Family(name, helptext, kind) for key, (name, helptext, kind) in SPECS.items()}
    for labels, d in rows:
        for key, h in (("latency", d.response_latency), ("rtt", d.upstream_rtt)):
            if h is not None:
                _histogram(f[key], labels, h)
        for key, v in (
            ("upstream", d.upstream_queries),
            ("timeouts", d.upstream_timeouts),
            ("in_flight", d.recursions_in_flight),
            ("limit", d.recursions_limit),
        ):
            if v is not None:
                f[key].add_raw(labels, v)
        _by(f["dropped"], labels, "reason", d.dropped)
        _by(f["cache"], labels, "cache", d.cache_entries)
        _by(f["memory"], labels, "pool", d.memory_bytes)
        _by(f["qtypes"], labels, "qtype", d.queries_by_type)
        _by(f["dnssec"], labels, "result", d.dnssec_answers)
    return list(f.values())
