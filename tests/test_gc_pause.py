"""malloc.collector_paused: the cyclic collector is off while any scrape's cycle runs, on
again when the last one ends, and left alone when someone else turned it off."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from dnsfleet import malloc

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
