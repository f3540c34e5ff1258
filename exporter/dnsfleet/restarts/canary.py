"""The canary of one resolver address (see the package docstring): when a canary TTL means a
cache reset, the backend identity in an answer, and the tracker of one cache's countdown."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from dnsfleet.dnswire import Malformed, decode_message, nsid_text
from dnsfleet.probes import ProbeResult

PREFETCH_FRACTION = 0.1  # unbound: prefetch when < 10% of the original TTL is left
PREFETCH_MIN_SECONDS = 2.0  # BIND: `prefetch 2 9` triggers at 2 s left
MAX_BACKEND_LEN = 128  # a label value from the network: bounded
TTL_GRANULARITY = 1.0  # seconds: see is_cache_reset


def is_cache_reset(
    *, prev_ttl: int, elapsed: float, ttl: int, tolerance: float, longest_ttl: int
) -> bool:
    """Pure: does ``ttl``, seen ``elapsed`` seconds after ``prev_ttl``, mean the cached
    record was thrown away? ``longest_ttl`` is the longest TTL seen for the canary (about
    the authoritative TTL), which sizes the prefetch window."""
    remaining = prev_ttl - elapsed
    window = max(PREFETCH_FRACTION * max(longest_ttl, ttl), PREFETCH_MIN_SECONDS)
    if remaining <= window + tolerance:
        return False  # could have expired or been prefetched: a fresh TTL is expected
    # TTLs are whole seconds counted against a whole-second clock: an answer may show up
    # to one second more than the time really left.
    return ttl > remaining + tolerance + TTL_GRANULARITY


def backend_text(raw: str) -> str:
    text = "".join(c if c.isprintable() else "?" for c in raw.strip())
    return text[:MAX_BACKEND_LEN]


def chaos_txt(result: ProbeResult) -> str | None:
    """The TXT strings of a CHAOS identity answer, joined; None without one."""
    if result.response is None or not result.success:
        return None
    import dns.rdatatype  # noqa: PLC0415 - only identity_query modules pay for it (dnswire)

    try:
        msg = decode_message(result.response.wire)
    except Malformed:
        return None
    for rrset in msg.answer:
        if rrset.rdtype == dns.rdatatype.TXT:
            for rd in rrset:
                text = b"".join(rd.strings).decode("utf-8", "replace")
                if text:
                    return backend_text(text)
    return None


def nsid_of(result: ProbeResult) -> str | None:
    r = result.response
    if r is None or not r.nsid:
        return None
    return backend_text(nsid_text(r.nsid))


class Unusable(enum.Enum):
    """Why a canary cannot show cache resets (``dnsfleet_resolver_canary_unusable_reason``)."""

    AUTHORITATIVE = "authoritative"
    TTL_STATIC = "ttl_static"
    TTL_BELOW_INTERVAL = "ttl_below_interval"
    QUERY_FAILING = "query_failing"
    SEVERAL_CACHES = "several_caches"


# Canary queries sent at once when a reset candidate appears (CanaryTracker.verify). With two
# processes sharing an address equally, all of them reach the newcomer with probability
# 2**-8; the candidate must then also count down at the next scrape from the newcomer
# (1/2): a false reset in about 1 of 512 joins, against 1 in 2 before.
VERIFY_QUERIES = 8

# How long TTLs that count down faster than time (several caches behind one address, no
# identity to tell them apart) keep the canary unusable after the last such sighting.
SEVERAL_CACHES_HOLD = 3600.0


@dataclass(slots=True)
class Baseline:
    """The last canary answer of one cache: TTL and monotonic time. ``trusted`` when it
    continued an observed countdown or was a full-TTL fetch: only then may a higher TTL
    later be counted as a reset (a stale answer or a first look is not trusted).
    ``reset_at`` (epoch seconds) when this answer looked like a reset that the next answer
    has to confirm by counting down from it."""

    ttl: int
    at: float
    trusted: bool
    reset_at: float | None = None


@dataclass(slots=True)
class CanaryTracker:
    """Pure bookkeeping of one target's canary answers; :meth:`observe` is the model.

    A TTL that jumps up before the record could have expired is a reset *candidate*; it is
    counted when the next answer counts down from it. A resolver that keeps a record only a
    few seconds (Knot Resolver in ``policy.STUB`` refetches every ~6 s) jumps at every
    scrape and never counts down across one: never confirmed, never counted, and after two
    such jumps in a row the canary is reported unusable (``ttl_static``)."""

    tolerance: float = 2.0
    pool: bool = False  # the target is a pool of caches (config `backends: pool`)
    baselines: dict[str, Baseline] = field(default_factory=dict)  # per backend identity
    longest_ttl: int = 0
    ttl: int | None = None  # TTL of the last answer, None if the query failed
    unusable: Unusable | None = None
    several_caches_at: float | None = None
    last_at: float | None = None  # monotonic time of the last answer, any backend
    unconfirmed: int = 0  # reset candidates in a row that did not count down
    # The backend key of a reset candidate the last answer raised, until verify() has seen
    # the answers of the verification burst (after_probe sends them in the same round).
    candidate: str | None = None
    resets: int = 0
    last_reset: float | None = None  # epoch seconds

    def observe(
        self,
        ttl: int | None,
        *,
        now: float,
        wall: float,
        backend: str | None,
        authoritative: bool = False,
    ) -> bool:
        """One canary answer (``ttl`` None: the query failed). True if it confirms a
        reset (then :attr:`last_reset` is when the reset was first seen)."""
        self.ttl = ttl
        refusal = self._refusal(ttl, backend, authoritative)
        if refusal is not None or ttl is None:
            self.unusable = refusal
            return False
        self.longest_ttl = max(self.longest_ttl, ttl)
        since_last, self.last_at = (None if self.last_at is None else now - self.last_at), now
        key = backend or ""
        b = self.baselines.get(key)
        self.unusable = None
        confirmed: float | None = None
        if b is None:
            new = Baseline(ttl, now, trusted=False)  # a first look proves nothing
        else:
            new, confirmed = self._follow(b, ttl, key, now=now, wall=wall, since_last=since_last)
        self.baselines[key] = new
        return self._conclude(now, confirmed)

    def _refusal(
        self, ttl: int | None, backend: str | None, authoritative: bool
    ) -> Unusable | None:
        """Why this answer cannot be judged at all, if it cannot."""
        if ttl is None:
            return Unusable.QUERY_FAILING
        if authoritative:
            return Unusable.AUTHORITATIVE
        if backend is None and self.pool:
            return Unusable.SEVERAL_CACHES
        return None

    def _follow(
        self, b: Baseline, ttl: int, key: str, *, now: float, wall: float, since_last: float | None
    ) -> tuple[Baseline, float | None]:
        """The answer against the backend's baseline ``b``: the next baseline, and when the
        reset this answer confirms was first seen (None: it confirms none)."""
        longest = self.longest_ttl
        elapsed = now - b.at
        remaining = b.ttl - elapsed
        window = max(PREFETCH_FRACTION * longest, PREFETCH_MIN_SECONDS)
        if since_last is not None and longest + self.tolerance < since_last:
            self.unusable = Unusable.TTL_BELOW_INTERVAL
            return Baseline(ttl, now, trusted=False), None
        if elapsed >= 2.0 and ttl == b.ttl:
            self.unusable = Unusable.TTL_STATIC
            return Baseline(ttl, now, trusted=False), None
        if (
            remaining > window + self.tolerance
            and ttl < remaining - self.tolerance - TTL_GRANULARITY
        ):
            # Counted down faster than time while the record was alive: another cache
            # answered under the same identity.
            self.several_caches_at = now
            return Baseline(ttl, now, trusted=False), None
        if b.trusted and is_cache_reset(
            prev_ttl=b.ttl, elapsed=elapsed, ttl=ttl, tolerance=self.tolerance, longest_ttl=longest
        ):
            if b.reset_at is not None:
                self.unconfirmed += 1  # jumped again: not counting down
            self.candidate = key
            return Baseline(ttl, now, trusted=True, reset_at=wall), None
        if ttl <= remaining + self.tolerance + TTL_GRANULARITY:
            if ttl < b.ttl:  # the countdown goes on
                self.unconfirmed = 0
                return Baseline(ttl, now, trusted=True), b.reset_at
            # A second look within the same second proves nothing new.
            return Baseline(ttl, now, trusted=b.trusted, reset_at=b.reset_at), None
        # Up after expiry or prefetch, or from an untrusted look: a full-TTL fetch is a new
        # countdown; a short one (a stale answer) is not.
        return Baseline(ttl, now, trusted=ttl >= longest - self.tolerance - 1), None

    def _conclude(self, now: float, confirmed: float | None) -> bool:
        """What the answers so far make of the canary, and whether a reset is counted."""
        if self.unconfirmed >= 2 and self.unusable is None:
            self.unusable = Unusable.TTL_STATIC
        if self._several_caches(now) and self.unusable is None:
            self.unusable = Unusable.SEVERAL_CACHES
        if confirmed is not None and not self._several_caches(now):
            self.resets += 1
            self.last_reset = confirmed
            return True
        return False

    def verify(self, ttl: int | None, *, now: float, backend: str | None) -> None:
        """One answer of the verification burst sent right after a reset candidate: several
        fresh queries, each from its own socket. A flushed cache answers them all from the
        new countdown. A second cache behind the same address and identity (a process that
        joined an SO_REUSEPORT group: the kernel picks the socket by a hash of the query's
        source address and port, so each fresh socket lands on either) shows the old
        countdown in some of them: then the candidate is withdrawn and the canary is marked
        `several_caches`. Never confirms a candidate, never becomes a baseline."""
        key = backend or ""
        b = self.baselines.get(key)
        if ttl is None or b is None or b.reset_at is None:
            return
        remaining = b.ttl - (now - b.at)
        window = max(PREFETCH_FRACTION * self.longest_ttl, PREFETCH_MIN_SECONDS)
        if (
            remaining > window + self.tolerance
            and ttl < remaining - self.tolerance - TTL_GRANULARITY
        ):
            self.several_caches_at = now
            self.unusable = Unusable.SEVERAL_CACHES
            b.reset_at = None
            b.trusted = False

    def _several_caches(self, now: float) -> bool:
        return (
            self.several_caches_at is not None
            and now - self.several_caches_at < SEVERAL_CACHES_HOLD
        )
