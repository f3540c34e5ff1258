"""udpbatch: the probes a drain (or the timeouts' sweep) ends are replaced after it, all at
once, never past the concurrency limit. A send per ended probe, from the answer's own
callback, woke the resolver for every datagram at 10,000 targets."""

from __future__ import annotations

import asyncio
import socket

import pytest

from dnsfleet.config import Module
from dnsfleet.probes import query_for, udpbatch
from dnsfleet.probes.result import Exchange

pytestmark = pytest.mark.unit


def test_ended_probes_are_replaced_together_after_the_drain() -> None:
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # bound, never read
    silent.bind(("127.0.0.1", 0))
    query = query_for(Module(name="a", query_name="example.test"))
    items = [(silent.getsockname(), socket.AF_INET, query, 30.0)] * 20
    ended: list[int] = []
    sends: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        batch = udpbatch.SharedBatch(
            loop, items, loop.time() + 60, 5, lambda i, ex: ended.append(i)
        )
        start_more = batch.start_more

        def counted() -> None:
            before = batch.next_item
            start_more()
            sends.append(batch.next_item - before)

        batch.start_more = counted  # type: ignore[method-assign]
        try:
            batch.start_more()
            assert (batch.in_flight, sends) == (5, [5])
            slots = [slot for *_, slot in sorted(batch.expiries)][:3]

            def drain() -> None:  # as three answers in one readiness event
                for slot in slots:
                    batch._end(slot, Exchange(None, None, 0.001))
                assert batch.in_flight == 2 and sends == [5]  # nothing sent in between

            batch._batched(drain)
            assert (batch.in_flight, sends, sorted(ended)) == (5, [5, 3], [0, 1, 2])
        finally:
            batch.close()
            silent.close()

    asyncio.run(main())
