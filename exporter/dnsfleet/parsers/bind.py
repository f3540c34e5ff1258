"""BIND 9 statistics channel, ``GET /json/v1/server`` (json-stats-version 1.x).

``boot-time`` is the process start (ISO 8601, milliseconds, UTC); ``rndc reload`` moves
``config-time`` only, so it is not a restart. ``opcodes.QUERY`` counts queries received,
``rcodes`` the rcodes of responses sent. Cache hits and misses are the per-view resolver
``cachestats`` ``QueryHits``/``QueryMisses`` (client queries answered, or not, from cache;
``CacheHits`` also counts the resolver's own lookups); the ``_bind`` view is the CHAOS view
and is left out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dnsfleet.parsers.resolver import ResolverStats, responses_with_common
from dnsfleet.parsers.resolverdetail import ResolverDetail, fold_qtypes, from_intervals, present


def _count(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{where}: expected a count, got {str(v)[:40]!r}")
    return v


def _mapping(v: Any, where: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ValueError(f"{where}: expected an object")
    return v


def parse_iso_time(text: Any) -> float:
    if not isinstance(text, str):
        raise ValueError(f"expected an ISO 8601 time, got {str(text)[:40]!r}")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"invalid ISO 8601 time {text[:40]!r}") from None


def _json_object(text: str | bytes) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError("expected a JSON object")
    return doc


def parse_bind_server(text: str | bytes, mem: str | bytes | None = None) -> ResolverStats:
    """``/json/v1/server``, and ``/json/v1/mem`` when read (memory outside the caches)."""
    doc = _json_object(text)
    if "boot-time" not in doc:
        raise ValueError("no boot-time: not a BIND /json/v1/server document")
    start = parse_iso_time(doc["boot-time"])
    version = doc.get("version", "")
    opcodes = _mapping(doc.get("opcodes"), "opcodes")
    rcodes = {
        str(k): _count(v, f"rcodes.{k}") for k, v in _mapping(doc.get("rcodes"), "rcodes").items()
    }
    hits = misses = 0
    for view, body in _mapping(doc.get("views"), "views").items():
        if view == "_bind":
            continue
        cs = _mapping(
            _mapping(_mapping(body, f"views.{view}").get("resolver"), f"views.{view}.resolver").get(
                "cachestats"
            ),
            f"views.{view}.resolver.cachestats",
        )
        hits += _count(cs.get("QueryHits", 0), f"views.{view}...QueryHits")
        misses += _count(cs.get("QueryMisses", 0), f"views.{view}...QueryMisses")
    ns = _mapping(doc.get("nsstats"), "nsstats")
    return ResolverStats(
        software="bind",
        version=version if isinstance(version, str) else "",
        start_time=start,
        queries=_count(opcodes.get("QUERY", 0), "opcodes.QUERY"),
        cache_hits=hits,
        cache_misses=misses,
        # Only real rcodes: BIND lists unassigned codes as "17", "RESERVED11", ...
        responses=responses_with_common(
            {k: v for k, v in rcodes.items() if not k.isdigit() and "RESERVED" not in k}
        ),
        # "successful uses of stale cache data after lookup failure" (omitted while 0).
        stale_answers=_count(ns.get("QryUsedStale", 0), "nsstats.QryUsedStale"),
        detail=bind_detail(doc, None if mem is None else _json_object(mem)),
    )


# --- the statistics beyond counters (parsers/resolverdetail.py) -------------------------
# The JSON leaves zero counters out (a missing key is 0); QryRTT* count per interval with
# strict < bounds and keep no sum; QryDropped includes RateDropped (lib/ns/query.c).

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
    return _count(d.get(key, 0), key)  # the JSON leaves zero counters out


def bind_detail(doc: Mapping[str, Any], mem: Mapping[str, Any] | None = None) -> ResolverDetail:
    """``/json/v1/server`` (and ``/json/v1/mem`` when read), summed over the views but the
    CHAOS view ``_bind``."""
    ns = _mapping(doc.get("nsstats"), "nsstats")
    rtt = dict.fromkeys((k for k, _ in BIND_RTT), 0)
    res: dict[str, int] = {}
    cache_rrsets = infra = cache_mem = 0
    for view, body in _mapping(doc.get("views"), "views").items():
        if view == "_bind":
            continue
        r = _mapping(_mapping(body, f"views.{view}").get("resolver"), f"views.{view}.resolver")
        stats = _mapping(r.get("stats"), f"views.{view}.resolver.stats")
        for key in (*rtt, "Queryv4", "Queryv6", "QueryTimeout", "ValOk", "ValNegOk", "ValFail"):
            if key in rtt:
                rtt[key] += _n(stats, key)
            else:
                res[key] = res.get(key, 0) + _n(stats, key)
        cache = _mapping(r.get("cache"), f"views.{view}.resolver.cache")
        cache_rrsets += sum(_count(v, k) for k, v in cache.items())
        infra += _n(_mapping(r.get("adb"), f"views.{view}.resolver.adb"), "entriescnt")
        cs = _mapping(r.get("cachestats"), f"views.{view}.resolver.cachestats")
        cache_mem += _n(cs, "TreeMemInUse") + _n(cs, "HeapMemInUse")
    other = None
    if mem is not None:
        other = max(_n(_mapping(mem.get("memory"), "memory"), "InUse") - cache_mem, 0)
    dropped, rate = _n(ns, "QryDropped"), _n(ns, "RateDropped")
    qtypes = _mapping(doc.get("qtypes"), "qtypes")
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
        queries_by_type=fold_qtypes({k: _count(v, f"qtypes.{k}") for k, v in qtypes.items()}),
        dnssec_answers=(
            ("secure", res.get("ValOk", 0) + res.get("ValNegOk", 0)),
            ("bogus", res.get("ValFail", 0)),
        ),
    )
