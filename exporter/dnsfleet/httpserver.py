"""A small, strict HTTP/1.1 server on asyncio.Protocol.

Why not aiohttp.web: importing it alone costs ~28 MB of RSS and ~150 µs of CPU per request,
which is most of this exporter's budget (RSS < 40 MB with 1,000 targets, /probe at under half
of blackbox_exporter's CPU). The exporter serves a handful of GET endpoints to Prometheus and
people; that needs request parsing with hard limits, keep-alive, timeouts, and TLS (asyncio's
own), not a framework.

Limits: request line and headers <= 16 KiB, body <= 64 KiB (Content-Length only; chunked
request bodies are refused), a request's head must arrive within 15 s, idle keep-alive
connections close after 75 s, one request at a time per connection (pipelined requests wait
their turn: reading pauses while a request is handled).

Parsing is as strict as RFC 9112 asks of a server and as h11 and Go's net/http are: lines
end in CRLF (a bare LF is a 400 at once, not a wait for a CRLF that never comes), header
names are tokens, values carry no control bytes, HTTP/1.1 needs exactly one Host, only
HTTP/1.0 and 1.1 are spoken, one Content-Length at most, ``Expect: 100-continue`` is
answered, and a TLS ClientHello on a plain port gets a 400 at once. Any exception while
answering ends in a 500 and a closed connection, never a hung one.

Why not h11: it is the library this parser is held to, and its per-request cost was
measured against this one (``bench/bench_http_parse.py``): see docs/design.md, "HTTP
server and endpoints", for the figure.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, unquote

log = logging.getLogger(__name__)

MAX_HEAD = 16 * 1024
MAX_BODY = 64 * 1024
HEAD_TIMEOUT = 15.0
IDLE_TIMEOUT = 75.0
MAX_QUERY_PARAMS = 32


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: Mapping[str, str]  # first value of each parameter
    headers: Mapping[str, str]  # lower-cased names
    body: bytes = b""
    peer: str = ""
    # Parameters given more than once (``query`` keeps the first): /probe refuses them.
    repeated: frozenset[str] = frozenset()
    # The verified client certificate (ssl.getpeercert() form) on a TLS connection.
    peercert: Mapping[str, Any] | None = None
    # loop.time() when the request's head was complete: deadlines count from here.
    arrived: float = 0.0


@dataclass(slots=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    close: bool = False  # end the connection after this response

    @classmethod
    def text(cls, status: int, text: str) -> Response:
        return cls(status=status, body=text.encode())


Handler = Callable[[Request], Awaitable[Response]]
# Runs before routing; returns a response to answer instead (e.g. 401), or None to go on.
# May be a coroutine (basic auth verifies bcrypt hashes off the event loop).
Guard = Callable[[Request], Awaitable[Response | None] | Response | None]


class Router:
    def __init__(self) -> None:
        self.routes: dict[str, dict[str, Handler]] = {}
        self.guards: list[Guard] = []
        # Added to every response, refusals included (--web.config.file headers).
        self.extra_headers: list[tuple[str, str]] = []

    def add(self, method: str, path: str, handler: Handler) -> None:
        self.routes.setdefault(path, {})[method] = handler
        if method == "GET":
            self.routes[path].setdefault("HEAD", handler)

    async def dispatch(self, req: Request) -> Response:
        resp = await self._dispatch(req)
        if self.extra_headers:
            resp.headers.extend(self.extra_headers)
        return resp

    async def _dispatch(self, req: Request) -> Response:
        for guard in self.guards:
            denied = guard(req)
            if inspect.isawaitable(denied):
                denied = await denied
            if denied is not None:
                return denied
        methods = self.routes.get(req.path)
        if methods is None:
            return Response.text(404, "not found\n")
        handler = methods.get(req.method)
        if handler is None:
            allow = ", ".join(sorted(methods))
            return Response(405, b"method not allowed\n", headers=[("Allow", allow)])
        try:
            return await handler(req)
        except Exception:
            log.exception("handler for %s %s failed", req.method, req.path)
            return Response(500, b"internal error\n", close=True)


class _BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


# RFC 9110 5.1 token; 5.5 field values: visible characters, SP and HTAB, obs-text.
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_VERSIONS = ("HTTP/1.0", "HTTP/1.1")


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    lines = head.split(b"\r\n")
    if any(b"\n" in line or b"\r" in line for line in lines):
        raise _BadRequest(400, "bare CR or LF in the request head")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise _BadRequest(400, "malformed request line")
    method_b, target_b, version_b = parts
    if not method_b.isalpha() or not method_b.isupper():
        raise _BadRequest(400, "malformed method")
    version = version_b.decode("latin-1")
    if version not in _VERSIONS:
        raise _BadRequest(400, f"unsupported protocol version {version[:16]!r}")
    if not target_b or _BAD_VALUE.search(target_b) or b" " in target_b:
        raise _BadRequest(400, "malformed request target")
    headers: dict[str, str] = {}
    hosts = 0
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):
            raise _BadRequest(400, "malformed header name")
        value = value.strip(b" \t")
        if _BAD_VALUE.search(value):
            raise _BadRequest(400, "control character in a header value")
        key = name.decode("ascii").lower()
        text = value.decode("latin-1")
        if key == "host":
            hosts += 1
        if key == "content-length" and key in headers:
            raise _BadRequest(400, "more than one Content-Length")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    if version == "HTTP/1.1" and hosts != 1:
        raise _BadRequest(400, "HTTP/1.1 needs exactly one Host header")
    return method_b.decode("ascii"), target_b.decode("latin-1"), version, headers


def _tokens(value: str) -> set[str]:
    return {t.strip().lower() for t in value.split(",") if t.strip()}


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


class HTTPProtocol(asyncio.Protocol):
    def __init__(
        self,
        router: Router,
        *,
        head_timeout: float = HEAD_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self.router = router
        self.head_timeout = head_timeout
        self.idle_timeout = idle_timeout
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False
        self.closing = False
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.peer = ""
        self.peercert: Mapping[str, Any] | None = None
        self.continued = False  # 100 Continue sent for the request being read
        self.tls = False

    # -- connection lifecycle
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else ""
        self.peercert = transport.get_extra_info("peercert")
        self.tls = transport.get_extra_info("sslcontext") is not None
        self._arm(self.head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self.timer:
            self.timer.cancel()
        if self.task and not self.task.done():
            self.task.cancel()
        self.transport = None

    def _arm(self, seconds: float) -> None:
        if self.timer:
            self.timer.cancel()
        self.timer = self.loop.call_later(seconds, self._timeout)

    def _timeout(self) -> None:
        if not self.busy and self.transport is not None:
            self.transport.close()

    # -- input
    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next()

    def eof_received(self) -> bool | None:
        if not self.busy and self.transport is not None:
            self.transport.close()
        if self.tls:
            # TLS cannot half-close; returning True there only makes asyncio log a warning
            # for every connection a client ends.
            return None
        return True  # keep our half open until the response in flight is written

    def _next(self) -> None:
        if self.closing or self.transport is None:
            return
        if self.buf[:2] == b"\x16\x03":
            # A TLS ClientHello (handshake record, version 3.x) on the plain port.
            self._fail(400, "this port speaks plain HTTP, not TLS")
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > MAX_HEAD:
                self._fail(431, "request head too large")
            elif self.buf.find(b"\n\n") >= 0 or self.buf.find(b"\r\n\n") >= 0:
                self._fail(400, "bare LF in the request head")
            return
        if end > MAX_HEAD:
            self._fail(431, "request head too large")
            return
        try:
            method, target, version, headers = _parse_head(bytes(self.buf[:end]))
            if "transfer-encoding" in headers:
                raise _BadRequest(501, "chunked request bodies are not supported")
            clen_raw = headers.get("content-length", "0")
            if not (clen_raw.isascii() and clen_raw.isdigit()):
                raise _BadRequest(400, "invalid Content-Length")
            clen = int(clen_raw)
            if clen > MAX_BODY:
                raise _BadRequest(413, "request body too large")
            expect = headers.get("expect")
            if expect is not None and expect.lower() != "100-continue":
                raise _BadRequest(417, "only Expect: 100-continue is supported")
        except _BadRequest as e:
            self._fail(e.status, str(e))
            return
        total = end + 4 + clen
        if len(self.buf) < total:
            if expect is not None and not self.continued:
                self.continued = True
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return  # wait for the body
        self.continued = False
        body = bytes(self.buf[end + 4 : total])
        del self.buf[:total]
        path, _, qs = target.partition("?")
        try:
            query: dict[str, str] = {}
            repeated: set[str] = set()
            for k, v in parse_qsl(
                qs, keep_blank_values=True, max_num_fields=MAX_QUERY_PARAMS, strict_parsing=False
            ):
                if k in query:
                    repeated.add(k)
                query.setdefault(k, v)
        except ValueError:
            self._fail(400, "too many query parameters")
            return
        conn = _tokens(headers.get("connection", ""))
        keep_alive = (
            "close" not in conn
            if version == "HTTP/1.1"
            else "keep-alive" in conn and "close" not in conn
        )
        req = Request(
            method=method,
            path=unquote(path),
            query=query,
            headers=headers,
            body=body,
            peer=self.peer,
            repeated=frozenset(repeated),
            peercert=self.peercert,
            arrived=self.loop.time(),
        )
        self.busy = True
        self.transport.pause_reading()
        if self.timer:
            self.timer.cancel()
        self.task = self.loop.create_task(self._handle(req, keep_alive))

    async def _handle(self, req: Request, keep_alive: bool) -> None:
        try:
            resp = await self.router.dispatch(req)
            if self.transport is None:
                return
            keep_alive = keep_alive and not resp.close
            self._write(resp, keep_alive=keep_alive, head_only=req.method == "HEAD")
        except Exception:
            # A guard, a handler outside the router's net, or writing itself (a header
            # that is not latin-1) failed: answer 500 and close, never leave the client
            # hanging on a connection nobody reads.
            log.exception("answering %s %s failed", req.method, req.path)
            self._fail(500, "internal error")
            return
        self.busy = False
        if not keep_alive:
            self.closing = True
            self.transport.close()
            return
        self.transport.resume_reading()
        self._arm(self.idle_timeout if not self.buf else self.head_timeout)
        if self.buf:
            self._next()

    def _write(self, resp: Response, *, keep_alive: bool, head_only: bool = False) -> None:
        assert self.transport is not None
        lines = [
            f"HTTP/1.1 {resp.status} {_reason(resp.status)}",
            f"Content-Type: {resp.content_type}",
            f"Content-Length: {len(resp.body)}",
            f"Connection: {'keep-alive' if keep_alive else 'close'}",
        ]
        lines += [f"{k}: {v}" for k, v in resp.headers]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if head_only or not resp.body:
            self.transport.write(head)
        else:
            # Two writes, not writelines(): asyncio joins writelines' buffers into one new
            # bytes object first, a copy of a multi-megabyte exposition.
            self.transport.write(head)
            self.transport.write(resp.body)

    def _fail(self, status: int, reason: str) -> None:
        """Answer and close, without the router's extra headers (they may be what failed)."""
        if self.transport is None:
            return
        self.closing = True
        body = (reason + "\n").encode()
        self.transport.write(
            f"HTTP/1.1 {status} {_reason(status)}\r\nContent-Type: text/plain; "
            f"charset=utf-8\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        self.transport.close()


async def serve(
    router: Router,
    host: str | None,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    head_timeout: float = HEAD_TIMEOUT,
    idle_timeout: float = IDLE_TIMEOUT,
) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: HTTPProtocol(router, head_timeout=head_timeout, idle_timeout=idle_timeout),
        host or None,
        port,
        ssl=ssl_context,
        reuse_address=True,
        backlog=512,
    )
