"""The exporter: configuration, reloads, and what one scrape does."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from dnsfleet import config as config_mod
from dnsfleet import malloc
from dnsfleet.collectors import COLLECTORS, CollectContext, run_collectors
from dnsfleet.collectors import dnstap as dnstap_collector
from dnsfleet.collectors.zones import zone_sockets
from dnsfleet.config import Config, ConfigError, Module, Target
from dnsfleet.exposition import Family, TextFamily, merge, render_bytes
from dnsfleet.hostfs import HostFS
from dnsfleet.parsers.resolvconf import parse_resolv_conf
from dnsfleet.prober import Prepared, Prober, ProbeRecord
from dnsfleet.probes import ProbeResult
from dnsfleet.selfmetrics import (
    ReloadStatus,
    cycle_end_family,
    descriptor_budget,
    exporter_families,
    probe_concurrency,
    process_families,
    scrape_duration_family,
    share_descriptors,
)
from dnsfleet.status import History, PageFacts, Snapshot
from dnsfleet.statuspage import RUNBOOK_BASE_URL, StatusView

log = logging.getLogger(__name__)

MIN_PROBE_TIMEOUT = 0.05


class Exporter:
    def __init__(self, *, fs: HostFS, config_file: str | None, background: bool = True) -> None:
        """``background``: start what runs beside the exporter (the dnstap listener) now;
        ``--config.check`` only validates and must not take the service's socket."""
        self.fs = fs
        self.config_file = config_file
        self.prober = Prober()
        self.collector_state: dict[str, object] = {}
        # The scrape in flight: requests that arrive meanwhile share its result.
        self._inflight: asyncio.Future[list[Family | TextFamily]] | None = None
        # The last cycle that completed: its probe record and its other families.
        self._last_cycle: tuple[ProbeRecord, list[Family | TextFamily]] | None = None
        self.started = time.time()
        self.config = self._load()
        self.prober.configure(self.config)
        # The dnstap listener exists from the start: a resolver may connect only at its own.
        if background:
            dnstap_collector.ensure(self.collector_state, self.config)
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
        self.last_snapshot: Snapshot | None = None
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
        """Stop what the exporter started beside itself (the dnstap ingest process)."""
        dnstap_collector.close(self.collector_state)

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
        dnstap_collector.ensure(self.collector_state, cfg)
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
        """The freshest complete probe-and-collect cycle this request can have within its
        own budget, counted from ``arrived`` (loop time).

        A request that arrives while a cycle is in flight shares it instead of starting
        another (ten concurrent scrapes used to run ten cycles back to back). If that cycle
        cannot finish within this request's budget (it was started by a request with a
        longer timeout, or the machine is starved), the request gets the last complete
        cycle instead, whose ``dnsfleet_scrape_cycle_end_timestamp_seconds`` says when it
        ended; TimeoutError only when no cycle has completed yet. Before, a person's
        ``curl /metrics`` could make Prometheus' shorter-timeout scrape a 503 (``up`` 0)."""
        loop = asyncio.get_running_loop()
        start = loop.time() if arrived is None else arrived
        deadline = start + self.scrape_budget(header_timeout)
        inflight = self._inflight
        if inflight is None or inflight.done():
            inflight = self._inflight = loop.create_task(self._scrape(deadline))
            inflight.add_done_callback(self._scrape_done)
        # The probes stop at the budget; half the offset is left to render and send.
        answer_by = deadline + self.config.limits.scrape_timeout_offset / 2
        try:
            return await asyncio.wait_for(
                asyncio.shield(inflight), max(answer_by - loop.time(), 0.001)
            )
        except TimeoutError:
            last = self.last_cycle
            if last is None:
                raise
            return last

    def _scrape_done(self, task: asyncio.Future[list[Family | TextFamily]]) -> None:
        if self._inflight is task:
            self._inflight = None

    async def _scrape(self, deadline: float) -> list[Family | TextFamily]:
        loop = asyncio.get_running_loop()
        malloc.trim()  # the previous scrape's buffers are all free by now
        cfg = self.config
        start = loop.time()
        probe_cap, zone_cap = share_descriptors(
            self.max_concurrent_probes(cfg), probes=len(cfg.targets), zones=zone_sockets(cfg.zones)
        )
        ctx = CollectContext(
            fs=self.fs, config=cfg, deadline=deadline, state=self.collector_state, sockets=zone_cap
        )
        _, collected = await asyncio.gather(
            self.prober.probe_all(cfg, deadline, probe_cap),
            run_collectors(ctx, COLLECTORS),
        )
        self.scrapes_total += 1
        record = self.prober.record()
        rest: list[Family | TextFamily] = [
            *merge(collected),
            *exporter_families(
                reload_successful=self.reload_status.successful,
                reload_timestamp=self.reload_status.timestamp,
                targets=len(cfg.targets),
                probes_total=self.prober.probes_total,
                scrapes_total=self.scrapes_total,
                web_reload=self.web_config_status() if self.web_config_status else None,
                probe_concurrency=self.max_concurrent_probes(cfg),
            ),
        ]
        took = loop.time() - start
        wall = time.time()
        rest.append(scrape_duration_family(took))
        rest.append(cycle_end_family(wall))
        rest.extend(process_families())
        # Kept until the next cycle completes: a request that cannot wait for a cycle in
        # flight is answered with it (see scrape_families). The probe families as their
        # record, not their text: 0.3 MB instead of 3.4 MB at 1,000 targets.
        self._last_cycle = (record, rest)
        fams = [*record.families(), *rest]
        self.last_snapshot = Snapshot.of(fams, wall=wall, duration=took)
        self.status_history.update(self.last_snapshot, (t.address for t in cfg.targets))
        return fams

    def status_view(self) -> StatusView:
        """What the status page renders: the state the last scrape left, never a probe."""
        return StatusView(
            config=self.config,
            reload_status=self.reload_status,
            targets=list(self.prober.states.values()),
            facts=PageFacts.of(self.last_snapshot) if self.last_snapshot else None,
            history=self.status_history,
            runbook_base_url=self.runbook_base_url,
        )

    @property
    def last_cycle(self) -> list[Family | TextFamily] | None:
        """The families of the last cycle that completed, rendered again from its record."""
        if self._last_cycle is None:
            return None
        record, rest = self._last_cycle
        return [*record.families(), *rest]

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
