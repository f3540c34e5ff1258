"""Seeing resolver restarts, cache flushes and backend changes from outside (any vendor).

**Cache resets.** A caching resolver counts a record's TTL down. For a module with
``canary:``, every probe of a target also asks for the canary name and keeps its TTL. If a
later answer's TTL is higher than the old TTL minus the time elapsed (plus a tolerance)
while the old record could not yet have expired, the cache lost it: a flush or a restart
(shared/REFERENCE.md §2, verified with unbound and BIND). Three things are *not* resets:

- the record expired and was fetched afresh (old TTL minus elapsed is at or near zero);
- prefetch refreshed it in the last stretch of its life: unbound prefetches when less than
  10% of the original TTL is left, BIND (``prefetch 2 9``) at 2 s, so a jump while less
  than max(10% of the TTL, 2 s) was left is not counted;
- the answer came from another backend behind the same address (its NSID differs): that
  is a backend change, and its cache is another cache.

**Backend identity.** Every probe asks for EDNS NSID (RFC 5001); a module may instead ask
CHAOS TXT ``identity_query`` (``id.server.``, ``hostname.bind.``). The identity is exported
as an info metric, never as a label on latency series, and each change is counted.

State is kept per (address, module) between scrapes and across reloads that keep the pair.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from dnsfleet.config import Config, Module, Target
from dnsfleet.dnswire import Query, build_query, nsid_text
from dnsfleet.exposition import Family, join_labels, labelset
from dnsfleet.probes import ProbeResult, probe

log = logging.getLogger(__name__)

PREFETCH_FRACTION = 0.1    # unbound: prefetch when < 10% of the original TTL is left
PREFETCH_MIN_SECONDS = 2.0  # BIND: `prefetch 2 9` triggers at 2 s left
MAX_BACKEND_LEN = 128       # a label value from the network: bounded

StateKey = tuple[str, str]  # (address, module)


def is_cache_reset(*, prev_ttl: int, elapsed: float, ttl: int, tolerance: float,
                   longest_ttl: int) -> bool:
    """Pure: does ``ttl``, seen ``elapsed`` seconds after ``prev_ttl``, mean the cached
    record was thrown away? ``longest_ttl`` is the longest TTL seen for the canary (about
    the authoritative TTL), which sizes the prefetch window."""
    remaining = prev_ttl - elapsed
    window = max(PREFETCH_FRACTION * max(longest_ttl, ttl), PREFETCH_MIN_SECONDS)
    if remaining <= window + tolerance:
        return False  # could have expired or been prefetched: a fresh TTL is expected
    return ttl > remaining + tolerance


def backend_text(raw: str) -> str:
    text = "".join(c if c.isprintable() else "?" for c in raw.strip())
    return text[:MAX_BACKEND_LEN]


def chaos_txt(result: ProbeResult) -> str | None:
    """The TXT strings of a CHAOS identity answer, joined; None without one."""
    if result.response is None or not result.success:
        return None
    import dns.message  # noqa: PLC0415 - only identity_query modules pay for it (dnswire)

    try:
        msg = dns.message.from_wire(result.response.wire, ignore_trailing=True)
    except Exception:  # hostile bytes raise many dnspython exception types
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


@dataclass(slots=True)
class WatchState:
    target: Target
    labels: str                   # target, module and configured labels
    tolerance: float = 2.0        # the module's canary_tolerance
    # canary
    ttl: int | None = None        # TTL of the last canary answer, None if it failed
    ttl_at: float = 0.0           # monotonic time of the last good canary answer
    last_good_ttl: int | None = None
    ttl_backend: str | None = None
    longest_ttl: int = 0
    # An authoritative answer (AA set: local-data, a stub to the authoritative server, or
    # the authority itself) comes from no cache: its TTL never counts down, so it cannot
    # show a reset. None until the first canary answer.
    canary_cached: bool | None = None
    resets: int = 0
    last_reset: float | None = None   # epoch seconds
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
                cm = Module(name=f"{name}/canary", query_name=m.canary,
                            query_type=m.canary_type, transport=m.transport, timeout=m.timeout,
                            recursion_desired=True, edns=m.edns, edns_udp_size=m.edns_udp_size,
                            min_answers=1)
                self.canary_queries[name] = (cm, _query(cm))
            if m.identity_query:
                im = Module(name=f"{name}/identity", query_name=m.identity_query,
                            query_type="TXT", query_class="CH", transport=m.transport,
                            timeout=m.timeout, edns=m.edns, edns_udp_size=m.edns_udp_size,
                            valid_rcodes=("NOERROR",), min_answers=1)
                self.identity_queries[name] = (im, _query(im))
        states: dict[StateKey, WatchState] = {}
        for t in cfg.targets:
            key = (t.address, t.module)
            old = self.states.get(key)
            labels = labelset([("target", t.address), ("module", t.module), *t.labels])
            st = old if old is not None else WatchState(target=t, labels=labels)
            st.target, st.labels = t, labels
            st.tolerance = cfg.modules[t.module].canary_tolerance
            states[key] = st
        self.states = states

    async def after_probe(self, target: Target, module: Module, result: ProbeResult, *,
                          deadline: float) -> None:
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
                _ask(target, canary, budget), _ask(target, ident, budget))
        if ident is not None:
            backend = chaos_txt(ident_res) if ident_res is not None else None
        else:
            backend = nsid_of(result) or (nsid_of(canary_res) if canary_res else None)
        self.observe_backend(st, backend)
        if canary is not None:
            ttl = None
            if canary_res is not None and canary_res.success and canary_res.response:
                ttl = canary_res.response.min_ttl
                cached = not canary_res.response.authoritative
                if not cached and st.canary_cached is not False:
                    log.warning("canary %s on %s is answered authoritatively (local data or "
                                "an authoritative server): its TTL does not count down, so "
                                "cache resets cannot be seen; pick a name the resolver "
                                "caches", canary[0].query_name, target.address)
                st.canary_cached = cached
            elif canary_res is not None:
                log.debug("canary %s on %s: %s", canary[0].query_name, target.address,
                          canary_res.detail)
            self.observe_canary(st, ttl, now=time.monotonic(), wall=time.time(),
                                backend=(nsid_of(canary_res) if canary_res else None)
                                or st.backend)

    @staticmethod
    def observe_backend(st: WatchState, backend: str | None) -> None:
        if backend is None:
            return  # no answer, or no identity in it: not a change
        if st.backend is not None and backend != st.backend:
            st.backend_changes += 1
            log.info("backend behind %s changed: %s -> %s", st.target.address, st.backend,
                     backend)
        st.backend = backend

    @staticmethod
    def observe_canary(st: WatchState, ttl: int | None, *, now: float, wall: float,
                       backend: str | None) -> bool:
        """Record one canary answer; True if it shows a cache reset."""
        st.ttl = ttl
        if ttl is None or st.canary_cached is False:
            return False
        reset = False
        prev = st.last_good_ttl
        if prev is not None and (backend is None or st.ttl_backend is None
                                 or backend == st.ttl_backend):
            reset = is_cache_reset(prev_ttl=prev, elapsed=now - st.ttl_at, ttl=ttl,
                                   tolerance=st.tolerance, longest_ttl=st.longest_ttl)
        if reset:
            st.resets += 1
            st.last_reset = wall
            log.info("cache reset on %s: canary TTL %d, expected at most %.0f", st.target.address,
                     ttl, prev - (now - st.ttl_at) if prev is not None else 0)
        st.last_good_ttl, st.ttl_at, st.ttl_backend = ttl, now, backend
        st.longest_ttl = max(st.longest_ttl, ttl)
        return reset

    def families(self) -> list[Family]:
        ttl = Family("dnsfleet_resolver_canary_ttl_seconds",
                     "TTL of the canary name in the last answer (counts down while cached).")
        resets = Family("dnsfleet_resolver_cache_resets_total",
                        "Cache resets (flush or restart) seen from outside: the canary TTL went "
                        "up before the cached record could have expired.", "counter")
        last = Family("dnsfleet_resolver_last_cache_reset_timestamp_seconds",
                      "When the last cache reset was seen, seconds since the epoch.")
        info = Family("dnsfleet_resolver_backend_info",
                      "Backend that answered the last probe (EDNS NSID or CHAOS TXT); "
                      "always 1.")
        cached = Family("dnsfleet_resolver_canary_cached",
                        "1 if the last canary answer came from the resolver's cache, 0 if it "
                        "was authoritative (then its TTL cannot show cache resets).")
        changes = Family("dnsfleet_resolver_backend_changes_total",
                         "Times the backend identity answering at this address changed.",
                         "counter")
        for st in self.states.values():
            has_canary = st.target.module in self.canary_queries
            if has_canary:
                resets.add_raw(st.labels, st.resets)
                if st.canary_cached is not None:
                    cached.add_raw(st.labels, 1.0 if st.canary_cached else 0.0)
                if st.ttl is not None:
                    ttl.add_raw(st.labels, st.ttl)
                if st.last_reset is not None:
                    last.add_raw(st.labels, st.last_reset)
            if st.backend is not None:
                info.add_raw(join_labels(st.labels, labelset([("backend", st.backend)])), 1.0)
                changes.add_raw(st.labels, st.backend_changes)
        return [ttl, cached, resets, last, info, changes]


def _query(m: Module) -> Query:
    return build_query(m.query_name, m.qtype, m.qclass, recursion_desired=m.recursion_desired,
                       edns=m.edns, payload=m.edns_udp_size, nsid=m.edns)


async def _ask(target: Target, mq: tuple[Module, Query] | None,
               budget: float) -> ProbeResult | None:
    if mq is None:
        return None
    return await probe(sockaddr=target.sockaddr, family=target.family, module=mq[0],
                       query=mq[1], timeout=min(mq[0].timeout, budget))
