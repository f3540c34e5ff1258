"""What the HTTP server's user gives it and gets: the parsed :class:`Request`, the
:class:`Response` a handler returns (and its head as written out), the :class:`Router`
that picks the handler after the guards (authentication, rate limits) have had their say,
and the :class:`TLSSource` of each new connection's context. The connection itself
(framing, keep-alive, timeouts, the TLS upgrade) is ``server``'s."""

from __future__ import annotations

import asyncio
import inspect
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol

# The server's logger: a failing handler is logged where it always was.
log = logging.getLogger("dnsfleet.web.server")

# Bodies up to this size go out with their head in one write (one send(), one TCP segment).
SMALL_BODY = 64 * 1024


class Request:
    """One parsed request. A plain slotted class: it is built once per request."""

    __slots__ = (
        "arrived",
        "body",
        "headers",
        "method",
        "path",
        "peer",
        "peercert",
        "query",
        "repeated",
        "tls_context",
    )

    def __init__(
        self,
        *,
        method: str,
        path: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes = b"",
        peer: str = "",
        repeated: frozenset[str] = frozenset(),
        peercert: Mapping[str, Any] | None = None,
        arrived: float = 0.0,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.query = query  # first value of each parameter
        self.headers = headers  # lower-cased names
        self.body = body
        self.peer = peer
        # Parameters given more than once (``query`` keeps the first): /probe refuses them.
        self.repeated = repeated
        # The verified client certificate (ssl.getpeercert() form) on a TLS connection.
        self.peercert = peercert
        # loop.time() when the request's head was complete: deadlines count from here.
        self.arrived = arrived
        # The TLS context the connection was accepted under (None on plain HTTP).
        self.tls_context = tls_context


@dataclass(slots=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    close: bool = False  # end the connection after this response
    # End the connection without answering, as when a server closes an idle keep-alive
    # connection: clients retry an idempotent request on a new one (Go's net/http does).
    drop: bool = False

    @classmethod
    def text(cls, status: int, text: str) -> Response:
        return cls(status=status, body=text.encode())

    def head(self, *, keep_alive: bool) -> bytes:
        """The status line and headers as sent (latin-1: a header that is not raises)."""
        status = self.status
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status) or reason_phrase(status)}\r\n"
            f"Content-Type: {self.content_type}\r\n"
            f"Content-Length: {len(self.body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n"
        )
        if self.headers:
            head += "".join(f"{k}: {v}\r\n" for k, v in self.headers)
        return (head + "\r\n").encode("latin-1")

    def write(self, transport: asyncio.WriteTransport, keep_alive: bool, head_only: bool) -> int:
        """Write the response to ``transport``; the bytes written."""
        data = self.head(keep_alive=keep_alive)
        body = b"" if head_only else self.body
        if not body:
            transport.write(data)
        elif len(body) <= SMALL_BODY:
            transport.write(data + body)
        else:
            # Two writes, not one joined buffer: joining would copy a multi-megabyte
            # exposition once more.
            transport.write(data)
            transport.write(body)
        return len(data) + len(body)


def failure(status: int, reason: str) -> bytes:
    """A whole plain-text answer that closes the connection, without extra headers (they
    may be what failed)."""
    body = (reason + "\n").encode()
    return (
        f"HTTP/1.1 {status} {reason_phrase(status)}\r\nContent-Type: text/plain; "
        f"charset=utf-8\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


def reason_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


_REASONS = {s.value: s.phrase for s in HTTPStatus}


Handler = Callable[[Request], Awaitable[Response]]
Respond = Callable[[Response], None]
Cancel = Callable[[], None]
# A handler served by callbacks (no task): takes the request and a ``respond`` it calls once,
# from a later callback of the loop, and returns what abandons it if the client goes; or
# returns None, having done nothing, to leave the request to the route's Handler.
FastHandler = Callable[[Request, Respond], Cancel | None]
# Runs before routing; returns a response to answer instead (e.g. 401), or None to go on.
# May be a coroutine (basic auth verifies bcrypt hashes off the event loop).
Guard = Callable[[Request], Awaitable[Response | None] | Response | None]


class Router:
    def __init__(self) -> None:
        self.routes: dict[str, dict[str, Handler]] = {}
        self.guards: list[Guard] = []
        # Added to every response, refusals included (--web.config.file headers).
        self.extra_headers: list[tuple[str, str]] = []
        self.fast: dict[str, FastHandler] = {}

    def add(self, method: str, path: str, handler: Handler) -> None:
        self.routes.setdefault(path, {})[method] = handler
        if method == "GET":
            self.routes[path].setdefault("HEAD", handler)

    def add_fast(self, path: str, handler: FastHandler) -> None:
        """Serve GET ``path`` by ``handler`` where it takes the request (no guard set: a
        guard may need to wait, so a guarded request always takes the general path)."""
        self.fast[path] = handler

    def start(self, req: Request, respond: Respond) -> Cancel | None:
        """Start ``req`` on its fast handler: what cancels it, or None to dispatch it."""
        if self.guards or req.method != "GET":
            return None
        fast = self.fast.get(req.path)
        if fast is None:
            return None
        extra = self.extra_headers
        if not extra:
            return fast(req, respond)

        def with_headers(resp: Response) -> None:
            resp.headers.extend(extra)
            respond(resp)

        return fast(req, with_headers)

    async def dispatch(self, req: Request) -> Response:
        # One coroutine, not one around another: a request's path runs through few enough
        # Python frames that one more was a measurable share of a /probe.
        resp = await self._guarded(req) if self.guards else None
        if resp is None:
            methods = self.routes.get(req.path)
            if methods is None:
                resp = Response.text(404, "not found\n")
            elif (handler := methods.get(req.method)) is None:
                allow = ", ".join(sorted(methods))
                resp = Response(405, b"method not allowed\n", headers=[("Allow", allow)])
            else:
                try:
                    resp = await handler(req)
                except Exception:
                    log.exception("handler for %s %s failed", req.method, req.path)
                    resp = Response(500, b"internal error\n", close=True)
        if self.extra_headers and not resp.drop:
            # Nothing is written for a drop, and the guard's drop response is one shared
            # object: extended, it would grow by the headers on every dropped request.
            resp.headers.extend(self.extra_headers)
        return resp

    async def _guarded(self, req: Request) -> Response | None:
        """The first guard's refusal, or None when every guard lets ``req`` through."""
        for guard in self.guards:
            denied = guard(req)
            if inspect.isawaitable(denied):
                denied = await denied
            if denied is not None:
                return denied
        return None


class TLSSource(Protocol):
    """Gives the TLS context a newly accepted connection is to use."""

    async def context(self) -> ssl.SSLContext: ...


class StaticTLS:
    def __init__(self, ctx: ssl.SSLContext) -> None:
        self.ctx = ctx

    async def context(self) -> ssl.SSLContext:
        return self.ctx
