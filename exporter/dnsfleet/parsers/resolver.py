"""What every resolver's statistics normalise to, whatever the software."""

from __future__ import annotations

from dataclasses import dataclass

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
    # epoch seconds of the resolver's process start; None where the software does not say
    # (Knot Resolver): restarts are then seen only by the canary
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


def responses_with_common(counts: dict[str, int]) -> tuple[tuple[str, int], ...]:
    out = {r: 0 for r in COMMON_RCODES}
    for name, n in counts.items():
        if n or name in out:
            out[name] = out.get(name, 0) + n
    return tuple(sorted(out.items()))
