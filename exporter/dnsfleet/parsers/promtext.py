"""Resolvers that publish their statistics as Prometheus text: PowerDNS Recursor, dnsdist,
Knot Resolver (http module) and CoreDNS. One small reader of the exposition format and one
mapping per software into :class:`~dnsfleet.parsers.resolver.ResolverStats`.

Metric names, from each project's documentation and checked against the Debian 12 daemons
(pdns-recursor 4.8, dnsdist 1.7, knot-resolver 5.6) in tests/test_resolver_families.py:

- PowerDNS Recursor, webserver ``/metrics`` (docs "Metrics and Statistics"): ``uptime``,
  ``questions``, ``packetcache_hits``, ``cache_hits``, ``cache_misses``, ``noerror_answers``,
  ``nxdomain_answers``, ``servfail_answers``, all prefixed ``pdns_recursor_``.
- dnsdist, webserver ``/metrics`` (docs "Statistics"): ``dnsdist_uptime``,
  ``dnsdist_queries``, ``dnsdist_cache_hits``, ``dnsdist_cache_misses``,
  ``dnsdist_frontend_noerror``/``_nxdomain``/``_servfail``; per backend
  ``dnsdist_server_status``, ``dnsdist_server_queries``, ``dnsdist_server_latency`` (ms).
- Knot Resolver 5, http module ``/metrics`` (docs "Prometheus metrics endpoint"; the
  names carry no prefix): ``request_total`` and ``request_internal`` (its own queries),
  ``answer_total``, ``answer_cached``, ``answer_noerror``, ``answer_nxdomain``,
  ``answer_servfail``. It exports no uptime or start time of its own; a
  ``process_start_time_seconds`` line added with ``http.prometheus.finalize`` in kresd's
  configuration (docs/configuration.md) is read as its start time. Without one, a restart
  shows as its query counter going backwards (restarts.judge_start).
- CoreDNS ``/metrics`` (plugin/metrics, plugin/cache README): ``process_start_time_seconds``,
  ``coredns_dns_requests_total``, ``coredns_cache_hits_total``,
  ``coredns_cache_misses_total``, ``coredns_dns_responses_total{rcode}``, ``coredns_build_info``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dnsfleet.parsers.resolver import Backend, ResolverStats, responses_with_common
from dnsfleet.parsers.resolverdetail import (
    Histogram,
    ResolverDetail,
    count,
    fold_qtypes,
    merge_cumulative,
    opt_count,
    present,
)

# name{labels} value [timestamp]; label values may contain escaped quotes.
_SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?'
    r"\s+(\S+)(?:\s+-?\d+)?\s*$"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str:
        return dict(self.labels).get(key, "")


def parse_prometheus_text(text: str) -> list[Sample]:
    """Pure: the samples of a text exposition (format 0.0.4). Comments and blank lines are
    skipped; a line that is not a sample raises ValueError naming it."""
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f"line {n}: not a sample: {line[:80]!r}")
        labels = tuple(
            (k, v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\"))
            for k, v in _LABEL.findall(m.group(2) or "")
        )
        try:
            value = float(m.group(3))
        except ValueError:
            raise ValueError(f"line {n}: bad value {m.group(3)[:20]!r}") from None
        out.append(Sample(m.group(1), labels, value))
    return out


class Samples:
    def __init__(self, samples: Iterable[Sample]) -> None:
        self.by_name: dict[str, list[Sample]] = {}
        for s in samples:
            self.by_name.setdefault(s.name, []).append(s)

    def has(self, name: str) -> bool:
        return name in self.by_name

    def total(self, name: str, **match: str) -> float:
        """Sum of a family's samples whose labels include ``match``; 0 when absent."""
        return sum(
            s.value
            for s in self.by_name.get(name, ())
            if all(s.label(k) == v for k, v in match.items()) and not math.isnan(s.value)
        )

    def need(self, name: str) -> float:
        if name not in self.by_name:
            raise ValueError(f"no {name} in the statistics")
        return self.total(name)

    def get(self, name: str) -> list[Sample]:
        return self.by_name.get(name, [])


# --- the statistics beyond counters (parsers/resolverdetail.py) -------------------------
# PowerDNS Recursor 4.8 adds 2 to policy-drops per RPZ-dropped query: the policy reason is
# policy-result-drop. dnsdist's and Knot Resolver's latency bounds are milliseconds; Knot
# Resolver's latency_sum is count x bound (+Inf as 3000 ms), not a sum: NaN here.


def _le(s: Sample) -> float:
    raw = s.label("le")
    try:
        return math.inf if raw == "+Inf" else float(raw)
    except ValueError:
        return math.nan


def prom_histogram(
    s: Samples, name: str, *, scale: float = 1.0, real_sum: bool = True
) -> Histogram | None:
    """A Prometheus histogram family summed over its labels (server, zone, ipversion...)."""
    buckets = [(le, b.value) for b in s.get(name + "_bucket") if not math.isnan(le := _le(b))]
    total = s.total(name + "_sum") * scale if real_sum and s.has(name + "_sum") else math.nan
    return merge_cumulative(buckets, total, scale=scale)


def _opt(s: Samples, *names: str) -> float | None:
    """Sum of the named families, or None when none of them is in the exposition."""
    if not any(s.has(n) for n in names):
        return None
    return sum(s.total(n) for n in names)


def pdns_recursor_detail(s: Samples) -> ResolverDetail:
    p = "pdns_recursor_"

    def f(*names: str) -> float | None:
        return _opt(s, *(p + n for n in names))

    return ResolverDetail(
        # Every answer to a client, packet-cache hits included (the answers0-1... counters
        # leave those out, which makes the recursor look slower than it is).
        response_latency=prom_histogram(s, p + "cumul_clientanswers_seconds"),
        upstream_rtt=prom_histogram(s, p + "cumul_authanswers_seconds"),
        upstream_queries=opt_count(f("all_outqueries", "tcp_outqueries")),
        upstream_timeouts=opt_count(f("outgoing_timeouts")),
        dropped=present(
            [
                ("overload", f("over_capacity_drops", "too_old_drops", "query_pipe_full_drops")),
                ("policy", f("policy_result_drop")),
                ("acl", f("unauthorized_udp", "unauthorized_tcp")),
                ("malformed", f("client_parse_errors")),
            ]
        ),
        recursions_in_flight=opt_count(f("concurrent_queries")),
        cache_entries=present(
            [
                ("rrset", f("cache_entries")),
                ("packet", f("packetcache_entries")),
                ("negative", f("negcache_entries")),
                ("infra", f("nsspeeds_entries")),
            ]
        ),
        memory_bytes=present([("other", f("real_memory_usage"))]),
        dnssec_answers=present(
            [
                ("secure", f("dnssec_result_secure")),
                ("insecure", f("dnssec_result_insecure", "dnssec_result_nta")),
                ("bogus", f("dnssec_result_bogus")),
                ("indeterminate", f("dnssec_result_indeterminate")),
            ]
        ),
    )


def dnsdist_detail(s: Samples) -> ResolverDetail:
    p = "dnsdist_"

    def f(*names: str) -> float | None:
        return _opt(s, *(p + n for n in names))

    return ResolverDetail(
        response_latency=prom_histogram(s, p + "latency", scale=0.001),
        upstream_queries=opt_count(f("server_queries")),
        upstream_timeouts=opt_count(f("downstream_timeouts")),
        dropped=present(
            [
                ("rate_limit", f("dyn_blocked")),
                ("policy", f("rule_drop")),
                ("acl", f("acl_drops")),
                ("malformed", f("noncompliant_queries", "empty_queries")),
            ]
        ),
        recursions_in_flight=opt_count(f("server_outstanding")),
        cache_entries=present([("packet", f("pool_cache_entries"))]),
        memory_bytes=present([("other", f("real_memory_usage"))]),
    )


def knot_resolver_detail(s: Samples) -> ResolverDetail:
    upstream = _opt(s, "worker_udp", "worker_tcp", "worker_tls")
    return ResolverDetail(
        response_latency=prom_histogram(s, "latency", scale=0.001, real_sum=False),
        upstream_queries=opt_count(upstream),
        upstream_timeouts=opt_count(_opt(s, "worker_timeout")),
        dropped=present([("malformed", _opt(s, "worker_dropped"))]),
        recursions_in_flight=opt_count(_opt(s, "worker_concurrent")),
        cache_entries=present([("rrset", _opt(s, "cache_count_entries"))]),
        memory_bytes=present([("other", _opt(s, "worker_rss"))]),
    )


def coredns_detail(s: Samples) -> ResolverDetail:
    upstream = prom_histogram(s, "coredns_proxy_request_duration_seconds") or prom_histogram(
        s, "coredns_forward_request_duration_seconds"
    )
    # The acl plugin's counters appear once non-zero; with the plugin on, a zero is known.
    acl_on = any(p.label("name") == "acl" for p in s.get("coredns_plugin_enabled"))
    types: dict[str, float] = {}
    for r in s.get("coredns_dns_requests_total"):
        types[r.label("type")] = types.get(r.label("type"), 0.0) + r.value
    return ResolverDetail(
        response_latency=prom_histogram(s, "coredns_dns_request_duration_seconds"),
        upstream_rtt=upstream,
        # Responses from upstreams: CoreDNS 1.15 counts no queries sent, nor timeouts.
        upstream_queries=None if upstream is None else count(upstream.count),
        dropped=present(
            [
                ("overload", _opt(s, "coredns_forward_max_concurrent_rejects_total")),
                (
                    "policy",
                    s.total("coredns_acl_dropped_requests_total")
                    if acl_on or s.has("coredns_acl_dropped_requests_total")
                    else None,
                ),
                (
                    "acl",
                    s.total("coredns_acl_blocked_requests_total")
                    if acl_on or s.has("coredns_acl_blocked_requests_total")
                    else None,
                ),
            ]
        ),
        cache_entries=present(
            [
                (
                    "message",
                    s.total("coredns_cache_entries", type="success")
                    if s.has("coredns_cache_entries")
                    else None,
                ),
                (
                    "negative",
                    s.total("coredns_cache_entries", type="denial")
                    if s.has("coredns_cache_entries")
                    else None,
                ),
            ]
        ),
        memory_bytes=present([("other", _opt(s, "process_resident_memory_bytes"))]),
        queries_by_type=fold_qtypes(types) if types else (),
    )


def _int(v: float) -> int:
    return int(v) if math.isfinite(v) and v >= 0 else 0


def _version(s: Samples, info: str) -> str:
    """The ``version`` label of an ``*_info`` sample (pdns_recursor_info, dnsdist_info,
    CoreDNS coredns_build_info, Knot Resolver's build_info line from
    ``http.prometheus.finalize``); "" when absent."""
    found = s.get(info)
    return found[0].label("version") if found else ""


def pdns_recursor(s: Samples) -> ResolverStats:
    p = "pdns_recursor_"
    rcodes = {
        "NOERROR": s.total(p + "noerror_answers"),
        "NXDOMAIN": s.total(p + "nxdomain_answers"),
        "SERVFAIL": s.total(p + "servfail_answers"),
    }
    return ResolverStats(
        software="pdns-recursor",
        version=_version(s, p + "info"),
        start_time=None,
        uptime=s.need(p + "uptime"),
        queries=_int(s.need(p + "questions")),
        # A question answered from the packet cache never reaches the record cache.
        cache_hits=_int(s.total(p + "packetcache_hits") + s.total(p + "cache_hits")),
        cache_misses=_int(s.total(p + "cache_misses")),
        responses=responses_with_common({k: _int(v) for k, v in rcodes.items()}),
        detail=pdns_recursor_detail(s),
    )


def dnsdist(s: Samples) -> ResolverStats:
    p = "dnsdist_"
    rcodes = {
        "NOERROR": s.total(p + "frontend_noerror"),
        "NXDOMAIN": s.total(p + "frontend_nxdomain"),
        "SERVFAIL": s.total(p + "frontend_servfail"),
    }
    backends = tuple(
        Backend(
            name=b.label("server") or b.label("address"),
            address=b.label("address"),
            up=b.value == 1,
            queries=_int(
                s.total(p + "server_queries", server=b.label("server"), address=b.label("address"))
            ),
            latency_seconds=s.total(
                p + "server_latency", server=b.label("server"), address=b.label("address")
            )
            / 1000,
        )
        for b in s.get(p + "server_status")
    )
    return ResolverStats(
        software="dnsdist",
        version=_version(s, p + "info"),
        start_time=None,
        uptime=s.need(p + "uptime"),
        queries=_int(s.need(p + "queries")),
        cache_hits=_int(s.total(p + "cache_hits")),
        cache_misses=_int(s.total(p + "cache_misses")),
        responses=responses_with_common({k: _int(v) for k, v in rcodes.items()}),
        backends=backends,
        detail=dnsdist_detail(s),
    )


def knot_resolver(s: Samples) -> ResolverStats:
    rcodes = {
        "NOERROR": s.total("answer_noerror"),
        "NXDOMAIN": s.total("answer_nxdomain"),
        "SERVFAIL": s.total("answer_servfail"),
    }
    answers = s.need("answer_total")
    cached = s.total("answer_cached")
    return ResolverStats(
        software="knot-resolver",
        version=_version(s, "build_info"),
        start_time=s.total("process_start_time_seconds")
        if s.has("process_start_time_seconds")
        else None,
        queries=_int(s.need("request_total") - s.total("request_internal")),
        cache_hits=_int(cached),
        cache_misses=_int(answers - cached),
        responses=responses_with_common({k: _int(v) for k, v in rcodes.items()}),
        detail=knot_resolver_detail(s),
    )


def coredns(s: Samples) -> ResolverStats:
    rcodes: dict[str, int] = {}
    for r in s.get("coredns_dns_responses_total"):
        rcodes[r.label("rcode")] = rcodes.get(r.label("rcode"), 0) + _int(r.value)
    return ResolverStats(
        software="coredns",
        version=_version(s, "coredns_build_info"),
        start_time=s.need("process_start_time_seconds"),
        queries=_int(s.need("coredns_dns_requests_total")),
        cache_hits=_int(s.total("coredns_cache_hits_total")),
        cache_misses=_int(s.total("coredns_cache_misses_total")),
        responses=responses_with_common(rcodes) if rcodes else None,
        stale_answers=_int(s.total("coredns_cache_served_stale_total"))
        if s.has("coredns_cache_served_stale_total")
        else None,
        detail=coredns_detail(s),
    )


MAPPINGS: dict[str, Callable[[Samples], ResolverStats]] = {
    "pdns-recursor": pdns_recursor,
    "dnsdist": dnsdist,
    "knot-resolver": knot_resolver,
    "coredns": coredns,
}


def parse_resolver_metrics(software: str, text: str) -> ResolverStats:
    """Pure: a resolver's Prometheus text -> normalised statistics."""
    return MAPPINGS[software](Samples(parse_prometheus_text(text)))
