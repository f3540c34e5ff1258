"""Probing the configured fleet: all targets concurrently, state kept between scrapes.

Per-target state (:class:`TargetState`) survives scrapes and reloads for targets whose
(address, module) is unchanged: failure counters, the latency histogram, the last result.
Later stages (restart and cache-reset detection) keep their own state beside it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from dnsfleet.collectors.resolver import canary_families
from dnsfleet.config import Config, Target
from dnsfleet.dnswire import Query
from dnsfleet.exposition import Family, TextFamily, format_value, join_labels, labelset
from dnsfleet.probes import REASONS, ProbeResult, Reason, failed, probe, query_for
from dnsfleet.restarts import ResolverWatch

log = logging.getLogger(__name__)

LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)
_REASON_SUFFIXES = tuple(f'reason="{r.value}"' for r in REASONS)

TargetKey = tuple[str, str]  # (address, module)


@dataclass(slots=True)
class TargetState:
    target: Target
    labels: str  # target, module and configured labels
    reason_labels: tuple[str, ...] = ()
    last: ProbeResult | None = None
    last_wall: float = 0.0  # epoch seconds of the last probe
    failures: list[int] = field(default_factory=lambda: [0] * len(REASONS))
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    latency_sum: float = 0.0
    probes: int = 0  # sent on /metrics, answered or not

    def observe(self, result: ProbeResult, wall: float) -> None:
        self.last = result
        self.last_wall = wall
        self.probes += 1
        if result.reason is not None:
            self.failures[REASONS.index(result.reason)] += 1
        if result.response is not None:
            # Latency of answers only: a timeout's duration is the timeout, not latency.
            d = result.duration
            i = 0
            for le in LATENCY_BUCKETS:
                if d <= le:
                    break
                i += 1
            self.buckets[i] += 1
            self.latency_sum += d


def target_labels(target: Target) -> str:
    return labelset([("target", target.address), ("module", target.module), *target.labels])


def new_state(target: Target) -> TargetState:
    labels = target_labels(target)
    return TargetState(
        target=target,
        labels=labels,
        reason_labels=tuple(join_labels(labels, s) for s in _REASON_SUFFIXES),
    )


@dataclass(frozen=True, slots=True)
class Prepared:
    queries: dict[str, Query]
    states: dict[TargetKey, TargetState]


class Prober:
    def __init__(self) -> None:
        self.states: dict[TargetKey, TargetState] = {}
        self.queries: dict[str, Query] = {}
        self.probes_total = 0
        # Canary TTLs and backend identities (issue 4), queried in the same probe round.
        self.watch = ResolverWatch()

    def configure(self, cfg: Config) -> None:
        """Adopt a new config, keeping the state of targets that are still configured."""
        self.adopt(cfg, self.prepare(cfg))

    def prepare(self, cfg: Config) -> Prepared:
        """The queries and per-target states ``cfg`` needs, built without changing this
        prober: a reload runs it in a worker thread (10,000 targets take ~0.2 s), then
        :meth:`adopt` swaps the result in on the event loop."""
        queries = {name: query_for(m) for name, m in cfg.modules.items()}
        current = self.states
        states: dict[TargetKey, TargetState] = {}
        for t in cfg.targets:
            key = (t.address, t.module)
            old = current.get(key)
            if old is not None and old.target == t:
                states[key] = old
            elif old is not None:  # same target, new labels: keep the counters
                fresh = new_state(t)
                fresh.failures, fresh.buckets, fresh.latency_sum, fresh.probes = (
                    old.failures,
                    old.buckets,
                    old.latency_sum,
                    old.probes,
                )
                fresh.last, fresh.last_wall = old.last, old.last_wall
                states[key] = fresh
            else:
                states[key] = new_state(t)
        return Prepared(queries, states)

    def adopt(self, cfg: Config, prepared: Prepared) -> None:
        self.queries = prepared.queries
        self.states = prepared.states
        self.watch.configure(cfg)

    async def probe_all(self, cfg: Config, deadline: float, concurrency: int | None = None) -> None:
        """Probe every configured target once, at most ``concurrency`` at a time (default
        limits.max_concurrent_probes); ``deadline`` is in ``loop.time()`` terms."""
        loop = asyncio.get_running_loop()
        sem = asyncio.Semaphore(concurrency or cfg.limits.max_concurrent_probes)

        async def one(st: TargetState) -> None:
            t = st.target
            module = cfg.modules[t.module]
            async with sem:
                budget = min(module.timeout, deadline - loop.time())
                if budget <= 0:
                    result = failed(
                        Reason.TIMEOUT, 0.0, "scrape deadline reached before the probe could start"
                    )
                else:
                    result = await probe(
                        sockaddr=t.sockaddr,
                        family=t.family,
                        module=module,
                        query=self.queries[t.module],
                        timeout=budget,
                    )
                    await self.watch.after_probe(t, module, result, deadline=deadline)
            st.observe(result, time.time())
            if result.reason is not None:
                log.debug(
                    "probe %s (%s) failed: %s: %s",
                    t.address,
                    t.module,
                    result.reason.value,
                    result.detail,
                )

        states = list(self.states.values())
        self.probes_total += len(states)
        await asyncio.gather(*(one(st) for st in states))

    def families(self) -> list[TextFamily | Family]:
        states = list(self.states.values())
        fams = probe_result_families([(st.labels, st.reason_labels, st.last) for st in states])
        failures: list[str] = []
        hist: list[str] = []
        attempts: list[str] = []
        fname = "dnsfleet_probe_failures_total"
        hname = "dnsfleet_probe_latency_seconds"
        aname = "dnsfleet_probe_attempts_total"
        for st in states:
            attempts.append(f"{aname}{{{st.labels}}} {st.probes}\n")
            failures.extend(
                f"{fname}{{{lab}}} {n}\n"
                for lab, n in zip(st.reason_labels, st.failures, strict=True)
            )
            labels = st.labels
            sep = "," if labels else ""
            acc = 0
            for le, c in zip(_LE_TEXT, st.buckets, strict=True):
                acc += c
                hist.append(f'{hname}_bucket{{{labels}{sep}le="{le}"}} {acc}\n')
            hist.append(f"{hname}_sum{{{labels}}} {format_value(st.latency_sum)}\n")
            hist.append(f"{hname}_count{{{labels}}} {acc}\n")
        return [
            *fams,
            TextFamily(
                fname,
                "Failed probes per target by reason since the exporter started.",
                "counter",
                "".join(failures),
            ),
            # The denominator of the failure ratio: a share of failed probes needs the
            # probes, and counting them here stays right when two Prometheus servers scrape
            # one exporter (each scrape is a probe; a sample count per server is not).
            TextFamily(
                aname,
                "Probes sent to this target on /metrics since the exporter "
                "started, answered or not.",
                "counter",
                "".join(attempts),
            ),
            TextFamily(
                hname,
                "Latency of probes that got an answer (any rcode).",
                "histogram",
                "".join(hist),
            ),
            *canary_families(self.watch),
        ]


_LE_TEXT = (*(format_value(b) for b in LATENCY_BUCKETS), "+Inf")


def probe_result_families(
    rows: Iterable[tuple[str, tuple[str, ...], ProbeResult | None]],
) -> list[TextFamily]:
    """Pure: the per-probe gauges for (labels, reason labels, result) rows. /metrics and
    /probe share it; /probe passes empty labels."""
    names = (
        "dnsfleet_probe_success",
        "dnsfleet_probe_duration_seconds",
        "dnsfleet_probe_dns_rcode",
        "dnsfleet_probe_answer_rrs",
    )
    cols: tuple[list[str], ...] = ([], [], [], [])
    failure: list[str] = []
    fail_name = "dnsfleet_probe_failure"
    for labels, reason_labels, r in rows:
        if r is None:
            continue
        lab = f"{{{labels}}}" if labels else ""
        cols[0].append(f"{names[0]}{lab} {1 if r.success else 0}\n")
        cols[1].append(f"{names[1]}{lab} {format_value(r.duration)}\n")
        cols[2].append(f"{names[2]}{lab} {r.rcode}\n")
        cols[3].append(f"{names[3]}{lab} {r.answer_rrs}\n")
        current = REASONS.index(r.reason) if r.reason is not None else -1
        failure.extend(
            f"{fail_name}{{{rl}}} {1 if i == current else 0}\n"
            for i, rl in enumerate(reason_labels)
        )
    helps = (
        "1 if the last probe succeeded.",
        "Duration of the last probe, answer or not.",
        "Response code of the last answer (numeric), -1 when there was none.",
        "Resource records in the answer section of the last answer.",
    )
    fams = [
        TextFamily(n, h, "gauge", "".join(c)) for n, h, c in zip(names, helps, cols, strict=True)
    ]
    fams.insert(
        2,
        TextFamily(
            fail_name,
            "1 for the reason the last probe failed, 0 for every other reason.",
            "gauge",
            "".join(failure),
        ),
    )
    return fams
