"""The watch of the configured fleet (see the package docstring): per (address, module) state
across scrapes, the canary and identity queries beside each probe, and their families."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from dnsfleet.config import Config, Module, Target
from dnsfleet.dnswire import Query
from dnsfleet.exposition import Family, Labels, join_labels, labelset
from dnsfleet.probes import ProbeResult, probe, query_for
from dnsfleet.restarts.canary import VERIFY_QUERIES, CanaryTracker, chaos_txt, nsid_of

log = logging.getLogger("dnsfleet.restarts")  # one logger for the model, as before the split

StateKey = tuple[str, str]  # (address, module)


@dataclass(slots=True)
class WatchState:
    target: Target
    labels: Labels  # target, module and configured labels
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
        self.observe_backend(st, _backend(result, canary, ident, canary_res, ident_res))
        if canary is not None:
            await self._observe_canary(st, target, canary, canary_res, deadline)

    def after_plain_probe(self, target: Target, result: ProbeResult) -> None:
        """:meth:`after_probe` for a module with neither a canary nor an identity query
        (the prober's batch): nothing to ask in the same round, so nothing to await (a
        coroutine per target cost more than the bookkeeping)."""
        r = result.response
        if r is None or not r.nsid:
            return  # no identity in the round (_backend says None): nothing to note
        st = self.states.get((target.address, target.module))
        if st is not None:
            self.observe_backend(st, _backend(result, None, None, None, None))

    async def _observe_canary(
        self,
        st: WatchState,
        target: Target,
        canary: tuple[Module, Query],
        canary_res: ProbeResult | None,
        deadline: float,
    ) -> None:
        """The canary's answer into its tracker; a reset candidate is verified at once."""
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


def _backend(
    result: ProbeResult,
    canary: tuple[Module, Query] | None,
    ident: tuple[Module, Query] | None,
    canary_res: ProbeResult | None,
    ident_res: ProbeResult | None,
) -> str | None:
    """The backend identity of this round: the CHAOS TXT answer where the module asks for
    one; with a canary, the identity of the canary's own answer (the backend label then
    describes the answer whose TTL the canary metrics show: round-robin sends the main
    probe and the canary to different backends); else the main probe's NSID."""
    if ident is not None:
        return chaos_txt(ident_res) if ident_res is not None else None
    if canary is not None:
        return (nsid_of(canary_res) if canary_res else None) or nsid_of(result)
    return nsid_of(result)


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
    canary = _CanaryFamilies(ttl, cached, usable, why, resets, last)
    for st in watch.states.values():
        if st.target.module in watch.canary_queries:
            canary.add(st)
        if st.backend is not None:
            info.add_raw(join_labels(st.labels, labelset([("backend", st.backend)])), 1.0)
            changes.add_raw(st.labels, st.backend_changes)
    return [ttl, cached, usable, why, resets, last, info, changes]


@dataclass(frozen=True, slots=True)
class CanaryReading:
    """What one target's canary and backend identity said (for the status page); the
    canary fields are None for a module without a canary."""

    address: str
    module: str
    backend: str | None
    usable: bool | None  # None until it has a baseline or a reason it cannot have one
    unusable_reason: str  # "" unless unusable
    cached: bool | None
    resets: int | None
    last_reset: float | None


def canary_readings(watch: ResolverWatch) -> list[CanaryReading]:
    """The readings of the targets whose canary or backend identity said something: a
    target with neither (most of a large fleet) would give a reading of Nones only, which
    the status page skips, made anew for every target at every scrape (17 ms of a
    10,000-target cycle)."""
    out = []
    canaries = watch.canary_queries
    for st in watch.states.values():
        c = st.canary if st.target.module in canaries else None
        if c is None and st.backend is None:
            continue
        judged = c is not None and (bool(c.baselines) or c.unusable is not None)
        out.append(
            CanaryReading(
                st.target.address,
                st.target.module,
                backend=st.backend,
                usable=None if c is None or not judged else not c.unusable,
                unusable_reason=c.unusable.value if c is not None and c.unusable else "",
                cached=None if c is None else st.canary_cached,
                resets=None if c is None else c.resets,
                last_reset=None if c is None else c.last_reset,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class _CanaryFamilies:
    ttl: Family
    cached: Family
    usable: Family
    why: Family
    resets: Family
    last: Family

    def add(self, st: WatchState) -> None:
        """The samples of one target's canary."""
        c = st.canary
        self.resets.add_raw(st.labels, c.resets)
        if st.canary_cached is not None:
            self.cached.add_raw(st.labels, 1.0 if st.canary_cached else 0.0)
        if c.ttl is not None:
            self.ttl.add_raw(st.labels, c.ttl)
        if c.last_reset is not None:
            self.last.add_raw(st.labels, c.last_reset)
        if c.baselines or c.unusable is not None:
            self.usable.add_raw(st.labels, 0.0 if c.unusable else 1.0)
        if c.unusable is not None:
            reason = labelset([("reason", c.unusable.value)])
            self.why.add_raw(join_labels(st.labels, reason), 1.0)
