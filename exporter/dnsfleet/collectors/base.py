"""The collector framework: context, the Collector record, and the runner.

A collector turns what it reads into metric families; the runner times it and reports
``dnsfleet_collector_success`` / ``dnsfleet_collector_duration_seconds``. A collector that
fails yields nothing partial and never fails the scrape. A missing subsystem is not a
failure: the collector returns no families.

Host collectors are synchronous functions of the host filesystem and run in a worker
thread; network collectors (stub resolvers, resolver statistics, Consul) are coroutines.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dnsfleet.config import Config
from dnsfleet.exposition import Family
from dnsfleet.hostfs import HostFS

log = logging.getLogger(__name__)


class CollectorError(Exception):
    """A collector could not produce truthful data; the message is the reason."""


@dataclass(frozen=True)
class CollectContext:
    fs: HostFS
    config: Config
    deadline: float        # loop.time() by which the scrape must be done
    state: dict[str, Any]  # per-collector state kept between scrapes, keyed by collector


HostCollectFn = Callable[[HostFS, Config], list[Family]]
AsyncCollectFn = Callable[[CollectContext], Awaitable[list[Family]]]


@dataclass(frozen=True)
class Collector:
    name: str
    run: AsyncCollectFn
    enabled: Callable[[Config], bool]


# Host collectors are syscall-bound Python. In parallel threads every read releases the GIL
# and the threads convoy: the three host collectors on a 128-CPU tree took 30 ms one after
# another and 80 ms in parallel threads (bench/bench_host.py). They share one worker thread,
# so a host collector's duration includes any wait behind the others.
_HOST_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dnsfleet-host")


def host_collector(name: str, fn: HostCollectFn) -> Collector:
    async def run(ctx: CollectContext) -> list[Family]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_HOST_THREAD, fn, ctx.fs, ctx.config)

    return Collector(name=name, run=run, enabled=lambda cfg: name in cfg.host.collectors)


async def run_collectors(ctx: CollectContext, collectors: dict[str, Collector]) -> list[Family]:
    chosen = [c for c in collectors.values() if c.enabled(ctx.config)]
    success = Family("dnsfleet_collector_success",
                     "1 if the collector produced its data in this scrape, 0 if it failed.")
    duration = Family("dnsfleet_collector_duration_seconds",
                      "Time the collector took in this scrape.")
    loop = asyncio.get_running_loop()

    async def one(c: Collector) -> list[Family]:
        start = time.monotonic()
        ok = 0.0
        fams: list[Family] = []
        try:
            remaining = max(ctx.deadline - loop.time(), 0.001)
            async with asyncio.timeout(remaining):
                fams = await c.run(ctx)
            ok = 1.0
        except TimeoutError:
            log.warning("collector %s failed: did not finish before the scrape deadline", c.name)
        except Exception as e:  # a collector bug must not fail the scrape
            log.warning("collector %s failed: %s", c.name, e,
                        exc_info=not isinstance(e, CollectorError | OSError | ValueError))
        labels = {"collector": c.name}
        success.add(ok, labels)
        duration.add(time.monotonic() - start, labels)
        return fams if ok else []

    results = await asyncio.gather(*(one(c) for c in chosen))
    return [success, duration, *(f for fams in results for f in fams)]
