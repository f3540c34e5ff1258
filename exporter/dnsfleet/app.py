"""The exporter: configuration, reloads, and what one scrape does."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from dnsfleet import config as config_mod
from dnsfleet import malloc
from dnsfleet.collectors import COLLECTORS, CollectContext, run_collectors
from dnsfleet.config import Config, ConfigError, Module, Target
from dnsfleet.exposition import Family, TextFamily, merge, render_bytes
from dnsfleet.hostfs import HostFS
from dnsfleet.parsers.resolvconf import parse_resolv_conf
from dnsfleet.prober import Prober
from dnsfleet.probes import ProbeResult, probe, query_for
from dnsfleet.selfmetrics import exporter_families, process_families, scrape_duration_family
from dnsfleet.statuspage import RUNBOOK_BASE_URL, History, Snapshot

log = logging.getLogger(__name__)

MIN_PROBE_TIMEOUT = 0.05


@dataclass(frozen=True)
class ReloadStatus:
    successful: bool
    timestamp: float  # of the last successful load
    error: str = ""  # of the latest failed load only
    failed_at: float = 0.0


class Exporter:
    def __init__(self, *, fs: HostFS, config_file: str | None) -> None:
        self.fs = fs
        self.config_file = config_file
        self.prober = Prober()
        self.collector_state: dict[str, object] = {}
        # The scrape in flight: requests that arrive meanwhile share its result.
        self._inflight: asyncio.Future[list[Family | TextFamily]] | None = None
        self.started = time.time()
        self.config = self._load()
        self.prober.configure(self.config)
        self.reload_status = ReloadStatus(True, time.time())
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

    def reload(self) -> ReloadStatus:
        try:
            cfg = self._load()
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
        self.prober.configure(cfg)
        self.reload_status = ReloadStatus(True, time.time())
        log.info(
            "configuration loaded from %s: %d modules, %d targets",
            cfg.source,
            len(cfg.modules),
            len(cfg.targets),
        )
        return self.reload_status

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
        """One probe-and-collect cycle. A request that arrives while a cycle is in flight
        shares its result instead of queueing behind it (ten concurrent scrapes used to run
        ten cycles back to back); either way it waits no longer than its own budget, counted
        from ``arrived`` (loop time), and gets a TimeoutError past it."""
        loop = asyncio.get_running_loop()
        start = loop.time() if arrived is None else arrived
        budget = self.scrape_budget(header_timeout)
        if self._inflight is None or self._inflight.done():
            task = self._inflight = loop.create_task(self._scrape(start + budget))
            # Drop the reference once done: waiters hold the result; keeping it here would
            # keep a whole scrape's families alive until the next one (megabytes at 1,000
            # targets).
            task.add_done_callback(self._scrape_done)
        # The probes stop at the budget; half the offset is left to render and send.
        remaining = start + budget + self.config.limits.scrape_timeout_offset / 2 - loop.time()
        return await asyncio.wait_for(asyncio.shield(self._inflight), max(remaining, 0.001))

    def _scrape_done(self, task: asyncio.Future[list[Family | TextFamily]]) -> None:
        if self._inflight is task:
            self._inflight = None

    async def _scrape(self, deadline: float) -> list[Family | TextFamily]:
        loop = asyncio.get_running_loop()
        malloc.trim()  # the previous scrape's buffers are all free by now
        cfg = self.config
        start = loop.time()
        ctx = CollectContext(fs=self.fs, config=cfg, deadline=deadline, state=self.collector_state)
        _, collected = await asyncio.gather(
            self.prober.probe_all(cfg, deadline), run_collectors(ctx, COLLECTORS)
        )
        self.scrapes_total += 1
        fams: list[Family | TextFamily] = [
            *self.prober.families(),
            *merge(collected),
            *exporter_families(
                reload_successful=self.reload_status.successful,
                reload_timestamp=self.reload_status.timestamp,
                targets=len(cfg.targets),
                probes_total=self.prober.probes_total,
                scrapes_total=self.scrapes_total,
            ),
        ]
        took = loop.time() - start
        fams.append(scrape_duration_family(took))
        fams.extend(process_families())
        self.last_snapshot = Snapshot.of(fams, wall=time.time(), duration=took)
        self.status_history.update(self.last_snapshot, (t.address for t in cfg.targets))
        return fams

    async def probe_one(
        self,
        target: Target,
        module: Module,
        timeout: float,
        *,
        qname: str | None = None,
        qtype: str | None = None,
    ) -> ProbeResult:
        if qname is not None or qtype is not None:
            module = Module(
                **{
                    **module.__dict__,
                    "query_name": qname or module.query_name,
                    "query_type": qtype or module.query_type,
                }
            )
            query = query_for(module)
        else:
            query = self.prober.queries.get(module.name) or query_for(module)
        return await probe(
            sockaddr=target.sockaddr,
            family=target.family,
            module=module,
            query=query,
            timeout=min(module.timeout, timeout),
        )
