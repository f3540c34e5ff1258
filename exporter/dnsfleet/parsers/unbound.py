"""unbound remote-control output: ``stats_noreset`` and ``status``.

``stats_noreset`` prints ``key=value`` lines (daemon/remote.c ``print_stats``). ``time.now``
and ``time.up`` are both printed as exact ``seconds.microseconds`` from one gettimeofday and
the daemon's ``time_boot``, so ``time.now - time.up`` done in decimal is the boot time to the
microsecond and identical on every scrape: no jitter that would look like a restart.
Per-rcode answer counts (``num.answer.rcode.*``) need ``extended-statistics: yes``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation

from dnsfleet.parsers.resolver import ResolverStats, responses_with_common
from dnsfleet.parsers.resolverdetail import (
    Counts,
    Histogram,
    ResolverDetail,
    fold_qtypes,
    from_intervals,
    opt_count,
    present,
)

# unbound spells rcodes its own way (sldns ``sldns_rcodes``); normalise to dnspython's.
_RCODE_NAMES = {"NOTIMPL": "NOTIMP", "YXRRSET": "YXRRSET", "NXRRSET": "NXRRSET"}
_VERSION_RE = re.compile(r"^version:\s*(\S+)", re.MULTILINE)
_THREADS_RE = re.compile(r"^threads:\s*(\d+)", re.MULTILINE)


def parse_stats_lines(text: str) -> dict[str, str]:
    """``key=value`` lines -> dict. Raises ValueError for anything else (an ``error ...``
    line from the daemon, or garbage)."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep or not key or " " in key:
            raise ValueError(f"line {n}: not key=value: {line[:80]!r}")
        out[key] = value.strip()
    return out


def _int(values: dict[str, str], key: str) -> int:
    try:
        raw = values[key]
    except KeyError:
        raise ValueError(f"missing {key}") from None
    try:
        return int(Decimal(raw))
    except InvalidOperation:
        raise ValueError(f"{key}: not a number: {raw[:40]!r}") from None


def _dec(values: dict[str, str], key: str) -> Decimal:
    try:
        return Decimal(values[key])
    except KeyError:
        raise ValueError(f"missing {key}") from None
    except InvalidOperation:
        raise ValueError(f"{key}: not a number: {values[key][:40]!r}") from None


def parse_version(status_text: str) -> str:
    """``version: 1.17.1`` from ``unbound-control status``; "" when absent."""
    m = _VERSION_RE.search(status_text)
    return m.group(1) if m else ""


def parse_threads(status_text: str) -> int | None:
    """``threads: 2`` from ``unbound-control status``; None when absent."""
    m = _THREADS_RE.search(status_text)
    return int(m.group(1)) if m else None


def parse_option(text: str) -> int | None:
    """The reply of ``get_option <name>`` for a numeric option; None if not a number."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return int(first) if first.isdigit() else None


def parse_unbound_stats(
    text: str,
    *,
    version: str = "",
    threads: int | None = None,
    queries_per_thread: int | None = None,
) -> ResolverStats:
    values = parse_stats_lines(text)
    if not values:
        raise ValueError("empty statistics")
    start = _dec(values, "time.now") - _dec(values, "time.up")
    rcodes: dict[str, int] = {}
    prefix = "num.answer.rcode."
    for key in values:
        if key.startswith(prefix) and key != prefix + "nodata":
            name = key[len(prefix) :].upper()
            rcodes[_RCODE_NAMES.get(name, name)] = _int(values, key)
    return ResolverStats(
        software="unbound",
        version=version,
        start_time=float(start),
        queries=_int(values, "total.num.queries"),
        cache_hits=_int(values, "total.num.cachehits"),
        cache_misses=_int(values, "total.num.cachemiss"),
        # unbound prints no num.answer.rcode.* lines without extended-statistics.
        responses=responses_with_common(rcodes) if rcodes else None,
        stale_answers=_int(values, "total.num.expired") if "total.num.expired" in values else None,
        detail=unbound_detail(values, threads=threads, per_thread=queries_per_thread),
    )


# --- the statistics beyond counters (parsers/resolverdetail.py) -------------------------
# unbound prints histogram.*, mem.* and most num.* only with extended-statistics: yes; its
# histogram counts cache-miss replies only (num.recursivereplies), its sum is
# recursion.time.avg x that count, as unbound_exporter computes it.


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
        upstream_queries=opt_count(_sum_keys(values, ("num.query.udpout", "num.query.tcpout"))),
        dropped=present(
            [
                ("rate_limit", _sum_keys(values, rate_limited)),
                ("overload", _num(values, "total.requestlist.exceeded")),
                ("policy", _num(values, "num.rpz.action.rpz-drop")),
                ("acl", _num(values, "unwanted.queries")),
            ]
        ),
        recursions_in_flight=opt_count(_num(values, "total.requestlist.current.user")),
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
