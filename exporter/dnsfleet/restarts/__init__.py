"""Seeing resolver restarts, cache flushes and backend changes from outside (any vendor).

**Cache resets.** A caching resolver counts a record's TTL down. For a module with
``canary:``, every probe of a target also asks for the canary name and keeps its TTL. If a
later answer's TTL is higher than the old TTL minus the time elapsed (plus a tolerance)
while the old record could not yet have expired, the cache lost it: a flush or a restart
(RFC 1035 §3.2.1 and §4.1.3: the TTL is how long a record may be cached, and a cache
answers with what is left of it; tests/test_canary_real.py checks this against unbound and
BIND). Four things are *not* resets:

- the record expired and was fetched afresh (old TTL minus elapsed is at or near zero);
- prefetch refreshed it in the last stretch of its life: unbound prefetches when less than
  10% of the original TTL is left, BIND (``prefetch 2 9``) at 2 s, so a jump while less
  than max(10% of the TTL, 2 s) was left is not counted;
- the answer came from another backend behind the same address (its NSID differs): that
  is a backend change, and its cache is another cache. Canary state is kept per backend
  identity, taken from the canary answer itself;
- a stale answer (unbound ``serve-expired``, BIND ``stale-answer-enable``): served after
  the record expired with a short fixed TTL (30 s by default), then replaced by a fresh
  fetch. Only an answer that continues an observed countdown, or a full-TTL fetch, becomes
  the baseline a reset is measured against; a stale answer never does.

**Usability.** Some canaries cannot show resets at all, and then nothing is counted and
``dnsfleet_resolver_canary_usable`` is 0 with the reason: the answer is authoritative (AA
set: its TTL never counts down), the TTL does not count down across scrapes (a forwarder
that passes the authoritative TTL through or keeps records only seconds, like Knot Resolver
``policy.STUB``; also unbound and BIND serving stale while the upstream is down), the TTL is
shorter than the time between scrapes (every look comes after an expiry), the canary query
fails (a restart meanwhile goes unseen), or the answers come from several caches that
cannot be told apart (a ``backends: pool`` target without NSID, or TTLs that count down
faster than time).

**Backend identity.** Every probe asks for EDNS NSID (RFC 5001); a module may instead ask
CHAOS TXT ``identity_query`` (``id.server.``, ``hostname.bind.``). The identity is exported
as an info metric, never as a label on latency series, and each change is counted.

State is kept per (address, module) between scrapes and across reloads that keep the pair.

**Restarts from inside** (:func:`judge_start`): a resolver's own statistics give either its
start time (BIND, CoreDNS, unbound) or only its uptime in whole seconds (PowerDNS Recursor,
dnsdist), or neither (Knot Resolver). Now minus an uptime moves by a second from one scrape to
the next on a healthy daemon, so the start time exported is kept until a restart is judged:
the uptime went backwards against the time that passed between the two reads, a stated start
time moved forward by more than :data:`START_TOLERANCE`, or, with neither, the query counter
went backwards.
"""

from dnsfleet.restarts.canary import (
    MAX_BACKEND_LEN,
    PREFETCH_FRACTION,
    PREFETCH_MIN_SECONDS,
    SEVERAL_CACHES_HOLD,
    TTL_GRANULARITY,
    VERIFY_QUERIES,
    Baseline,
    CanaryTracker,
    Unusable,
    backend_text,
    chaos_txt,
    is_cache_reset,
    nsid_of,
)
from dnsfleet.restarts.start import (
    START_TOLERANCE,
    UPTIME_GRANULARITY,
    StartJudgement,
    StartReading,
    judge_start,
)
from dnsfleet.restarts.watch import (
    CanaryReading,
    ResolverWatch,
    StateKey,
    WatchState,
    canary_families,
    canary_readings,
)

__all__ = [
    "MAX_BACKEND_LEN",
    "PREFETCH_FRACTION",
    "PREFETCH_MIN_SECONDS",
    "SEVERAL_CACHES_HOLD",
    "START_TOLERANCE",
    "TTL_GRANULARITY",
    "UPTIME_GRANULARITY",
    "VERIFY_QUERIES",
    "Baseline",
    "CanaryReading",
    "CanaryTracker",
    "ResolverWatch",
    "StartJudgement",
    "StartReading",
    "StateKey",
    "Unusable",
    "WatchState",
    "backend_text",
    "canary_families",
    "canary_readings",
    "chaos_txt",
    "is_cache_reset",
    "judge_start",
    "nsid_of",
]
