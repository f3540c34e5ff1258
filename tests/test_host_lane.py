"""The host lane tells an event loop of its ended jobs once the queue is empty, in one call:
a scrape's host collectors wake the loop once. A job that ended before one that hangs is
still found by its waiter, and a job whose collector ran out of time before it started
never runs."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any

import pytest

from dnsfleet.capacity.model import State
from dnsfleet.collectors import COLLECTORS, base, resolver_capacity
from dnsfleet.collectors.base import (
    CollectContext,
    HostLane,
    host_collector,
    run_collectors,
)
from dnsfleet.config import Config, builtin_default, parse
from dnsfleet.exposition import Family
from dnsfleet.hostfs import HostFS
from tests.harness import metrics
from tests.harness.metrics import of

pytestmark = pytest.mark.unit


def test_jobs_queued_together_wake_the_loop_once(monkeypatch: pytest.MonkeyPatch) -> None:
    lane = HostLane()
    go = threading.Event()
    calls: list[object] = []

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        real = loop.call_soon_threadsafe

        def counting(callback: Any, *args: Any, **kw: Any) -> Any:
            calls.append(callback)
            return real(callback, *args, **kw)

        monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
        waiters = [loop.create_future() for _ in range(4)]
        futs = [lane.submit(functools.partial(go.wait, 30), (loop, waiters[0]))]
        futs += [
            lane.submit(functools.partial(abs, k), (loop, w)) for k, w in enumerate(waiters[1:], 1)
        ]
        go.set()
        await asyncio.wait_for(asyncio.gather(*waiters), 30)
        return [f.result() for f in futs]

    assert asyncio.run(main()) == [True, 1, 2, 3]
    assert len(calls) == 1


def collectors(*fns: Any) -> dict[str, Any]:
    cols = {f.__name__: host_collector(f.__name__, f) for f in fns}
    for c in cols.values():
        object.__setattr__(c, "enabled", lambda cfg: True)
    return cols


def scrape(cols: dict[str, Any], seconds: float) -> dict[str, float | None]:
    async def run() -> dict[str, float | None]:
        loop = asyncio.get_running_loop()
        ctx = CollectContext(
            fs=HostFS(), config=builtin_default([]), deadline=loop.time() + seconds, state={}
        )
        success = (await run_collectors(ctx, cols))[0]
        return {n: success.value({"collector": n}) for n in cols}

    return asyncio.run(run())


def test_a_job_ended_before_one_that_hangs_is_not_held_back_by_it() -> None:
    """The loop is told when the queue is empty: here only once the hung job is retired."""
    release = threading.Event()

    def fine(fs: HostFS, cfg: Config) -> list[Family]:
        return [Family("test_fine", "ok").add(1)]

    def hung(fs: HostFS, cfg: Config) -> list[Family]:
        release.wait(30)
        return []

    try:
        assert scrape(collectors(fine, hung), 3.0) == {"fine": 1.0, "hung": 0.0}
    finally:
        release.set()


def test_a_job_out_of_time_before_it_started_never_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lane = HostLane(stall=60.0)
    monkeypatch.setattr(base, "HOST_LANE", lane)
    release = threading.Event()
    ran = threading.Event()

    def late(fs: HostFS, cfg: Config) -> list[Family]:
        ran.set()
        return []

    async def main() -> None:
        busy = lane.submit(functools.partial(release.wait, 30))
        loop = asyncio.get_running_loop()
        ctx = CollectContext(
            fs=HostFS(), config=builtin_default([]), deadline=loop.time() + 30, state={}
        )
        task = asyncio.ensure_future(host_collector("late", late).run(ctx))
        await asyncio.sleep(0.05)
        task.cancel()  # the scrape's deadline, while the job waits behind the busy one
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        assert await asyncio.wrap_future(busy) is True

    try:
        asyncio.run(main())
    finally:
        release.set()
    assert not ran.wait(1.0)


def test_the_capacity_file_is_read_on_the_lane_beside_the_host_collectors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its stat rides the host collectors' wake of the loop instead of a thread of its own."""
    threads: list[str] = []
    real = resolver_capacity._load

    def load(ctx: CollectContext) -> State:
        threads.append(threading.current_thread().name)
        return real(ctx)

    monkeypatch.setattr(resolver_capacity, "_load", load)
    cfg = parse(
        {
            "modules": {"m": {"query_name": "example.test."}},
            "targets": [{"address": "127.0.0.1", "module": "m", "capacity_qps": 100}],
        },
        source="test",
    )

    async def run() -> float | None:
        loop = asyncio.get_running_loop()
        ctx = CollectContext(fs=HostFS(), config=cfg, deadline=loop.time() + 30, state={})
        fams = await run_collectors(ctx, {"resolver_capacity": COLLECTORS["resolver_capacity"]})
        return metrics.matching(of(fams), "dnsfleet_resolver_capacity_qps", kind="declared")

    assert asyncio.run(run()) == 100
    assert threads == ["dnsfleet-host"]


def test_each_host_collector_times_its_own_job_not_the_whole_lane() -> None:
    """The loop learns of both jobs at once; the first one's duration still ends where its
    job did, before the second one's started."""

    def first(fs: HostFS, cfg: Config) -> list[Family]:
        return []

    def second(fs: HostFS, cfg: Config) -> list[Family]:
        threading.Event().wait(0.05)
        return []

    cols = collectors(first, second)

    async def run() -> dict[str, float | None]:
        loop = asyncio.get_running_loop()
        ctx = CollectContext(
            fs=HostFS(), config=builtin_default([]), deadline=loop.time() + 30, state={}
        )
        duration = (await run_collectors(ctx, cols))[1]
        return {n: duration.value({"collector": n}) for n in cols}

    took = asyncio.run(run())
    assert took["first"] is not None and took["second"] is not None
    assert took["first"] < took["second"]
