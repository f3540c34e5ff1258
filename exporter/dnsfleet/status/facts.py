"""What the status page shows of each scrape: :class:`PageFacts`, built from the typed
records the producers hand over (the collectors' :class:`Findings`, the prober's canary
readings), never from families or their text; and the :class:`History` of restarts and
cache resets found by comparing one scrape's facts with the next. ``app`` keeps the facts
and the history and builds the page's view; ``status.page`` renders it and names no metric
and no label.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from dnsfleet.collectors.base import CollectorRun, Findings
from dnsfleet.collectors.resolver import ResolverReading
from dnsfleet.collectors.resolver_capacity import CapacityFigure
from dnsfleet.collectors.stub import FileReport
from dnsfleet.restarts import CanaryReading
from dnsfleet.stubmodel import ServerState

EVENTS_PER_TARGET = 5

CanaryKey = tuple[str, str]  # target address, module


@dataclass(frozen=True, slots=True)
class ResolverFacts:
    """What a resolver's own statistics and its capacity figures said at the last scrape."""

    stats_up: bool | None = None  # None: its statistics were not read (yet)
    software: str = ""  # "unbound 1.17.1", "" when unknown
    started: float | None = None  # start time the resolver states, epoch seconds
    capacity: Mapping[str, float] = field(default_factory=dict)  # positive qps, by kind
    lower_bound: frozenset[str] = frozenset()  # kinds whose figure is only a lower bound
    last_cache_reset: float | None = None  # the canary's latest, over the target's modules
    # The resolver's own counters (None while unreadable): the page's rates between scrapes.
    queries: float | None = None
    cache_hits: float | None = None
    cache_misses: float | None = None


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
    resolvers: Mapping[str, ResolverFacts] = field(default_factory=dict)  # by target address
    canaries: Mapping[CanaryKey, CanaryFacts] = field(default_factory=dict)
    stubs: tuple[StubFacts, ...] = ()  # worst first
    unreadable_stubs: tuple[str, ...] = ()  # resolv.conf paths the stub collector cannot read
    collectors: tuple[CollectorFacts, ...] = ()  # failing first
    stub_watched: bool = False  # the stub collector reported on some resolv.conf
    # Cache resets each canary counted, and when it saw the last (the history's events).
    cache_resets: Mapping[CanaryKey, int] = field(default_factory=dict)
    last_cache_resets: Mapping[CanaryKey, float] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        findings: Findings,
        canaries: Iterable[CanaryReading],
        *,
        wall: float,
        duration: float,
    ) -> PageFacts:
        """Pure: the facts of one scrape from what its producers found."""
        canaries = list(canaries)
        reports = findings.of(FileReport)
        return cls(
            wall=wall,
            duration=duration,
            resolvers=_resolvers(findings, canaries),
            canaries=_canaries(canaries),
            stubs=_stubs(reports),
            unreadable_stubs=tuple(r.watch.path for r in reports if r.conf is None),
            collectors=_collectors(findings.of(CollectorRun)),
            stub_watched=bool(reports),
            cache_resets={
                (c.address, c.module): c.resets for c in canaries if c.resets is not None
            },
            last_cache_resets={
                (c.address, c.module): c.last_reset for c in canaries if c.last_reset is not None
            },
        )


def _resolvers(findings: Findings, canaries: list[CanaryReading]) -> dict[str, ResolverFacts]:
    readings: dict[str, ResolverReading] = {}
    for reading in findings.of(ResolverReading):
        # One resolver behind several configured entries: the first, as exported first.
        readings.setdefault(reading.address, reading)
    figures: dict[str, list[CapacityFigure]] = {}
    for f in findings.of(CapacityFigure):
        figures.setdefault(f.address, []).append(f)
    resets: dict[str, list[float]] = {}
    for c in canaries:
        if c.last_reset is not None:
            resets.setdefault(c.address, []).append(c.last_reset)
    out: dict[str, ResolverFacts] = {}
    for t in {*readings, *figures, *resets}:
        r = readings.get(t)
        st = None if r is None else r.stats
        out[t] = ResolverFacts(
            stats_up=None if r is None else st is not None,
            software="" if st is None else f"{st.software} {st.version}".strip(),
            started=None if r is None or st is None else r.started,
            capacity={f.kind: f.qps for f in figures.get(t, ()) if f.qps > 0},
            lower_bound=frozenset(f.kind for f in figures.get(t, ()) if f.lower_bound),
            last_cache_reset=max(resets[t]) if t in resets else None,
            queries=None if st is None else st.queries,
            cache_hits=None if st is None else st.cache_hits,
            cache_misses=None if st is None else st.cache_misses,
        )
    return out


def _canaries(canaries: list[CanaryReading]) -> dict[CanaryKey, CanaryFacts]:
    out: dict[CanaryKey, CanaryFacts] = {}
    for c in canaries:
        if c.backend is None and c.usable is None and c.cached is None:
            continue
        out[(c.address, c.module)] = CanaryFacts(
            backend=c.backend or "",
            usable=c.usable,
            unusable_reason=c.unusable_reason or "unknown",
            cached=c.cached,
        )
    return out


def _stubs(reports: list[FileReport]) -> tuple[StubFacts, ...]:
    facts = [
        StubFacts(
            resolv_conf=r.watch.path,
            libc=v.libc,
            delay=v.delay,
            failing=v.failing,
            nameservers=len(r.conf.servers),
            answering=sum(1 for o in r.outcomes if o.state is ServerState.ANSWERING),
        )
        for r in reports
        if r.conf is not None
        for v in r.verdicts
    ]
    return tuple(sorted(facts, key=lambda s: (-s.delay, s.resolv_conf)))


def _collectors(runs: list[CollectorRun]) -> tuple[CollectorFacts, ...]:
    facts = (CollectorFacts(r.name, r.ok, r.duration) for r in runs)
    return tuple(sorted(facts, key=lambda c: (c.ok, c.name)))


@dataclass(frozen=True)
class Event:
    wall: float
    what: str


@dataclass
class History:
    """Restarts and cache resets per target, found by comparing consecutive scrapes' facts."""

    events: dict[str, deque[Event]] = field(default_factory=dict)
    qps: dict[str, float] = field(default_factory=dict)
    hit_ratio: dict[str, float] = field(default_factory=dict)
    previous: PageFacts | None = None

    def update(self, facts: PageFacts, targets: Iterable[str]) -> None:
        prev = self.previous
        if prev is not None:
            self._compare(prev, facts)
        self.previous = facts
        keep = set(targets)
        for gone in [t for t in self.events if t not in keep]:
            del self.events[gone]
        for gone in [t for t in self.qps if t not in keep]:
            del self.qps[gone]
        for gone in [t for t in self.hit_ratio if t not in keep]:
            del self.hit_ratio[gone]

    def _compare(self, prev: PageFacts, now: PageFacts) -> None:
        before = _counts(prev, lambda r: r.started)
        for t, started in _counts(now, lambda r: r.started).items():
            old = before.get(t)
            if old is not None and started != old:
                self._add(t, Event(started, "restarted (start time changed)"))
        for key, n in now.cache_resets.items():
            old_resets = prev.cache_resets.get(key)
            if old_resets is not None and n > old_resets:
                self._add(
                    key[0],
                    Event(
                        now.last_cache_resets.get(key, now.wall),
                        f"cache reset seen by the canary (module {key[1]})",
                    ),
                )
        queries_before = _counts(prev, lambda r: r.queries)
        dt = now.wall - prev.wall
        for t, q in _counts(now, lambda r: r.queries).items():
            old = queries_before.get(t)
            if old is not None and dt > 0 and q >= old:
                self.qps[t] = (q - old) / dt
            else:
                self.qps.pop(t, None)  # a counter reset: no rate across it

        # Cache-hit ratio between the two scrapes, as target:..._cache_hit:ratio_rate5m
        # computes it (hits / (hits + misses)); absent without traffic or across a reset.
        def delta(figure: Figure) -> dict[str, float]:
            old = _counts(prev, figure)
            return {
                t: v - old[t] for t, v in _counts(now, figure).items() if t in old and v >= old[t]
            }

        hits, misses = delta(lambda r: r.cache_hits), delta(lambda r: r.cache_misses)
        self.hit_ratio = {
            t: hits[t] / (hits[t] + misses[t])
            for t in hits
            if t in misses and hits[t] + misses[t] > 0
        }

    def _add(self, target: str, event: Event) -> None:
        q = self.events.setdefault(target, deque(maxlen=EVENTS_PER_TARGET))
        q.append(event)


Figure = Callable[[ResolverFacts], float | None]


def _counts(facts: PageFacts, figure: Figure) -> dict[str, float]:
    """One figure of every resolver that has it (its start time, its query counter...)."""
    out: dict[str, float] = {}
    for t, r in facts.resolvers.items():
        v = figure(r)
        if v is not None:
            out[t] = v
    return out
