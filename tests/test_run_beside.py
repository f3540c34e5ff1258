"""collectors.run_beside: a cycle's probes start once the host collectors have ended (their
thread and the probes' socket calls convoy on the GIL side by side), never later than a
bound when one hangs, while the network collectors run beside the probes."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from dnsfleet.collectors import CollectContext, Collector, host_collector, run_beside
from dnsfleet.config import Config, HostConfig, builtin_default
from dnsfleet.exposition import Family
from dnsfleet.hostfs import HostFS

pytestmark = pytest.mark.unit


def config(*host: str) -> Config:
    cfg = builtin_default([])
    return Config(
        source=cfg.source, modules=cfg.modules, targets=(), host=HostConfig(collectors=host)
    )


def run(
    collectors: dict[str, Collector],
    cfg: Config,
    *,
    budget: float,
    host_first_max: float,
    order: list[str] | None = None,
) -> tuple[str, list[Family], list[str]]:
    order = [] if order is None else order

    async def work() -> str:
        order.append("work")
        return "probed"

    async def main() -> tuple[str, list[Family]]:
        loop = asyncio.get_running_loop()
        ctx = CollectContext(fs=HostFS(), config=cfg, deadline=loop.time() + budget, state={})
        return await run_beside(ctx, collectors, work, host_first_max=host_first_max)

    result, fams = asyncio.run(main())
    return result, fams, order


def test_probes_start_after_the_host_collectors_and_beside_the_network_ones() -> None:
    order: list[str] = []

    def host(name: str) -> Collector:
        def collect(fs: HostFS, cfg: Config) -> list[Family]:
            time.sleep(0.2)  # long enough that a probe started beside it would show first
            order.append(name)
            return [Family(f"test_{name}", "A host fact.").add(1)]

        return host_collector(name, collect)

    async def network(ctx: CollectContext) -> list[Family]:
        order.append("network began")
        while "work" not in order:  # it ends only once the probes have started
            await asyncio.sleep(0.01)
        order.append("network")
        return [Family("test_network", "A network fact.").add(1)]

    collectors = {
        "a": host("a"),
        "b": host("b"),
        "network": Collector(name="network", run=network, enabled=lambda cfg: True),
    }
    result, fams, _ = run(collectors, config("a", "b"), budget=600, host_first_max=60, order=order)
    assert result == "probed"
    assert {f.name for f in fams} >= {"test_a", "test_b", "test_network"}
    # The network collector began at once; both host collectors (one after the other on
    # the lane) ended before the probes started.
    assert order == ["network began", "a", "b", "work", "network"], order


def test_a_hung_host_collector_holds_the_probes_no_longer_than_the_bound() -> None:
    release = threading.Event()
    started = threading.Event()

    def hung(fs: HostFS, cfg: Config) -> list[Family]:
        started.set()
        release.wait(60)
        return []

    seen: list[bool] = []

    async def work() -> str:
        seen.append(release.is_set())  # the hung collector still holds its thread
        return "probed"

    async def main() -> tuple[str, list[Family]]:
        loop = asyncio.get_running_loop()
        ctx = CollectContext(fs=HostFS(), config=config("hung"), deadline=loop.time() + 3, state={})
        return await run_beside(
            ctx, {"hung": host_collector("hung", hung)}, work, host_first_max=0.1
        )

    try:
        result, fams = asyncio.run(main())
    finally:
        release.set()
    assert started.is_set()
    assert result == "probed" and seen == [False]
    success = next(f for f in fams if f.name == "dnsfleet_collector_success")
    assert [v for *_, v in success.samples] == [0.0]  # the hung one failed, with a reason


def test_no_host_collector_no_wait() -> None:
    result, _, order = run({}, config(), budget=600, host_first_max=60)
    assert result == "probed" and order == ["work"]
