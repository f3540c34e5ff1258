"""A shared UDP socket (IP_RECVERR) keeps being read after an ICMP error woke it, on both
event loops: /probe's pool (probes/udpshared.py) and a /metrics batch (probes/udpbatch.py).
uvloop, when epoll reports EPOLLERR, runs the reader once and stops watching the socket for
good, so every later answer or refusal on that socket waited for its probe's timeout."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dnsfleet.config import Module
from dnsfleet.probes import Reason, query_for, udpbatch, udpshared
from dnsfleet.probes.result import Exchange
from tests.harness.loops import both
from tests.harness.loops import run as run_on
from tests.harness.servers import answer
from tests.harness.tools import free_port
from tests.test_probe_fast import Client, reason, run

pytestmark = pytest.mark.integration

MODULE = Module(name="local", query_name="a.local.test", query_type="A", timeout=30.0)
QUERY = query_for(MODULE)
# Every probe waits 30 s for its answer; one told within this was read when it came.
TOLD_WITHIN = 10.0


class Answering:
    """A loopback UDP server that answers every query at once."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.sockaddr = self.sock.getsockname()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                q, src = self.sock.recvfrom(65535)
            except OSError:
                continue
            self.sock.sendto(answer(q, "a.local.test. 60 IN A 192.0.2.1"), src)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def answering() -> Iterator[Answering]:
    a = Answering()
    yield a
    a.close()


def verdict(ex: Exchange) -> Reason | None:
    assert ex.error is not None or ex.response is not None, ex
    return ex.error


@both
def test_the_probe_pool_reads_on_after_a_refusal(
    loop_kind: str, answering: Answering, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One socket in the pool: refusals and answers in turn, each told when it comes."""
    monkeypatch.setattr(udpshared, "POOL", 1)
    refused = ("127.0.0.1", free_port())

    async def one(sockaddr: tuple[str, int]) -> Reason | None:
        loop = asyncio.get_running_loop()
        got: asyncio.Future[Exchange] = loop.create_future()
        udpshared.start(
            loop,
            sockaddr=sockaddr,
            family=socket.AF_INET,
            query=QUERY,
            timeout=MODULE.timeout,
            done=got.set_result,
        )
        return verdict(await asyncio.wait_for(got, TOLD_WITHIN))

    async def main() -> list[Reason | None]:
        try:
            return [await one(refused if i % 2 else answering.sockaddr) for i in range(6)]
        finally:
            udpshared._pool(asyncio.get_running_loop()).close()

    assert run_on(main(), loop_kind) == [None, Reason.REFUSED] * 3


@both
def test_a_batch_socket_reads_on_after_a_refusal(loop_kind: str, answering: Answering) -> None:
    """One probe at a time through the batch's one socket: refused, refused, answered."""
    refused = ("127.0.0.1", free_port())
    items = [
        (addr, socket.AF_INET, QUERY, MODULE.timeout)
        for addr in (refused, refused, answering.sockaddr, refused, answering.sockaddr)
    ]

    async def main() -> list[Reason | None]:
        got: dict[int, Exchange | None] = {}
        loop = asyncio.get_running_loop()
        batch = udpbatch.exchange_many(
            items,
            deadline=loop.time() + 60,
            concurrency=1,
            on_result=got.__setitem__,
        )
        await asyncio.wait_for(batch, TOLD_WITHIN * 2)
        return [verdict(ex) if ex else Reason.INTERNAL for _, ex in sorted(got.items())]

    refusal = Reason.REFUSED
    assert run_on(main(), loop_kind) == [refusal, refusal, None, refusal, None]


@both
def test_probe_requests_beside_refusals_are_told_when_answered(
    loop_kind: str, tmp_path: Path, answering: Answering
) -> None:
    """/probe from 32 keep-alive clients at once, refused and answered targets mixed: a
    request's send can read a socket's ICMP error after uvloop's epoll_wait reported it and
    before that socket's reader ran, which then found no error to tell it the watch had
    stopped. Every verdict is told within 10 s of its 30 s timeout."""
    ok = f"127.0.0.1:{answering.sockaddr[1]}"
    targets = [
        ok if i % 2 else f"127.0.{1 + i // 200}.{1 + i % 200}:{free_port()}" for i in range(800)
    ]

    async def client(c: Client, todo: list[str], got: list[str | None]) -> None:
        conn = await asyncio.open_connection("127.0.0.1", c.port)
        try:
            while todo:
                target = todo.pop()
                path = f"/probe?target={target}&module=long"
                _, body = await asyncio.wait_for(c.get(path, conn), TOLD_WITHIN)
                got.append("success" if reason(body) is None else reason(body))
        finally:
            conn[1].close()

    async def main(c: Client) -> dict[str | None, int]:
        todo, got = list(targets), list[str | None]()
        await asyncio.gather(*(client(c, todo, got) for _ in range(32)))
        return {r: got.count(r) for r in set(got)}

    assert run(tmp_path, main, loop_kind) == {"success": 400, "refused": 400}
