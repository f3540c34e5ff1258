"""malloc.collector_paused: the cyclic collector is off while any scrape's cycle runs, on
again when the last one ends, and left alone when someone else turned it off."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from dnsfleet import malloc
from tests.harness.inprocess import exporter
from tests.harness.tools import free_port

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_off_inside_on_after() -> None:
    with malloc.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_on_again_after_an_error() -> None:
    with pytest.raises(RuntimeError), malloc.collector_paused():
        raise RuntimeError("a cycle that failed")
    assert gc.isenabled()


def test_overlapping_cycles_keep_it_off_until_the_last_ends() -> None:
    seen: list[bool] = []

    async def cycle(hold: asyncio.Event, done: asyncio.Event) -> None:
        with malloc.collector_paused():
            await hold.wait()
        seen.append(gc.isenabled())
        done.set()

    async def main() -> None:
        a_go, b_go, a_done, b_done = (asyncio.Event() for _ in range(4))
        a = asyncio.create_task(cycle(a_go, a_done))
        b = asyncio.create_task(cycle(b_go, b_done))
        await asyncio.sleep(0)
        a_go.set()
        await a_done.wait()  # the first cycle ended; the second still runs
        b_go.set()
        await asyncio.gather(a, b)

    asyncio.run(main())
    assert seen == [False, True]
    assert gc.isenabled()


def test_a_collector_turned_off_elsewhere_stays_off() -> None:
    gc.disable()
    with malloc.collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_a_steady_cycle_leaves_the_young_generation_as_it_found_it(tmp_path: Path) -> None:
    """A cycle's new record replaces the kept one before the collector resumes: resumed with
    both alive, its first young collection traversed every object of the new record (11.7 ms
    of a 10,000-target cycle), all of them alive. Targets refused on a closed loopback port:
    every probe still makes its result and its row."""
    port = free_port()
    targets = [
        {"address": f"127.0.{i // 250}.{i % 250 + 1}:{port}", "module": "m"} for i in range(1500)
    ]
    exp = exporter(tmp_path, {"modules": {"m": {"query_name": "a.test"}}, "targets": targets})
    young = gc.get_threshold()
    collections: list[int] = []  # the cycle each collection started in
    cycle = [0]

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(cycle[0])

    async def cycles() -> None:
        for i in range(6):
            cycle[0] = i
            if i == 2:  # the cycles before made and kept their records
                gc.collect()
                gc.set_threshold(1000, 1000, 1000)  # below one cycle's rows
            if i == 3:  # steady since the full collection
                gc.callbacks.append(count)
            await exp.scrape_families(8.0)

    try:
        asyncio.run(cycles())
    finally:
        if count in gc.callbacks:
            gc.callbacks.remove(count)
        gc.set_threshold(*young)
    assert collections == []
