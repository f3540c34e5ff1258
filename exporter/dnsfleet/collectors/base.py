"""The collector framework: context, the Collector record, and the runner.

A collector turns what it reads into metric families; the runner times it and reports
``dnsfleet_collector_success`` / ``dnsfleet_collector_duration_seconds``. A collector that
fails yields nothing partial and never fails the scrape. A missing subsystem is not a
failure: the collector returns no families.

Host collectors are synchronous functions of the host filesystem and run in a worker
thread; network collectors (stub resolvers, resolver statistics, Consul) are coroutines.

A collector that runs something beside the exporter (dnstap's ingest process) has ``start``
and ``close`` hooks: the exporter calls :func:`start_collectors` when it starts and after
every configuration it adopts, and :func:`close_collectors` when it stops, for every
collector, enabled or not, so one that a reload disabled stops what it started.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dnsfleet.config import Config
from dnsfleet.exposition import Family
from dnsfleet.hostfs import HostFS

log = logging.getLogger(__name__)

# Network collectors stop their work this long before the scrape deadline, leaving the
# runner a moment to render the families once every reader is done or has given up.
DEADLINE_MARGIN = 0.05


class CollectorError(Exception):
    """A collector could not produce truthful data; the message is the reason."""


T = TypeVar("T")
W = TypeVar("W")


class Findings:
    """Typed records a scrape's producers hand to a second consumer (the status page)
    beside their families: what they found, never text to read back. Each producer adds
    records of its own types; a reader asks for one type."""

    __slots__ = ("_records",)

    def __init__(self) -> None:
        self._records: list[object] = []

    def add(self, *records: object) -> None:
        self._records.extend(records)

    def of(self, kind: type[T]) -> list[T]:
        return [r for r in self._records if isinstance(r, kind)]


@dataclass(frozen=True, slots=True)
class CollectorRun:
    """How one collector ran in a scrape: its success and duration, as typed records."""

    name: str
    ok: bool
    duration: float  # seconds


@dataclass(frozen=True)
class CollectContext:
    fs: HostFS
    config: Config
    deadline: float  # loop.time() by which the scrape must be done
    state: dict[str, Any]  # per-collector state kept between scrapes, keyed by collector
    # Sockets the zone checks may hold at once: their share of the cycle's open-file
    # budget (app.py splits it with the probes; selfmetrics.share_descriptors).
    sockets: int = 64
    # What this scrape's collectors found, typed, for the status page.
    findings: Findings = field(default_factory=Findings)


HostCollectFn = Callable[[HostFS, Config], list[Family]]
AsyncCollectFn = Callable[[CollectContext], Awaitable[list[Family]]]
# The state is CollectContext.state: what a hook starts, the collector's runs find there.
StartFn = Callable[[MutableMapping[str, Any], Config], None]
CloseFn = Callable[[MutableMapping[str, Any]], None]


@dataclass(frozen=True)
class Collector:
    name: str
    run: AsyncCollectFn
    enabled: Callable[[Config], bool]
    # Start, or bring in line with the configuration, what runs beside the exporter.
    start: StartFn | None = None
    # Stop it: the exporter is going away.
    close: CloseFn | None = None
    # Sockets its run holds at once with no limit: the cycle's open-file budget is split
    # between the probes and these (selfmetrics.share_descriptors; CollectContext.sockets).
    sockets: Callable[[Config], int] | None = None
    host: bool = False  # runs on the host lane (host_collector)


def start_collectors(
    state: MutableMapping[str, Any], config: Config, collectors: Mapping[str, Collector]
) -> None:
    """Every collector's start hook. One that fails is logged and the others start: the
    collector's own run can try again and report its failure there."""
    for c in collectors.values():
        if c.start is not None:
            try:
                c.start(state, config)
            except Exception as e:
                log.error("collector %s could not start: %s", c.name, e)


def close_collectors(state: MutableMapping[str, Any], collectors: Mapping[str, Collector]) -> None:
    """Every collector's close hook; one that fails does not keep the others running."""
    for c in collectors.values():
        if c.close is not None:
            try:
                c.close(state)
            except Exception as e:
                log.error("collector %s could not stop: %s", c.name, e)


def socket_demand(config: Config, collectors: Mapping[str, Collector]) -> int:
    """Sockets the enabled collectors would hold at once in one cycle with no limit."""
    return sum(
        c.sockets(config)
        for c in collectors.values()
        if c.sockets is not None and c.enabled(config)
    )


class HostLane:
    """Runs host collectors one after another on one thread, and replaces a stuck thread.

    Host collectors are syscall-bound Python. In parallel threads every read releases the GIL
    and the threads convoy: the three host collectors on a 128-CPU tree took 30 ms one after
    another and 80 ms in parallel threads (bench/bench_host.py). So they queue on one thread.
    But a read can hang (a FUSE or NFS mount, a wedged driver) and Python cannot interrupt
    it: a thread busy with one job for longer than ``stall`` seconds is retired (it exits
    when its job returns, if ever) and a fresh thread takes the queue, so the other
    collectors, and later scrapes, go on. An idle worker waits up to ``idle`` seconds for
    the next scrape's jobs before its thread ends: a thread started for every scrape cost
    its start (the event loop waits for it) and its stack's page faults, every time.

    A job submitted with ``tell`` (an event loop and a future of it) has its end told to
    that loop when the queue is empty, in one call for every job ended since: a scrape's
    host collectors wake the loop once, not once each (each wake took the GIL from the lane
    mid-work, ~45 us of CPU a collector). A job ended before one that hangs is found by its
    waiter's own next look (:func:`host_collector` looks every half ``stall``).
    """

    def __init__(self, stall: float = 1.0, idle: float = 60.0) -> None:
        self.stall = stall
        self.idle = idle
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._queue: collections.deque[_Job] = collections.deque()
        self._worker: _LaneWorker | None = None
        self._untold: list[_Tell] = []
        self.threads_started = 0

    def submit(self, fn: Callable[[], Any], tell: _Tell | None = None) -> Future[Any]:
        fut: Future[Any] = Future()
        with self._lock:
            self._queue.append((fut, fn, tell))
            self._ensure_worker()
            self._work.notify()
        return fut

    def check(self, stall: float) -> None:
        """Retire the worker if one job has kept it for more than ``stall`` seconds
        (called while callers wait)."""
        with self._lock:
            self._ensure_worker(stall)

    def _ensure_worker(self, stall: float | None = None) -> None:  # holds the lock
        w = self._worker
        limit = self.stall if stall is None else stall
        if (
            w is not None
            and not w.done
            and not (w.busy_since is not None and time.monotonic() - w.busy_since > limit)
        ):
            return
        if w is not None:
            w.retired = True
        if not self._queue:
            self._worker = None
            return
        self._worker = _LaneWorker(self)
        self.threads_started += 1
        threading.Thread(target=self._worker.loop, name="dnsfleet-host", daemon=True).start()

    def ended(self, tell: _Tell | None) -> None:
        """A job ended (called by the worker): tell every loop waiting for ended jobs, once
        the queue is empty."""
        with self._lock:
            if tell is not None:
                self._untold.append(tell)
            if self._queue or not self._untold:
                return
            untold, self._untold = self._untold, []
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for loop, waiter in untold:
            by_loop.setdefault(loop, []).append(waiter)
        for loop, waiters in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_wake, waiters)


_Tell = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]
_Job = tuple[Future[Any], Callable[[], Any], _Tell | None]


def _wake(waiters: list[asyncio.Future[None]]) -> None:
    for w in waiters:
        if not w.done():
            w.set_result(None)


class _LaneWorker:
    def __init__(self, lane: HostLane) -> None:
        self.lane = lane
        self.busy_since: float | None = None
        self.retired = False
        self.done = False

    def loop(self) -> None:
        lane = self.lane
        while True:
            with lane._lock:
                if not self.retired and not lane._queue:
                    lane._work.wait_for(lambda: self.retired or bool(lane._queue), lane.idle)
                if self.retired or not lane._queue:
                    self.done = True
                    if lane._worker is self:
                        lane._worker = None
                    return
                fut, fn, tell = lane._queue.popleft()
                self.busy_since = time.monotonic()
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as e:  # delivered to the waiting coroutine
                    fut.set_exception(e)
            self.busy_since = None
            lane.ended(tell)


HOST_LANE = HostLane()


# When this task's last job on the host lane ended, as the lane's thread saw it: a host
# collector's duration ends there, not when the loop is told (after the scrape's last job).
_LANE_END: contextvars.ContextVar[float | None] = contextvars.ContextVar("lane_end", default=None)


async def on_host_lane(ctx: CollectContext, fn: Callable[[], T]) -> T:
    """``fn``'s result, run on the host lane (a read of the host that may hang), queued with
    this scrape's host collectors: their one wake of the loop tells its end too."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def timed() -> tuple[T, float]:
        result = fn()
        return result, time.monotonic()

    fut = HOST_LANE.submit(timed, (loop, waiter))
    # A job is stuck after a quarter of what is left of the scrape (at most lane.stall):
    # early enough that the collectors queued behind it still finish in time.
    stall = min(HOST_LANE.stall, max(0.05, (ctx.deadline - loop.time()) / 4))
    try:
        while True:
            await asyncio.wait({waiter}, timeout=stall / 2)
            if fut.done():
                result: T
                result, ended = fut.result()
                _LANE_END.set(ended)
                return result
            HOST_LANE.check(stall)
    finally:
        fut.cancel()  # out of time: a job not started yet never runs


def host_collector(name: str, fn: HostCollectFn) -> Collector:
    async def run(ctx: CollectContext) -> list[Family]:
        return await on_host_lane(ctx, lambda: fn(ctx.fs, ctx.config))

    return Collector(name=name, run=run, enabled=lambda cfg: name in cfg.host.collectors, host=True)


# How long a cycle's probes wait for the host collectors to end before starting anyway: a
# twentieth of what is left of the scrape, at most 0.1 s (they take 2-16 ms; a hung one is
# retired by the lane, and the probes do not wait for that).
HOST_FIRST_SHARE = 20
HOST_FIRST_MAX = 0.1


async def run_beside(
    ctx: CollectContext,
    collectors: Mapping[str, Collector],
    work: Callable[[], Awaitable[W]],
    host_first_max: float = HOST_FIRST_MAX,
) -> tuple[W, list[Family]]:
    """The collectors and ``work`` (a cycle's probes), ``work`` started once the host
    collectors have ended. Run side by side, the host lane's thread and the probes' socket
    calls each release the GIL at every system call and hand it back and forth: a
    1,000-target scrape cost 40 ms of CPU so, and 30 ms with the host collectors first."""
    loop = asyncio.get_running_loop()
    host_done = asyncio.Event()
    collecting = asyncio.ensure_future(run_collectors(ctx, collectors, host_done))
    try:
        wait = min(host_first_max, max(0.0, ctx.deadline - loop.time()) / HOST_FIRST_SHARE)
        try:
            async with asyncio.timeout(wait):
                await host_done.wait()
        except TimeoutError:
            pass
        result, fams = await asyncio.gather(work(), collecting)
    except BaseException:
        collecting.cancel()
        raise
    return result, fams


async def run_collectors(
    ctx: CollectContext,
    collectors: Mapping[str, Collector],
    host_done: asyncio.Event | None = None,
) -> list[Family]:
    """Every enabled collector at once; ``host_done`` is set when the host ones have ended."""
    chosen = [c for c in collectors.values() if c.enabled(ctx.config)]
    host_left = [c.host for c in chosen].count(True)
    if host_done is not None and not host_left:
        host_done.set()
    success = Family(
        "dnsfleet_collector_success",
        "1 if the collector produced its data in this scrape, 0 if it failed.",
    )
    duration = Family(
        "dnsfleet_collector_duration_seconds", "Time the collector took in this scrape."
    )
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
            log.warning(
                "collector %s failed: %s",
                c.name,
                e,
                exc_info=not isinstance(e, CollectorError | OSError | ValueError),
            )
        labels = {"collector": c.name}
        ended = _LANE_END.get() if c.host and ok else None
        took = (time.monotonic() if ended is None else ended) - start
        success.add(ok, labels)
        duration.add(took, labels)
        ctx.findings.add(CollectorRun(c.name, ok == 1.0, took))
        if c.host and host_done is not None:
            nonlocal host_left
            host_left -= 1
            if not host_left:
                host_done.set()
        return fams if ok else []

    results = await asyncio.gather(*(one(c) for c in chosen))
    return [success, duration, *(f for fams in results for f in fams)]
