"""Single UDP exchanges time out from their multiplexer's one timer: each at its own
timeout whatever the others', a cancelled caller's socket closed at once, and nothing kept
of a probe that has ended."""

from __future__ import annotations

import asyncio
import socket

import pytest

from dnsfleet.config import Module
from dnsfleet.probes import Exchange, Reason, expiry, query_for, udp
from tests.harness.servers import Blackhole
from tests.harness.tools import free_port

pytestmark = pytest.mark.integration

QUERY = query_for(Module(name="t", query_name="www.example.test", query_type="A"))


def exchange(sockaddr: tuple[str, int], timeout: float) -> asyncio.Task[Exchange]:
    return asyncio.get_running_loop().create_task(
        udp.exchange(sockaddr=sockaddr, family=socket.AF_INET, query=QUERY, timeout=timeout)
    )


def test_a_shorter_timeout_sent_later_ends_first(blackhole: Blackhole) -> None:
    """The timer moves to an earlier expiry: a 0.3 s probe sent after a 30 s one ends
    while the 30 s one still waits."""
    addr = ("127.0.0.1", blackhole.port)

    async def run() -> tuple[Exchange, bool]:
        long = exchange(addr, 30.0)
        await asyncio.sleep(0)  # the long probe is sent and its expiry pushed first
        short = exchange(addr, 0.3)
        done, _ = await asyncio.wait({long, short}, return_when=asyncio.FIRST_COMPLETED)
        still_waiting = not long.done()
        long.cancel()
        await asyncio.gather(long, return_exceptions=True)
        return short.result(), still_waiting and done == {short}

    short, ordered = asyncio.run(run())
    assert short.error is Reason.TIMEOUT
    assert short.detail == "no answer within 0.3s"
    assert ordered


def test_a_cancelled_exchange_closes_its_socket(blackhole: Blackhole) -> None:
    addr = ("127.0.0.1", blackhole.port)

    async def run() -> int:
        mux = udp._mux(asyncio.get_running_loop())
        task = exchange(addr, 30.0)
        await asyncio.sleep(0)
        assert len(mux.handlers) == 1
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return len(mux.handlers)

    assert asyncio.run(run()) == 0


def test_groups_of_many_timeouts_do_not_pile_up() -> None:
    """Every request's scrape timeout can differ: the groups of timeouts whose probes have
    all ended are dropped as new ones come, not kept until the timer passes."""
    addr = ("127.0.0.1", free_port())

    async def run() -> int:
        mux = udp._mux(asyncio.get_running_loop())
        for i in range(1000):
            await exchange(addr, 60.0 + i / 1000)
        return len(mux.expiries.waiting)

    assert asyncio.run(run()) <= expiry.GROUPS


def test_ended_exchanges_leave_nothing_waiting() -> None:
    """Thousands of exchanges refused at once (ICMP from a closed port) with a long timeout:
    each takes itself out of the mux's waiting probes as it ends, none is left for the timer
    to pass over."""
    addr = ("127.0.0.1", free_port())

    async def run() -> tuple[set[Reason | None], int, int]:
        mux = udp._mux(asyncio.get_running_loop())
        reasons = set()
        most = 0
        for _ in range(3000):
            reasons.add((await exchange(addr, 60.0)).error)
            most = max(most, sum(len(g) for g in mux.expiries.waiting.values()))
        return reasons, most, len(mux.expiries.waiting)

    reasons, most, groups = asyncio.run(run())
    assert reasons == {Reason.REFUSED}
    assert most == 0
    assert groups <= 1  # the one timeout's group, empty, until the timer passes
