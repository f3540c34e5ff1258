"""The HTTP server over raw sockets: every status code it produces and every path through
it (strict parsing, keep-alive and close, 100-continue, both timeouts, a failing guard or
handler or header, TLS on the plain port), and /metrics content negotiation (gzip,
OpenMetrics checked with client_python's parser and promtool), lifecycle gating, and
concurrent scrapes that share one cycle and are each answered within their own timeout."""

from __future__ import annotations

import asyncio
import gzip
import os
import select
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families

from dnsfleet.app import Exporter
from dnsfleet.endpoints.router import make_router
from dnsfleet.hostfs import HostFS
from dnsfleet.web.routes import Request, Response, Router
from dnsfleet.web.server import serve
from tests.harness.metrics import promtool_check, value

pytestmark = pytest.mark.integration

Handler = Callable[[Request], Awaitable[Response]]


async def ok(req: Request) -> Response:
    return Response.text(200, f"ok {req.method} {req.path} {len(req.body)}\n")


async def boom(req: Request) -> Response:
    raise RuntimeError("handler failed")


def router() -> Router:
    r = Router()
    r.add("GET", "/", ok)
    r.add("POST", "/post", ok)
    r.add("GET", "/boom", boom)
    return r


@asynccontextmanager
async def server(r: Router, **kw: Any) -> AsyncIterator[int]:
    srv = await serve(r, "127.0.0.1", 0, **kw)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        srv.close()
        await srv.wait_closed()


async def exchange(port: int, data: bytes, *, timeout: float = 5.0) -> bytes:
    """Send raw bytes, read until the server closes (or ``timeout``)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    out = b""
    try:
        async with asyncio.timeout(timeout):
            while chunk := await reader.read(65536):
                out += chunk
    finally:
        writer.close()
    return out


def status(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1])


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


GOOD = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize(
    ("request_bytes", "code", "why"),
    [
        (GOOD, 200, "a well-formed request"),
        (b"GET / HTTP/1.0\r\n\r\n", 200, "HTTP/1.0 needs no Host"),
        (b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404, "unknown path"),
        (b"DELETE / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405, "wrong method"),
        (b"GET / HTTP/1.1\nHost: x\n\n", 400, "bare LF"),
        (b"GET / HTTP/1.1\r\nHost: x\nX: y\r\n\r\n", 400, "bare LF inside the head"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400, "NUL in a value"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400, "CR in a value"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX\x01A: a\r\n\r\n", 400, "control byte in a name"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX A: a\r\n\r\n", 400, "space in a name"),
        (b"GET / HTTP/1.1\r\n\r\n", 400, "HTTP/1.1 without Host"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "two Host headers"),
        (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 400, "unknown version"),
        (b"GET / HTTP/1.2\r\nHost: x\r\n\r\n", 400, "unknown minor version"),
        (b"GET /  HTTP/1.1\r\nHost: x\r\n\r\n", 400, "malformed request line"),
        (b"get / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "lower-case method"),
        (
            b"POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nab",
            400,
            "two Content-Length",
        ),
        (b"POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n", 400, "bad length"),
        (b"POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 999999\r\n\r\n", 413, "body"),
        (b"POST /post HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 501, "chunked"),
        (
            b"POST /post HTTP/1.1\r\nHost: x\r\nExpect: magic\r\nContent-Length: 1\r\n\r\nx",
            417,
            "unknown expectation",
        ),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 20000 + b"\r\n\r\n", 431, "head size"),
        (b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n", 500, "a handler that raises"),
        (bytes.fromhex("160301020001") + b"\x00" * 50, 400, "a TLS ClientHello"),
    ],
)
def test_status_codes(request_bytes: bytes, code: int, why: str) -> None:
    async def go() -> None:
        async with server(router()) as port:
            raw = await exchange(port, request_bytes)
            assert status(raw) == code, (why, raw[:200])

    run(go())


def test_absolute_form_request_target() -> None:
    """RFC 9112 §3.2.2: a server must accept the absolute form (it used to be a 404)."""

    async def go() -> None:
        async with server(router()) as port:
            for target in (b"http://x/", b"HTTP://x:9853/", b"http://x", b"https://x/?a=b"):
                raw = await exchange(
                    port, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                )
                assert status(raw) == 200 and raw.endswith(b"ok GET / 0\n"), (target, raw)
            raw = await exchange(port, b"GET ftp://x/ HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status(raw) == 400

    run(go())


def test_a_client_that_never_reads_is_bounded_and_aborted() -> None:
    """N4: 300 pipelined requests on a connection that never reads grew the exporter's RSS
    from 40 to 130 MB (every response queued), and the connection was still open after
    100 s. Now no request is started while the connection's output is above its high-water
    mark, and output that makes no progress for write_timeout gets the connection aborted.
    (The wait is a hang guard, not a timing assertion.)"""
    calls = 0

    async def big(req: Request) -> Response:
        nonlocal calls
        calls += 1
        return Response(body=b"x" * (256 * 1024))

    r = Router()
    r.add("GET", "/big", big)

    async def go() -> None:
        async with server(r, write_timeout=0.5) as port:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", port))
            sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n" * 300)
            poller = select.poll()
            poller.register(sock, select.POLLERR | select.POLLHUP)

            async def ended() -> None:
                while not poller.poll(0):
                    await asyncio.sleep(0.05)

            try:
                await asyncio.wait_for(ended(), timeout=30)
            finally:
                sock.close()
            # What the kernel takes into the socket's send buffer (it autotunes up to
            # tcp_wmem's maximum) and the peer's receive buffer is out of the server's hands;
            # beyond that, one response queued past the high-water mark stops the next.
            wmem_max = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
            assert calls <= 2 + (wmem_max + 65536) // (256 * 1024), calls

    run(go())


def test_keep_alive_and_close_tokens() -> None:
    async def go() -> None:
        async with server(router()) as port:
            two = (
                b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
                b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n"
            )
            raw = await exchange(port, two)
            assert raw.count(b"HTTP/1.1 200 OK") == 2  # pipelined, then closed
            assert raw.endswith(b"ok GET / 0\n")
            # HEAD: the head only
            raw = await exchange(port, b"HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert status(raw) == 200 and raw.endswith(b"\r\n\r\n")

    run(go())


def test_expect_100_continue_is_answered() -> None:
    async def go() -> None:
        async with server(router()) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"POST /post HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                b"Content-Length: 5\r\nConnection: close\r\n\r\n"
            )
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(b"hello")
            rest = await asyncio.wait_for(reader.read(), 5)
            assert status(rest) == 200 and rest.endswith(b"ok POST /post 5\n")
            writer.close()

    run(go())


def test_head_and_idle_timeouts_close_the_connection() -> None:
    async def go() -> None:
        async with server(router(), head_timeout=0.3, idle_timeout=0.5) as port:
            # exchange() raises if the server has not closed within 5 s.
            raw = await exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n", timeout=5)
            assert raw == b""  # head never completed
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            await reader.readuntil(b"ok GET / 0\n")
            assert await asyncio.wait_for(reader.read(), 5) == b""  # idle keep-alive closed
            writer.close()

    run(go())


def test_failing_guard_and_unencodable_header_end_in_500_and_close() -> None:
    """Both used to leave the connection hanging and the descriptor open."""

    def bad_guard(req: Request) -> Response | None:
        raise ValueError("guard failed")

    async def go() -> None:
        r = router()
        r.guards.append(bad_guard)
        async with server(r) as port:
            raw = await exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", timeout=5)
            assert status(raw) == 500 and b"Connection: close" in raw
        r2 = router()
        r2.extra_headers.append(("X-Frame-Options", "d\u00e9ny\u2603"))  # not latin-1
        async with server(r2) as port:
            raw = await exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", timeout=5)
            assert status(raw) == 500

    before = len(os.listdir("/proc/self/fd"))
    run(go())
    assert len(os.listdir("/proc/self/fd")) <= before + 1


# ------------------------------------------------------------------------------ /metrics


def exporter(tmp_path: Path, **extra: object) -> Exporter:
    p = tmp_path / "dnsfleet.yml"
    p.write_text(
        yaml.safe_dump(
            {
                "resolv_conf": [],
                "modules": {"m": {"timeout": "1s"}},
                # A silent target: every scrape lasts about as long as the budget allows.
                "targets": [{"address": "127.0.0.1:9", "module": "m"}],
                **extra,
            }
        )
    )
    return Exporter(fs=HostFS(), config_file=str(p))


def test_gzip_openmetrics_and_lifecycle(tmp_path: Path) -> None:
    exp = exporter(tmp_path)

    async def go() -> None:
        async with server(make_router(exp)) as port:
            raw = await exchange(
                port,
                b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                b"Accept-Encoding: gzip\r\nConnection: close\r\n\r\n",
            )
            head, _, body = raw.partition(b"\r\n\r\n")
            assert b"Content-Encoding: gzip" in head and b"Vary: Accept-Encoding" in head
            text = gzip.decompress(body).decode()
            assert list(text_string_to_metric_families(text))
            raw = await exchange(
                port,
                b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: "
                b"application/openmetrics-text; version=1.0.0,"
                b"text/plain;q=0.5\r\nConnection: close\r\n\r\n",
            )
            head, _, body = raw.partition(b"\r\n\r\n")
            assert b"application/openmetrics-text; version=1.0.0" in head
            om = body.decode()
            assert om.endswith("# EOF\n")
            fams = {f.name: f for f in om_parse(om)}  # type: ignore[no-untyped-call]
            assert fams["dnsfleet_probe_failures"].type == "counter"
            check = promtool_check(om)
            # promtool writes "<metric> <problem>": a name may say error, a problem may not.
            problems = [ln.partition(" ")[2] for ln in (check.stdout + check.stderr).splitlines()]
            assert not any("error" in p.lower() for p in problems), check.stderr
            raw = await exchange(
                port,
                b"POST /-/reload HTTP/1.1\r\nHost: x\r\n"
                b"Content-Length: 0\r\nConnection: close\r\n\r\n",
            )
            assert status(raw) == 403 and b"--web.enable-lifecycle" in raw
        async with server(make_router(exp, enable_lifecycle=True)) as port:
            raw = await exchange(
                port,
                b"POST /-/reload HTTP/1.1\r\nHost: x\r\n"
                b"Content-Length: 0\r\nConnection: close\r\n\r\n",
            )
            assert status(raw) == 200

    run(go())


def test_concurrent_scrapes_share_a_cycle_and_keep_their_own_deadline(tmp_path: Path) -> None:
    """Ten concurrent scrapes with a 1.5 s timeout header: one probe cycle, and every one
    answered within its own timeout counted from its arrival (before: they queued behind a
    lock, the last one at ten times the timeout). A request beyond --web.max-requests gets
    a 503 at once."""
    exp = exporter(tmp_path)

    async def one(port: int) -> tuple[int, float]:
        t = time.monotonic()
        raw = await exchange(
            port,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
            b"X-Prometheus-Scrape-Timeout-Seconds: 1.5\r\n"
            b"Connection: close\r\n\r\n",
            timeout=20,
        )
        return status(raw), time.monotonic() - t

    async def go() -> None:
        async with server(make_router(exp, max_requests=10)) as port:
            results = await asyncio.gather(*(one(port) for _ in range(10)))
            assert all(code == 200 for code, _ in results), results
            assert exp.scrapes_total == 1
            # The handler is shared and no clock threshold is asserted: each request is
            # bounded by asyncio.wait_for on its own remaining budget (see app.py).
            over = await asyncio.gather(*(one(port) for _ in range(11)))
            assert sorted(code for code, _ in over).count(503) >= 1

    run(go())


def test_a_late_scrape_keeps_its_own_deadline(tmp_path: Path) -> None:
    """A scrape in flight will take ~2.5 s (a silent target, 3 s header); a second request
    arriving meanwhile with a 1 s header must not wait for it. N6: it used to get a 503 in
    0.75 s (so a person's curl could make Prometheus record up=0); it now gets, within its
    own deadline, the last complete cycle of a budget at least its own, which says when it
    ended. While none has completed, it runs a cycle of its own (it got a 503)."""
    from tests.harness.servers import Blackhole

    hole = Blackhole()
    p = tmp_path / "dnsfleet.yml"
    p.write_text(
        yaml.safe_dump(
            {
                "resolv_conf": [],
                "modules": {"m": {"timeout": "10s"}},
                "targets": [{"address": hole.address, "module": "m"}],
            }
        )
    )
    exp = Exporter(fs=HostFS(), config_file=str(p))

    async def scrape(port: int, timeout: str, delay: float) -> tuple[int, float | None]:
        await asyncio.sleep(delay)
        raw = await exchange(
            port,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
            b"X-Prometheus-Scrape-Timeout-Seconds: "
            + timeout.encode()
            + b"\r\nConnection: close\r\n\r\n",
            timeout=20,
        )
        body = raw.partition(b"\r\n\r\n")[2].decode()
        code = status(raw)
        return code, value(
            body, "dnsfleet_scrape_cycle_end_timestamp_seconds"
        ) if code == 200 else None

    async def go() -> None:
        async with server(make_router(exp)) as port:
            # No complete cycle yet: the short request has nothing to fall back on, so it
            # runs a cycle of its own budget beside the long one (it used to get a 503).
            (first, _), (second, _) = await asyncio.gather(
                scrape(port, "3", 0), scrape(port, "1", 0.3)
            )
            assert (first, second) == (200, 200)
            code, complete = await scrape(port, "1", 0)
            assert code == 200 and complete is not None
            long, short = await asyncio.gather(scrape(port, "3", 0), scrape(port, "1", 0.3))
            assert long[0] == 200 and short[0] == 200
            assert short[1] == complete  # the last complete cycle, as it was
            assert long[1] is not None and long[1] > complete  # the long one: fresh

    try:
        run(go())
    finally:
        hole.close()
