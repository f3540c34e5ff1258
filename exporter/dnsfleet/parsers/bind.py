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
from datetime import datetime
from typing import Any

from dnsfleet.parsers.resolver import ResolverStats, responses_with_common
from dnsfleet.parsers.resolverdetail_maps import bind_detail


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
