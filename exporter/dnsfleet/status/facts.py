"""What the status page shows, kept from each scrape: the last :class:`Snapshot` of the
families the page reads (named in :class:`Kept`, the one table that ties the page to metric
names; read from their samples' typed labels, never from text), the typed
:class:`PageFacts` read from it, and the :class:`History` of restarts and cache resets
found by comparing one snapshot with the next. ``app`` keeps the snapshot and the history
and builds the page's view from the facts; ``status.page`` renders it and names no metric
and no label.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dnsfleet.exposition import Family

EVENTS_PER_TARGET = 5


class Kept(enum.StrEnum):
    """The families a snapshot keeps, by name: the one place the status page's data is
    tied to metric names; the page reads nothing else from a scrape. Names another part of
    the exporter may not emit (a collector that is off, a resolver family without the
    counter) are simply absent."""

    STATS_UP = "dnsfleet_resolver_stats_up"
    START_TIME = "dnsfleet_resolver_start_time_seconds"
    INFO = "dnsfleet_resolver_info"
    QUERIES = "dnsfleet_resolver_queries_total"
    CACHE_HITS = "dnsfleet_resolver_cache_hits_total"
    CACHE_MISSES = "dnsfleet_resolver_cache_misses_total"
    CAPACITY = "dnsfleet_resolver_capacity_qps"
    CAPACITY_LOWER_BOUND = "dnsfleet_resolver_capacity_lower_bound"
    BACKEND = "dnsfleet_resolver_backend_info"
    CACHE_RESETS = "dnsfleet_resolver_cache_resets_total"
    LAST_CACHE_RESET = "dnsfleet_resolver_last_cache_reset_timestamp_seconds"
    CANARY_CACHED = "dnsfleet_resolver_canary_cached"
    CANARY_USABLE = "dnsfleet_resolver_canary_usable"
    CANARY_UNUSABLE_REASON = "dnsfleet_resolver_canary_unusable_reason"
    STUB_DELAY = "dnsfleet_stub_expected_delay_seconds"
    STUB_FAILING = "dnsfleet_stub_resolution_failing"
    STUB_NAMESERVERS = "dnsfleet_stub_nameservers"
    STUB_NAMESERVER_UP = "dnsfleet_stub_nameserver_up"
    STUB_READABLE = "dnsfleet_stub_resolv_conf_readable"
    COLLECTOR_SUCCESS = "dnsfleet_collector_success"
    COLLECTOR_DURATION = "dnsfleet_collector_duration_seconds"


KEPT = frozenset(Kept)

Labels = dict[str, str]


@dataclass(frozen=True)
class Sample:
    labels: Labels
    value: float


@dataclass(frozen=True)
class Snapshot:
    """What one scrape left for the page: when, how long, and the kept families."""

    wall: float
    duration: float
    families: Mapping[str, tuple[Sample, ...]]

    @classmethod
    def of(cls, families: Iterable[object], *, wall: float, duration: float) -> Snapshot:
        kept: dict[str, list[Sample]] = {}
        for fam in families:
            if isinstance(fam, Family) and fam.name in KEPT:
                kept.setdefault(fam.name, []).extend(
                    Sample(lab.as_dict(), v) for suffix, lab, v in fam.samples if not suffix
                )
        return cls(wall, duration, {k: tuple(v) for k, v in kept.items()})

    def get(self, name: str) -> tuple[Sample, ...]:
        return tuple(self.families.get(name, ()))

    def by_target(self, name: str) -> dict[str, list[Sample]]:
        out: dict[str, list[Sample]] = {}
        for s in self.get(name):
            out.setdefault(s.labels.get("target", ""), []).append(s)
        return out


@dataclass(frozen=True, slots=True)
class ResolverFacts:
    """What a resolver's own statistics and its capacity figures said at the last scrape."""

    stats_up: bool | None = None  # None: its statistics were not read (yet)
    software: str = ""  # "unbound 1.17.1", "" when unknown
    started: float | None = None  # start time the resolver states, epoch seconds
    capacity: Mapping[str, float] = field(default_factory=dict)  # positive qps, by kind
    lower_bound: frozenset[str] = frozenset()  # kinds whose figure is only a lower bound
    last_cache_reset: float | None = None  # the canary's latest, over the target's modules


@dataclass(frozen=True, slots=True)
class CanaryFacts:
    """What the canary of one target and module said: the backend that answered it, and
    whether it can see restarts and cache resets (``usable``; or, for a canary without
    that judgement, whether the answer came from a cache)."""

    backend: str = ""
    usable: bool | None = None
    unusable_reason: str = ""
    cached: bool | None = None


@dataclass(frozen=True, slots=True)
class StubFacts:
    """One watched resolv.conf, as one libc's stub resolver suffers it."""

    resolv_conf: str
    libc: str
    delay: float  # modelled extra delay per lookup, seconds
    failing: bool  # every lookup fails
    nameservers: float | None  # listed; None when unknown
    answering: float  # of them answering


@dataclass(frozen=True, slots=True)
class CollectorFacts:
    name: str
    ok: bool
    duration: float  # seconds


@dataclass(frozen=True, slots=True)
class PageFacts:
    """The typed model of one scrape that the status page renders."""

    wall: float
    duration: float
    resolvers: Mapping[str, ResolverFacts]  # by target address
    canaries: Mapping[tuple[str, str], CanaryFacts]  # by target address and module
    stubs: tuple[StubFacts, ...]  # worst first
    unreadable_stubs: tuple[str, ...]  # resolv.conf paths the stub collector cannot read
    collectors: tuple[CollectorFacts, ...]  # failing first
    stub_watched: bool  # the stub collector reported on some resolv.conf

    @classmethod
    def of(cls, snap: Snapshot) -> PageFacts:
        return cls(
            wall=snap.wall,
            duration=snap.duration,
            resolvers=_resolvers(snap),
            canaries=_canaries(snap),
            stubs=_stubs(snap),
            unreadable_stubs=tuple(
                s.labels.get("resolv_conf", "") for s in snap.get(Kept.STUB_READABLE) if not s.value
            ),
            collectors=_collectors(snap),
            stub_watched=bool(snap.get(Kept.STUB_DELAY) or snap.get(Kept.STUB_READABLE)),
        )


def _first(snap: Snapshot, name: Kept) -> dict[str, Sample]:
    return {t: s[0] for t, s in snap.by_target(name).items()}


def _resolvers(snap: Snapshot) -> dict[str, ResolverFacts]:
    up, info, start = (
        _first(snap, Kept.STATS_UP),
        _first(snap, Kept.INFO),
        _first(snap, Kept.START_TIME),
    )
    caps, lower = snap.by_target(Kept.CAPACITY), snap.by_target(Kept.CAPACITY_LOWER_BOUND)
    resets = snap.by_target(Kept.LAST_CACHE_RESET)
    out: dict[str, ResolverFacts] = {}
    for t in {*up, *info, *start, *caps, *lower, *resets}:
        soft = info[t].labels if t in info else {}
        software = f"{soft.get('software', '')} {soft.get('version', '')}"
        out[t] = ResolverFacts(
            stats_up=up[t].value == 1 if t in up else None,
            software=software.strip(),
            started=start[t].value if t in start else None,
            capacity={s.labels.get("kind", ""): s.value for s in caps.get(t, ()) if s.value > 0},
            lower_bound=frozenset(
                s.labels.get("kind", "") for s in lower.get(t, ()) if s.value == 1
            ),
            last_cache_reset=max((s.value for s in resets[t]), default=0.0)
            if t in resets
            else None,
        )
    return out


def _canaries(snap: Snapshot) -> dict[tuple[str, str], CanaryFacts]:
    def key(s: Sample) -> tuple[str, str]:
        return (s.labels.get("target", ""), s.labels.get("module", ""))

    backend = {key(s): s.labels.get("backend", "") for s in snap.get(Kept.BACKEND)}
    usable = {key(s): s.value == 1 for s in snap.get(Kept.CANARY_USABLE)}
    reason = {
        key(s): s.labels.get("reason", "")
        for s in snap.get(Kept.CANARY_UNUSABLE_REASON)
        if s.value == 1
    }
    cached = {key(s): s.value == 1 for s in snap.get(Kept.CANARY_CACHED)}
    return {
        k: CanaryFacts(
            backend=backend.get(k, ""),
            usable=usable.get(k),
            unusable_reason=reason.get(k, "unknown"),
            cached=cached.get(k),
        )
        for k in {*backend, *usable, *cached}
    }


def _stubs(snap: Snapshot) -> tuple[StubFacts, ...]:
    def path(s: Sample) -> str:
        return s.labels.get("resolv_conf", "")

    failing = {(path(s), s.labels.get("libc", "")): s.value for s in snap.get(Kept.STUB_FAILING)}
    total = {path(s): s.value for s in snap.get(Kept.STUB_NAMESERVERS)}
    up: dict[str, float] = {}
    for s in snap.get(Kept.STUB_NAMESERVER_UP):
        up[path(s)] = up.get(path(s), 0) + s.value
    delays = sorted(snap.get(Kept.STUB_DELAY), key=lambda s: (-s.value, path(s)))
    return tuple(
        StubFacts(
            resolv_conf=path(s),
            libc=s.labels.get("libc", ""),
            delay=s.value,
            failing=failing.get((path(s), s.labels.get("libc", ""))) == 1,
            nameservers=total.get(path(s)),
            answering=up.get(path(s), 0),
        )
        for s in delays
    )


def _collectors(snap: Snapshot) -> tuple[CollectorFacts, ...]:
    took = {s.labels.get("collector", ""): s.value for s in snap.get(Kept.COLLECTOR_DURATION)}
    facts = (
        CollectorFacts(name, s.value == 1, took.get(name, 0.0))
        for s in snap.get(Kept.COLLECTOR_SUCCESS)
        for name in (s.labels.get("collector", ""),)
    )
    return tuple(sorted(facts, key=lambda c: (c.ok, c.name)))


@dataclass(frozen=True)
class Event:
    wall: float
    what: str


@dataclass
class History:
    """Restarts and cache resets per target, found by comparing consecutive snapshots."""

    events: dict[str, deque[Event]] = field(default_factory=dict)
    qps: dict[str, float] = field(default_factory=dict)
    hit_ratio: dict[str, float] = field(default_factory=dict)
    previous: Snapshot | None = None

    def update(self, snap: Snapshot, targets: Iterable[str]) -> None:
        prev = self.previous
        if prev is not None:
            self._compare(prev, snap)
        self.previous = snap
        keep = set(targets)
        for gone in [t for t in self.events if t not in keep]:
            del self.events[gone]
        for gone in [t for t in self.qps if t not in keep]:
            del self.qps[gone]
        for gone in [t for t in self.hit_ratio if t not in keep]:
            del self.hit_ratio[gone]

    def _compare(self, prev: Snapshot, snap: Snapshot) -> None:
        before = {t: s[0].value for t, s in prev.by_target(Kept.START_TIME).items()}
        for t, samples in snap.by_target(Kept.START_TIME).items():
            old = before.get(t)
            if old is not None and samples[0].value != old:
                self._add(t, Event(samples[0].value, "restarted (start time changed)"))
        resets_before = {
            (s.labels.get("target", ""), s.labels.get("module", "")): s.value
            for s in prev.get(Kept.CACHE_RESETS)
        }
        last_reset = {
            (s.labels.get("target", ""), s.labels.get("module", "")): s.value
            for s in snap.get(Kept.LAST_CACHE_RESET)
        }
        for s in snap.get(Kept.CACHE_RESETS):
            key = (s.labels.get("target", ""), s.labels.get("module", ""))
            old = resets_before.get(key)
            if old is not None and s.value > old:
                self._add(
                    key[0],
                    Event(
                        last_reset.get(key, snap.wall),
                        f"cache reset seen by the canary (module {key[1]})",
                    ),
                )
        queries_before = {t: s[0].value for t, s in prev.by_target(Kept.QUERIES).items()}
        dt = snap.wall - prev.wall
        for t, samples in snap.by_target(Kept.QUERIES).items():
            old = queries_before.get(t)
            if old is not None and dt > 0 and samples[0].value >= old:
                self.qps[t] = (samples[0].value - old) / dt
            else:
                self.qps.pop(t, None)  # a counter reset: no rate across it

        # Cache-hit ratio between the two scrapes, as target:..._cache_hit:ratio_rate5m
        # computes it (hits / (hits + misses)); absent without traffic or across a reset.
        def delta(name: str) -> dict[str, float]:
            old = {t: s[0].value for t, s in prev.by_target(name).items()}
            return {
                t: s[0].value - old[t]
                for t, s in snap.by_target(name).items()
                if t in old and s[0].value >= old[t]
            }

        hits, misses = (
            delta(Kept.CACHE_HITS),
            delta(Kept.CACHE_MISSES),
        )
        self.hit_ratio = {
            t: hits[t] / (hits[t] + misses[t])
            for t in hits
            if t in misses and hits[t] + misses[t] > 0
        }

    def _add(self, target: str, event: Event) -> None:
        q = self.events.setdefault(target, deque(maxlen=EVENTS_PER_TARGET))
        q.append(event)
