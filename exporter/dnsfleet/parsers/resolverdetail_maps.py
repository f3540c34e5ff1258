"""Each software's fields -> :class:`~dnsfleet.parsers.resolverdetail.ResolverDetail`.

The field names were read from the daemons' sources and documentation and checked on the
Debian 12 daemons (unbound 1.17, BIND 9.18, pdns-recursor 4.8, dnsdist 1.7, knot-resolver
5.6) and CoreDNS 1.15 after a dnsperf run; docs/metrics.md names the field behind every
family per software. Traps kept in mind here:

- unbound prints ``histogram.*``, ``mem.*`` and ``num.*`` only with
  ``extended-statistics: yes``; its histogram counts cache-miss replies only
  (``num.recursivereplies``), its sum is ``recursion.time.avg`` x that count, as
  unbound_exporter computes it.
- BIND's JSON leaves out zero counters (a missing key is 0); its ``QryRTT*`` counters are
  per interval with strict ``<`` bounds (statschannel.c) and have no sum; ``QryDropped``
  includes ``RateDropped`` (lib/ns/query.c), so policy drops are the difference.
- PowerDNS Recursor 4.8 adds 2 to ``policy-drops`` for one RPZ-dropped query; the policy
  reason is ``policy-result-drop``. Its ``cumul-authanswers`` histogram includes timed-out
  queries.
- dnsdist's and Knot Resolver's latency bounds are milliseconds; Knot Resolver's
  ``latency_sum`` is count x bound (+Inf as 3000 ms), not a sum, so it is NaN here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

from dnsfleet.parsers.resolverdetail import (
    Counts,
    Histogram,
    ResolverDetail,
    count,
    fold_qtypes,
    from_intervals,
    merge_cumulative,
    present,
)


class _Sample(Protocol):
    @property
    def value(self) -> float: ...

    def label(self, key: str) -> str: ...


class SampleSet(Protocol):
    """What :class:`dnsfleet.parsers.promtext.Samples` offers (no import upward)."""

    def has(self, name: str) -> bool: ...

    def total(self, name: str, **match: str) -> float: ...

    def get(self, name: str) -> list[Any]: ...


def _le(s: _Sample) -> float:
    raw = s.label("le")
    try:
        return math.inf if raw == "+Inf" else float(raw)
    except ValueError:
        return math.nan


def prom_histogram(
    s: SampleSet, name: str, *, scale: float = 1.0, real_sum: bool = True
) -> Histogram | None:
    """A Prometheus histogram family summed over its labels (server, zone, ipversion...)."""
    buckets = [(le, b.value) for b in s.get(name + "_bucket") if not math.isnan(le := _le(b))]
    total = s.total(name + "_sum") * scale if real_sum and s.has(name + "_sum") else math.nan
    return merge_cumulative(buckets, total, scale=scale)


def _opt(s: SampleSet, *names: str) -> float | None:
    """Sum of the named families, or None when none of them is in the exposition."""
    if not any(s.has(n) for n in names):
        return None
    return sum(s.total(n) for n in names)


# --- unbound ---------------------------------------------------------------------------


def _num(values: Mapping[str, str], key: str) -> float | None:
    raw = values.get(key)
    if raw is None:
        return None
    try:
        return float(Decimal(raw))
    except InvalidOperation:
        raise ValueError(f"{key}: not a number: {raw[:40]!r}") from None


def _sum_keys(values: Mapping[str, str], keys: Iterable[str]) -> float | None:
    got = [v for k in keys if (v := _num(values, k)) is not None]
    return sum(got) if got else None


def _unbound_latency(values: Mapping[str, str]) -> Histogram | None:
    intervals = []
    for key in values:
        if key.startswith("histogram."):
            # histogram.<s>.<us>.to.<s>.<us>: the interval [from, to) in seconds.
            upper = key.partition(".to.")[2]
            n = _num(values, key)
            if upper and n is not None:
                try:
                    intervals.append((float(Decimal(upper)), n))
                except InvalidOperation:
                    raise ValueError(f"{key}: bad histogram bound") from None
    if not intervals:
        return None
    avg = _num(values, "total.recursion.time.avg") or 0.0
    return from_intervals(intervals, avg * sum(n for _, n in intervals))


def _unbound_memory(values: Mapping[str, str]) -> Counts:
    caches = [k for k in values if k.startswith("mem.cache.")]
    mods = [k for k in values if k.startswith("mem.mod.")]
    buffers = ("mem.streamwait", "mem.http.query_buffer", "mem.http.response_buffer")
    return present(
        [
            ("cache", _sum_keys(values, caches) if caches else None),
            ("modules", _sum_keys(values, mods) if mods else None),
            ("buffers", _sum_keys(values, buffers)),
        ]
    )


def unbound_detail(
    values: Mapping[str, str], *, threads: int | None = None, per_thread: int | None = None
) -> ResolverDetail:
    """``stats_noreset`` key=value pairs; ``threads`` from ``status``, ``per_thread`` from
    ``get_option num-queries-per-thread`` (None when not read)."""
    qtypes = {
        k.removeprefix("num.query.type."): v
        for k in values
        if k.startswith("num.query.type.") and (v := _num(values, k)) is not None
    }
    rate_limited = ("num.query.ratelimited", "total.num.queries_ip_ratelimited")
    return ResolverDetail(
        response_latency=_unbound_latency(values),
        upstream_queries=_opt_int(_sum_keys(values, ("num.query.udpout", "num.query.tcpout"))),
        dropped=present(
            [
                ("rate_limit", _sum_keys(values, rate_limited)),
                ("overload", _num(values, "total.requestlist.exceeded")),
                ("policy", _num(values, "num.rpz.action.rpz-drop")),
                ("acl", _num(values, "unwanted.queries")),
            ]
        ),
        recursions_in_flight=_opt_int(_num(values, "total.requestlist.current.user")),
        recursions_limit=threads * per_thread if threads and per_thread else None,
        cache_entries=present(
            [
                ("message", _num(values, "msg.cache.count")),
                ("rrset", _num(values, "rrset.cache.count")),
                ("key", _num(values, "key.cache.count")),
                ("infra", _num(values, "infra.cache.count")),
            ]
        ),
        memory_bytes=_unbound_memory(values),
        queries_by_type=fold_qtypes(qtypes) if qtypes else (),
        dnssec_answers=present(
            [
                ("secure", _num(values, "num.answer.secure")),
                ("bogus", _num(values, "num.answer.bogus")),
            ]
        ),
    )


def _opt_int(v: float | None) -> int | None:
    return None if v is None else count(v)


# --- BIND ------------------------------------------------------------------------------

# statschannel.c: "queries with RTT < 10ms", "10-100ms", ..., "1600ms+".
BIND_RTT = (
    ("QryRTT10", 0.01),
    ("QryRTT100", 0.1),
    ("QryRTT500", 0.5),
    ("QryRTT800", 0.8),
    ("QryRTT1600", 1.6),
    ("QryRTT1600+", math.inf),
)


def _n(d: Mapping[str, Any], key: str) -> int:
    v = d.get(key, 0)  # BIND's JSON leaves zero counters out
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{key}: expected a count, got {str(v)[:40]!r}")
    return v


def _obj(v: Any, where: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ValueError(f"{where}: expected an object")
    return v


def bind_detail(doc: Mapping[str, Any], mem: Mapping[str, Any] | None = None) -> ResolverDetail:
    """``/json/v1/server`` (and ``/json/v1/mem`` when read), summed over the views but the
    CHAOS view ``_bind``."""
    ns = _obj(doc.get("nsstats"), "nsstats")
    rtt = dict.fromkeys((k for k, _ in BIND_RTT), 0)
    res: dict[str, int] = {}
    cache_rrsets = infra = cache_mem = 0
    for view, body in _obj(doc.get("views"), "views").items():
        if view == "_bind":
            continue
        r = _obj(_obj(body, f"views.{view}").get("resolver"), f"views.{view}.resolver")
        stats = _obj(r.get("stats"), f"views.{view}.resolver.stats")
        for key in (*rtt, "Queryv4", "Queryv6", "QueryTimeout", "ValOk", "ValNegOk", "ValFail"):
            n = _n(stats, key)
            if key in rtt:
                rtt[key] += n
            else:
                res[key] = res.get(key, 0) + n
        cache = _obj(r.get("cache"), f"views.{view}.resolver.cache")
        cache_rrsets += sum(_n(cache, k) for k in cache)
        infra += _n(_obj(r.get("adb"), f"views.{view}.resolver.adb"), "entriescnt")
        cs = _obj(r.get("cachestats"), f"views.{view}.resolver.cachestats")
        cache_mem += _n(cs, "TreeMemInUse") + _n(cs, "HeapMemInUse")
    other = None
    if mem is not None:
        in_use = _n(_obj(mem.get("memory"), "memory"), "InUse")
        other = max(in_use - cache_mem, 0)
    dropped = _n(ns, "QryDropped")
    rate = _n(ns, "RateDropped")
    return ResolverDetail(
        upstream_rtt=from_intervals(((b, rtt[k]) for k, b in BIND_RTT), math.nan),
        upstream_queries=res["Queryv4"] + res["Queryv6"] if res else 0,
        upstream_timeouts=res.get("QueryTimeout", 0),
        dropped=(
            ("rate_limit", rate),
            ("overload", _n(ns, "RecLimitDropped")),
            ("policy", max(dropped - rate, 0)),
            ("acl", _n(ns, "RecQryRej") + _n(ns, "AuthQryRej")),
        ),
        recursions_in_flight=_n(ns, "RecursClients"),
        cache_entries=(("rrset", cache_rrsets), ("infra", infra)),
        memory_bytes=present([("cache", cache_mem), ("other", other)]),
        queries_by_type=fold_qtypes(
            {k: _n(_obj(doc.get("qtypes"), "qtypes"), k) for k in _obj(doc.get("qtypes"), "qtypes")}
        ),
        dnssec_answers=(
            ("secure", res.get("ValOk", 0) + res.get("ValNegOk", 0)),
            ("bogus", res.get("ValFail", 0)),
        ),
    )


# --- the /metrics ones -----------------------------------------------------------------


def pdns_recursor_detail(s: SampleSet) -> ResolverDetail:
    p = "pdns_recursor_"

    def f(*names: str) -> float | None:
        return _opt(s, *(p + n for n in names))

    return ResolverDetail(
        # Every answer to a client, packet-cache hits included (the answers0-1... counters
        # leave those out, which makes the recursor look slower than it is).
        response_latency=prom_histogram(s, p + "cumul_clientanswers_seconds"),
        upstream_rtt=prom_histogram(s, p + "cumul_authanswers_seconds"),
        upstream_queries=_opt_int(f("all_outqueries", "tcp_outqueries")),
        upstream_timeouts=_opt_int(f("outgoing_timeouts")),
        dropped=present(
            [
                ("overload", f("over_capacity_drops", "too_old_drops", "query_pipe_full_drops")),
                ("policy", f("policy_result_drop")),
                ("acl", f("unauthorized_udp", "unauthorized_tcp")),
                ("malformed", f("client_parse_errors")),
            ]
        ),
        recursions_in_flight=_opt_int(f("concurrent_queries")),
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


def dnsdist_detail(s: SampleSet) -> ResolverDetail:
    p = "dnsdist_"

    def f(*names: str) -> float | None:
        return _opt(s, *(p + n for n in names))

    return ResolverDetail(
        response_latency=prom_histogram(s, p + "latency", scale=0.001),
        upstream_queries=_opt_int(f("server_queries")),
        upstream_timeouts=_opt_int(f("downstream_timeouts")),
        dropped=present(
            [
                ("rate_limit", f("dyn_blocked")),
                ("policy", f("rule_drop")),
                ("acl", f("acl_drops")),
                ("malformed", f("noncompliant_queries", "empty_queries")),
            ]
        ),
        recursions_in_flight=_opt_int(f("server_outstanding")),
        cache_entries=present([("packet", f("pool_cache_entries"))]),
        memory_bytes=present([("other", f("real_memory_usage"))]),
    )


def knot_resolver_detail(s: SampleSet) -> ResolverDetail:
    upstream = _opt(s, "worker_udp", "worker_tcp", "worker_tls")
    return ResolverDetail(
        response_latency=prom_histogram(s, "latency", scale=0.001, real_sum=False),
        upstream_queries=_opt_int(upstream),
        upstream_timeouts=_opt_int(_opt(s, "worker_timeout")),
        dropped=present([("malformed", _opt(s, "worker_dropped"))]),
        recursions_in_flight=_opt_int(_opt(s, "worker_concurrent")),
        cache_entries=present([("rrset", _opt(s, "cache_count_entries"))]),
        memory_bytes=present([("other", _opt(s, "worker_rss"))]),
    )


def coredns_detail(s: SampleSet) -> ResolverDetail:
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
