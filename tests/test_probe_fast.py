"""/probe's common request on callbacks and shared sockets (endpoints/probe.py's start,
probes/udpshared.py), through the real HTTP server against real unbound: every verdict the
socket per probe gave (the answer, refused at once, a timeout, a spoofed answer from
another port or with another ID ignored), hundreds of distinct targets at once, a socket
rotated while its queries are in flight, and a client that leaves before its answer."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import struct
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from dnsfleet import probes
from dnsfleet.app import Exporter
from dnsfleet.endpoints import probe as endpoints_probe
from dnsfleet.endpoints import router as endpoints_router
from dnsfleet.endpoints.probe import ProbeHandler
from dnsfleet.endpoints.router import make_router
from dnsfleet.hostfs import HostFS
from dnsfleet.probes import expiry, udpshared
from dnsfleet.web.server import serve
from tests.harness.loops import both
from tests.harness.loops import run as run_on
from tests.harness.servers import Blackhole, Unbound, answer, scripted
from tests.harness.tools import free_port
from tests.wildcard import WildcardUnbound

pytestmark = pytest.mark.integration

T = TypeVar("T")
CONFIG = """resolv_conf: []
modules:
  local: {query_name: a.local.test, query_type: A, timeout: 3s}
  short: {query_name: a.local.test, query_type: A, timeout: 500ms}
  long: {query_name: a.local.test, query_type: A, timeout: 30s}
probe_allowlist: [127.0.0.0/8, "::1/128"]
"""


class Client:
    """An in-process exporter on a loopback port, and a keep-alive HTTP/1.1 client of it."""

    def __init__(self, port: int, exp: Exporter, handler: ProbeHandler) -> None:
        self.port = port
        self.exp = exp
        self.handler = handler

    async def get(self, path: str, conn: Any = None, raw: bytes = b"") -> tuple[int, str]:
        r, w = conn or await asyncio.open_connection("127.0.0.1", self.port)
        try:
            w.write(raw or f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 20)
            length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
            body = await asyncio.wait_for(r.readexactly(length), 20)
            return int(head.split()[1]), body.decode()
        finally:
            if conn is None:
                w.close()

    async def probe(self, target: str, module: str = "local") -> str:
        status, body = await self.get(f"/probe?target={target}&module={module}")
        assert status == 200, body
        return body


def run(tmp_path: Path, main: Callable[[Client], Awaitable[T]], loop_kind: str = "asyncio") -> T:
    """``main`` against a fresh exporter whose general /probe path would fail the test: a
    request that should take the callback path and does not ends with reason internal."""
    conf = tmp_path / "dnsfleet.yml"
    conf.write_text(CONFIG)

    async def forbidden(**kw: Any) -> Any:
        raise AssertionError("the general path probed")

    async def go() -> T:
        exp = Exporter(fs=HostFS(), config_file=str(conf), background=False)
        router = make_router(exp)
        port = free_port()
        server = await serve(router, "127.0.0.1", port)
        fast = router.fast["/probe"]
        handler = fast.__self__.probe_handler  # type: ignore[attr-defined]
        try:
            return await main(Client(port, exp, handler))
        finally:
            server.close()
            udpshared._pool(asyncio.get_running_loop()).close()

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(probes.PROBES, "udp", forbidden)
        return run_on(go(), loop_kind)


def reason(body: str) -> str | None:
    if re.search(r"^dnsfleet_probe_success 1$", body, re.M):
        return None
    m = re.search(r'dnsfleet_probe_failure\{reason="(\w+)"\} 1', body)
    assert m, body
    return m.group(1)


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


class Delayed:
    """A loopback UDP server that answers each query rightly after ``delay`` seconds, and
    records the source ports queries came from."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.ports: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                q, src = self.sock.recvfrom(65535)
            except OSError:
                continue
            self.ports.append(src[1])
            reply = answer(q, "a.local.test. 60 IN A 192.0.2.1")
            threading.Timer(self.delay, self.sock.sendto, (reply, src)).start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def delayed() -> Iterator[Delayed]:
    d = Delayed(0.3)
    yield d
    d.close()


@both
def test_every_verdict_as_the_socket_per_probe_gave_it(
    loop_kind: str,
    tmp_path: Path,
    unbound: Unbound,
    blackhole: Blackhole,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """All at once on one shared socket, so an ICMP error, a stranger's datagram or a
    wrong ID can only reach its own target's probe."""
    monkeypatch.setattr(udpshared, "POOL", 1)

    def wrong_id(q: bytes) -> list[bytes]:
        good = answer(q, "a.local.test. 60 IN A 192.0.2.1")
        return [(int.from_bytes(q[:2], "big") ^ 1).to_bytes(2, "big") + good[2:]]

    def wrong_then_right(q: bytes) -> list[bytes]:
        return [*wrong_id(q), answer(q, "a.local.test. 60 IN A 192.0.2.1")]

    with (
        scripted(wrong_id) as liar,
        scripted(wrong_then_right) as patient,
        scripted(lambda q: [os.urandom(40)]) as junk,
    ):
        cases = {
            unbound.address: None,
            f"127.0.0.1:{free_port()}": "refused",
            blackhole.address: "timeout",
            liar.address: "malformed",
            patient.address: None,
            junk.address: "malformed",
        }
        if has_ipv6_loopback():
            cases[f"[::1]:{free_port()}"] = "refused"

        async def main(c: Client) -> dict[str, str | None]:
            targets = list(cases)
            bodies = await asyncio.gather(*(c.probe(t) for t in targets))
            return {t: reason(b) for t, b in zip(targets, bodies, strict=True)}

        got = run(tmp_path, main, loop_kind)
    assert got == cases


@both
def test_answers_from_another_port_are_not_taken(loop_kind: str, tmp_path: Path) -> None:
    """The right ID and question from another port of the target's host: a stranger's
    datagram, dropped as the connected socket's kernel dropped it; the probe times out."""
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other.bind(("127.0.0.1", 0))
    target = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    target.bind(("127.0.0.1", 0))
    target.settimeout(5)

    def spoof() -> None:
        q, src = target.recvfrom(65535)
        other.sendto(answer(q, "a.local.test. 60 IN A 192.0.2.66"), src)

    thread = threading.Thread(target=spoof, daemon=True)
    thread.start()

    async def main(c: Client) -> str:
        return await c.probe(f"127.0.0.1:{target.getsockname()[1]}", "short")

    try:
        body = run(tmp_path, main, loop_kind)
    finally:
        thread.join(timeout=5)
        other.close()
        target.close()
    assert reason(body) == "timeout"


def test_hundreds_of_distinct_targets_at_once(tmp_path: Path) -> None:
    """400 distinct loopback targets over 64 keep-alive connections, as Prometheus' scrape
    of a sharded fleet sends them; every answer reaches its own request."""
    u = WildcardUnbound(tmp_path / "unbound", local_data=["a.local.test. 300 IN A 192.0.2.1"])
    u.start()
    try:
        targets = [f"127.0.{1 + i // 250}.{1 + i % 250}:{u.port}" for i in range(400)]

        async def main(c: Client) -> list[str | None]:
            conns = [await asyncio.open_connection("127.0.0.1", c.port) for _ in range(64)]

            async def one_conn(k: int) -> list[str | None]:
                out = []
                for t in targets[k::64]:
                    status, body = await c.get(f"/probe?target={t}&module=local", conns[k])
                    assert status == 200, body
                    out.append(reason(body))
                return out

            try:
                got = await asyncio.gather(*(one_conn(k) for k in range(64)))
            finally:
                for _, w in conns:
                    w.close()
            assert c.handler.in_flight == 0
            return [r for rs in got for r in rs]

        reasons = run(tmp_path, main)
    finally:
        u.stop()
    assert reasons == [None] * 400


@both
def test_a_socket_rotated_with_queries_in_flight_keeps_them(
    loop_kind: str, tmp_path: Path, delayed: Delayed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two queries a socket: eight requests at once retire three sockets while their
    answers are on the way; each still gets its answer, from the socket it was sent from,
    and a retired socket is closed once its last query has ended."""
    monkeypatch.setattr(udpshared, "POOL", 1)
    monkeypatch.setattr(udpshared, "ROTATE_QUERIES", 2)
    made: list[udpshared._Socket] = []
    init = udpshared._Socket.__init__

    def counting_init(self: udpshared._Socket, *a: Any) -> None:
        init(self, *a)
        made.append(self)

    monkeypatch.setattr(udpshared._Socket, "__init__", counting_init)

    async def main(c: Client) -> list[str]:
        return await asyncio.gather(*(c.probe(delayed.address) for _ in range(8)))

    bodies = run(tmp_path, main, loop_kind)
    assert [reason(b) for b in bodies] == [None] * 8
    assert len(made) == 4 and len(set(delayed.ports)) == 4
    # Every socket was closed: the retired ones after their last answer, the live one with
    # the pool at the end of the run.
    assert all(s.fd == -1 for s in made)


@both
def test_a_client_that_leaves_before_its_answer(
    loop_kind: str, tmp_path: Path, blackhole: Blackhole
) -> None:
    """A client that resets its connection before the answer: the probe is abandoned at
    once (its place under the cap, its socket's count and its timer freed). One that only
    closes its side (a FIN may be a half-close: the server keeps its own half open for the
    answer, as on the general path) gets its probe ended at the timeout, the answer
    written to nobody. The server serves the next request either way."""

    async def leave(c: Client, *, reset: bool, module: str) -> bool:
        """Whether the probe ended (and left nothing behind) within 10 s of the client."""
        _, w = await asyncio.open_connection("127.0.0.1", c.port)
        path = f"/probe?target={blackhole.address}&module={module}"
        w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await w.drain()
        for _ in range(1000):
            if c.handler.in_flight:
                break
            await asyncio.sleep(0.01)
        assert c.handler.in_flight == 1
        if reset:
            w.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            w.transport.abort()
        else:
            w.close()
        loop = asyncio.get_running_loop()
        start = loop.time()
        while c.handler.in_flight and loop.time() < start + 10:
            await asyncio.sleep(0.01)
        pool = udpshared._pool(loop)
        left = sum(s.in_flight for live in pool.live.values() for s in live)
        return not c.handler.in_flight and not any(pool.expiries.waiting.values()) and not left

    async def main(c: Client) -> tuple[bool, bool, str | None]:
        # The reset one's module waits 30 s: ended within 10 s, it was abandoned.
        at_once = await leave(c, reset=True, module="long")
        half = await leave(c, reset=False, module="short")
        return at_once, half, reason(await c.probe(blackhole.address, "short"))

    assert run(tmp_path, main, loop_kind) == (True, True, "timeout")


@both
def test_a_pipelined_request_started_by_a_timeout(
    loop_kind: str, tmp_path: Path, blackhole: Blackhole
) -> None:
    """A timeout answers its request and the server starts the connection's next, pipelined,
    from that answer: its probe joins the timeouts being swept. Under a new scrape timeout,
    with the groups of others emptied (refused at once), that add drops them all, the swept
    one too: the sweep goes on without failing and both probes time out in turn."""
    refused = f"127.0.0.1:{free_port()}"

    def request(target: str, scrape_timeout: str) -> bytes:
        return (
            f"GET /probe?target={target}&module=long HTTP/1.1\r\nHost: x\r\n"
            f"X-Prometheus-Scrape-Timeout-Seconds: {scrape_timeout}\r\n\r\n"
        ).encode()

    async def main(c: Client) -> tuple[list[str | None], list[object]]:
        failures: list[object] = []
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, ctx: failures.append(ctx.get("exception")))
        r, w = await asyncio.open_connection("127.0.0.1", c.port)
        w.write(request(blackhole.address, "1.5"))
        await w.drain()
        for i in range(expiry.GROUPS - 1):  # each refused probe's group stays, emptied
            _, body = await c.get("", raw=request(refused, f"10.{i:03}"))
            assert reason(body) == "refused", body
        w.write(request(blackhole.address, "2.5"))
        reasons = []
        for _ in range(2):
            head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 20)
            length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
            reasons.append(reason((await asyncio.wait_for(r.readexactly(length), 20)).decode()))
        w.close()
        return reasons, failures

    assert run(tmp_path, main, loop_kind) == (["timeout", "timeout"], [])


def test_a_failure_of_ours_is_the_targets_or_a_500(
    tmp_path: Path, unbound: Unbound, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on the general path: an exception while judging is the target's ``internal``
    failure, counted; one while rendering the answer is a 500 that closes the connection."""

    def broken(*a: Any) -> Any:
        raise RuntimeError("a corner no check foresaw")

    async def main(c: Client) -> tuple[str | None, int, int, str | None]:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(endpoints_probe, "judge", broken)
            judged = reason(await c.probe(unbound.address))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(endpoints_router, "probe_exposition", broken)
            status, _ = await c.get(f"/probe?target={unbound.address}&module=local")
        return judged, c.exp.prober.internal_errors, status, reason(await c.probe(unbound.address))

    assert run(tmp_path, main) == ("internal", 1, 500, None)
