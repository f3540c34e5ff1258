"""The ``resolver_stats`` collector and its families: each target's own counters (unbound
  remote control, BIND statistics channel, ...), normalised to one set of families whatever
  the software. A resolver whose statistics cannot be read is ``dnsfleet_resolver_stats_up
  0`` with the reason logged; that is the resolver's problem, not the collector's, so the
  collector still succeeds. The start time comes from the resolver (unbound ``time.now -
  time.up``, BIND ``boot-time``, or its uptime), never from this exporter's process, and
  moves only when :func:`dnsfleet.restarts.judge_start` judges a restart: the judgement of
  each target is kept in the collector state between scrapes.

The other ``dnsfleet_resolver_*`` families sit beside their own producers: the canary and
backend identity in restarts/watch.py (``canary_families``), the resolver process on this host
in collectors/nic.py (``process_families``), the recorded capacity in
collectors/resolver_capacity.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dnsfleet.collectors.base import DEADLINE_MARGIN, CollectContext, Collector
from dnsfleet.config import Config, StatsSource, Target
from dnsfleet.exposition import Family, Labels, MetricType, join_labels, labelset
from dnsfleet.histograms import add_histogram
from dnsfleet.parsers.resolver import ResolverStats
from dnsfleet.parsers.resolverdetail import Counts, Histogram, ResolverDetail
from dnsfleet.resolverstats import StatsError, read_stats
from dnsfleet.restarts import StartJudgement, StartReading, judge_start

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

STATE_KEY = "resolver_stats"  # in CollectContext.state: {(address, source): StartJudgement}
JudgementKey = tuple[str, StatsSource]


@dataclass(frozen=True, slots=True)
class ResolverReading:
    """What one target's statistics said in a scrape (for the status page)."""

    address: str
    stats: ResolverStats | None  # None: unreadable
    started: float | None  # the judged start time, else the stated one (as exported)


def resolver_labels(target: Target) -> Labels:
    """Resolver-level series: the target and its configured labels (``site``...), no module:
    the statistics describe the resolver at an address, whatever module probes it."""
    return labelset([("target", target.address), *target.labels])


def stats_targets(cfg: Config) -> list[Target]:
    return [t for t in cfg.targets if t.stats is not None]


# The statistics families, in exposition order: key -> (name, help, type).
_STATS: dict[str, tuple[str, str, MetricType]] = {
    "up": (
        "dnsfleet_resolver_stats_up",
        "1 if the resolver's own statistics could be read in this scrape.",
        "gauge",
    ),
    "start": (
        "dnsfleet_resolver_start_time_seconds",
        "Start time of the resolver process, from the resolver's statistics "
        "(unbound time.now - time.up, BIND boot-time, or its uptime), seconds since "
        "the epoch; moves only when a restart is judged.",
        "gauge",
    ),
    "restarts": (
        "dnsfleet_resolver_restarts_total",
        "Restarts of the resolver judged from its own statistics since the exporter "
        "started: its uptime went backwards, its start time moved forward, or (with "
        "neither) its query counter went backwards.",
        "counter",
    ),
    "info": ("dnsfleet_resolver_info", "Resolver software and version; always 1.", "gauge"),
    "queries": (
        "dnsfleet_resolver_queries_total",
        "Client queries the resolver received (its own counter).",
        "counter",
    ),
    "hits": (
        "dnsfleet_resolver_cache_hits_total",
        "Client queries answered from the resolver's cache.",
        "counter",
    ),
    "misses": (
        "dnsfleet_resolver_cache_misses_total",
        "Client queries the resolver could not answer from cache.",
        "counter",
    ),
    "responses": (
        "dnsfleet_resolver_responses_total",
        "Responses the resolver sent, by rcode.",
        "counter",
    ),
    "by_rcode": (
        "dnsfleet_resolver_rcode_stats_available",
        "1 if the resolver counts responses by rcode; 0 if it does not "
        "(unbound without extended-statistics: yes), and then "
        "dnsfleet_resolver_responses_total is absent rather than zero.",
        "gauge",
    ),
    "stale": (
        "dnsfleet_resolver_stale_answers_total",
        "Answers the resolver served from expired records (serve-stale: unbound "
        "serve-expired); absent where the software does not count them.",
        "counter",
    ),
    "b_up": (
        "dnsfleet_resolver_backend_up",
        "1 if the load balancer (dnsdist) counts the backend as up.",
        "gauge",
    ),
    "b_queries": (
        "dnsfleet_resolver_backend_queries_total",
        "Queries the load balancer sent to the backend.",
        "counter",
    ),
    "b_latency": (
        "dnsfleet_resolver_backend_latency_seconds",
        "The load balancer's average latency of the backend.",
        "gauge",
    ),
}


def stats_families(
    rows: list[tuple[Labels, ResolverStats | None, StartJudgement | None]],
) -> list[Family]:
    """Pure: (resolver labels, stats or None when unreadable, the restart judgement or None
    before any) -> families. Without a judgement the start time is the stated one."""
    fams = {key: Family(name, help_, type_) for key, (name, help_, type_) in _STATS.items()}
    for labels, st, judged in rows:
        fams["up"].add_raw(labels, 0.0 if st is None else 1.0)
        if judged is not None:
            fams["restarts"].add_raw(labels, judged.restarts)
        if st is not None:
            _add_stats(fams, labels, st, judged)
    return list(fams.values())


def _add_stats(
    fams: dict[str, Family], labels: Labels, st: ResolverStats, judged: StartJudgement | None
) -> None:
    started = st.start_time if judged is None else judged.start_time
    if started is not None:
        fams["start"].add_raw(labels, started)
    fams["info"].add_raw(
        join_labels(labels, labelset([("software", st.software), ("version", st.version)])), 1.0
    )
    fams["queries"].add_raw(labels, st.queries)
    fams["hits"].add_raw(labels, st.cache_hits)
    fams["misses"].add_raw(labels, st.cache_misses)
    fams["by_rcode"].add_raw(labels, 0.0 if st.responses is None else 1.0)
    for rcode, n in st.responses or ():
        fams["responses"].add_raw(join_labels(labels, labelset([("rcode", rcode)])), n)
    if st.stale_answers is not None:
        fams["stale"].add_raw(labels, st.stale_answers)
    for b in st.backends:
        bl = join_labels(labels, labelset([("backend", b.name), ("backend_address", b.address)]))
        fams["b_up"].add_raw(bl, 1.0 if b.up else 0.0)
        fams["b_queries"].add_raw(bl, b.queries)
        fams["b_latency"].add_raw(bl, b.latency_seconds)


async def _one(
    target: Target, session: aiohttp.ClientSession | None, budget: float
) -> tuple[ResolverStats, StartReading] | None:
    assert target.stats is not None
    try:
        async with asyncio.timeout(max(budget, 0.001)):
            sent = time.monotonic()
            st = await read_stats(target.stats, session)
            received = time.monotonic()
            return st, StartReading(
                start_time=st.start_time,
                uptime=st.uptime,
                queries=st.queries,
                sent=sent,
                received=received,
                wall=time.time(),
            )
    except TimeoutError:
        log.warning(
            "resolver stats %s: no answer within %.3gs",
            target.address,
            min(budget, target.stats.timeout),
        )
    except StatsError as e:
        log.warning("resolver stats %s: %s", target.address, e)
    return None


async def collect(ctx: CollectContext) -> list[Family]:
    targets = stats_targets(ctx.config)
    if not targets:
        return []
    loop = asyncio.get_running_loop()
    budget = ctx.deadline - loop.time() - DEADLINE_MARGIN
    if not any(t.stats is not None and t.stats.type != "unbound" for t in targets):
        # Unbound's remote control needs no HTTP: do not import aiohttp (~28 MB RSS).
        results = await asyncio.gather(*(_one(t, None, budget) for t in targets))
    else:
        import aiohttp  # noqa: PLC0415

        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None),
            connector=aiohttp.TCPConnector(limit=64, force_close=True),
        ) as session:
            results = await asyncio.gather(*(_one(t, session, budget) for t in targets))
    # Kept per (address, statistics source) across scrapes and reloads that keep the pair.
    before: dict[JudgementKey, StartJudgement] = ctx.state.get(STATE_KEY, {})
    judged: dict[JudgementKey, StartJudgement] = {}
    rows: list[tuple[Labels, ResolverStats | None, StartJudgement | None]] = []
    for t, r in zip(targets, results, strict=True):
        assert t.stats is not None
        key = (t.address, t.stats)
        j = before.get(key)
        if r is not None:
            j = judge_start(j, r[1])
            if j.restarts > (before[key].restarts if key in before else 0):
                log.info("resolver %s restarted (its own statistics say so)", t.address)
        if j is not None:
            judged[key] = j
        st = None if r is None else r[0]
        rows.append((resolver_labels(t), st, j))
        started = None if st is None else st.start_time if j is None else j.start_time
        ctx.findings.add(ResolverReading(t.address, st, started))
    ctx.state[STATE_KEY] = judged
    return resolver_families(rows)


def resolver_families(
    rows: list[tuple[Labels, ResolverStats | None, StartJudgement | None]],
) -> list[Family]:
    """Pure: every family of the resolvers' statistics, the counters and the detail."""
    detail = [(labels, st.detail) for labels, st, _ in rows if st is not None]
    return stats_families(rows) + detail_families(detail)


COLLECTOR = Collector(
    name="resolver_stats",
    run=collect,
    enabled=lambda cfg: any(t.stats is not None for t in cfg.targets),
)


# --- the statistics beyond counters (parsers/resolverdetail.py): latency, upstream, drops,
# recursions, cache, memory, query types, DNSSEC. A family is absent for a resolver whose
# software does not count the thing (docs/metrics.md), never a zero standing for unknown.


def _histogram(fam: Family, labels: Labels, h: Histogram) -> None:
    add_histogram(fam, labels, h.buckets, total=h.sum, count=h.count)


def _by(fam: Family, labels: Labels, key: str, counts: Counts) -> None:
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


def detail_families(rows: list[tuple[Labels, ResolverDetail]]) -> list[Family]:
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
