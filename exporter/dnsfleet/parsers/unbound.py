"""unbound remote-control output: ``stats_noreset`` and ``status``.

``stats_noreset`` prints ``key=value`` lines (daemon/remote.c ``print_stats``). ``time.now``
and ``time.up`` are both printed as exact ``seconds.microseconds`` from one gettimeofday and
the daemon's ``time_boot``, so ``time.now - time.up`` done in decimal is the boot time to the
microsecond and identical on every scrape: no jitter that would look like a restart.
Per-rcode answer counts (``num.answer.rcode.*``) need ``extended-statistics: yes``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from dnsfleet.parsers.resolver import ResolverStats, responses_with_common
from dnsfleet.parsers.resolverdetail_maps import unbound_detail

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
