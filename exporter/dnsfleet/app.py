"""The exporter: configuration, reloads, and what one scrape does."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dnsfleet import config as config_mod
from dnsfleet import malloc
from dnsfleet.collectors import (
    COLLECTORS,
    CollectContext,
    Collector,
    close_collectors,
    run_beside,
    socket_demand,
    start_collectors,
)
from dnsfleet.config import Config, ConfigError, Module, Target
from dnsfleet.exposition import Family, TextFamily, merge, render_bytes
from dnsfleet.hostfs import HostFS
from dnsfleet.parsers.resolvconf import parse_resolv_conf
from dnsfleet.prober import Prepared, Prober
from dnsfleet.proberecord import ProbeRecord
from dnsfleet.probes import ProbeResult
from dnsfleet.restarts import canary_readings
from dnsfleet.selfmetrics import (
    CONCURRENT_CYCLES,
    LoopLag,
    ReloadStatus,
    cycle_end_family,
    descriptor_budget,
    exporter_families,
    probe_concurrency,
    process_families,
    scrape_duration_family,
    share_descriptors,
)
from dnsfleet.status.facts import History, PageFacts
from dnsfleet.status.page import RUNBOOK_BASE_URL, StatusView

log = logging.getLogger(__name__)

MIN_PROBE_TIMEOUT = 0.05
# Cycles of different budgets running at once (a short-deadline client, an HA pair with two
# scrape timeouts, a person's curl): beyond this a request that finds no cycle of its budget
# gets a kept one or a 503. selfmetrics.probe_concurrency sizes probe sockets for it.
MAX_CYCLES_IN_FLIGHT = CONCURRENT_CYCLES
# The lead requester is the one that asked for the largest budget within this window: the
# Prometheus server, whose scrape timeout is the longest any client sends. One of the
# cycles in flight is kept for it, and only its cycles count every timeout as evidence
# (prober.evident). Longer than any scrape interval, so the lead renews it at every scrape.
LEAD_WINDOW = 180.0
# Complete cycles kept as fallbacks of shorter requests (~0.3 MB each at 1,000 targets).
MAX_KEPT_CYCLES = 4


@dataclass(frozen=True, slots=True, eq=False)
class _Cycle:
    budget: float  # seconds the probes were given, from the starting request's header
    deadline: float  # loop time
    started: float  # loop time
    task: asyncio.Task[list[Family | TextFamily]]


@dataclass(frozen=True, slots=True)
class _Kept:
    budget: float
    record: ProbeRecord
    rest: list[Family | TextFamily]


def _exposition(record: ProbeRecord, rest: list[Family | TextFamily]) -> list[Family | TextFamily]:
    """Every family of one cycle, merged and checked as one (exposition.merge): a family
    that conflicts with another, the prober's or a collector's, is that family's logged
    error and is left out; the scrape goes on."""
    return merge([*record.families(), *rest])


class Exporter:
    def __init__(
        self,
        *,
        fs: HostFS,
        config_file: str | None,
        background: bool = True,
        collectors: Mapping[str, Collector] = COLLECTORS,
    ) -> None:
        """``background``: start what runs beside the exporter (the collectors' start hooks:
        the dnstap listener) now; ``--config.check`` only validates and must not take the
        service's socket."""
        self.fs = fs
        self.config_file = config_file
        self.prober = Prober()
        self.collectors = collectors
        self.collector_state: dict[str, object] = {}
        # The cycles in flight, each with the budget its probes were given; a request
        # shares one whose budget is at least its own (see scrape_families).
        self._cycles: list[_Cycle] = []
        # Complete cycles kept as fallbacks, older to newer, budgets falling (see _keep).
        self._kept: list[_Kept] = []
        # The lead requester's budget and when it last asked (loop time; see LEAD_WINDOW).
        self._lead: tuple[float, float] = (0.0, float("-inf"))
        # The event loop's lag (cli.py starts it with the server; absent in --once).
        self.loop_lag: LoopLag | None = None
        self.started = time.time()
        self.config = self._load()
        self.prober.configure(self.config)
        # What runs beside the exporter exists from the start: a resolver may connect to the
        # dnstap listener only at its own start.
        if background:
            start_collectors(self.collector_state, self.config, self.collectors)
        self.reload_status = ReloadStatus(True, time.time())
        # Probe sockets that fit in the open-file limit (measured once: the limit is raised
        # to the hard one at start, cli.py, before the exporter is built).
        soft, in_use = descriptor_budget()
        self.fd_probe_cap = probe_concurrency(2**31, soft, in_use)
        configured = self.config.limits.max_concurrent_probes
        if self.fd_probe_cap < configured:
            log.warning(
                "the open-file limit (%d, %d open) allows %d probes in flight, not "
                "limits.max_concurrent_probes %d: raise it (LimitNOFILE=, ulimit -n)",
                soft,
                in_use,
                self.fd_probe_cap,
                configured,
            )
        self._reloading: asyncio.Task[ReloadStatus] | None = None
        self._reload_again = False
        # The web configuration's reload state, when --web.config.file is given (cli.py).
        self.web_config_status: Callable[[], ReloadStatus] | None = None
        self.scrapes_total = 0
        # What the status page shows: the last scrape's findings, never a probe of its own.
        self.last_facts: PageFacts | None = None
        self.status_history = History()
        # The status page links runbooks under this (--web.runbook-base-url).
        self.runbook_base_url = RUNBOOK_BASE_URL

    def _load(self) -> Config:
        if self.config_file:
            return config_mod.load(self.config_file)
        path = self.fs.root("etc", "resolv.conf")
        text = ""
        try:
            text = self.fs.read_text(path)
        except (OSError, ValueError) as e:
            log.warning("built-in default: cannot read %s: %s; no targets", path, e)
        return config_mod.builtin_default(list(parse_resolv_conf(text).nameservers))

    def close(self) -> None:
        """Stop what the collectors started beside the exporter (the dnstap ingest process)."""
        close_collectors(self.collector_state, self.collectors)

    def request_reload(self) -> None:
        """SIGHUP: reload soon, without waiting (see :meth:`reload`)."""
        self._start_reload()

    async def reload(self) -> ReloadStatus:
        """Load the configuration file again and adopt it, or keep the running one and say
        why. The file is read and validated in a worker thread (a 10,000-target file takes
        about a second of CPU; the event loop keeps serving meanwhile). Requests that arrive
        while a load runs share one more load, started after it, which sees the file as it
        is then: a storm of SIGHUPs costs two loads, not one per signal."""
        return await asyncio.shield(self._start_reload())

    def _start_reload(self) -> asyncio.Task[ReloadStatus]:
        if self._reloading is None:
            self._reloading = asyncio.get_running_loop().create_task(self._reload_until_current())
        else:
            self._reload_again = True
        return self._reloading

    async def _reload_until_current(self) -> ReloadStatus:
        try:
            while True:
                self._reload_again = False
                status = await self._reload_once()
                if not self._reload_again:
                    return status
        finally:
            self._reloading = None

    async def _reload_once(self) -> ReloadStatus:
        def load() -> tuple[Config, Prepared]:
            cfg = self._load()
            return cfg, self.prober.prepare(cfg)

        try:
            cfg, prepared = await asyncio.to_thread(load)
        except Exception as e:
            msg = (
                str(e)
                if isinstance(e, ConfigError)
                else (f"{self.config_file}: {type(e).__name__}: {e}")
            )
            log.error("reload failed, keeping the running configuration: %s", msg)
            self.reload_status = ReloadStatus(
                False, self.reload_status.timestamp, msg, failed_at=time.time()
            )
            return self.reload_status
        self.config = cfg
        self.prober.adopt(cfg, prepared)
        start_collectors(self.collector_state, cfg, self.collectors)
        self.reload_status = ReloadStatus(True, time.time())
        log.info(
            "configuration loaded from %s: %d modules, %d targets",
            cfg.source,
            len(cfg.modules),
            len(cfg.targets),
        )
        return self.reload_status

    def max_concurrent_probes(self, cfg: Config | None = None) -> int:
        cfg = self.config if cfg is None else cfg
        return min(cfg.limits.max_concurrent_probes, self.fd_probe_cap)

    def scrape_budget(self, header_timeout: float | None) -> float:
        lim = self.config.limits
        if header_timeout is None or header_timeout <= 0:
            return lim.default_scrape_timeout - lim.scrape_timeout_offset
        return max(header_timeout - lim.scrape_timeout_offset, MIN_PROBE_TIMEOUT)

    async def scrape(
        self, header_timeout: float | None = None, *, arrived: float | None = None
    ) -> bytes:
        """The exposition of one probe-and-collect cycle, in the text format."""
        return render_bytes(await self.scrape_families(header_timeout, arrived=arrived))

    async def scrape_families(
        self, header_timeout: float | None = None, *, arrived: float | None = None
    ) -> list[Family | TextFamily]:
        """The freshest complete probe-and-collect cycle that gave its probes at least this
        request's budget, within that budget counted from ``arrived`` (loop time).

        Deadlines belong to the requester (docs/design.md, "Whose deadline"): a request
        shares a cycle in flight only if that cycle's budget is at least its own, so a
        client asking for 0.5 s never cuts short the probes a 10 s scrape waits for; a
        request that finds none starts its own cycle beside the others (at most
        MAX_CYCLES_IN_FLIGHT). A request that shares a longer cycle which cannot end in time
        gets the freshest complete cycle whose budget was at least its own, whose
        ``dnsfleet_scrape_cycle_end_timestamp_seconds`` says when it ended; it shares such
        a cycle only when that fallback exists, so the first short scrape beside a long
        one runs its own cycle rather than getting a 503. TimeoutError when nothing fits."""
        loop = asyncio.get_running_loop()
        start = loop.time() if arrived is None else arrived
        budget = self.scrape_budget(header_timeout)
        deadline = start + budget
        lead = self._leads(budget, start)
        cycle = self._cycle_for(budget, deadline)
        # One cycle in flight is the lead's: clients asking for ever so slightly longer
        # budgets below it (0.8 s, 0.800000001 s, ...) never share each other's cycles and
        # once held every slot, so the Prometheus server got the same kept cycle for as
        # long as they went on.
        if cycle is None and len(self._cycles) < MAX_CYCLES_IN_FLIGHT - (0 if lead else 1):
            cycle = self._start_cycle(budget, deadline, lead=lead)
        if cycle is not None:
            # The probes stop at the budget; half the offset is left to render and send.
            answer_by = deadline + self.config.limits.scrape_timeout_offset / 2
            try:
                return await asyncio.wait_for(
                    asyncio.shield(cycle.task), max(answer_by - loop.time(), 0.001)
                )
            except TimeoutError:
                pass
        kept = self._kept_for(budget)
        if kept is None:
            raise TimeoutError
        return _exposition(kept.record, kept.rest)

    def _cycle_for(self, budget: float, deadline: float) -> _Cycle | None:
        """The freshest cycle in flight this request may share: its probes got at least
        ``budget``, and it ends by ``deadline`` or a complete cycle is there to fall back
        on."""
        fallback = self._kept_for(budget) is not None
        fits = [
            c for c in self._cycles if c.budget >= budget and (c.deadline <= deadline or fallback)
        ]
        return max(fits, key=lambda c: c.started, default=None)

    def _leads(self, budget: float, now: float) -> bool:
        """Whether a request of ``budget`` is the lead requester's: no larger budget was
        asked for within LEAD_WINDOW."""
        lead_budget, since = self._lead
        if budget >= lead_budget or now - since > LEAD_WINDOW:
            self._lead = (budget, now)
            return True
        return False

    def _kept_for(self, budget: float) -> _Kept | None:
        return next((k for k in reversed(self._kept) if k.budget >= budget), None)

    def _start_cycle(self, budget: float, deadline: float, *, lead: bool) -> _Cycle:
        loop = asyncio.get_running_loop()
        cycle = _Cycle(
            budget,
            deadline,
            loop.time(),
            loop.create_task(self._scrape(budget, deadline, lead=lead)),
        )
        self._cycles.append(cycle)
        cycle.task.add_done_callback(lambda _: self._cycles.remove(cycle))
        return cycle

    def _keep(self, kept: _Kept) -> None:
        """Keep ``kept`` as the fallback of requests whose budget is at most its own. The
        list runs from older to newer with budgets falling: a newer cycle replaces every
        older one of a budget no larger (it serves all their requests, fresher)."""
        self._kept = [k for k in self._kept if k.budget > kept.budget]
        self._kept.append(kept)
        if len(self._kept) > MAX_KEPT_CYCLES:
            # The second newest goes: its requests fall back on an older cycle of a larger
            # budget, never on one that gave its probes less.
            del self._kept[-2]

    async def _scrape(
        self, budget: float, deadline: float, *, lead: bool = True
    ) -> list[Family | TextFamily]:
        loop = asyncio.get_running_loop()
        malloc.trim()  # the previous scrape's buffers are all free by now
        cfg = self.config
        start = loop.time()
        probe_cap, zone_cap = share_descriptors(
            self.max_concurrent_probes(cfg),
            probes=len(cfg.targets),
            zones=socket_demand(cfg, self.collectors),
        )
        ctx = CollectContext(
            fs=self.fs, config=cfg, deadline=deadline, state=self.collector_state, sockets=zone_cap
        )
        with malloc.collector_paused():  # the cycle's objects live on: nothing to collect
            results, collected = await run_beside(
                ctx,
                self.collectors,
                lambda: self.prober.probe_all(cfg, deadline, probe_cap, budget=budget, lead=lead),
            )
            self.scrapes_total += 1
            record = self.prober.record(results)
            rest: list[Family | TextFamily] = [
                *collected,
                *exporter_families(
                    reload_successful=self.reload_status.successful,
                    reload_timestamp=self.reload_status.timestamp,
                    targets=len(cfg.targets),
                    probes_total=self.prober.probes_total,
                    scrapes_total=self.scrapes_total,
                    web_reload=self.web_config_status() if self.web_config_status else None,
                    probe_concurrency=self.max_concurrent_probes(cfg),
                    internal_errors=self.prober.internal_errors,
                ),
            ]
            if self.loop_lag is not None:
                rest.append(self.loop_lag.family())
            took = loop.time() - start
            wall = time.time()
            rest.append(scrape_duration_family(took))
            rest.append(cycle_end_family(wall))
            rest.extend(process_families())
            # Kept until a newer cycle of at least its budget completes: a request that cannot
            # wait for a cycle in flight is answered with it (see scrape_families). The probe
            # families as their record, not their text: 0.3 MB instead of 3.4 MB at 1,000 targets.
            # The record it replaces is freed before the collector resumes: resumed with both
            # alive, it traversed the new one's objects at once (11.7 ms of a 10,000-target cycle).
            self._keep(_Kept(budget, record, rest))
        fams = _exposition(record, rest)
        self.last_facts = PageFacts.of(
            ctx.findings, canary_readings(self.prober.watch), wall=wall, duration=took
        )
        self.status_history.update(self.last_facts, (t.address for t in cfg.targets))
        return fams

    def status_view(self) -> StatusView:
        """What the status page renders: the state the last scrape left, never a probe."""
        return StatusView(
            config=self.config,
            reload_status=self.reload_status,
            targets=self.prober.snapshots(),
            facts=self.last_facts,
            history=self.status_history,
            runbook_base_url=self.runbook_base_url,
        )

    async def probe_one(
        self,
        target: Target,
        module: Module,
        timeout: float,
        *,
        qname: str | None = None,
        qtype: str | None = None,
    ) -> ProbeResult:
        return await self.prober.probe_one(target, module, timeout, qname=qname, qtype=qtype)

    def probe_failed(self, target: Target, e: Exception, duration: float) -> ProbeResult:
        return self.prober._internal(target, e, duration)
