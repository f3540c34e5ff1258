"""Resolver detail, pure parts: latency, upstream, drop, cache, memory, qtype and DNSSEC families
from statistics captured after one dnsperf run (2,270 queries of every kind: cache hits,
misses, secure, insecure and bogus zones, slow and silent upstreams, rate-limited, dropped
and refused clients) against the real daemons: unbound 1.17.1, BIND 9.18.49,
pdns-recursor 4.8.8, dnsdist 1.7.3, knot-resolver 5.6.0 and CoreDNS 1.15.0 (a build of the
release's module with the acl, cache, forward and metrics plugins).

The expected figures were read off the captures by hand, field by field; the unbound one is
also compared with letsencrypt/unbound_exporter's exposition of the same unbound (its
module cannot be fetched here; the live comparison with `unbound-control stats_noreset` is
in tests/test_resolver_detail_real.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from dnsfleet.collectors.resolver import detail_families
from dnsfleet.exposition import Labels
from dnsfleet.parsers.bind import parse_bind_server
from dnsfleet.parsers.promtext import parse_prometheus_text, parse_resolver_metrics
from dnsfleet.parsers.resolver import ResolverStats
from dnsfleet.parsers.resolverdetail import (
    DNSSEC_RESULTS,
    DROP_REASONS,
    POOLS,
    QTYPES,
    Histogram,
    fold_qtypes,
    from_intervals,
    merge_cumulative,
)
from dnsfleet.parsers.unbound import parse_option, parse_threads, parse_unbound_stats
from tests.harness.metrics import of

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent / "fixtures" / "resolver"


def unbound() -> ResolverStats:
    return parse_unbound_stats(
        (FIX / "unbound-1.17-dnsperf.stats.txt").read_text(),
        version="1.17.1",
        threads=2,
        queries_per_thread=64,
    )


def bind(mem: bool = True) -> ResolverStats:
    return parse_bind_server(
        (FIX / "bind-9.18-dnsperf.server.json").read_text(),
        (FIX / "bind-9.18-dnsperf.mem.json").read_text() if mem else None,
    )


def prom(software: str, name: str) -> ResolverStats:
    return parse_resolver_metrics(software, (FIX / name).read_text())


ALL: dict[str, Callable[[], ResolverStats]] = {
    "unbound": unbound,
    "bind": bind,
    "pdns-recursor": lambda: prom("pdns-recursor", "pdns-recursor-4.8-dnsperf.metrics.txt"),
    "dnsdist": lambda: prom("dnsdist", "dnsdist-1.7-dnsperf.metrics.txt"),
    "knot-resolver": lambda: prom("knot-resolver", "knot-resolver-5.6-dnsperf.metrics.txt"),
    "coredns": lambda: prom("coredns", "coredns-1.15-dnsperf.metrics.txt"),
}


def le_counts(h: Histogram | None) -> dict[float, float]:
    assert h is not None
    return dict(h.buckets)


def test_unbound() -> None:
    d = unbound().detail
    h = d.response_latency
    assert h is not None
    # 40 intervals [from, to) with upper bounds 1 us ... 524288 s, then +Inf.
    assert len(h.buckets) == 41 and h.buckets[0] == (1e-06, 676)
    assert h.buckets[-2][0] == 524288 and h.buckets[-1][0] == math.inf
    # Cache-miss replies only: the count is num.recursivereplies, not num.queries (2,270).
    assert h.count == 1214
    assert h.sum == pytest.approx(0.062283 * 1214)
    assert le_counts(h)[2.0] == 1214 and le_counts(h)[1.0] == 1174
    assert d.upstream_rtt is None and d.upstream_timeouts is None
    assert d.upstream_queries == 1146
    assert dict(d.dropped) == {"rate_limit": 369, "overload": 31, "acl": 5}
    assert (d.recursions_in_flight, d.recursions_limit) == (1, 128)
    assert dict(d.cache_entries) == {"message": 554, "rrset": 527, "key": 5, "infra": 7}
    assert dict(d.memory_bytes) == {
        "cache": 205683 + 208858,
        "modules": 16604 + 69886 + 0 + 74504,
        "buffers": 0,
    }
    q = dict(d.queries_by_type)
    # NULL, NAPTR and unbound's own "other" (CAA) fold into other.
    assert q["A"] == 1750 and q["HTTPS"] == 30 and q["other"] == 10 + 10 + 10
    assert sum(q.values()) == 2270
    assert dict(d.dnssec_answers) == {"secure": 1321, "bogus": 84}


def test_unbound_without_limit_or_extended_statistics() -> None:
    text = (FIX / "unbound-1.17-dnsperf.stats.txt").read_text()
    assert unbound().detail.recursions_limit == 128
    assert parse_unbound_stats(text).detail.recursions_limit is None
    plain = "\n".join(
        line for line in text.splitlines() if line.startswith(("thread", "total.", "time."))
    )
    d = parse_unbound_stats(plain).detail
    assert d.response_latency is None and d.queries_by_type == () and d.dnssec_answers == ()
    # total.num.queries_ip_ratelimited is printed without extended statistics too.
    assert dict(d.dropped) == {"rate_limit": 0, "overload": 31}
    assert parse_threads("version: 1.17.1\nthreads: 2\n") == 2
    assert parse_threads("version: 1.17.1\n") is None
    assert parse_option("64\n") == 64 and parse_option("error unknown option\n") is None


def _exporter_samples(name: str) -> dict[str, float]:
    return {
        s.name + "".join(f"|{k}={v}" for k, v in s.labels): s.value
        for s in parse_prometheus_text((FIX / name).read_text())
    }


def test_unbound_equals_unbound_exporter() -> None:
    """letsencrypt/unbound_exporter (HEAD 01314cb) scraped the same unbound; the stats
    were taken right after (`-after-exporter`), with no query in between."""
    theirs = _exporter_samples("unbound_exporter-01314cb.metrics.txt")
    st = parse_unbound_stats((FIX / "unbound-1.17-dnsperf-after-exporter.stats.txt").read_text())
    d = st.detail
    h = d.response_latency
    assert h is not None
    buckets = {
        float(k.split("|le=")[1]): v
        for k, v in theirs.items()
        if k.startswith("unbound_response_time_seconds_bucket|")
    }
    assert buckets == dict(h.buckets)
    assert theirs["unbound_response_time_seconds_count"] == h.count
    assert theirs["unbound_response_time_seconds_sum"] == pytest.approx(h.sum)

    def total(name: str) -> float:
        return sum(v for k, v in theirs.items() if k == name or k.startswith(name + "|"))

    assert total("unbound_queries_total") == st.queries
    assert total("unbound_expired_total") == st.stale_answers
    folded = fold_qtypes(
        {k.split("|type=")[1]: v for k, v in theirs.items() if k.startswith("unbound_query_types")}
    )
    assert folded == d.queries_by_type
    assert dict(d.dnssec_answers) == {
        "secure": theirs["unbound_answers_secure_total"],
        "bogus": theirs["unbound_answers_bogus"],
    }
    dropped = dict(d.dropped)
    assert dropped["overload"] == total("unbound_request_list_exceeded_total")
    assert dropped["acl"] == theirs["unbound_unwanted_queries_total"]
    assert d.recursions_in_flight == total("unbound_request_list_current_user")
    assert d.upstream_queries == theirs["unbound_query_udpout_total"] + theirs.get(
        "unbound_query_tcpout_total", 0
    )
    caches = dict(d.cache_entries)
    assert caches["message"] == theirs["unbound_msg_cache_count"]
    assert caches["rrset"] == theirs["unbound_rrset_cache_count"]
    assert caches["infra"] == theirs["unbound_infra_cache_count"]
    mem = dict(d.memory_bytes)
    assert mem["cache"] == total("unbound_memory_caches_bytes")
    assert mem["modules"] == total("unbound_memory_modules_bytes")


def test_bind() -> None:
    st = bind()
    d = st.detail
    assert st.stale_answers == 3  # QryUsedStale
    rtt = d.upstream_rtt
    assert rtt is not None and math.isnan(rtt.sum)
    # QryRTT10 377, QryRTT100 81, QryRTT500 40, QryRTT800 40, QryRTT1600 40, 1600+ 40.
    assert rtt.buckets == (
        (0.01, 377),
        (0.1, 458),
        (0.5, 498),
        (0.8, 538),
        (1.6, 578),
        (math.inf, 618),
    )
    assert d.response_latency is None
    assert (d.upstream_queries, d.upstream_timeouts) == (964, 343)
    # QryDropped 269 = RateDropped 269 + 0 policy drops.
    assert dict(d.dropped) == {"rate_limit": 269, "overload": 0, "policy": 0, "acl": 0}
    assert d.recursions_in_flight == 0 and d.recursions_limit is None
    assert dict(d.cache_entries) == {"rrset": 544, "infra": 4}
    assert dict(d.memory_bytes) == {
        "cache": 171069 + 140352,
        "other": 26600560 - (171069 + 140352),
    }
    q = dict(d.queries_by_type)
    assert q["A"] == 1750 and q["other"] == 10 + 10 + 10  # Others, NULL, NAPTR
    assert dict(d.dnssec_answers) == {"secure": 486 + 7, "bogus": 60}
    # Without /json/v1/mem the other pool is absent, not zero.
    assert dict(bind(mem=False).detail.memory_bytes) == {"cache": 171069 + 140352}


def test_pdns_recursor() -> None:
    st = ALL["pdns-recursor"]()
    d = st.detail
    assert st.version == "4.8.8" and st.stale_answers is None
    lat = d.response_latency
    assert lat is not None and lat.count == 2220 and lat.sum == pytest.approx(152.657)
    assert le_counts(lat)[1e-05] == 314 and le_counts(lat)[2.0] == 2220
    rtt = d.upstream_rtt
    assert rtt is not None and rtt.count == 865 and le_counts(rtt)[0.001] == 540
    assert (d.upstream_queries, d.upstream_timeouts) == (865, 49)
    # policy-result-drop, not policy-drops (100: 4.8 counts each RPZ drop twice).
    assert dict(d.dropped) == {"overload": 0, "policy": 50, "acl": 5, "malformed": 0}
    assert d.recursions_in_flight == 0
    assert dict(d.cache_entries) == {"rrset": 828, "packet": 1165, "negative": 8, "infra": 6}
    assert dict(d.memory_bytes) == {"other": 32002048}
    assert d.queries_by_type == ()
    assert dict(d.dnssec_answers) == {
        "secure": 319,
        "insecure": 744,
        "bogus": 51,
        "indeterminate": 53,
    }


def test_dnsdist() -> None:
    st = ALL["dnsdist"]()
    d = st.detail
    assert st.version == "1.7.3"
    lat = d.response_latency
    assert lat is not None
    # Milliseconds on dnsdist's side: le="1" is 1 ms.
    assert lat.buckets[0] == (0.001, 1862) and lat.count == 2049
    assert lat.sum == pytest.approx(27.582)
    assert (d.upstream_queries, d.upstream_timeouts) == (1092, 22)
    assert dict(d.dropped) == {"rate_limit": 148, "policy": 47, "acl": 5, "malformed": 0}
    assert d.recursions_in_flight == 0
    assert dict(d.cache_entries) == {"packet": 1070}
    assert dict(d.memory_bytes) == {"other": 40062976}
    assert d.upstream_rtt is None and d.dnssec_answers == ()


def test_knot_resolver() -> None:
    st = ALL["knot-resolver"]()
    d = st.detail
    assert st.version == ""  # this capture has no build_info line
    lat = d.response_latency
    assert lat is not None and lat.count == 2019 and math.isnan(lat.sum)
    assert le_counts(lat)[0.001] == 1846 and le_counts(lat)[1.5] == 2013
    assert (d.upstream_queries, d.upstream_timeouts) == (2572, 56)
    assert dict(d.dropped) == {"malformed": 0}
    assert d.recursions_in_flight == 0
    assert dict(d.cache_entries) == {"rrset": 669}
    assert dict(d.memory_bytes) == {"other": 27234304}
    text = (FIX / "knot-resolver-5.6-dnsperf.metrics.txt").read_text()
    withv = parse_resolver_metrics("knot-resolver", text + 'build_info{version="5.6.0"} 1\n')
    assert withv.version == "5.6.0"


def test_coredns() -> None:
    st = ALL["coredns"]()
    d = st.detail
    assert st.version == "1.15.0" and st.stale_answers == 18
    lat = d.response_latency
    assert lat is not None and lat.count == 2275 and lat.buckets[0] == (0.00025, 1264)
    rtt = d.upstream_rtt
    assert rtt is not None and rtt.count == 1220
    assert d.upstream_queries == 1220 and d.upstream_timeouts is None
    assert dict(d.dropped) == {"overload": 0, "policy": 0, "acl": 5}
    assert d.recursions_in_flight is None
    assert dict(d.cache_entries) == {"message": 453, "negative": 757}
    q = dict(d.queries_by_type)
    assert q["A"] == 1755 and sum(q.values()) == 2275


@pytest.mark.parametrize("software", sorted(ALL))
def test_label_sets_are_closed_and_histograms_cumulative(software: str) -> None:
    d = ALL[software]().detail
    assert {r for r, _ in d.dropped} <= set(DROP_REASONS)
    assert {p for p, _ in d.memory_bytes} <= set(POOLS)
    assert {r for r, _ in d.dnssec_answers} <= set(DNSSEC_RESULTS)
    if d.queries_by_type:
        assert [q for q, _ in d.queries_by_type] == [*QTYPES, "other"]
    for h in (d.response_latency, d.upstream_rtt):
        if h is None:
            continue
        bounds = [b for b, _ in h.buckets]
        counts = [n for _, n in h.buckets]
        assert bounds == sorted(bounds) and bounds[-1] == math.inf
        assert counts == sorted(counts)


def test_families_render_and_read_back() -> None:
    rows = [(Labels({"target": name}), make().detail) for name, make in ALL.items()]
    got = of(detail_families(rows))
    key = frozenset({("target", "unbound"), ("le", "1e-06")})
    assert got[("dnsfleet_resolver_response_latency_seconds_bucket", key)] == 676
    key = frozenset({("target", "bind")})
    assert math.isnan(got[("dnsfleet_resolver_upstream_rtt_seconds_sum", key)])
    key = frozenset({("target", "dnsdist"), ("reason", "rate_limit")})
    assert got[("dnsfleet_resolver_queries_dropped_total", key)] == 148
    # Absent, not zero, where the software does not count it.
    assert not any(
        n.startswith("dnsfleet_resolver_dnssec_answers") and ("target", "dnsdist") in lab
        for n, lab in got
    )


def test_helpers() -> None:
    h = from_intervals([(0.1, 2), (0.01, 1)])
    assert h.buckets == ((0.01, 1), (0.1, 3), (math.inf, 3)) and math.isnan(h.sum)
    m = merge_cumulative([(1, 5), (1, 2), (math.inf, 9)], 4.0, scale=0.001)
    assert m is not None and m.buckets == ((0.001, 7), (math.inf, 9)) and m.sum == 4.0
    assert merge_cumulative([]) is None
    assert dict(fold_qtypes({"a": 3, "CAA": 2, "Others": 1}))["other"] == 3
