"""Probing the configured fleet: all targets concurrently, state kept between scrapes.

Per-target state (:class:`TargetState`) survives scrapes and reloads for targets whose
(address, module) is unchanged: failure counters, the latency histogram, the last result,
and since when the target has been failing.
Later stages (restart and cache-reset detection) keep their own state beside it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
from bisect import bisect_left
from dataclasses import dataclass, field

from dnsfleet.config import Config, Module, Target
from dnsfleet.dnswire import Query
from dnsfleet.exposition import Family, Labels, TextFamily
from dnsfleet.nativehist import NativeHistogram, Snapshots
from dnsfleet.proberecord import LATENCY, FailureCounter, ProbeRecord, TargetSnapshot
from dnsfleet.probes import Exchange, ProbeResult, Reason, failed, judge, probe, query_for
from dnsfleet.probes.ede import code_label
from dnsfleet.probes.result import NOT_STARTED, evident
from dnsfleet.probes.udpbatch import Item, exchange_many
from dnsfleet.restarts import ResolverWatch, canary_families

log = logging.getLogger(__name__)

__all__ = ["Prepared", "ProbeRecord", "Prober", "TargetSnapshot", "TargetState", "evident"]

_NOT_STARTED = NOT_STARTED  # a probe its cycle's deadline left no time to start
_LATENCY_BOUNDS = LATENCY.bounds
TargetKey = tuple[str, str]  # (address, module)


@dataclass(slots=True)
class TargetState:
    target: Target
    labels: Labels  # target, module and configured labels
    # The target's socket address and family, worked out once (each probe needs them).
    sockaddr: tuple[str, int] | tuple[str, int, int, int]
    family: socket.AddressFamily
    # Its module has `dnssec: expect_bogus`: each probe makes a validating resolver answer
    # SERVFAIL on purpose, which the SLO rules subtract from the resolver's own counts.
    bogus: bool = False
    last: ProbeResult | None = None
    last_wall: float = 0.0  # epoch seconds of the last probe
    failures: FailureCounter = field(default_factory=FailureCounter)  # born at zero
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY.bounds) + 1))
    latency_sum: float = 0.0
    native: NativeHistogram = field(default_factory=NativeHistogram)
    probes: int = 0  # sent on /metrics, answered or not, and evidence (see evident)
    sent: int = 0  # queries sent on /metrics, whatever the requester's deadline
    # Epoch seconds of the first failed probe of the current run of failures; None while
    # the last probe succeeded (the status page's "failing since").
    failing_since: float | None = None
    # Answers carrying each Extended DNS Error code (label value), since the exporter started.
    ede_counts: dict[str, int] = field(default_factory=dict)

    def observe(self, result: ProbeResult, wall: float, *, counted: bool = True) -> None:
        """``counted``: whether the probe is evidence about the target, for the attempts
        and failures counters (see :func:`evident`)."""
        self.last = result
        self.last_wall = wall
        if result is not _NOT_STARTED:
            self.sent += 1
        if not counted:
            return
        self.probes += 1
        if result.success:
            self.failing_since = None
        elif self.failing_since is None:
            self.failing_since = wall
        if result.reason is not None:
            self.failures.add(result.reason)
        if result.response is not None:
            # Latency of answers only: a timeout's duration is the timeout, not latency.
            d = result.duration
            self.buckets[bisect_left(_LATENCY_BOUNDS, d)] += 1  # LATENCY.index, one call less
            self.latency_sum += d
            self.native.observe(d)
            for code in result.response.ede:
                label = code_label(code)
                self.ede_counts[label] = self.ede_counts.get(label, 0) + 1


def target_labels(target: Target) -> Labels:
    return Labels([("target", target.address), ("module", target.module), *target.labels])


def new_state(target: Target, *, bogus: bool = False) -> TargetState:
    return TargetState(
        target=target,
        labels=target_labels(target),
        sockaddr=target.sockaddr,
        family=target.family,
        bogus=bogus,
    )


@dataclass(frozen=True, slots=True)
class Prepared:
    queries: dict[str, Query]
    states: dict[TargetKey, TargetState]


# What Prober._plan_for worked out for (config, states, queries): the batched targets,
# their keys, modules and items, and the targets probed by a task each.
_States = list[TargetState]
_Plan = tuple[tuple[object, ...], _States, list[TargetKey], list[Module], list[Item], _States]


class Prober:
    def __init__(self) -> None:
        self.states: dict[TargetKey, TargetState] = {}
        self.queries: dict[str, Query] = {}
        self.probes_total = 0
        self.internal_errors = 0  # probes that ended in an exception of ours (_internal)
        self._plan: _Plan | None = None
        # Canary TTLs and backend identities (restart detection), queried in the same probe round.
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
            bogus = cfg.modules[t.module].dnssec == "expect_bogus"
            if old is not None and old.target == t and old.bogus == bogus:
                states[key] = old
            elif old is not None:  # same target, new labels or check: keep the counters
                fresh = new_state(t, bogus=bogus)
                for kept in ("failures", "buckets", "latency_sum", "native", "probes", "sent"):
                    setattr(fresh, kept, getattr(old, kept))
                fresh.last, fresh.last_wall = old.last, old.last_wall
                fresh.failing_since = old.failing_since
                fresh.ede_counts = old.ede_counts
                states[key] = fresh
            else:
                states[key] = new_state(t, bogus=bogus)
        return Prepared(queries, states)

    def adopt(self, cfg: Config, prepared: Prepared) -> None:
        self.queries = prepared.queries
        self.states = prepared.states
        self.watch.configure(cfg)

    async def probe_all(
        self,
        cfg: Config,
        deadline: float,
        concurrency: int | None = None,
        *,
        budget: float = float("inf"),
        lead: bool = True,
    ) -> dict[TargetKey, ProbeResult]:
        """Probe every configured target once, at most ``concurrency`` at a time (default
        limits.max_concurrent_probes); ``deadline`` is in ``loop.time()`` terms. Returns
        this cycle's result per target: cycles of different budgets may run at once
        (app.py), and each reports its own, while the counters add up every probe.

        Plain UDP probes (no canary or identity query in the same round) go out as one
        batch (udpbatch.exchange_many): in a 1,000-target cycle a task, a future and a timer per
        probe cost more CPU than the probes' system calls. The rest, one task each. The
        concurrency limit is shared between the two in proportion."""
        states = list(self.states.values())
        results: dict[TargetKey, ProbeResult] = {}
        if not states:
            return results
        self.probes_total += len(states)
        limit = concurrency or cfg.limits.max_concurrent_probes
        plan = self._plan_for(cfg)
        batch, each = plan[1], plan[5]
        batch_limit = max(1, limit * len(batch) // len(states))
        await asyncio.gather(
            self._probe_batch(plan, deadline, batch_limit, results, cycle=(budget, lead)),
            self._probe_each(
                cfg, each, deadline, max(1, limit - batch_limit), results, cycle=(budget, lead)
            ),
        )
        return results

    async def probe_one(
        self,
        target: Target,
        module: Module,
        timeout: float,
        *,
        qname: str | None = None,
        qtype: str | None = None,
    ) -> ProbeResult:
        """One probe outside the fleet's cycle (``/probe``): the module's query, or the
        module with the query name and type overridden; no state is kept."""
        if qname is not None or qtype is not None:
            module = dataclasses.replace(
                module,
                query_name=qname or module.query_name,
                query_type=qtype or module.query_type,
            )
            query = query_for(module)
        else:
            query = self.queries.get(module.name) or query_for(module)
        start = time.monotonic()
        try:
            return await probe(
                sockaddr=target.sockaddr,
                family=target.family,
                module=module,
                query=query,
                timeout=min(module.timeout, timeout),
            )
        except Exception as e:
            return self._internal(target, e, time.monotonic() - start)

    def _internal(self, target: Target, e: Exception, duration: float) -> ProbeResult:
        """The barrier around one target: an exception of ours while probing or judging it
        (a parser's corner, a peer's bytes no check foresaw) is that target's failure with
        reason ``internal``, counted and logged with its traceback; the other targets and
        the scrape go on (a certificate whose notAfter was not a time used to fail every
        /metrics with a 500)."""
        self.internal_errors += 1
        log.error(
            "probe %s (%s): internal error: %s: %s",
            target.address,
            target.module,
            type(e).__name__,
            e,
            exc_info=e,
        )
        return failed(Reason.INTERNAL, duration, f"internal error: {type(e).__name__}: {e}")

    def _batchable(self, module: Module) -> bool:
        # The watch's canary and identity queries ride in the probe's concurrency slot.
        return (
            module.transport == "udp"
            and module.name not in self.watch.canary_queries
            and module.name not in self.watch.identity_queries
        )

    def _plan_for(self, cfg: Config) -> _Plan:
        """The split of the targets and the batch's items, kept across cycles while the
        config, states and queries are the same objects (a reload replaces all three)."""
        key, plan = (cfg, self.states, self.queries), self._plan
        if plan is not None and all(a is b for a, b in zip(plan[0], key, strict=True)):
            return plan
        plain = {name: self._batchable(m) for name, m in cfg.modules.items()}
        keys = [k for k, st in self.states.items() if plain[st.target.module]]
        batch = [self.states[k] for k in keys]
        modules = [cfg.modules[st.target.module] for st in batch]
        items = [
            (st.sockaddr, st.family, self.queries[st.target.module], m.timeout)
            for st, m in zip(batch, modules, strict=True)
        ]
        each = [st for st in self.states.values() if not plain[st.target.module]]
        self._plan = (key, batch, keys, modules, items, each)
        return self._plan

    async def _probe_batch(
        self,
        plan: _Plan,
        deadline: float,
        concurrency: int,
        out: dict[TargetKey, ProbeResult],
        *,
        cycle: tuple[float, bool],
    ) -> None:
        _, states, keys, modules, items, _ = plan
        if not states:
            return

        def on_result(i: int, ex: Exchange | None) -> None:
            # Recorded at once, as the per-task path does: the previous result is freed as
            # its successor arrives (held until the batch ended, the two generations took
            # ~3 MB more heap at 1,000 targets).
            st = states[i]
            try:
                result = _NOT_STARTED if ex is None else judge(ex, modules[i])
            except Exception as e:
                result = self._internal(st.target, e, ex.duration if ex else 0.0)
            out[keys[i]] = result  # the state's own key: no tuple a probe
            if result.success:  # always evidence (see evident), nothing to log
                st.observe(result, time.time())
            else:
                self._record(st, result, modules[i], cycle)
            if result is not _NOT_STARTED:
                try:
                    # A batched module has no canary or identity query (_batchable).
                    self.watch.after_plain_probe(st.target, result)
                except Exception as e:
                    # The probe's own result stands; the watch's bookkeeping is what failed.
                    self._internal(st.target, e, 0.0)

        await exchange_many(items, deadline=deadline, concurrency=concurrency, on_result=on_result)

    async def _probe_each(
        self,
        cfg: Config,
        states: list[TargetState],
        deadline: float,
        concurrency: int,
        out: dict[TargetKey, ProbeResult],
        *,
        cycle: tuple[float, bool],
    ) -> None:
        loop = asyncio.get_running_loop()
        sem = asyncio.Semaphore(concurrency)

        async def one(st: TargetState) -> None:
            t = st.target
            module = cfg.modules[t.module]
            async with sem:
                budget = min(module.timeout, deadline - loop.time())
                start = time.monotonic()
                try:
                    if budget <= 0:
                        result = _NOT_STARTED
                    else:
                        result = await probe(
                            sockaddr=st.sockaddr,
                            family=st.family,
                            module=module,
                            query=self.queries[t.module],
                            timeout=budget,
                        )
                        await self.watch.after_probe(t, module, result, deadline=deadline)
                except Exception as e:
                    result = self._internal(t, e, time.monotonic() - start)
            out[(t.address, t.module)] = result
            self._record(st, result, module, cycle)

        await asyncio.gather(*(one(st) for st in states))

    @staticmethod
    def _record(
        st: TargetState, result: ProbeResult, module: Module, cycle: tuple[float, bool]
    ) -> None:
        """``cycle``: the budget of the cycle the probe ran in, and whether it is the lead
        requester's (see :func:`evident`)."""
        budget, lead = cycle
        st.observe(result, time.time(), counted=evident(result, module, budget=budget, lead=lead))
        if result.reason is not None:
            log.debug(
                "probe %s (%s) failed: %s: %s",
                st.target.address,
                st.target.module,
                result.reason.value,
                result.detail,
            )

    def record(self, results: dict[TargetKey, ProbeResult] | None = None) -> ProbeRecord:
        """What the per-target families say now, copied (counters as tuples) so that a
        later cycle does not change it: kept as a complete cycle's (app.py), in a tenth of
        the memory of its rendered text. ``results``: the cycle's own result per target
        (another cycle of a shorter budget may have finished meanwhile); a target it did
        not probe (added by a reload meanwhile) shows its last result."""
        cycle = (results or {}).get
        return ProbeRecord(
            rows=[
                (
                    st.labels,
                    cycle(key, st.last),
                    st.probes,
                    st.failures.row(),
                    tuple(st.buckets),
                    st.latency_sum,
                    tuple(st.ede_counts.items()) if st.ede_counts else (),  # most have none
                    st.sent if st.bogus else None,
                )
                for key, st in self.states.items()
            ],
            canary=canary_families(self.watch),
            native=Snapshots({st.labels.text: st.native for st in self.states.values()}),
        )

    def families(self) -> list[TextFamily | Family]:
        return self.record().families()

    def snapshots(self) -> tuple[TargetSnapshot, ...]:
        """Each configured target's last result and failing run, as immutable records."""
        states = self.states.values()
        return tuple(TargetSnapshot(s.target, s.last, s.last_wall, s.failing_since) for s in states)
