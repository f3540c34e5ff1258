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

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass, field

from dnsfleet.config import Config, Module, Target
from dnsfleet.dnswire import Malformed, Query, decode_message, nsid_text
from dnsfleet.exposition import Family, join_labels, labelset
from dnsfleet.probes import ProbeResult, probe, query_for

log = logging.getLogger(__name__)

PREFETCH_FRACTION = 0.1  # unbound: prefetch when < 10% of the original TTL is left
PREFETCH_MIN_SECONDS = 2.0  # BIND: `prefetch 2 9` triggers at 2 s left
MAX_BACKEND_LEN = 128  # a label value from the network: bounded
TTL_GRANULARITY = 1.0  # seconds: see is_cache_reset

StateKey = tuple[str, str]  # (address, module)

# ---------------------------------------------------------------- restarts from the inside

UPTIME_GRANULARITY = 1.0  # PowerDNS Recursor and dnsdist: time(2) minus the start, in seconds
# Slack beyond granularity and read windows: a stated start time that moves by this much or
# less is the same process (CoreDNS's process_start_time_seconds adds /proc/stat's btime,
# which the kernel recomputes from the wall clock: it moves by a second now and then).
START_TOLERANCE = 1.0


@dataclass(frozen=True, slots=True)
class StartReading:
    """What one read of a resolver's statistics says about its process. ``sent`` and
    ``received`` are monotonic times around the read (the resolver read its clock somewhere
    between them); ``wall`` is epoch seconds at ``received``."""

    start_time: float | None  # as the resolver states it
    uptime: float | None  # or its uptime in whole seconds
    queries: int  # a counter that starts from zero with the process
    sent: float
    received: float
    wall: float

    def estimate(self) -> float | None:
        """The start time this reading alone implies."""
        if self.start_time is not None:
            return self.start_time
        if self.uptime is None:
            return None
        # The middle of the read window; whole seconds, as the uptime is.
        return float(round(self.wall - (self.received - self.sent) / 2 - self.uptime))


@dataclass(frozen=True, slots=True)
class StartJudgement:
    """The start time to export (None: the resolver gives none), the restarts judged since
    the exporter started, and the reading the next judgement compares with."""

    start_time: float | None
    restarts: int
    last: StartReading


def judge_start(prev: StartJudgement | None, r: StartReading) -> StartJudgement:
    """Pure: did the resolver restart since ``prev``? The exported start time moves only when
    it did; otherwise the one exported before is kept.

    - Uptime: the same process shows at least ``uptime_before + (least time between the two
      reads) - granularity``; anything lower by more than :data:`START_TOLERANCE` is a new
      process. The elapsed time is monotonic, so a step of this host's clock changes
      nothing. A step of the *resolver's* clock moves its uptime (PowerDNS and dnsdist count
      it on the wall clock): forward is ignored, backward by more than 2 s reads as a restart.
    - A stated start time: a restart when it moved forward by more than the tolerance.
    - Neither (Knot Resolver without ``process_start_time_seconds``): a restart when the
      query counter went backwards; no start time is exported.

    Blind spots: two restarts between two scrapes count once (only the last process is
    seen); a process replaced within ~2 s of its own start, when the previous read caught it
    in those 2 s, looks like the same process; without a start time or uptime, a new process
    that answered more queries by the next read than the old one had at the previous read
    is not seen."""
    if prev is None:
        return StartJudgement(r.estimate(), 0, r)
    p = prev.last
    if r.uptime is not None and p.uptime is not None:
        least_elapsed = max(r.sent - p.received, 0.0)
        restarted = r.uptime < p.uptime + least_elapsed - UPTIME_GRANULARITY - START_TOLERANCE
    elif r.start_time is not None and p.start_time is not None:
        restarted = r.start_time - p.start_time > START_TOLERANCE
    else:
        restarted = r.queries < p.queries
    if restarted:
        return StartJudgement(r.estimate(), prev.restarts + 1, r)
    kept = prev.start_time if prev.start_time is not None else r.estimate()
    return StartJudgement(kept, prev.restarts, r)


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

    def observe(  # noqa: C901, PLR0912, PLR0915 (not split yet (issue 25 note))
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
        if ttl is None:
            self.unusable = Unusable.QUERY_FAILING
            return False
        if authoritative:
            self.unusable = Unusable.AUTHORITATIVE
            return False
        if backend is None and self.pool:
            self.unusable = Unusable.SEVERAL_CACHES
            return False
        self.longest_ttl = longest = max(self.longest_ttl, ttl)
        since_last, self.last_at = (None if self.last_at is None else now - self.last_at), now
        key = backend or ""
        b = self.baselines.get(key)
        self.unusable = None
        confirmed: float | None = None
        if b is None:
            new = Baseline(ttl, now, trusted=False)  # a first look proves nothing
        else:
            elapsed = now - b.at
            remaining = b.ttl - elapsed
            window = max(PREFETCH_FRACTION * longest, PREFETCH_MIN_SECONDS)
            if since_last is not None and longest + self.tolerance < since_last:
                self.unusable = Unusable.TTL_BELOW_INTERVAL
                new = Baseline(ttl, now, trusted=False)
            elif elapsed >= 2.0 and ttl == b.ttl:
                self.unusable = Unusable.TTL_STATIC
                new = Baseline(ttl, now, trusted=False)
            elif (
                remaining > window + self.tolerance
                and ttl < remaining - self.tolerance - TTL_GRANULARITY
            ):
                # Counted down faster than time while the record was alive: another cache
                # answered under the same identity.
                self.several_caches_at = now
                new = Baseline(ttl, now, trusted=False)
            elif b.trusted and is_cache_reset(
                prev_ttl=b.ttl,
                elapsed=elapsed,
                ttl=ttl,
                tolerance=self.tolerance,
                longest_ttl=longest,
            ):
                if b.reset_at is not None:
                    self.unconfirmed += 1  # jumped again: not counting down
                new = Baseline(ttl, now, trusted=True, reset_at=wall)
                self.candidate = key
            elif ttl <= remaining + self.tolerance + TTL_GRANULARITY:
                if ttl < b.ttl:  # the countdown goes on
                    confirmed = b.reset_at
                    self.unconfirmed = 0
                    new = Baseline(ttl, now, trusted=True)
                else:  # a second look within the same second proves nothing new
                    new = Baseline(ttl, now, trusted=b.trusted, reset_at=b.reset_at)
            else:
                # Up after expiry or prefetch, or from an untrusted look: a full-TTL fetch
                # is a new countdown; a short one (a stale answer) is not.
                new = Baseline(ttl, now, trusted=ttl >= longest - self.tolerance - 1)
        self.baselines[key] = new
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


@dataclass(slots=True)
class WatchState:
    target: Target
    labels: str  # target, module and configured labels
    canary: CanaryTracker = field(default_factory=CanaryTracker)
    # An authoritative answer (AA set: local-data, a stub to the authoritative server, or
    # the authority itself) comes from no cache: its TTL never counts down, so it cannot
    # show a reset. None until the first canary answer.
    canary_cached: bool | None = None
    # backend identity
    backend: str | None = None
    backend_changes: int = 0


@dataclass
class ResolverWatch:
    states: dict[StateKey, WatchState] = field(default_factory=dict)
    canary_queries: dict[str, tuple[Module, Query]] = field(default_factory=dict)
    identity_queries: dict[str, tuple[Module, Query]] = field(default_factory=dict)

    def configure(self, cfg: Config) -> None:
        self.canary_queries = {}
        self.identity_queries = {}
        for name, m in cfg.modules.items():
            if m.canary:
                cm = Module(
                    name=f"{name}/canary",
                    query_name=m.canary,
                    query_type=m.canary_type,
                    transport=m.transport,
                    timeout=m.timeout,
                    recursion_desired=True,
                    edns=m.edns,
                    edns_udp_size=m.edns_udp_size,
                    min_answers=1,
                )
                self.canary_queries[name] = (cm, query_for(cm))
            if m.identity_query:
                im = Module(
                    name=f"{name}/identity",
                    query_name=m.identity_query,
                    query_type="TXT",
                    query_class="CH",
                    transport=m.transport,
                    timeout=m.timeout,
                    edns=m.edns,
                    edns_udp_size=m.edns_udp_size,
                    valid_rcodes=("NOERROR",),
                    min_answers=1,
                )
                self.identity_queries[name] = (im, query_for(im))
        states: dict[StateKey, WatchState] = {}
        for t in cfg.targets:
            key = (t.address, t.module)
            old = self.states.get(key)
            labels = labelset([("target", t.address), ("module", t.module), *t.labels])
            st = old if old is not None else WatchState(target=t, labels=labels)
            st.target, st.labels = t, labels
            st.canary.tolerance = cfg.modules[t.module].canary_tolerance
            st.canary.pool = t.backends == "pool"
            states[key] = st
        self.states = states

    async def after_probe(
        self, target: Target, module: Module, result: ProbeResult, *, deadline: float
    ) -> None:
        """Called by the prober after each probe of ``target``: the canary and identity
        queries of the same round, then the bookkeeping. Never raises for the network."""
        st = self.states.get((target.address, target.module))
        if st is None:
            return
        loop = asyncio.get_running_loop()
        budget = min(module.timeout, deadline - loop.time())
        canary = self.canary_queries.get(module.name)
        ident = self.identity_queries.get(module.name)
        canary_res: ProbeResult | None = None
        ident_res: ProbeResult | None = None
        if budget > 0 and (canary or ident):
            canary_res, ident_res = await asyncio.gather(
                _ask(target, canary, budget), _ask(target, ident, budget)
            )
        if ident is not None:
            backend = chaos_txt(ident_res) if ident_res is not None else None
        else:
            # With a canary, the identity of the canary's own answer: the backend label then
            # describes the answer whose TTL the canary metrics show (round-robin sends the
            # main probe and the canary to different backends).
            backend = (
                (nsid_of(canary_res) if canary_res else None) or nsid_of(result)
                if canary is not None
                else nsid_of(result)
            )
        self.observe_backend(st, backend)
        if canary is not None:
            ttl = None
            authoritative = False
            if canary_res is not None and canary_res.success and canary_res.response:
                ttl = canary_res.response.min_ttl
                authoritative = canary_res.response.authoritative
                if authoritative and st.canary_cached is not False:
                    log.warning(
                        "canary %s on %s is answered authoritatively (local data or "
                        "an authoritative server): its TTL does not count down, so "
                        "cache resets cannot be seen; pick a name the resolver "
                        "caches",
                        canary[0].query_name,
                        target.address,
                    )
                st.canary_cached = not authoritative
            elif canary_res is not None:
                log.debug(
                    "canary %s on %s: %s", canary[0].query_name, target.address, canary_res.detail
                )
            # The canary's own identity: the main probe may have reached another backend.
            st.canary.candidate = None
            if st.canary.observe(
                ttl,
                now=time.monotonic(),
                wall=time.time(),
                backend=nsid_of(canary_res) if canary_res else None,
                authoritative=authoritative,
            ):
                log.info(
                    "cache reset on %s (backend %s) seen by canary %s",
                    target.address,
                    nsid_of(canary_res) if canary_res else None,
                    canary[0].query_name,
                )
            if st.canary.candidate is not None:
                await self._verify(st, target, canary, deadline)

    async def _verify(
        self, st: WatchState, target: Target, canary: tuple[Module, Query], deadline: float
    ) -> None:
        """A reset candidate: ask the canary VERIFY_QUERIES more times at once, each from
        its own socket, so a second cache behind the address shows itself now rather than
        after the reset was counted (CanaryTracker.verify)."""
        budget = min(canary[0].timeout, deadline - asyncio.get_running_loop().time())
        if budget <= 0:
            return
        answers = await asyncio.gather(
            *(_ask(target, canary, budget) for _ in range(VERIFY_QUERIES))
        )
        now = time.monotonic()
        for res in answers:
            if res is not None and res.success and res.response is not None:
                st.canary.verify(res.response.min_ttl, now=now, backend=nsid_of(res))
        st.canary.candidate = None

    @staticmethod
    def observe_backend(st: WatchState, backend: str | None) -> None:
        if backend is None:
            return  # no answer, or no identity in it: not a change
        if st.backend is not None and backend != st.backend and not st.canary.pool:
            # On a pool (`backends: pool`) answering from another member is normal.
            st.backend_changes += 1
            log.info("backend behind %s changed: %s -> %s", st.target.address, st.backend, backend)
        st.backend = backend


async def _ask(
    target: Target, mq: tuple[Module, Query] | None, budget: float
) -> ProbeResult | None:
    if mq is None:
        return None
    return await probe(
        sockaddr=target.sockaddr,
        family=target.family,
        module=mq[0],
        query=mq[1],
        timeout=min(mq[0].timeout, budget),
    )


def canary_families(watch: ResolverWatch) -> list[Family]:
    """Pure: the canary and backend-identity families of :class:`ResolverWatch`'s state
    (cache resets, restarts and backend changes seen from outside)."""
    ttl = Family(
        "dnsfleet_resolver_canary_ttl_seconds",
        "TTL of the canary name in the last answer (counts down while cached).",
    )
    resets = Family(
        "dnsfleet_resolver_cache_resets_total",
        "Cache resets (flush or restart) seen from outside: the canary TTL went "
        "up before the cached record could have expired.",
        "counter",
    )
    last = Family(
        "dnsfleet_resolver_last_cache_reset_timestamp_seconds",
        "When the last cache reset was seen, seconds since the epoch.",
    )
    info = Family(
        "dnsfleet_resolver_backend_info",
        "Backend that answered the last probe (EDNS NSID or CHAOS TXT); always 1.",
    )
    cached = Family(
        "dnsfleet_resolver_canary_cached",
        "1 if the last canary answer came from the resolver's cache, 0 if it "
        "was authoritative (then its TTL cannot show cache resets).",
    )
    usable = Family(
        "dnsfleet_resolver_canary_usable",
        "1 if the canary can show cache resets, 0 if not (the reason is in "
        "dnsfleet_resolver_canary_unusable_reason); nothing is counted while 0.",
    )
    why = Family(
        "dnsfleet_resolver_canary_unusable_reason",
        "1 for the reason the canary cannot show cache resets; present only "
        "while dnsfleet_resolver_canary_usable is 0.",
    )
    changes = Family(
        "dnsfleet_resolver_backend_changes_total",
        "Times the backend identity answering at this address changed "
        "(not counted on a `backends: pool` target).",
        "counter",
    )
    for st in watch.states.values():
        c = st.canary
        has_canary = st.target.module in watch.canary_queries
        if has_canary:
            resets.add_raw(st.labels, c.resets)
            if st.canary_cached is not None:
                cached.add_raw(st.labels, 1.0 if st.canary_cached else 0.0)
            if c.ttl is not None:
                ttl.add_raw(st.labels, c.ttl)
            if c.last_reset is not None:
                last.add_raw(st.labels, c.last_reset)
            if c.baselines or c.unusable is not None:
                usable.add_raw(st.labels, 0.0 if c.unusable else 1.0)
            if c.unusable is not None:
                why.add_raw(join_labels(st.labels, labelset([("reason", c.unusable.value)])), 1.0)
        if st.backend is not None:
            info.add_raw(join_labels(st.labels, labelset([("backend", st.backend)])), 1.0)
            changes.add_raw(st.labels, st.backend_changes)
    return [ttl, cached, usable, why, resets, last, info, changes]
