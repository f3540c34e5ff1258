"""What every resolver's statistics normalise to, whatever the software."""

from __future__ import annotations

from dataclasses import dataclass, field

from dnsfleet.parsers.resolverdetail import ResolverDetail

# Always exported (0 when the resolver has not sent one) so that rate() sees the first
# SERVFAIL instead of a series appearing out of nothing; other rcodes appear when non-zero.
COMMON_RCODES: tuple[str, ...] = ("NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED")


@dataclass(frozen=True, slots=True)
class Backend:
    """A backend behind a load balancer (dnsdist), as the balancer sees it."""

    name: str
    address: str
    up: bool
    queries: int
    latency_seconds: float


@dataclass(frozen=True, slots=True)
class ResolverStats:
    software: str  # "unbound", "bind"
    version: str  # "" when the resolver does not say
    # The process start as the resolver itself states it, epoch seconds: BIND boot-time,
    # CoreDNS process_start_time_seconds, unbound time.now - time.up (both from one
    # gettimeofday). None where it states only an uptime, or nothing (Knot Resolver).
    start_time: float | None
    queries: int  # client queries received
    cache_hits: int
    cache_misses: int
    # (rcode name as dnspython spells it, count); None when the resolver does not count
    # responses by rcode (unbound without `extended-statistics: yes`): no series then,
    # rather than zeros that read as "no SERVFAIL sent".
    responses: tuple[tuple[str, int], ...] | None
    # Answers served from expired records (unbound `num.expired` with serve-expired);
    # None when the software does not report it.
    stale_answers: int | None = None
    backends: tuple[Backend, ...] = ()  # a load balancer's view of its backends
    # Seconds since the process started, as the resolver reports it where it gives no start
    # time (PowerDNS Recursor, dnsdist: whole seconds of its wall clock). The restart
    # judgement (restarts.judge_start) turns it into a start time that moves only on a
    # restart; the parser does not, because one reading cannot tell jitter from a restart.
    uptime: float | None = None
    # Latency, drops, upstream, cache, memory, qtypes, DNSSEC (parsers/resolverdetail.py).
    detail: ResolverDetail = field(default_factory=ResolverDetail)


def responses_with_common(counts: dict[str, int]) -> tuple[tuple[str, int], ...]:
    out = {r: 0 for r in COMMON_RCODES}
    for name, n in counts.items():
        if n or name in out:
            out[name] = out.get(name, 0) + n
    return tuple(sorted(out.items()))
