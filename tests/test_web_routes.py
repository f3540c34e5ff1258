"""The router as a connection sees it, without a socket: guards first, then the route, the
method, the handler's answer or its failure, and the configured headers on each answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from dnsfleet.web.routes import Request, Response, Router

pytestmark = pytest.mark.unit

EXTRA = [("X-Frame-Options", "deny")]


async def ok(request: Request) -> Response:
    return Response.text(200, "ok\n")


async def broken(request: Request) -> Response:
    raise RuntimeError("handler bug")


def answer(resp: Response | None) -> Callable[[Request], Response | None]:
    return lambda request: resp


def router(*guards: Response | None) -> Router:
    r = Router()
    r.add("GET", "/ok", ok)
    r.add("GET", "/broken", broken)
    for g in guards:
        r.guards.append(answer(g))
    r.extra_headers.extend(EXTRA)
    return r


def get(r: Router, path: str, method: str = "GET") -> Response:
    req = Request(method=method, path=path, query={}, headers={})
    return asyncio.run(r.dispatch(req))


@pytest.mark.parametrize(
    ("path", "method", "status", "headers"),
    [
        ("/ok", "GET", 200, EXTRA),
        ("/ok", "HEAD", 200, EXTRA),
        ("/nowhere", "GET", 404, EXTRA),
        ("/ok", "POST", 405, [("Allow", "GET, HEAD"), *EXTRA]),
        ("/broken", "GET", 500, EXTRA),
    ],
)
def test_each_answer_carries_the_configured_headers(
    path: str, method: str, status: int, headers: list[tuple[str, str]]
) -> None:
    resp = get(router(), path, method)
    assert (resp.status, resp.headers) == (status, headers)


def test_a_guard_answers_before_the_route() -> None:
    resp = get(router(None, Response.text(429, "Too Many Requests\n")), "/ok")
    assert (resp.status, resp.headers) == (429, EXTRA)


def test_a_dropped_connection_collects_no_headers() -> None:
    """A guard ends stale TLS connections with one shared drop response: nothing is written
    for it, and the headers must not pile up on it request after request."""
    drop = Response(status=0, drop=True)
    r = router(drop)
    for _ in range(3):
        assert get(r, "/ok") is drop
    assert drop.headers == []
